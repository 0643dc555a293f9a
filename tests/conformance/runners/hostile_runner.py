"""Runners that misbehave as processes or peers, for the kit's own limits:
``python hostile_runner.py MODE`` (websockets only, no leasegate import).

Modes:

* ``never-connects``: runs, never dials the bridge.
* ``exits-at-once``: exits with status 3 before connecting.
* ``floods``: sends its ``lease.request``, then text frames without pause.
* ``binary-request``: sends its ``lease.request`` as a binary message.
* ``ignores-sigterm``: sends its ``lease.request`` and ignores SIGTERM.
* ``leaves-a-child``: ignores SIGTERM and starts a child process that
  ignores it too, then sends its ``lease.request``.

With ``$HOSTILE_PID_DIR`` set, each writes its pid to ``<mode>.pid`` there
and a child's to ``<mode>.child.pid``, so a test can check they are gone.
"""

import json
import os
import signal
import subprocess
import sys
import time

from websockets.sync.client import connect

REQUEST = json.dumps(
    {
        "kind": "lease.request",
        "opId": "op-1",
        "taskId": os.environ.get("LEASEGATE_TASK_ID"),
        "runEpoch": int(os.environ.get("LEASEGATE_RUN_EPOCH", "1")),
    }
)


def _note_pid(name: str, pid: int) -> None:
    where = os.environ.get("HOSTILE_PID_DIR")
    if where:
        with open(os.path.join(where, name), "w") as f:
            f.write(str(pid))


def main(mode: str) -> None:
    _note_pid(f"{mode}.pid", os.getpid())
    if mode == "exits-at-once":
        sys.exit(3)
    if mode in ("ignores-sigterm", "leaves-a-child"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "leaves-a-child":
        child = subprocess.Popen(
            [sys.executable, "-c", "import signal,time; signal.signal(15, 1); time.sleep(120)"]
        )
        _note_pid(f"{mode}.child.pid", child.pid)
    if mode == "never-connects":
        time.sleep(120)
        return
    with connect(os.environ["LEASEGATE_BRIDGE_URL"]) as ws:
        if mode == "binary-request":
            ws.send(REQUEST.encode())
        else:
            ws.send(REQUEST)
        if mode == "floods":
            filler = json.dumps({"kind": "flood", "n": 0, "pad": "x" * 512})
            try:
                while True:
                    ws.send(filler)
            except Exception:  # noqa: BLE001 - the kit closed the connection
                return
        time.sleep(120)


if __name__ == "__main__":
    main(sys.argv[1])
