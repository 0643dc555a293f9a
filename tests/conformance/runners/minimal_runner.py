"""A minimal runner written from docs/protocol.md alone: websockets and boto3,
no leasegate import. It implements the lease part (request, grant reads at
the pinned versions, credential.changed, lease.stale, deny and unavailable
with their 30 s retry) and not the env replica nor refreshes: judge it with
``--implements lease,rotation,narrowing,deny,unavailable``.

Environment: LEASEGATE_BRIDGE_URL, LEASEGATE_SSM_ENDPOINT, LEASEGATE_TASK_ID,
LEASEGATE_RUN_EPOCH (docs/conformance.md). Runs until SIGTERM.

``--listen``: the runner listens on 127.0.0.1 instead (``--runner-url``),
prints its ``ws://127.0.0.1:<port>`` and serves one connection at a time,
each with its run in the query string (taskId, runEpoch, ssmEndpoint).
"""

import itertools
import json
import os
import signal
import sys
import threading
from urllib.parse import parse_qs, urlsplit

import boto3
from botocore.config import Config
from websockets.sync.client import connect
from websockets.sync.server import serve

RETRY_S = 30.0
env = dict(os.environ)
TASK, RUN = env.get("LEASEGATE_TASK_ID"), int(env.get("LEASEGATE_RUN_EPOCH", "0"))
ops = itertools.count(1)
state = {"pending": None, "lease": None, "retry": None}
lock = threading.RLock()


def reader(lease):
    s = next(x for x in lease["sessions"] if x["purpose"] == "credentials")
    return boto3.session.Session().client(
        "ssm",
        region_name=lease["region"],
        endpoint_url=env["LEASEGATE_SSM_ENDPOINT"],
        aws_access_key_id=s["accessKeyId"],
        aws_secret_access_key=s["secretAccessKey"],
        aws_session_token=s["sessionToken"],
        config=Config(proxies={}, retries={"max_attempts": 1}),
    )


def entries(manifest):
    out = list(manifest["engines"]) + [e for e in manifest["mcp"] if e["parameter"]]
    return out + [x for x in (manifest["github"], manifest["ssh"]) if x is not None]


def read(lease, selectors):
    client = reader(lease)
    for i in range(0, len(selectors), 10):  # at most ten names per call
        client.get_parameters(Names=selectors[i : i + 10], WithDecryption=True)


def request(ws):
    with lock:
        if state["retry"] is not None:
            state["retry"].cancel()
            state["retry"] = None
        op = f"op-{next(ops)}"
        state["pending"] = op
    ws.send(json.dumps({"kind": "lease.request", "opId": op, "taskId": TASK, "runEpoch": RUN}))


def retry_later(ws):
    with lock:
        state["pending"] = None
        t = threading.Timer(RETRY_S, request, args=(ws,))
        t.daemon = True
        state["retry"] = t
        t.start()


def mine(frame):
    return frame.get("taskId") == TASK and frame.get("runEpoch") == RUN


def handle(ws, frame):
    kind = frame.get("kind")
    with lock:
        pending, lease = state["pending"], state["lease"]
    if kind == "lease.grant.v1" and pending is not None and frame.get("opId") == pending:
        new = frame["lease"]
        if new.get("taskId") != TASK or new.get("runEpoch") != RUN:
            return
        with lock:
            state["pending"], state["lease"] = None, new
        read(new, [f"{e['parameter']}:{e['version']}" for e in entries(new["manifest"])])
    elif (
        kind in ("lease.deny", "lease.unavailable")
        and pending is not None
        and frame.get("opId") == pending
    ):
        if kind == "lease.deny":
            with lock:
                state["lease"] = None  # cleaned up: nothing is read through it again
        retry_later(ws)
    elif (
        kind == "lease.stale"
        and mine(frame)
        and set(frame) == {"kind", "taskId", "runEpoch", "wantedRevision", "minRevision", "removed"}
    ):
        if lease is not None and frame["wantedRevision"] <= lease["manifestRevision"]:
            return
        request(ws)
    elif kind == "credential.changed" and mine(frame) and lease is not None:
        v = frame.get("version")
        if type(v) is not int or v < 1:
            return
        for e in entries(lease["manifest"]):
            if e["credentialId"] == frame.get("credentialId"):
                read(lease, [f"{e['parameter']}:{v}"])


def serve_frames(ws):
    for text in ws:
        try:
            frame = json.loads(text)
        except ValueError:
            continue
        if isinstance(frame, dict):
            try:
                handle(ws, frame)
            except Exception as e:  # noqa: BLE001 - a failed read leaves the runner serving
                print(f"frame {frame.get('kind')!r}: {type(e).__name__}", file=sys.stderr)


def dialed(ws):
    """One connection from the kit: a fresh run from its query string."""
    global TASK, RUN
    query = {k: v[0] for k, v in parse_qs(urlsplit(ws.request.path).query).items()}
    with lock:
        if state["retry"] is not None:
            state["retry"].cancel()
        state.update(pending=None, lease=None, retry=None)
        TASK, RUN = query["taskId"], int(query["runEpoch"])
        env["LEASEGATE_SSM_ENDPOINT"] = query["ssmEndpoint"]
    request(ws)
    try:
        serve_frames(ws)
    finally:
        with lock:
            if state["retry"] is not None:
                state["retry"].cancel()


def main():
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if sys.argv[1:] == ["--listen"]:
        with serve(dialed, "127.0.0.1", 0) as server:
            print(f"ws://127.0.0.1:{server.socket.getsockname()[1]}", flush=True)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            stop.wait()
        return
    with connect(env["LEASEGATE_BRIDGE_URL"]) as ws:
        request(ws)
        threading.Thread(target=serve_frames, args=(ws,), daemon=True).start()
        stop.wait()


if __name__ == "__main__":
    main()
