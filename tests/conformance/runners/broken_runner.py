"""leasegate's threading-shell runner with one planted protocol fault.

``python broken_runner.py FAULT``:

* ``read-latest``: every ``GetParameters`` drops the ``:version`` of its names
  (reads the latest version instead of the pinned one);
* ``read-after-deny``: after a ``lease.deny``, a ``credential.changed`` is
  still read, with the denied lease's session;
* ``ack-out-of-order``: of two applied acks sent within 0.3 s of each other,
  the later goes first;
* ``retry-early`` / ``retry-late``: the lease retry (after
  ``lease.unavailable`` and a deny's cleanup) fires after 20 s / 40 s
  instead of 30 s;
* ``refresh-per-request``: every refresh request sends its own
  ``credential.refresh`` (as many frames as ``LEASEGATE_REFRESH_REQUESTS``);
* ``refresh-takes-any-answer``: a ``credential.refresh.result`` is taken as
  the answer to the pending refresh whatever its ``opId``;
* ``refresh-ignores-sign-in``: a ``needs_sign_in`` answer is taken as
  ``failed`` (no new lease is asked for).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import boto3
from botocore.config import Config

from leasegate.conformance.selfrunner import run_threads
from leasegate.core.registry import _cleanup, _requests
from leasegate.shells import ThreadWebSocketClient
from leasegate.shells import ssm as ssm_module


def read_latest() -> None:
    original = ssm_module.SsmReader.__init__

    def strip(params: dict[str, Any], **_: Any) -> None:
        params["Names"] = [n.split(":", 1)[0] for n in params.get("Names", [])]

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._client.meta.events.register("provide-client-params.ssm.GetParameters", strip)

    ssm_module.SsmReader.__init__ = init  # type: ignore[method-assign]
    run_threads()


class ReadsAfterDeny(ThreadWebSocketClient):
    lease: dict[str, Any] | None = None
    denied = False

    def receive(self, timeout_s: float | None = None) -> Any:
        value = super().receive(timeout_s)
        if isinstance(value, dict):
            kind = value.get("kind")
            if kind == "lease.grant.v1":
                type(self).lease = value["lease"]
            elif kind == "lease.deny":
                type(self).denied = True
            elif kind == "credential.changed" and self.denied and self.lease is not None:
                self._read(value)
        return value

    def _read(self, changed: dict[str, Any]) -> None:
        import os

        lease = self.lease
        assert lease is not None
        s = next(x for x in lease["sessions"] if x["purpose"] == "credentials")
        entry = next(
            e for e in lease["manifest"]["engines"] if e["credentialId"] == changed["credentialId"]
        )
        client = boto3.session.Session().client(
            "ssm",
            region_name=lease["region"],
            endpoint_url=os.environ["LEASEGATE_SSM_ENDPOINT"],
            aws_access_key_id=s["accessKeyId"],
            aws_secret_access_key=s["secretAccessKey"],
            aws_session_token=s["sessionToken"],
            config=Config(proxies={}),
        )
        client.get_parameters(
            Names=[f"{entry['parameter']}:{changed['version']}"], WithDecryption=True
        )


class AcksOutOfOrder(ThreadWebSocketClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: Any = None
        self._lock = threading.Lock()

    def send(self, value: Any) -> None:
        if (
            isinstance(value, dict)
            and value.get("kind") == "env.replica.v1.ack"
            and value.get("phase") == "applied"
        ):
            with self._lock:
                held, self._held = self._held, None
                if held is None:
                    self._held = value
                    threading.Thread(target=self._flush, args=(value,), daemon=True).start()
                    return
            super().send(value)
            super().send(held)
            return
        super().send(value)

    def _flush(self, value: Any) -> None:
        time.sleep(0.3)
        with self._lock:
            if self._held is not value:
                return
            self._held = None
        super().send(value)


def retry_after(ms: int) -> None:
    # Every registry module that arms the retry timer reads its own binding.
    for module in (_requests, _cleanup):
        assert isinstance(module.LEASE_RETRY_MS, int)
        module.LEASE_RETRY_MS = ms  # type: ignore[misc]
    run_threads()


class RefreshPerRequest(ThreadWebSocketClient):
    def send(self, value: Any) -> None:
        super().send(value)
        if isinstance(value, dict) and value.get("kind") == "credential.refresh":
            import os

            for i in range(1, int(os.environ.get("LEASEGATE_REFRESH_REQUESTS") or "1")):
                super().send({**value, "opId": f"{value['opId']}-{i}"})


class RefreshTakesAnyAnswer(ThreadWebSocketClient):
    pending: str | None = None

    def send(self, value: Any) -> None:
        if isinstance(value, dict) and value.get("kind") == "credential.refresh":
            type(self).pending = value["opId"]
        super().send(value)

    def receive(self, timeout_s: float | None = None) -> Any:
        value = super().receive(timeout_s)
        if (
            isinstance(value, dict)
            and value.get("kind") == "credential.refresh.result"
            and self.pending is not None
        ):
            value = {**value, "opId": self.pending}
        return value


class RefreshIgnoresSignIn(ThreadWebSocketClient):
    def receive(self, timeout_s: float | None = None) -> Any:
        value = super().receive(timeout_s)
        if (
            isinstance(value, dict)
            and value.get("kind") == "credential.refresh.result"
            and value.get("outcome") == "needs_sign_in"
        ):
            value = {**value, "outcome": "failed"}
        return value


FAULTS = {
    "read-latest": read_latest,
    "read-after-deny": lambda: run_threads(ReadsAfterDeny),
    "ack-out-of-order": lambda: run_threads(AcksOutOfOrder),
    "retry-early": lambda: retry_after(20_000),
    "retry-late": lambda: retry_after(40_000),
    "refresh-per-request": lambda: run_threads(RefreshPerRequest),
    "refresh-takes-any-answer": lambda: run_threads(RefreshTakesAnyAnswer),
    "refresh-ignores-sign-in": lambda: run_threads(RefreshIgnoresSignIn),
}

if __name__ == "__main__":
    fault = sys.argv[1]
    if fault not in FAULTS:
        sys.exit(f"unknown fault {fault}")
    FAULTS[fault]()
