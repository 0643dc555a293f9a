"""The numbered scenarios. Each derives from docs/protocol.md or
docs/protocol-env.md and names the catalog entries it checks.

Expected acks are built from the frames alone (protocol-env.md, "EnvAck";
env-replica.md, "Acks") and compared in canonical JSON (sorted keys, no
whitespace), so a runner's key order is free but every key, type and value
is checked.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from leasegate.testing import ReferenceCloud

from ._suite import RUN_EPOCH, TASK_ID, Case, Context, default_seed
from ._world import Frame

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
SETTLE_S = 1.0


def _ready(ctx: Context, lease: dict[str, Any]) -> None:
    """The run is up: its snapshot committed, or (a runner without the env
    replica) every credential of ``lease`` was read at its pinned version;
    then :data:`SETTLE_S` seconds for the runner to finish installing."""
    if "env-replica" in ctx.implements:
        _snapshot(ctx)
    else:
        ctx.step = "grant reads"
        ctx.wait_reads(
            [f"{p}:{v}" for p, v in _credential_selectors(lease).items()],
            "every manifest credential read",
        )
    ctx.settle(SETTLE_S)


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
        "projectId": "web",
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


def _web_version(commit_ack: dict[str, Any], frames: list[dict[str, Any]]) -> int:
    commit = next(f for f in frames if f["kind"] == "env.replica.v1.commit")
    return int(next(v["recordVersion"] for v in commit["versions"] if v["projectId"] == "web"))


def _credential_selectors(lease: dict[str, Any]) -> dict[str, int]:
    m = lease["manifest"]
    entries = list(m["engines"]) + [e for e in m["mcp"] if e["parameter"]]
    entries += [s for s in (m["github"], m["ssh"]) if s is not None]
    return {e["parameter"]: e["version"] for e in entries}


def _credentials_key(lease: dict[str, Any]) -> str:
    return str(next(s["accessKeyId"] for s in lease["sessions"] if s["purpose"] == "credentials"))


# ---------------------------------------------------------------------- cases


def case_lease_request(ctx: Context) -> None:
    ctx.step = "first frame"
    f = ctx.wait_frame("in", "lease.request", "a lease.request for the assigned run")
    v = f.value
    if sorted(v) != ["kind", "opId", "runEpoch", "taskId"]:
        raise ctx.fail("exactly the keys kind, opId, taskId, runEpoch", f"{sorted(v)}")
    if (v["taskId"], v["runEpoch"]) != (TASK_ID, RUN_EPOCH):
        raise ctx.fail(
            f"taskId {TASK_ID!r}, runEpoch {RUN_EPOCH}", f"{v['taskId']!r}, {v['runEpoch']!r}"
        )
    if not (isinstance(v["opId"], str) and OP_ID.fullmatch(v["opId"])):
        raise ctx.fail("an opId matching ^[A-Za-z0-9_-]{1,128}$", "another opId")


def _many_seed(cloud: ReferenceCloud, boot_id: str) -> None:
    default_seed(cloud, boot_id)
    for i in range(11):
        cloud.add_engine_credential("alice", f"engine-{i:02d}", env={"EXTRA_KEY": f"extra-{i}"})


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
    pins = {p: {v} for p, v in _credential_selectors(lease).items()}
    ctx.step = "reads after the grant"
    ctx.wait_reads(
        [f"{p}:{v}" for p, (v,) in ((p, tuple(s)) for p, s in pins.items())],
        "every manifest credential read as <parameter>:<version>",
        check=partial(_check_pinned, ctx, lease, pins, 0),
    )
    _check_pinned(ctx, lease, pins, 0)


def case_rotation(ctx: Context) -> None:
    ctx.step = "grant"
    lease = ctx.grant()
    _ready(ctx, lease)
    pins = {p: {v} for p, v in _credential_selectors(lease).items()}
    ctx.step = "rotation"
    t = ctx.mark()
    ctx.cloud.rotate("claude", env={"ANTHROPIC_API_KEY": "sk-rotated"})
    changed = ctx.wait_frame("out", "credential.changed", "credential.changed sent", since=t).value
    param = ctx.cloud.credential_parameter("claude")
    assert param is not None
    pins[param].add(changed["version"])
    ctx.wait_reads(
        [f"{param}:{changed['version']}"],
        f"a read of {param}:{changed['version']}",
        since_ms=ctx.frames()[t].at_ms,
        check=partial(_check_pinned, ctx, lease, pins, 0),
    )
    _check_pinned(ctx, lease, pins, 0)


def case_snapshot_acks(ctx: Context) -> None:
    ctx.step = "grant"
    lease = ctx.grant()
    frames, _ = _snapshot(ctx)
    for frame in frames:
        ctx.step = f"{frame['kind'].rsplit('.', 1)[1]} {frame['opId']}"
        seq = frame["highWater"]["sequence"] if frame["kind"].endswith("commit") else 0
        ack = ctx.ack_for(frame, "an ack")
        ctx.expect_equal(expected_ack(frame, sequence=seq), ack.value)
    ctx.step = "staged values read"
    names = [
        n
        for f in frames
        if f["kind"].endswith("page")
        for r in f["records"]
        if (n := ctx.cloud.env_parameter("web", r["key"])) is not None
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
            ctx.cloud.set_env_value("web", "NEW_KEY", "fresh value")
        else:
            ctx.cloud.delete_env_value("web", "NEW_KEY")
        apply = ctx.wait_frame("out", "env.replica.v1.apply", "a live apply sent", since=t).value
        ack = ctx.ack_for(apply, "an applied ack", since=t)
        ctx.expect_equal(expected_ack(apply, sequence=seq), ack.value)


def _detached_snapshot(ctx: Context) -> tuple[dict[str, Any], int]:
    ctx.grant()
    frames, commit_ack = _snapshot(ctx)
    ctx.bridge._feed_cloud = False  # the kit alone talks from here on
    return commit_ack, _web_version(commit_ack, frames)


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
    acks = [f.value for f in ctx.frames("in", "env.replica.v1.ack")[-3:]]
    ctx.step = "ack order"
    order = [a["opId"] for a in acks]
    if order != [a["opId"] for a in applies]:
        raise ctx.fail("acks in delivery order 1, 2, 3", f"{order}")
    for i, (a, ack) in enumerate(zip(applies, acks, strict=True), 1):
        ctx.step = f"ack {i} contents"
        ctx.expect_equal(expected_ack(a, sequence=i), ack)


def case_apply_gap(ctx: Context) -> None:
    commit_ack, version = _detached_snapshot(ctx)
    ctx.step = "apply at sequence 2 after a cursor of 0"
    a = _live_apply(ctx, commit_ack, 2, "GAP_KEY", version + 1)
    t = ctx.send(a)
    ack = ctx.ack_for(a, "an error ack", since=t)
    ctx.expect_equal(expected_ack(a, sequence=0, code="delivery_gap"), ack.value)
    ctx.step = "the gap is not consumed: sequence 1 then applies"
    b = _live_apply(ctx, commit_ack, 1, "GAP_KEY", version + 1)
    t = ctx.send(b)
    ctx.expect_equal(expected_ack(b, sequence=1), ctx.ack_for(b, "an applied ack", since=t).value)


def case_apply_replay(ctx: Context) -> None:
    commit_ack, version = _detached_snapshot(ctx)
    ctx.step = "apply 1"
    a = _live_apply(ctx, commit_ack, 1, "REPLAY_KEY", version + 1)
    t = ctx.send(a)
    first = ctx.ack_for(a, "an applied ack", since=t).value
    ctx.expect_equal(expected_ack(a, sequence=1), first)
    ctx.step = "the same apply again"
    t = ctx.send(a)
    ctx.expect_equal(first, ctx.ack_for(a, "the recorded ack again", since=t).value)
    ctx.step = "another change at the same sequence"
    b = _live_apply(ctx, commit_ack, 1, "OTHER_KEY", version + 1)
    t = ctx.send(b)
    ctx.expect_equal(
        expected_ack(b, sequence=1, code="delivery_conflict"),
        ctx.ack_for(b, "a delivery_conflict ack", since=t).value,
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
        "projectIds": ["web"],
    }
    t = ctx.send(begin)
    ack = ctx.ack_for(begin, "an error ack", since=t)
    ctx.expect_equal(expected_ack(begin, sequence=0, code="runner_boot_mismatch"), ack.value)


def case_malformed_ignored(ctx: Context) -> None:
    lease = ctx.grant()
    _snapshot(ctx)
    ctx.bridge._feed_cloud = True
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
    param = ctx.cloud.credential_parameter("claude")
    changed_float = (
        f'{{"kind":"credential.changed","taskId":"{ctx.task_id}","runEpoch":1,'
        '"credentialId":"claude","revision":"r1","version":2.0}'
    )
    foreign_grant = {"kind": "lease.grant.v1", "opId": "not-a-pending-op", "lease": lease}
    for frame in ("not json {", "[]", "null", stale_extra, changed_float, foreign_grant):
        ctx.send(frame)
    ctx.quiet(1.5, "frame in answer to a malformed frame", lambda f: f.direction == "in", since=t)
    if any(c.at_ms >= t_ms for c in ctx.ssm_calls()):
        raise ctx.fail("no SSM call for a malformed frame", f"a read (e.g. of {param})")
    ctx.step = "still serving after them"
    t = ctx.mark()
    ctx.cloud.set_env_value("web", "AFTER_GARBAGE", "still here")
    apply = ctx.wait_frame("out", "env.replica.v1.apply", "a live apply sent", since=t).value
    ctx.expect_equal(
        expected_ack(apply, sequence=1), ctx.ack_for(apply, "an applied ack", since=t).value
    )


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


def case_deny(ctx: Context) -> None:
    lease = ctx.grant()
    _ready(ctx, lease)
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
    # LR-112: after a taken deny the runner cleans up and asks again only
    # when its 30 s retry fires; the deny came with no cleanup in flight (the
    # run was up and settled, SETTLE_S), so no request of any kind follows.
    ctx.step = "no request after the deny"
    ctx.quiet(
        2.0,
        "lease.request within 2 s of lease.deny (the retry is after 30 s)",
        lambda f: f.direction == "in" and f.kind == "lease.request",
        since=denied_index(ctx, denied),
    )
    key = _credentials_key(lease)
    late = [c for c in ctx.ssm_calls(denied.at_ms) if c.access_key_id == key]
    if late:
        raise ctx.fail(
            "no SSM call with the denied lease's session after lease.deny",
            f"{late[0].action} {list(late[0].names)}",
        )


def denied_index(ctx: Context, frame: Frame) -> int:
    """The index just after ``frame`` in the record."""
    return ctx.frames().index(frame) + 1


def case_unavailable(ctx: Context) -> None:
    lease = ctx.grant()
    _ready(ctx, lease)
    ctx.step = "unavailable"
    t = ctx.mark()
    ctx.cloud.make_unavailable(ctx.task_id, ctx.run_epoch)
    answer = ctx.wait_frame(
        "out", "lease.unavailable", "lease.unavailable answering a new request", since=t
    )
    ctx.step = "no early retry"
    ctx.quiet(
        3.0,
        "lease.request within 3 s of lease.unavailable (retry is after 30 s)",
        lambda f: f.direction == "in" and f.kind == "lease.request",
        since=denied_index(ctx, answer),
    )


CASES: tuple[Case, ...] = (
    Case(
        1,
        "lease-request",
        "asks for the assigned run's lease",
        "lease",
        ("LR-012",),
        "protocol.md#leaserequest-leaserequest",
        45.0,
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
        "after lease.deny: no read with that session, no early retry",
        "deny",
        ("LR-111", "LR-112"),
        "protocol.md#leasedeny-leasedeny",
        60.0,
        case_deny,
    ),
    Case(
        13,
        "unavailable-retry",
        "after lease.unavailable: no retry before 30 s",
        "unavailable",
        ("LR-110",),
        "protocol.md#leaseunavailable-leaseunavailable",
        60.0,
        case_unavailable,
    ),
)
