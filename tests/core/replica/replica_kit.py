"""Test kit for the env replica: frame builders, a fake reader, a driver.

Everything is driven by events: no sleeps, no clock, no AWS.
"""

from __future__ import annotations

import json
import re
from typing import Any

from leasegate.core import Secret
from leasegate.core._model import encode
from leasegate.core.replica import (
    ActivateAssignment,
    AwaitReady,
    DropAll,
    DropAssignment,
    EnvFrameReceived,
    ExpectActivation,
    ReadLegacyValue,
    ReadStagedValue,
    ReplicaLimits,
    ReplicaManager,
    SendAck,
    SettleActivation,
    ValueReadCompleted,
    ValueReadFailed,
)

BOOT = "boot1"
TASK = "t1"
ORG = "org1"


def sid(i: int) -> str:
    """A staging id (lowercase UUID) numbered ``i``."""
    return f"{i:08x}-0000-4000-8000-000000000000"


def staged_ref(i: int = 1) -> dict[str, Any]:
    return {"kind": "staged", "stagingId": sid(i)}


def legacy_ref(v: int = 1) -> dict[str, Any]:
    return {"kind": "legacy", "ssmVersion": v}


def state(
    key: str,
    *,
    rev: int = 1,
    gen: int = 1,
    tomb: bool = False,
    ref: Any = "default",
    binding: Any = None,
    epoch: int | None = 1,
    lg: int = 0,
) -> dict[str, Any]:
    if ref == "default":
        ref = None if tomb else staged_ref(1)
    return {
        "key": key,
        "head": {"revision": rev, "generation": gen, "tombstone": tomb, "valueRef": ref},
        "binding": binding,
        "policyEpoch": epoch,
        "listingGeneration": lg,
    }


def _common(kind: str, op: str, task: str, run: int, boot: str, stream: str) -> dict[str, Any]:
    return {
        "kind": f"env.replica.v1.{kind}",
        "opId": op,
        "taskId": task,
        "runEpoch": run,
        "runnerBootId": boot,
        "streamId": stream,
    }


def begin(
    attempt: str = "A1",
    projects: tuple[str, ...] = ("p1",),
    *,
    stream: str = "S1",
    task: str = TASK,
    run: int = 1,
    boot: str = BOOT,
    op: str = "op-b",
) -> dict[str, Any]:
    f = _common("begin", op, task, run, boot, stream)
    f.update(attemptId=attempt, projectIds=list(projects))
    return f


def page(
    records: list[dict[str, Any]],
    *,
    project: str = "p1",
    after: str | None = None,
    version: int = 1,
    complete: bool = True,
    attempt: str = "A1",
    stream: str = "S1",
    task: str = TASK,
    run: int = 1,
    boot: str = BOOT,
    op: str = "op-p",
) -> dict[str, Any]:
    f = _common("page", op, task, run, boot, stream)
    f.update(
        attemptId=attempt,
        projectId=project,
        after=after,
        recordVersion=version,
        records=records,
        complete=complete,
    )
    return f


def apply(
    st: dict[str, Any],
    seq: int,
    *,
    project: str = "p1",
    version: int = 2,
    attempt: str | None = None,
    stream: str = "S1",
    task: str = TASK,
    run: int = 1,
    boot: str = BOOT,
    op: str = "op-a",
) -> dict[str, Any]:
    f = _common("apply", op, task, run, boot, stream)
    f.update(
        attemptId=attempt,
        projectId=project,
        recordVersion=version,
        state=st,
        delivery={"streamId": stream, "sequence": seq},
    )
    return f


def commit(
    versions: list[tuple[str, int]] | None = None,
    *,
    seq: int = 0,
    attempt: str = "A1",
    stream: str = "S1",
    task: str = TASK,
    run: int = 1,
    boot: str = BOOT,
    op: str = "op-c",
) -> dict[str, Any]:
    f = _common("commit", op, task, run, boot, stream)
    vs = [("p1", 1)] if versions is None else versions
    f.update(
        attemptId=attempt,
        highWater={"streamId": stream, "sequence": seq},
        versions=[{"projectId": p, "recordVersion": v} for p, v in vs],
    )
    return f


def staged_envelope(
    project: str, key: str, staging: str, value: str, /, *, org: str = ORG, **over: Any
) -> str:
    env: dict[str, Any] = {
        "v": 2,
        "kind": "project-env",
        "orgId": org,
        "projectId": project,
        "key": key,
        "stagingId": staging,
        "value": value,
    }
    env.update(over)
    return json.dumps(env)


def legacy_envelope(project: str, key: str, value: str, /, **over: Any) -> str:
    env: dict[str, Any] = {
        "v": 1,
        "kind": "project-env",
        "projectId": project,
        "key": key,
        "value": value,
        "updatedAt": 1700000000000,
    }
    env.update(over)
    return json.dumps(env)


class FakeReader:
    """Answers reads from ``values``; unknown staged reads return a valid
    envelope whose value is ``CANARY-{project}-{key}-{stagingId}``."""

    def __init__(self, name: str = "r1") -> None:
        self.name = name
        self.calls: list[tuple[Any, ...]] = []
        self.values: dict[tuple[Any, ...], Any] = {}

    def __repr__(self) -> str:
        return f"FakeReader({self.name})"

    def answer(self, cmd: ReadStagedValue | ReadLegacyValue, now: int = 0) -> Any:
        if isinstance(cmd, ReadStagedValue):
            k: tuple[Any, ...] = ("staged", cmd.project_id, cmd.key, cmd.staging_id)
            self.calls.append(k)
            got = self.values.get(
                k,
                staged_envelope(
                    cmd.project_id,
                    cmd.key,
                    cmd.staging_id,
                    f"CANARY-{cmd.project_id}-{cmd.key}-{cmd.staging_id}",
                ),
            )
            if got == "FAIL":
                return ValueReadFailed(now_ms=now, cmd_id=cmd.cmd_id)
            return ValueReadCompleted(
                now_ms=now, cmd_id=cmd.cmd_id, raw=None if got is None else Secret(got)
            )
        k = ("legacy", cmd.project_id, cmd.key, cmd.version)
        self.calls.append(k)
        got = self.values.get(
            k, (legacy_envelope(cmd.project_id, cmd.key, f"CANARY-{cmd.key}"), cmd.version)
        )
        if got == "FAIL":
            return ValueReadFailed(now_ms=now, cmd_id=cmd.cmd_id)
        if got is None:
            return ValueReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, raw=None, version=None)
        return ValueReadCompleted(now_ms=now, cmd_id=cmd.cmd_id, raw=Secret(got[0]), version=got[1])


def acks(cmds: list[Any]) -> list[dict[str, Any]]:
    return [encode(c.ack) for c in cmds if isinstance(c, SendAck)]


def reads(cmds: list[Any]) -> list[Any]:
    return [c for c in cmds if isinstance(c, ReadStagedValue | ReadLegacyValue)]


class Driver:
    """A manager plus helpers; ``feed`` answers reads automatically."""

    def __init__(
        self,
        *,
        limits: ReplicaLimits | None = None,
        epochs: tuple[int, ...] = (1,),
    ) -> None:
        self.m = ReplicaManager(boot_id=BOOT, policy_epochs=epochs, limits=limits)
        self.readers: dict[str, FakeReader] = {}
        self.log: list[Any] = []
        self.now = 0

    def send(self, ev: Any) -> list[Any]:
        cmds = self.m.handle(ev)
        self.log.extend(cmds)
        return cmds

    def activate(
        self, task: str = TASK, run: int = 1, *, org: str = ORG, reader: Any = None
    ) -> list[Any]:
        if reader is None:
            reader = self.readers.setdefault(task, FakeReader(f"r-{task}"))
        return self.send(
            ActivateAssignment(now_ms=0, task_id=task, run_epoch=run, org_id=org, reader=reader)
        )

    def raw(self, frame: Any) -> list[Any]:
        """Send a frame; do not answer reads."""
        return self.send(EnvFrameReceived(now_ms=0, frame=frame))

    def step(self, frame: Any) -> list[Any]:
        """Send a frame and answer every read through its reader, in order;
        return every command caused."""
        cmds = self.raw(frame)
        out = list(cmds)
        pending = reads(cmds)
        while pending:
            cmd = pending.pop(0)
            more = self.send(cmd.reader.answer(cmd))
            out.extend(more)
            pending.extend(reads(more))
        return out

    def feed(self, frame: Any) -> list[dict[str, Any]]:
        """Send a frame and answer every read through its reader; return acks."""
        return acks(self.step(frame))

    def one(self, frame: Any) -> dict[str, Any]:
        got = self.feed(frame)
        assert len(got) == 1, got
        return got[0]

    def expect(self, task: str = TASK, run: int = 1) -> int:
        (c,) = self.send(ExpectActivation(now_ms=0, task_id=task, run_epoch=run))
        return int(c.token)

    def settle(self, token: int, task: str = TASK) -> list[Any]:
        return self.send(SettleActivation(now_ms=0, task_id=task, token=token))

    def drop(self, task: str = TASK, run: int = 1) -> list[Any]:
        return self.send(DropAssignment(now_ms=0, task_id=task, run_epoch=run))

    def drop_all(self) -> list[Any]:
        return self.send(DropAll(now_ms=0))

    def await_ready(self, wid: int, task: str = TASK, run: int = 1, ms: Any = 1000) -> list[Any]:
        return self.send(
            AwaitReady(now_ms=0, waiter_id=wid, task_id=task, run_epoch=run, timeout_ms=ms)
        )

    def ready_snapshot(
        self,
        records: list[dict[str, Any]] | None = None,
        *,
        task: str = TASK,
        run: int = 1,
        attempt: str = "A1",
        stream: str = "S1",
        version: int = 1,
    ) -> None:
        """Begin, one complete page for p1, commit."""
        recs = [state("A"), state("B")] if records is None else records
        assert self.one(begin(attempt, stream=stream, task=task, run=run))["ok"]
        ack = self.one(
            page(recs, attempt=attempt, stream=stream, task=task, run=run, version=version)
        )
        assert ack["ok"], ack
        seq = self.m.read_status(task).applied_through.sequence  # type: ignore[union-attr]
        ack = self.one(
            commit([("p1", version)], attempt=attempt, stream=stream, task=task, run=run, seq=seq)
        )
        assert ack["ok"], ack

    def value(
        self, key: str, task: str = TASK, run: int = 1, projects: tuple[str, ...] = ("p1",)
    ) -> str | None:
        view = self.m.read_view(task, run, projects)
        assert view is not None
        for p in view.projects:
            for e in p.entries:
                if e.state.key == key:
                    return None if e.value is None else e.value.reveal()
        raise KeyError(key)


def reachable_values(m: ReplicaManager) -> list[str]:
    """Every plaintext value reachable from the manager's state (for scrub tests)."""
    found: list[str] = []
    seen: set[int] = set()

    def walk(o: Any) -> None:
        if id(o) in seen:
            return
        seen.add(id(o))
        if isinstance(o, Secret):
            found.append(o.reveal())
            return
        if isinstance(o, dict):
            for k, v in o.items():
                walk(k)
                walk(v)
        elif isinstance(o, list | tuple | set | frozenset):
            for v in o:
                walk(v)
        elif hasattr(o, "__slots__") and not isinstance(o, type):
            for cls in type(o).__mro__:
                for s in getattr(cls, "__slots__", ()):
                    if hasattr(o, s):
                        walk(getattr(o, s))
        elif hasattr(o, "__dict__"):
            walk(vars(o))
        elif hasattr(o, "popleft"):
            for v in o:
                walk(v)

    walk(m)
    return found


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def js_str(s: str) -> str:
    """``JSON.stringify`` of a string (well-formed: lone surrogates escaped).

    Python's encoder (``ensure_ascii=False``) writes the same escapes as
    JavaScript's except lone surrogates, which it leaves raw. Frames parsed
    from JSON text never hold a split surrogate pair, so every surrogate
    code point here is lone.
    """
    return _LONE_SURROGATE.sub(
        lambda m: f"\\u{ord(m.group()):04x}", json.dumps(s, ensure_ascii=False)
    )


def js_canonical(v: Any) -> str:
    """The reference's ``canonicalJson`` (keys sorted; ASCII keys only here),
    written independently of ``leasegate.core.replica._ledger``."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is int:
        return str(v)
    if type(v) is str:
        return js_str(v)
    if type(v) is list:
        return "[" + ",".join(js_canonical(x) for x in v) + "]"
    assert type(v) is dict
    return "{" + ",".join(js_str(k) + ":" + js_canonical(v[k]) for k in sorted(v)) + "}"


def generic_apply_cost(frame: dict[str, Any], ack: dict[str, Any]) -> int:
    """ER-114: ``64 + Buffer.byteLength(canonicalJson(["apply", seq, receipt]))``.

    The receipt as the reference builds it (``#apply`` /
    ``#consumeApplyError``), from what crossed the wire only (the apply frame
    and its first ack), never from the replica's receipt store. Cross-checked
    against Node running the reference's ``canonicalJson``.
    """
    fingerprint = js_canonical(
        {
            "attemptId": frame["attemptId"],
            "projectId": frame["projectId"],
            "recordVersion": frame["recordVersion"],
            "state": frame["state"],
            "delivery": frame["delivery"],
        }
    )
    receipt: dict[str, Any] = {
        "fingerprint": fingerprint,
        "ok": ack["ok"],
        "attemptId": frame["attemptId"],
        "appliedThrough": frame["delivery"],
    }
    if ack["ok"]:
        receipt.update(
            projectId=ack["projectId"], recordVersion=ack["recordVersion"], result=ack["result"]
        )
    else:
        receipt["code"] = ack["code"]
    text = js_canonical(["apply", frame["delivery"]["sequence"], receipt])
    return 64 + len(text.encode("utf-8"))  # no surrogate is left raw
