"""The invariant monitor: safety properties checked over the runtime's steps (issue #7 item 5).

Pure core (standard library only). A *step* is one ``CredentialRuntime.handle``
call as a trace holds it: the event, the port calls made during it and the
commands returned. Wrap the runtime's ports with :func:`wrap_ports` (calls go
into a :class:`PortLog`), and after each ``handle`` feed
``monitor.observe(event, commands, log.take())``; or pass a
:class:`MonitorRecorder` to a shell as its ``recorder``.

```python
log = PortLog()
engines, mcp, person, files = wrap_ports(engines=e, mcp=m, person=p, files=f, log=log)
rt = CredentialRuntime(..., engines=engines, mcp=mcp, person=person, files=files)
mon = InvariantMonitor()
cmds = rt.handle(event)
assert mon.observe(event, cmds, log.take()) == []
```

The monitor turns the steps into one ordered stream (``_stream``: the event
fed, each port call, each command, the return) and runs one checker per
property over it (``_checks``), after a shared mirror of what the stream
revealed (``_mirror``). The properties (:data:`PROPERTIES`), their checkers,
what each observes and its limits are documented in ``docs/monitor.md``.
"""

from __future__ import annotations

from ._monitor import (
    MAX_SECRETS,
    MIN_SECRET_CHARS,
    PROPERTIES,
    InvariantMonitor,
    MonitorRecorder,
    Violation,
)
from ._ports import PortCall, PortLog, ViewStamp, wrap_ports

__all__ = [
    "MAX_SECRETS",
    "MIN_SECRET_CHARS",
    "PROPERTIES",
    "InvariantMonitor",
    "MonitorRecorder",
    "PortCall",
    "PortLog",
    "ViewStamp",
    "Violation",
    "wrap_ports",
]
