"""The numbered scenarios. Each derives from docs/protocol.md or
docs/protocol-env.md and names the catalog entries it checks.

Expected acks are built from the frames alone (protocol-env.md, "EnvAck";
env-replica.md, "Acks") and compared as JSON values (canonical JSON: sorted
keys, no whitespace), so a runner's key order is free, as the protocol leaves
it (protocol-env.md, "Acks on the wire"), but every key, type and value is
checked, and each key must be written once.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from ._suite import RUN_EPOCH, TASK_ID, Case, Context, default_seed, duplicate_key, masked
from ._world import Frame, now_ms

__all__ = ["CASES", "expected_ack"]

OP_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
ENV_KINDS = {
    "env.replica.v1.begin": "begun",
    "env.replica.v1.page": "page",
    "env.replica.v1.apply": "applied",
    "env.replica.v1.commit": "complete",
}


# ---------------------------------------------------------------- expected acks


def materialization(state: dict[str, Any], policy_epochs: tuple[int, ...] = (1,)) -> dict[str, Any]:
    """What a correct runner reports for ``state`` whose value the kit wrote
    correctly (protocol-env.md, "Materializations")."""
    head, binding = state["head"], state["binding"]
    if head["tombstone"]:
        return {"kind": "withheld", "reason": "tombstone"}
    if state["policyEpoch"] is not None and state["policyEpoch"] not in policy_epochs:
        return {"kind": "withheld", "reason": "policy_epoch_unknown"}
    if binding is not None and binding["kind"] == "omit":
        return {"kind": "withheld", "reason": "binding_omits"}
    if binding is not None and binding["kind"] == "withhold":
        return {"kind": "withheld", "reason": binding["reason"]}
    ref = head["valueRef"]
    if ref is None:
        return {"kind": "unavailable", "reason": "value_reference_invalid"}
    if ref["kind"] == "row":
        return {"kind": "unavailable", "reason": "value_unavailable"}
    return {"kind": "installed"}


def expected_ack(
    frame: dict[str, Any], *, sequence: int, code: str | None = None
) -> dict[str, Any]:
    """The ack a correct runner sends for ``frame`` (a success unless ``code``),
    with ``appliedThrough`` at ``sequence`` on the frame's stream."""
    phase = ENV_KINDS[frame["kind"]]
    ack: dict[str, Any] = {
        "kind": "env.replica.v1.ack",
        "opId": frame["opId"],
        "taskId": frame["taskId"],
        "runEpoch": frame["runEpoch"],
        "runnerBootId": frame["runnerBootId"],
        "streamId": frame["streamId"],
        "attemptId": frame["attemptId"],
        "policyEpochs": [1],
        "appliedThrough": {"streamId": frame["streamId"], "sequence": sequence},
        "ok": code is None,
        "phase": phase,
    }
    if code is not None:
        ack.update(code=code, error=code)
    elif phase == "page":
        ack.update(
            projectId=frame["projectId"],
            after=frame["after"],
            recordVersion=frame["recordVersion"],
            results=[{"state": r, "materialization": materialization(r)} for r in frame["records"]],
            complete=frame["complete"],
        )
    elif phase == "applied":
        ack.update(
            projectId=frame["projectId"],
            recordVersion=frame["recordVersion"],
            result={"state": frame["state"], "materialization": materialization(frame["state"])},
        )
    elif phase == "complete":
        ack.update(highWater=frame["highWater"])
    return ack


#: Seconds the kit leaves a runner after it is up before changing its lease
#: or its env. A runner installs a grant after its snapshot committed (the
#: reference does), and no frame tells when that install ends; a change in
#: that window has other correct answers: a ``lease.stale`` withdraws the
#: grant being installed (LR-080), whose full cleanup then asks again at once
#: (LR-057, LR-072; a deny or unavailable arriving meanwhile joins that
#: cleanup, LR-071); a value read started during the install and finished
#: after its commit is refused (LR-154: ``value_unavailable``).
SETTLE_S = 2.0
#: The same for the cases whose next step relies on the install having
#: ended: 12 and 13 then judge the retry's timing (a longer settle costs
#: them little), 16 answers a refresh that must meet the change's commit.
LONG_SETTLE_S = 3.0

#: The protocol's retry delay, ms: after ``lease.unavailable`` (LR-110) and
#: after a taken deny's cleanup (LR-112); LR-162's ``LEASE_RETRY_MS``.
RETRY_MS = 30_000
#: How much earlier than :data:`RETRY_MS` after the answer left the kit a
#: retry may be seen, ms: the kit stamps a frame just before it sends it, so
#: only clock granularity separates a correct runner's timer from that stamp.
RETRY_EARLY_MS = 100
#: How much later, ms: the runner's scheduling on a loaded machine and, after
#: a deny, its cleanup (LR-112 arms the retry when the cleanup ended).
RETRY_LATE_MS = 5_000


def _ready(ctx: Context, lease: dict[str, Any], settle_s: float = SETTLE_S) -> None:
    """The run is up: its snapshot committed, or (a runner without the env
    replica) every credential of ``lease`` was read at its pinned version;
    then ``settle_s`` seconds for the runner to finish installing."""
    if "env-replica" in ctx.implements:
        _snapshot(ctx)
    else:
        ctx.step = "grant reads"
        ctx.wait_reads(
            [f"{p}:{v}" for p, v in _credential_selectors(lease).items()],
            "every manifest credential read",
        )
    ctx.settle(settle_s)


def _snapshot(ctx: Context) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Wait for the first snapshot to commit; return its frames and the commit ack."""
    ctx.step = "snapshot"
    ack = ctx.committed()
    frames = [
        f.value
        for f in ctx.frames("out")
        if f.kind in ENV_KINDS and f.value["attemptId"] is not None
    ]
    return frames, ack.value


def _live_apply(
    ctx: Context, commit_ack: dict[str, Any], seq: int, key: str, version: int
) -> dict[str, Any]:
    """A live apply of a new key at ``seq`` (head 1/1, a ``row`` reference)."""
    stream = commit_ack["streamId"]
    return {
        "kind": "env.replica.v1.apply",
        "opId": f"conformance-apply-{seq}-{key}",
        "taskId": ctx.task_id,
        "runEpoch": ctx.run_epoch,
        "runnerBootId": ctx.boot_id,
        "streamId": stream,
        "attemptId": None,
        "projectId": ctx.project_id,
        "recordVersion": version,
        "state": {
            "key": key,
            "head": {
                "revision": 1,
                "generation": 1,
                "tombstone": False,
                "valueRef": {"kind": "row", "rowId": f"row-{key}"},
            },
            "binding": None,
            "policyEpoch": 1,
            "listingGeneration": 1,
        },
        "delivery": {"streamId": stream, "sequence": seq},
    }


def _project_version(ctx: Context, frames: list[dict[str, Any]]) -> int:
    commit = next(f for f in frames if f["kind"] == "env.replica.v1.commit")
    return int(
        next(v["recordVersion"] for v in commit["versions"] if v["projectId"] == ctx.project_id)
    )


def _credential_selectors(lease: dict[str, Any]) -> dict[str, int]:
    m = lease["manifest"]
    entries = list(m["engines"]) + [e for e in m["mcp"] if e["parameter"]]
    entries += [s for s in (m["github"], m["ssh"]) if s is not None]
    return {e["parameter"]: e["version"] for e in entries}


def _credentials_key(lease: dict[str, Any]) -> str:
    return str(next(s["accessKeyId"] for s in lease["sessions"] if s["purpose"] == "credentials"))


# ---------------------------------------------------------------------- cases


def _check_run_frame(ctx: Context, f: Frame, keys: list[str]) -> None:
    """``f`` (a runner frame) came as a text message with each key written
    once, and has exactly ``keys``, the assigned run and an op id."""
    if f.binary:
        raise ctx.fail(f"the {f.kind} as a text message", "a binary message")
    dup = duplicate_key(f.text)
    if dup is not None:
        raise ctx.fail("each key once per object", f"{dup} twice in one object")
    v = f.value
    if sorted(v) != sorted(keys):
        raise ctx.fail(f"exactly the keys {', '.join(keys)}", f"{sorted(masked(v, keys))}")
    if (v["taskId"], v["runEpoch"]) != (TASK_ID, RUN_EPOCH):
        seen = masked([v["taskId"], v["runEpoch"]], [TASK_ID])
        raise ctx.fail(f"taskId {TASK_ID!r}, runEpoch {RUN_EPOCH}", f"{seen[0]!r}, {seen[1]!r}")
    if not (isinstance(v["opId"], str) and OP_ID.fullmatch(v["opId"])):
        raise ctx.fail("an opId matching ^[A-Za-z0-9_-]{1,128}$", "another opId")


REQUEST_KEYS = ["kind", "opId", "taskId", "runEpoch"]


def case_lease_request(ctx: Context) -> None:
    ctx.step = "first frame"
    f = ctx.wait_frame("in", "lease.request", "a lease.request for the assigned run")
    _check_run_frame(ctx, f, REQUEST_KEYS)


def _many_seed(ctx: Context) -> None:
    default_seed(ctx)
    for i in range(11):
        ctx.cloud.add_engine_credential("alice", f"engine-{i:02d}", env={"EXTRA_KEY": f"extra-{i}"})


def _bump_before_grant(ctx: Context, value: Any) -> None:
    # The latest version of every credential differs from the pinned one.
    if value.get("kind") == "lease.grant.v1":
        for name in _credential_selectors(value["lease"]):
            ctx.put_new_version(name)


def _check_pinned(
    ctx: Context, lease: dict[str, Any], pins: dict[str, set[int]], since_ms: int
) -> None:
    key = _credentials_key(lease)
    for call in ctx.ssm_calls(since_ms):
        if call.action != "GetParameters":
            raise ctx.fail("only GetParameters calls", call.action)
        if len(call.names) > 10:
            raise ctx.fail("at most 10 names per GetParameters", f"{len(call.names)}")
        if call.access_key_id != key:
            raise ctx.fail(
                "calls signed with the lease's credentials session", "another access key id"
            )
        for n in call.names:
            if n.startswith("/uai/projects/"):
                continue
            name, _, version = n.rpartition(":")
            if (
                not name
                or name not in pins
                or not version.isdigit()
                or int(version) not in pins[name]
            ):
                raise ctx.fail(
                    "version-pinned names "
                    + ", ".join(f"{p}:{sorted(v)[-1]}" for p, v in pins.items()),
                    n,
                )


def case_grant_reads_pinned(ctx: Context) -> None:
    ctx.step = "grant"
    lease = ctx.grant()
    pins = _pins(lease)
    ctx.step = "reads after the grant"
    ctx.wait_reads(
        [f"{p}:{v}" for p, (v,) in ((p, tuple(s)) for p, s in pins.items())],
        "every manifest credential read as <parameter>:<version>",
        check=partial(_check_pinned, ctx, lease, pins, 0),
    )
    _check_pinned(ctx, lease, pins, 0)


def _pins(lease: dict[str, Any]) -> dict[str, set[int]]:
    """Each manifest credential's parameter → the versions it may be read at."""
    return {p: {v} for p, v in _credential_selectors(lease).items()}


def _expect_pinned_read(
    ctx: Context,
    lease: dict[str, Any],
    pins: dict[str, set[int]],
    param: str,
    version: int,
    since_ms: int,
) -> None:
    """``<param>:<version>`` is read (it joins ``pins``), and every call so
    far is pinned, ≤ 10 names, with ``lease``'s session (:func:`_check_pinned`)."""
    pins[param].add(version)
    ctx.wait_reads(
        [f"{param}:{version}"],
        f"a read of {param}:{version} with the lease's session",
        since_ms=since_ms,
        check=partial(_check_pinned, ctx, lease, pins, 0),
    )
    _check_pinned(ctx, lease, pins, 0)


def _rotate(ctx: Context) -> tuple[str, Frame]:
    """Rotate ``claude`` in the cloud; its parameter and the ``credential.changed`` sent."""
    t = ctx.mark()
    ctx.cloud.rotate("claude", env={"ANTHROPIC_API_KEY": "sk-rotated"})
    changed = ctx.wait_frame("out", "credential.changed", "credential.changed sent", since=t)
    param = ctx.cloud.credential_parameter("claude")
    assert param is not None
    return param, changed


def case_rotation(ctx: Context) -> None:
    ctx.step = "grant"
    lease = ctx.grant()
    _ready(ctx, lease)
    ctx.step = "rotation"
    param, changed = _rotate(ctx)
    _expect_pinned_read(ctx, lease, _pins(lease), param, changed.value["version"], changed.at_ms)


def case_snapshot_acks(ctx: Context) -> None:
    ctx.step = "grant"
    lease = ctx.grant()
    # Each snapshot frame's ack is judged as it comes: the cloud goes on
    # only after a good ack, so a wrong one fails here, not at the timeout.
    frames: list[dict[str, Any]] = []
    while not frames or not frames[-1]["kind"].endswith("commit"):
        ctx.step = "snapshot"
        ops = {f["opId"] for f in frames}

        def next_frame(fs: list[Frame], ops: set[str] = ops) -> Frame | None:
            return next(
                (
                    f
                    for f in fs
                    if f.direction == "out"
                    and f.kind in ENV_KINDS
                    and f.value["attemptId"] is not None
                    and f.value["opId"] not in ops
                ),
                None,
            )

        nxt = ctx.bridge.wait(next_frame, ctx.left())
        if nxt is None:
            raise ctx.fail("the snapshot's next frame (begin, page or commit)", "none")
        frame = nxt.value
        frames.append(frame)
        ctx.step = f"{frame['kind'].rsplit('.', 1)[1]} {frame['opId']}"
        seq = frame["highWater"]["sequence"] if frame["kind"].endswith("commit") else 0
        ctx.expect_ack(expected_ack(frame, sequence=seq), ctx.ack_for(frame, "an ack"))
    ctx.step = "staged values read"
    names = [
        n
        for f in frames
        if f["kind"].endswith("page")
        for r in f["records"]
        if (n := ctx.cloud.env_parameter(ctx.project_id, r["key"])) is not None
    ]
    ctx.wait_reads(names, "each installed record's staged parameter read by name alone")
    key = _credentials_key(lease)
    if any(c.access_key_id != key for c in ctx.ssm_calls()):
        raise ctx.fail("env reads through the lease's credentials session", "another access key id")


def case_live_applies(ctx: Context) -> None:
    _ready(ctx, ctx.grant())
    for seq, change in ((1, "set"), (2, "delete")):
        ctx.step = f"live apply {seq} ({change})"
        t = ctx.mark()
        if change == "set":
            ctx.cloud.set_env_value(ctx.project_id, "NEW_KEY", "fresh value")
        else:
            ctx.cloud.delete_env_value(ctx.project_id, "NEW_KEY")
        apply = ctx.wait_frame("out", "env.replica.v1.apply", "a live apply sent", since=t).value
        ctx.expect_ack(
            expected_ack(apply, sequence=seq), ctx.ack_for(apply, "an applied ack", since=t)
        )


def _detached_snapshot(ctx: Context) -> tuple[dict[str, Any], int]:
    ctx.grant()
    frames, commit_ack = _snapshot(ctx)
    ctx.bridge.detach()  # the kit alone talks from here on
    return commit_ack, _project_version(ctx, frames)


def case_pipelined_applies(ctx: Context) -> None:
    commit_ack, version = _detached_snapshot(ctx)
    ctx.step = "three applies sent back to back"
    applies = [_live_apply(ctx, commit_ack, i, f"PIPE_{i}", version + i) for i in (1, 2, 3)]
    t = ctx.mark()
    for a in applies:
        ctx.send(a)
    for i, a in enumerate(applies, 1):
        ctx.step = f"ack {i} of 3"
        ctx.ack_for(a, f"an ack for apply {i}", since=t)
    acks = ctx.frames("in", "env.replica.v1.ack")[-3:]
    ctx.step = "ack order"
    order = [a.value["opId"] for a in acks]
    if order != [a["opId"] for a in applies]:
        raise ctx.fail("acks in delivery order 1, 2, 3", f"{order}")
    for i, (a, ack) in enumerate(zip(applies, acks, strict=True), 1):
        ctx.step = f"ack {i} contents"
        ctx.expect_ack(expected_ack(a, sequence=i), ack)


def case_apply_gap(ctx: Context) -> None:
    commit_ack, version = _detached_snapshot(ctx)
    ctx.step = "apply at sequence 2 after a cursor of 0"
    a = _live_apply(ctx, commit_ack, 2, "GAP_KEY", version + 1)
    t = ctx.send(a)
    ctx.expect_ack(
        expected_ack(a, sequence=0, code="delivery_gap"), ctx.ack_for(a, "an error ack", since=t)
    )
    ctx.step = "the gap is not consumed: sequence 1 then applies"
    b = _live_apply(ctx, commit_ack, 1, "GAP_KEY", version + 1)
    t = ctx.send(b)
    ctx.expect_ack(expected_ack(b, sequence=1), ctx.ack_for(b, "an applied ack", since=t))


def case_apply_replay(ctx: Context) -> None:
    commit_ack, version = _detached_snapshot(ctx)
    ctx.step = "apply 1"
    a = _live_apply(ctx, commit_ack, 1, "REPLAY_KEY", version + 1)
    t = ctx.send(a)
    first = ctx.ack_for(a, "an applied ack", since=t)
    ctx.expect_ack(expected_ack(a, sequence=1), first)
    ctx.step = "the same apply again"
    t = ctx.send(a)
    ctx.expect_ack(first.value, ctx.ack_for(a, "the recorded ack again", since=t))
    ctx.step = "another change at the same sequence"
    b = _live_apply(ctx, commit_ack, 1, "OTHER_KEY", version + 1)
    t = ctx.send(b)
    ctx.expect_ack(
        expected_ack(b, sequence=1, code="delivery_conflict"),
        ctx.ack_for(b, "a delivery_conflict ack", since=t),
    )


def case_boot_mismatch(ctx: Context) -> None:
    _detached_snapshot(ctx)
    ctx.step = "begin for another runner boot"
    begin = {
        "kind": "env.replica.v1.begin",
        "opId": "conformance-other-boot",
        "taskId": ctx.task_id,
        "runEpoch": ctx.run_epoch,
        "runnerBootId": "another-boot",
        "streamId": "conformance-stream-x",
        "attemptId": "conformance-attempt-x",
        "projectIds": [ctx.project_id],
    }
    t = ctx.send(begin)
    ctx.expect_ack(
        expected_ack(begin, sequence=0, code="runner_boot_mismatch"),
        ctx.ack_for(begin, "an error ack", since=t),
    )


def case_malformed_ignored(ctx: Context) -> None:
    lease = ctx.grant()
    _snapshot(ctx)
    ctx.step = "malformed frames"
    t = ctx.mark()
    t_ms = ctx.frames()[-1].at_ms
    stale_extra = {
        "kind": "lease.stale",
        "taskId": ctx.task_id,
        "runEpoch": ctx.run_epoch,
        "wantedRevision": 9,
        "minRevision": None,
        "removed": [],
        "x": 1,
    }
    # A version written as a string: every JSON reader sees a string (2.0
    # would not do: JSON.parse reads it as 2, as the reference's host does).
    changed_text_version = (
        f'{{"kind":"credential.changed","taskId":"{ctx.task_id}","runEpoch":1,'
        '"credentialId":"claude","revision":"r1","version":"2"}'
    )
    foreign_grant = {"kind": "lease.grant.v1", "opId": "not-a-pending-op", "lease": lease}
    for frame in ("not json {", "[]", "null", stale_extra, changed_text_version, foreign_grant):
        ctx.send(frame)
    ctx.quiet(1.5, "frame in answer to a malformed frame", lambda f: f.direction == "in", since=t)
    read = next((c for c in ctx.ssm_calls(t_ms)), None)
    if read is not None:
        raise ctx.fail("no SSM call for a malformed frame", f"{read.action} {list(read.names)}")
    ctx.step = "still serving after them"
    t = ctx.mark()
    ctx.cloud.set_env_value(ctx.project_id, "AFTER_GARBAGE", "still here")
    apply = ctx.wait_frame("out", "env.replica.v1.apply", "a live apply sent", since=t).value
    ctx.expect_ack(expected_ack(apply, sequence=1), ctx.ack_for(apply, "an applied ack", since=t))


def case_narrowing(ctx: Context) -> None:
    lease = ctx.grant()
    _ready(ctx, lease)
    ctx.step = "lease.stale with a floor"
    removed = ctx.cloud.credential_parameter("gh")
    t = ctx.mark()
    ctx.cloud.narrow(ctx.task_id, ctx.run_epoch, remove=["gh"], floor=True)
    stale = ctx.wait_frame("out", "lease.stale", "lease.stale sent", since=t)
    ctx.step = "a new lease.request"
    ctx.wait_frame(
        "in", "lease.request", "a new lease.request after the stale frame", since=t, timeout_s=10
    )
    lease = ctx.grant(since=t)
    if lease["manifestRevision"] < stale.value["minRevision"]:
        raise ctx.fail("a grant at or above the floor", f"revision {lease['manifestRevision']}")
    if "env-replica" in ctx.implements:
        ctx.committed(since=t)
    ctx.step = "no read of the removed credential"
    for c in ctx.ssm_calls(stale.at_ms):
        if any(n.split(":")[0] == removed for n in c.names):
            raise ctx.fail(f"no read of {removed} after it was removed", "a read of it")


def _expect_retry(ctx: Context, answer: Frame, what: str) -> Frame:
    """The runner's next ``lease.request`` after ``answer`` comes
    :data:`RETRY_MS` after it, no earlier than :data:`RETRY_EARLY_MS` before
    and no later than :data:`RETRY_LATE_MS` after; an early one fails at once."""
    since = ctx.frames().index(answer) + 1
    latest = answer.at_ms + RETRY_MS + RETRY_LATE_MS
    window = f"{RETRY_MS - RETRY_EARLY_MS}–{RETRY_MS + RETRY_LATE_MS} ms after {what}"

    def find(frames: list[Frame]) -> Frame | None:
        return next(
            (f for f in frames[since:] if f.direction == "in" and f.kind == "lease.request"), None
        )

    ctx.idle()  # only waiting from here: another case may start meanwhile
    got = ctx.bridge.wait(find, min(max(0.0, (latest - now_ms()) / 1000), ctx.left()))
    if got is None:
        raise ctx.fail(
            f"the retry's lease.request {window}", f"none by {RETRY_MS + RETRY_LATE_MS} ms"
        )
    assert isinstance(got, Frame)
    after = got.at_ms - answer.at_ms
    if not RETRY_MS - RETRY_EARLY_MS <= after <= RETRY_MS + RETRY_LATE_MS:
        raise ctx.fail(f"the retry's lease.request {window}", f"one {after} ms after it")
    _check_run_frame(ctx, got, REQUEST_KEYS)
    return got


def case_deny(ctx: Context) -> None:
    lease = ctx.grant()
    _ready(ctx, lease, LONG_SETTLE_S)
    ctx.step = "deny"
    t = ctx.mark()
    ctx.cloud.deny(ctx.task_id, ctx.run_epoch, "denied by the conformance kit")
    denied = ctx.wait_frame("out", "lease.deny", "lease.deny answering a new request", since=t)
    ctx.step = "credential.changed after the deny"
    param = ctx.cloud.credential_parameter("claude")
    assert param is not None
    version = ctx.put_new_version(param)
    ctx.send(
        {
            "kind": "credential.changed",
            "taskId": ctx.task_id,
            "runEpoch": ctx.run_epoch,
            "credentialId": "claude",
            "revision": "r1",
            "version": version,
        }
    )
    key = _credentials_key(lease)
    ctx.quiet_ssm(
        2.0,
        "SSM call with the denied lease's session after lease.deny",
        lambda c: c.access_key_id == key,
        since_ms=denied.at_ms,
    )
    # LR-112: after a taken deny the runner cleans up and asks again only
    # when its 30 s retry fires; the deny came with no cleanup in flight (the
    # run was up and settled), so the next request is that retry.
    ctx.step = "the retry after the deny"
    _expect_retry(ctx, denied, "lease.deny")
    ctx.step = "no read with the denied session"
    late = [c for c in ctx.ssm_calls(denied.at_ms) if c.access_key_id == key]
    if late:
        raise ctx.fail(
            "no SSM call with the denied lease's session after lease.deny",
            f"{late[0].action} {list(late[0].names)}",
        )


def index_after(ctx: Context, frame: Frame) -> int:
    """The index just after ``frame`` in the record."""
    return ctx.frames().index(frame) + 1


def case_unavailable(ctx: Context) -> None:
    lease = ctx.grant()
    _ready(ctx, lease, LONG_SETTLE_S)
    ctx.step = "unavailable"
    t = ctx.mark()
    ctx.cloud.make_unavailable(ctx.task_id, ctx.run_epoch)
    answer = ctx.wait_frame(
        "out", "lease.unavailable", "lease.unavailable answering a new request", since=t
    )
    # LR-110: the gate and the committed bundle are untouched: a usable run
    # stays usable, so a rotation meanwhile is still read with its session.
    ctx.step = "still usable: a rotation after lease.unavailable"
    param, changed = _rotate(ctx)
    _expect_pinned_read(ctx, lease, _pins(lease), param, changed.value["version"], changed.at_ms)
    ctx.step = "the retry after lease.unavailable"
    _expect_retry(ctx, answer, "lease.unavailable")


# ---------------------------------------------------------------- refresh

REFRESH_KEYS = ["kind", "opId", "taskId", "runEpoch", "credentialId", "revision"]
#: Seconds the kit holds its answer to a ``credential.refresh``: every
#: request the runner makes at once is pending by then (LR-103).
REFRESH_HOLD_S = 3.0


def _refresh_frame(ctx: Context, lease: dict[str, Any], credential_id: str) -> Frame:
    """The runner's ``credential.refresh`` of ``credential_id``: exactly the
    keys of LR-104, the run, the credential's revision in ``lease``'s
    manifest, an op id no ``lease.request`` used."""
    ctx.step = "credential.refresh"
    f = ctx.wait_frame(
        "in", "credential.refresh", f"a credential.refresh of {credential_id} once the run is up"
    )
    _check_run_frame(ctx, f, REFRESH_KEYS)
    v = f.value
    m = lease["manifest"]
    entries = [*m["engines"], *m["mcp"], *(e for e in (m["github"], m["ssh"]) if e is not None)]
    revision = next(e["revision"] for e in entries if e["credentialId"] == credential_id)
    if (v["credentialId"], v["revision"]) != (credential_id, revision):
        raise ctx.fail(
            f"credentialId {credential_id!r}, revision {revision!r}",
            ", ".join(
                repr(x)
                for x in masked([v["credentialId"], v["revision"]], [credential_id, revision])
            ),
        )
    if v["opId"] in {r.value["opId"] for r in ctx.frames("in", "lease.request")}:
        raise ctx.fail("an opId of its own", "the opId of a lease.request")
    return f


def _refresh_result(op_id: str, outcome: str, version: int | None) -> dict[str, Any]:
    return {
        "kind": "credential.refresh.result",
        "opId": op_id,
        "outcome": outcome,
        "version": version,
        "expiresAt": None if version is None else now_ms() + 3_600_000,
    }


def _no_read_of(ctx: Context, param: str, version: int, why: str, since: int) -> None:
    """No read of ``<param>:<version>`` (nor of ``param`` unpinned) for 2 s
    after the frame at index ``since``."""
    ctx.quiet_ssm(
        2.0,
        f"read of {param}:{version} ({why})",
        lambda c: f"{param}:{version}" in c.names or param in c.names,
        since_ms=ctx.frames()[since].at_ms,
    )


def case_refresh_coalesced(ctx: Context) -> None:
    ctx.bridge.withhold("credential.refresh")  # the kit answers refreshes
    lease = ctx.grant()
    first = _refresh_frame(ctx, lease, "claude")
    ctx.step = "three requests at once"
    ctx.quiet(
        REFRESH_HOLD_S,
        "second credential.refresh while the first is pending (requests share one frame)",
        lambda f: f.direction == "in" and f.kind == "credential.refresh",
        since=index_after(ctx, first),
    )
    ctx.step = "refreshed"
    param = ctx.cloud.credential_parameter("claude")
    assert param is not None
    version = ctx.put_new_version(param)
    t = ctx.send(_refresh_result(first.value["opId"], "refreshed", version))
    _expect_pinned_read(ctx, lease, _pins(lease), param, version, ctx.frames()[t].at_ms)
    ctx.step = "after the answer"
    ctx.quiet(
        1.0,
        "credential.refresh after the answer (each request got that one result)",
        lambda f: f.direction == "in" and f.kind == "credential.refresh",
        since=t,
    )


def case_refresh_needs_sign_in(ctx: Context) -> None:
    ctx.bridge.withhold("credential.refresh")
    lease = ctx.grant()
    first = _refresh_frame(ctx, lease, "claude")
    ctx.step = "needs_sign_in"
    t = ctx.send(_refresh_result(first.value["opId"], "needs_sign_in", None))
    request = ctx.wait_frame(
        "in", "lease.request", "a lease.request after needs_sign_in", since=t, timeout_s=10
    )
    _check_run_frame(ctx, request, REQUEST_KEYS)
    ctx.step = "no read for needs_sign_in"
    param = ctx.cloud.credential_parameter("claude")
    assert param is not None
    pinned = f"{param}:{_credential_selectors(lease)[param]}"

    def other_version(n: str) -> bool:
        return (n == param or n.startswith(param + ":")) and n != pinned

    ctx.quiet_ssm(
        2.0,
        f"read of {param} other than {pinned}",
        lambda c: any(other_version(n) for n in c.names),
        since_ms=0,
    )


def case_refresh_stale_answers(ctx: Context) -> None:
    ctx.bridge.withhold("credential.refresh")
    lease = ctx.grant()
    first = _refresh_frame(ctx, lease, "claude")
    param = ctx.cloud.credential_parameter("claude")
    assert param is not None
    ctx.step = "an answer for no pending refresh"
    v1 = ctx.put_new_version(param)
    t = ctx.send(_refresh_result("conformance-no-such-refresh", "refreshed", v1))
    _no_read_of(ctx, param, v1, "the answer matched no pending refresh", t)
    ctx.step = "a commit while the refresh is pending"
    _, changed = _rotate(ctx)
    v2 = changed.value["version"]
    ctx.wait_reads([f"{param}:{v2}"], f"a read of {param}:{v2}", since_ms=changed.at_ms)
    ctx.settle(LONG_SETTLE_S)  # the change's install and commit (no frame tells)
    ctx.step = "the pending refresh answered after that commit"
    v3 = ctx.put_new_version(param)
    t = ctx.send(_refresh_result(first.value["opId"], "refreshed", v3))
    _no_read_of(ctx, param, v3, "an answer after a commit resolves unavailable", t)


CASES: tuple[Case, ...] = (
    Case(
        1,
        "lease-request",
        "asks for the assigned run's lease",
        "lease",
        ("LR-012",),
        "protocol.md#leaserequest-leaserequest",
        60.0,
        case_lease_request,
    ),
    Case(
        2,
        "grant-reads-pinned",
        "reads every credential at its pinned version, ≤ 10 per call, with the lease's session",
        "lease",
        ("LR-026", "LR-029"),
        "protocol.md#credential-parameter-names",
        60.0,
        case_grant_reads_pinned,
        seed=_many_seed,
        before_send=_bump_before_grant,
    ),
    Case(
        3,
        "env-snapshot-acks",
        "acks begin, pages and commit exactly",
        "env-replica",
        ("ER-028", "ER-048", "ER-052", "ER-108", "ER-111"),
        "protocol-env.md#envack",
        60.0,
        case_snapshot_acks,
    ),
    Case(
        4,
        "env-live-applies",
        "acks live applies (set, delete) exactly",
        "env-replica",
        ("ER-064", "ER-065", "ER-069"),
        "protocol-env.md#envapply",
        60.0,
        case_live_applies,
    ),
    Case(
        5,
        "env-pipelined-applies",
        "acks applies sent back to back in delivery order",
        "env-replica",
        ("ER-026", "ER-065"),
        "protocol-env.md#who-sends-what",
        60.0,
        case_pipelined_applies,
    ),
    Case(
        6,
        "env-apply-gap",
        "refuses an apply past cursor + 1 with delivery_gap, unconsumed",
        "env-replica",
        ("ER-059",),
        "protocol-env.md#envack",
        60.0,
        case_apply_gap,
    ),
    Case(
        7,
        "env-apply-replay",
        "answers a replayed apply from its receipt; a different one at the "
        "same sequence is delivery_conflict",
        "env-replica",
        ("ER-055", "ER-056"),
        "env-replica.md#acks",
        60.0,
        case_apply_replay,
    ),
    Case(
        8,
        "env-boot-mismatch",
        "refuses a frame for another runner boot",
        "env-replica",
        ("ER-027", "ER-108"),
        "protocol-env.md#envack",
        60.0,
        case_boot_mismatch,
    ),
    Case(
        9,
        "malformed-frames",
        "ignores frames that do not decode and grants it did not ask for",
        "env-replica",
        ("LR-018", "LR-078", "LR-091"),
        "protocol.md#decoding-rules",
        60.0,
        case_malformed_ignored,
    ),
    Case(
        10,
        "rotation",
        "reads exactly <parameter>:<version> after credential.changed",
        "rotation",
        ("LR-091", "LR-092"),
        "protocol.md#credentialchanged-credentialchanged",
        60.0,
        case_rotation,
    ),
    Case(
        11,
        "narrowing-floor",
        "asks again after lease.stale with a floor; never reads a removed credential",
        "narrowing",
        ("LR-078", "LR-079", "LR-080", "LR-084"),
        "protocol.md#leasestale-leasestale",
        60.0,
        case_narrowing,
    ),
    Case(
        12,
        "deny-stops-reads",
        "after lease.deny: no read with that session; the retry 30 s later",
        "deny",
        ("LR-111", "LR-112", "LR-162"),
        "protocol.md#leasedeny-leasedeny",
        90.0,
        case_deny,
        long=True,
    ),
    Case(
        13,
        "unavailable-retry",
        "after lease.unavailable: still usable; the retry 30 s later",
        "unavailable",
        ("LR-110", "LR-162"),
        "protocol.md#leaseunavailable-leaseunavailable",
        90.0,
        case_unavailable,
        long=True,
    ),
    Case(
        14,
        "refresh-coalesced",
        "three refresh requests at once send one credential.refresh; "
        "a refreshed answer is read at its version",
        "refresh",
        ("LR-103", "LR-104", "LR-107", "LR-092"),
        "protocol.md#credentialrefresh-credentialrefresh",
        60.0,
        case_refresh_coalesced,
        refresh=("claude", 3),
    ),
    Case(
        15,
        "refresh-needs-sign-in",
        "a needs_sign_in answer asks for a new lease and reads nothing",
        "refresh",
        ("LR-104", "LR-108"),
        "protocol.md#credentialrefreshresult-credentialrefreshresult",
        60.0,
        case_refresh_needs_sign_in,
        refresh=("claude", 1),
    ),
    Case(
        16,
        "refresh-stale-answers",
        "an answer for no pending refresh, or after a commit, is not read",
        "refresh",
        ("LR-106",),
        "protocol.md#credentialrefreshresult-credentialrefreshresult",
        60.0,
        case_refresh_stale_answers,
        refresh=("claude", 1),
    ),
)
