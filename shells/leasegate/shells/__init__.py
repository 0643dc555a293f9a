"""leasegate's shells: the I/O around the sans-I/O core.

Async shell (anyio: trio and asyncio), threading shell, boto3 SSM reader,
transports, file event store and the ``leasegate`` command. The shells move
bytes, run timers, call boto3 and consumers; they decide nothing.
"""
