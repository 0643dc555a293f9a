"""Running the suite: the world a case runs in, and the verdicts.

:func:`run_suite` starts moto (SSM, STS, IAM) once, then for each selected
case: a fresh :class:`~leasegate.testing.ReferenceCloud` whose org and
project ids are the case's own (so cases share moto without a reset and can
run at once, ``jobs``), its own SSM request log, a fresh bridge, the seeded
assignment, a fresh runner process, the case's script under its timeout, and
one :class:`Verdict`. :func:`run_matrix` does the same for (case, runner)
pairs of several runners at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from leasegate.testing import ReferenceCloud, start_moto

from ._world import (
    ENV_BOOT_ID,
    ENV_BRIDGE_URL,
    ENV_REFRESH_CREDENTIAL,
    ENV_REFRESH_REQUESTS,
    ENV_REGION,
    ENV_RUN_EPOCH,
    ENV_SSM_ENDPOINT,
    ENV_TASK_ID,
    Bridge,
    Frame,
    RunnerProcess,
    SsmCall,
    SsmRequestLog,
    now_ms,
)

__all__ = [
    "PARTS",
    "Case",
    "CaseFailed",
    "Context",
    "Outcome",
    "Verdict",
    "canonical",
    "duplicate_key",
    "first_difference",
    "masked",
    "run_matrix",
    "run_suite",
]

#: The parts of the protocol a runner may implement; ``lease`` is required.
PARTS = ("lease", "rotation", "narrowing", "deny", "unavailable", "env-replica", "refresh")

Outcome = Literal["passed", "failed", "not applicable"]

TASK_ID = "conformance-task"
RUN_EPOCH = 1


def canonical(value: Any) -> str:
    """Compact JSON with sorted keys: the form acks are compared in."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_SAFE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _key(k: str) -> str:
    return k if _SAFE_KEY.fullmatch(k) else "<key>"


def _strings(value: Any) -> set[str]:
    """Every string in a JSON value: its keys and its string values."""
    if isinstance(value, dict):
        return set(value).union(*(_strings(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value))
    return {value} if isinstance(value, str) else set()


def masked(seen: Any, expected: Any) -> Any:
    """``seen`` (a runner's JSON value) as a verdict may show it: a string
    that appears nowhere in ``expected`` is written ``"<string>"`` and such a
    key ``<key>`` (when it is not a safe name), so a value a broken runner
    put in its frame (an env value, a session key) never reaches a report;
    structure, numbers, booleans and every string the kit itself wrote stay."""
    known = _strings(expected)

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {(k if k in known else _key(k)): walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and v not in known:
            return "<string>"
        return v

    return walk(seen)


def first_difference(expected: Any, seen: Any, path: str = "") -> str | None:
    """The path of the first place ``seen`` differs from ``expected`` (two JSON
    values; a boolean is not a number, ``1.0`` is not ``1``), or ``None``.

    Paths are wire names (``appliedThrough.sequence``, ``results[1].state``);
    a key outside ``[A-Za-z0-9_.-]{1,64}`` is written ``<key>``; the top
    level is ``(the ack)``.
    """
    here = path or "(the ack)"
    if type(expected) is not type(seen):
        return here
    if isinstance(expected, dict):
        keys = list(expected)
        missing = [k for k in keys if k not in seen]
        extra = [k for k in seen if k not in expected]
        if missing:
            return f"{path + '.' if path else ''}{_key(missing[0])} (missing)"
        if extra:
            return f"{path + '.' if path else ''}{_key(extra[0])} (unexpected)"
        for k in keys:
            d = first_difference(expected[k], seen[k], f"{path + '.' if path else ''}{_key(k)}")
            if d is not None:
                return d
        return None
    if isinstance(expected, list):
        for i, (e, v) in enumerate(zip(expected, seen, strict=False)):
            d = first_difference(e, v, f"{path}[{i}]")
            if d is not None:
                return d
        return None if len(expected) == len(seen) else f"{here} (length)"
    return None if expected == seen else here


def duplicate_key(text: str) -> str | None:
    """The first key written twice in one object of the JSON ``text``
    (``<key>`` for a key outside ``[A-Za-z0-9_.-]{1,64}``), or ``None``
    (also for text that is not JSON)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names: set[str] = set()
        for k, _ in items:
            if k in names and not found:
                found.append(_key(k))
            names.add(k)
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except ValueError:
        return None
    return found[0] if found else None


class CaseFailed(Exception):  # noqa: N818 - reads as the verdict it is
    """A case's expectation did not hold at ``step``: ``expected`` vs ``seen``."""

    def __init__(self, step: str, expected: str, seen: str) -> None:
        super().__init__(f"{step}: expected {expected}; seen {seen}")
        self.step, self.expected, self.seen = step, expected, seen


@dataclass(frozen=True)
class Case:
    """One numbered scenario.

    ``number`` and ``slug`` name it (``07-env-apply-gap``); ``part`` is the
    protocol part it needs (:data:`PARTS`); ``catalog`` the catalog ids it
    checks; ``derives`` the docs section it derives from; ``timeout_s`` its
    bound in seconds; ``script`` drives it (raises :class:`CaseFailed`).
    ``seed`` sets up the cloud (default :func:`default_seed`);
    ``before_send`` sees each cloud frame before it leaves; ``refresh``
    (``(credentialId, requests)``) asks the runner for that many refreshes
    of that credential once its run is usable (the ``refresh`` part's
    assignment facts); ``long`` marks a case that waits out a protocol delay
    (the 30 s retry): :func:`run_matrix` starts those first.
    """

    number: int
    slug: str
    title: str
    part: str
    catalog: tuple[str, ...]
    derives: str
    timeout_s: float
    script: Callable[[Context], None]
    seed: Callable[[Context], None] | None = None
    before_send: Callable[[Context, Any], None] | None = None
    refresh: tuple[str, int] | None = None
    long: bool = False

    @property
    def name(self) -> str:
        """``NN-slug``."""
        return f"{self.number:02d}-{self.slug}"


@dataclass
class Verdict:
    """A case's one-line verdict and its evidence (frame kinds, SSM calls: no values)."""

    case: Case
    outcome: Outcome
    detail: str
    seconds: float
    evidence: list[str] = field(default_factory=list)

    def line(self) -> str:
        """``NN-slug: passed`` / ``failed (step: expected …; seen …)`` / ``not applicable``."""
        return f"{self.case.name}: {self.outcome}" + (f" ({self.detail})" if self.detail else "")

    def as_json(self) -> dict[str, Any]:
        """The verdict as a JSON value for the report."""
        c = self.case
        return {
            "case": c.name,
            "title": c.title,
            "part": c.part,
            "catalog": list(c.catalog),
            "derives": c.derives,
            "timeoutSeconds": c.timeout_s,
            "verdict": self.outcome,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
            "evidence": self.evidence,
        }


class Context:
    """What a case script sees: the cloud, the bridge, the SSM log, and helpers.

    Every wait is bounded by the case's deadline; a failed expectation raises
    :class:`CaseFailed` naming the current :attr:`step`. ``org_id`` and
    ``project_id`` are the case's own (fresh per case), so the SSM names of
    cases running at once never meet.
    """

    def __init__(
        self,
        case: Case,
        cloud: ReferenceCloud,
        bridge: Bridge,
        ssm: SsmRequestLog,
        moto_ssm: Any,
        boot_id: str,
        deadline: float,
        implements: tuple[str, ...] = PARTS,
        *,
        org_id: str = "acme",
        project_id: str = "web",
    ) -> None:
        self.case = case
        self.cloud = cloud
        self.bridge = bridge
        self.ssm = ssm
        self.moto_ssm = moto_ssm
        self.boot_id = boot_id
        self.task_id = TASK_ID
        self.run_epoch = RUN_EPOCH
        self.org_id = org_id
        self.project_id = project_id
        self.deadline = deadline
        self.step = "start"
        #: The parts the runner declared (``--implements``).
        self.implements = implements
        self.evidence: list[str] = []
        #: Called once when the case starts waiting out a protocol delay
        #: (:meth:`idle`); :func:`run_matrix` then lets another case start.
        self.on_idle: Callable[[], None] | None = None

    def idle(self) -> None:
        """The case now only waits (a 30 s retry): with ``jobs`` above 1 it
        stops counting against them (:func:`run_matrix`). Idempotent."""
        hook, self.on_idle = self.on_idle, None
        if hook is not None:
            hook()

    # -- time
    def left(self) -> float:
        """Seconds left before the case's deadline."""
        return max(0.0, self.deadline - time.monotonic())

    def fail(self, expected: str, seen: str) -> CaseFailed:
        """A :class:`CaseFailed` at the current step (raise it)."""
        return CaseFailed(self.step, expected, seen)

    # -- frames
    def frames(self, direction: str | None = None, kind: str | None = None) -> list[Frame]:
        """Recorded frames, filtered by direction and kind."""
        return [
            f
            for f in self.bridge.frames()
            if (direction is None or f.direction == direction) and (kind is None or f.kind == kind)
        ]

    def wait_frame(
        self,
        direction: str,
        kind: str,
        what: str,
        pred: Callable[[Any], bool] | None = None,
        *,
        since: int = 0,
        timeout_s: float | None = None,
    ) -> Frame:
        """The first frame at index ≥ ``since`` of that direction and kind
        matching ``pred``; :class:`CaseFailed` (expected ``what``) on timeout."""

        def find(frames: list[Frame]) -> Frame | None:
            for f in frames[since:]:
                if f.direction == direction and f.kind == kind and (pred is None or pred(f.value)):
                    return f
            return None

        limit = self.left() if timeout_s is None else min(timeout_s, self.left())
        got = self.bridge.wait(find, limit)
        if got is None:
            seen = [_label(f) for f in self.bridge.frames()[since:] if f.direction == direction]
            raise self.fail(what, f"{seen[-8:] or 'nothing'} within {limit:.1f} s")
        assert isinstance(got, Frame)
        return got

    def mark(self) -> int:
        """The index the next recorded frame will have (for ``since=``)."""
        return len(self.bridge.frames())

    def ack_for(self, frame: Any, what: str, *, since: int = 0) -> Frame:
        """The runner's first ``env.replica.v1.ack`` echoing ``frame``'s ``opId``
        that is not ``activation_pending`` (the transient answer while the
        lease is being installed, which the cloud answers by resending, ER-018)."""
        op = frame["opId"]
        return self.wait_frame(
            "in",
            "env.replica.v1.ack",
            what,
            lambda v: (
                isinstance(v, dict)
                and v.get("opId") == op
                and v.get("code") != "activation_pending"
            ),
            since=since,
        )

    def quiet(
        self, seconds: float, what: str, pred: Callable[[Frame], bool], *, since: int
    ) -> None:
        """Wait ``seconds``; :class:`CaseFailed` if a recorded frame after
        ``since`` matches ``pred`` (``what`` says what must not happen)."""
        found = self.bridge.wait(
            lambda fs: next((f for f in fs[since:] if pred(f)), None), min(seconds, self.left())
        )
        if found is not None:
            raise self.fail(f"no {what}", _label(found))

    def settle(self, seconds: float) -> None:
        """Wait ``seconds`` (bounded by the deadline), whatever the runner sends."""
        self.bridge.wait(lambda fs: False, min(seconds, self.left()))

    def send(self, frame: Any) -> int:
        """Inject ``frame`` (raw ``str`` or JSON value); return the mark before it."""
        at = self.mark()
        self.bridge.inject(frame)
        return at

    def expect_equal(self, expected: Any, seen: Any) -> None:
        """Compare two JSON values in :func:`canonical` form; a difference
        fails with both texts and the path of the first difference. The
        seen text is :func:`masked`: a string the expected value does not
        hold is not shown."""
        e, s = canonical(expected), canonical(seen)
        if e != s:
            shown = canonical(masked(seen, expected))
            raise self.fail(e, f"{shown} (first difference: {first_difference(expected, seen)})")

    def expect_ack(self, expected: Any, ack: Frame) -> None:
        """Judge a received env ack against the ``expected`` value.

        The protocol fixes the ack's JSON value, not its text's key order or
        whitespace (``docs/protocol-env.md``, "Acks on the wire"): the ack
        must be a text message, each key written once per object, and equal
        to ``expected`` as a JSON value (:meth:`expect_equal`: every key,
        type and value). A failure shows both texts (acks carry no values).
        """
        if ack.binary:
            raise self.fail("the ack as a text message", "a binary message")
        dup = duplicate_key(ack.text)
        if dup is not None:
            raise self.fail("each key once per object", f"{dup} twice in one object")
        self.expect_equal(expected, ack.value)

    # -- well-known waits
    def grant(self, since: int = 0) -> dict[str, Any]:
        """The lease of the first grant sent at index ≥ ``since``."""
        f = self.wait_frame(
            "out", "lease.grant.v1", "a lease.request answered by a grant", since=since
        )
        lease: dict[str, Any] = f.value["lease"]
        return lease

    def committed(self, since: int = 0) -> Frame:
        """Wait for the snapshot's commit ack (``ok: true``, phase ``complete``)."""
        return self.wait_frame(
            "in",
            "env.replica.v1.ack",
            "the snapshot committed (complete ack)",
            lambda v: isinstance(v, dict) and v.get("phase") == "complete" and v.get("ok") is True,
            since=since,
        )

    def ssm_calls(self, since_ms: int = 0) -> list[SsmCall]:
        """SSM calls recorded at or after ``since_ms``."""
        return [c for c in self.ssm.calls() if c.at_ms >= since_ms]

    def quiet_ssm(
        self, seconds: float, what: str, pred: Callable[[SsmCall], bool], *, since_ms: int
    ) -> None:
        """Watch the SSM calls for ``seconds`` (bounded by the deadline);
        :class:`CaseFailed` at the first call at or after ``since_ms``
        matching ``pred`` (``what`` says what must not happen)."""
        end = time.monotonic() + min(seconds, self.left())
        while True:
            bad = next((c for c in self.ssm_calls(since_ms) if pred(c)), None)
            if bad is not None:
                raise self.fail(f"no {what}", f"{bad.action} {list(bad.names)}")
            if time.monotonic() >= end:
                return
            time.sleep(0.05)

    def wait_reads(
        self,
        names: Sequence[str],
        what: str,
        since_ms: int = 0,
        check: Callable[[], None] | None = None,
    ) -> None:
        """Wait until every selector in ``names`` was requested (in any call).

        ``check`` is called before each look at the calls: it raises
        :class:`CaseFailed` at once for a call that is wrong already, rather
        than letting the wait run into the deadline."""

        def done() -> bool:
            if check is not None:
                check()
            seen = {n for c in self.ssm_calls(since_ms) for n in c.names}
            return all(n in seen for n in names)

        end = time.monotonic() + self.left()
        while not done():
            if time.monotonic() >= end:
                seen = sorted({n for c in self.ssm_calls(since_ms) for n in c.names})
                raise self.fail(what, f"{seen[:12] or 'no SSM call'}")
            time.sleep(0.05)

    def put_new_version(self, parameter: str) -> int:
        """Write the parameter's current value again as a new SSM version
        (directly to moto, unlogged); return that version."""
        value = self.moto_ssm.get_parameter(Name=parameter, WithDecryption=True)["Parameter"][
            "Value"
        ]
        out = self.moto_ssm.put_parameter(
            Name=parameter, Value=value, Type="SecureString", Overwrite=True
        )
        return int(out["Version"])


def default_seed(ctx: Context) -> None:
    """One person (``alice``) with one engine credential (``claude``) and a
    GitHub sign-in (``gh``) in the case's org; the case's project with two
    staged env values; run 1 of :data:`TASK_ID` assigned to the case's boot id."""
    cloud, org, project = ctx.cloud, ctx.org_id, ctx.project_id
    cloud.add_org(org)
    cloud.add_user(org, "alice")
    cloud.add_project(org, project)
    cloud.add_engine_credential("alice", "claude", env={"ANTHROPIC_API_KEY": "sk-conformance"})
    cloud.set_github("alice", "gh", "ghp_conformance")
    cloud.set_env_value(project, "API_URL", "https://api.example")
    cloud.set_env_value(project, "DATABASE_URL", "postgres://db.example/web")
    cloud.assign(TASK_ID, RUN_EPOCH, org, "alice", [project], runner_boot_id=ctx.boot_id)


@dataclass(frozen=True)
class Target:
    """The runner under test: a command to launch, or a URL it listens on."""

    command: str | None = None
    url: str | None = None
    implements: tuple[str, ...] = PARTS


@contextlib.contextmanager
def _aws() -> Iterator[Any]:
    with start_moto() as moto:
        moto.ssm_client().describe_parameters()  # moto loads its SSM backend lazily: now
        yield moto


def _assignment(case: Case, boot_id: str, ssm_url: str, region: str) -> dict[str, str]:
    """The run's facts for the runner: the environment of a ``--runner-cmd``
    (the query string of a ``--runner-url`` uses :func:`_query`)."""
    env = {
        ENV_SSM_ENDPOINT: ssm_url,
        ENV_REGION: region,
        ENV_TASK_ID: TASK_ID,
        ENV_RUN_EPOCH: str(RUN_EPOCH),
        ENV_BOOT_ID: boot_id,
    }
    if case.refresh is not None:
        credential, requests = case.refresh
        env.update({ENV_REFRESH_CREDENTIAL: credential, ENV_REFRESH_REQUESTS: str(requests)})
    return env


_QUERY_NAMES = {
    ENV_SSM_ENDPOINT: "ssmEndpoint",
    ENV_REGION: "region",
    ENV_TASK_ID: "taskId",
    ENV_RUN_EPOCH: "runEpoch",
    ENV_BOOT_ID: "runnerBootId",
    ENV_REFRESH_CREDENTIAL: "refreshCredential",
    ENV_REFRESH_REQUESTS: "refreshRequests",
}


def _query(env: dict[str, str]) -> dict[str, str]:
    return {_QUERY_NAMES[k]: v for k, v in env.items()}


@dataclass(frozen=True)
class _Aws:
    """moto and the clients every run shares (botocore clients are
    thread-safe; building one loads its service model, so once is enough)."""

    moto: Any
    ssm: Any
    sts: Any


def _label(f: Frame) -> str:
    """A frame in evidence and verdicts: its kind, else what it is (never its
    text, which may hold a secret): ``<kind>`` for a kind outside
    ``[A-Za-z0-9_.-]{1,64}``, ``non-JSON``, ``JSON without a kind``;
    ``(binary)`` after a binary message."""
    if f.kind is not None:
        name = f.kind if _SAFE_KEY.fullmatch(f.kind) else "<kind>"
    elif f.value is None and f.text.strip() != "null":
        name = "non-JSON"
    else:
        name = "JSON without a kind"
    return name + (" (binary)" if f.binary else "")


def _connected(bridge: Bridge, runner: RunnerProcess | None, timeout_s: float) -> bool:
    """Wait for the runner's connection (bounded by ``timeout_s``, the case's
    time left: a loaded machine starts a runner slowly); give up early when
    the runner process ended."""
    end = time.monotonic() + timeout_s
    while not bridge.connected(min(0.5, max(0.0, end - time.monotonic()))):
        if time.monotonic() >= end or (runner is not None and runner.returncode is not None):
            return False
    return True


def _run_case(
    case: Case,
    target: Target,
    aws: _Aws,
    logpath: str,
    on_idle: Callable[[], None] | None = None,
) -> Verdict:
    started = time.monotonic()
    if case.part not in target.implements:
        return Verdict(case, "not applicable", f"the runner does not implement {case.part}", 0.0)
    token = secrets.token_hex(4)
    boot_id = "boot-" + secrets.token_hex(8)
    moto = aws.moto
    cloud = ReferenceCloud(
        ssm=aws.ssm,
        sts=aws.sts,
        region=moto.region,
        clock=now_ms,
        retry_delay_ms=50,
    )
    holder: list[Context] = []

    def before_send(value: Any) -> None:
        if case.before_send is not None and holder:
            case.before_send(holder[0], value)

    with contextlib.ExitStack() as stack:
        log = stack.enter_context(SsmRequestLog(moto.url))
        env = _assignment(case, boot_id, log.url, moto.region)
        bridge = Bridge(cloud, runner_url=target.url, query=_query(env), before_send=before_send)
        ctx = Context(
            case,
            cloud,
            bridge,
            log,
            aws.ssm,
            boot_id,
            started + case.timeout_s,
            target.implements,
            org_id=f"conformance-{token}",
            project_id=f"web-{token}",
        )
        ctx.on_idle = on_idle
        (case.seed or default_seed)(ctx)
        holder.append(ctx)
        runner: RunnerProcess | None = None
        out = stack.enter_context(open(logpath, "wb"))
        try:
            bridge.start()
            if target.url is None:
                assert target.command is not None
                try:
                    runner = RunnerProcess(target.command, {ENV_BRIDGE_URL: bridge.url, **env}, out)
                except OSError as e:
                    raise CaseFailed(
                        "start", "the runner command started", f"{type(e).__name__} ({e.strerror})"
                    ) from None
            if not _connected(bridge, runner, ctx.left()):
                seen = "no connection"
                if runner is not None and runner.returncode is not None:
                    seen = f"the runner exited with status {runner.returncode}"
                raise CaseFailed("connect", "the runner connected to the bridge", seen)
            case.script(ctx)
            verdict = Verdict(case, "passed", "", time.monotonic() - started)
        except CaseFailed as e:
            verdict = Verdict(case, "failed", str(e), time.monotonic() - started)
        except Exception as e:  # noqa: BLE001 - a kit error is a failed case, named
            verdict = Verdict(
                case,
                "failed",
                f"{ctx.step}: kit error {type(e).__name__}",
                time.monotonic() - started,
            )
        finally:
            bridge.stop()
            if runner is not None:
                runner.stop()
        frames = bridge.frames()
        verdict.evidence = [
            f"{f.direction} {_label(f)} +{f.at_ms - frames[0].at_ms} ms" for f in frames
        ][:200] + [f"ssm {c.action} {list(c.names)} key {c.access_key_id}" for c in log.calls()][
            :100
        ]
    return verdict


def run_matrix(
    runs: Sequence[tuple[Case, Target]],
    *,
    jobs: int = 1,
    on_verdict: Callable[[Verdict], None] | None = None,
    logdir: str | None = None,
) -> list[Verdict]:
    """Run each (case, runner) pair of ``runs``; return one :class:`Verdict`
    each, in the order of ``runs``.

    One moto (SSM, STS, IAM) on 127.0.0.1 in this process serves every run;
    each run gets a fresh cloud with its own org and project ids, its own SSM
    request log, a fresh bridge and (for a command) a fresh runner process.
    With ``jobs`` 1 the runs go one after another; above 1, up to ``jobs``
    runs work at once (threads), :attr:`Case.long` ones first, and a run
    waiting out a protocol delay (:meth:`Context.idle`: the 30 s retry)
    no longer counts, so the waits of the long cases overlap the others.
    ``on_verdict`` is called as each run ends (from the thread that ran it,
    one call at a time). Runner output goes to ``logdir/<case>.log``, or
    ``logdir/<index>-<case>.log`` when the runners differ (a temporary
    directory when ``None``).

    Raises:
        ValueError: a target with neither or both of command and URL; ``jobs``
            < 1; ``jobs`` > 1 with a listening runner (``--runner-url``: the
            kit cannot know whether it serves several runs at once).
    """
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    for _, target in runs:
        if (target.command is None) == (target.url is None):
            raise ValueError("give exactly one of a runner command and a runner URL")
        if target.url is not None and jobs > 1:
            raise ValueError("a listening runner is judged one case at a time (jobs 1)")
    one_target = len({t for _, t in runs}) <= 1
    results: list[Verdict | None] = [None] * len(runs)
    lock = threading.Lock()
    with contextlib.ExitStack() as stack:
        if logdir is None:
            logdir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="leasegate-conformance-")
            )
        moto = stack.enter_context(_aws())
        aws = _Aws(moto, moto.ssm_client(), moto.sts_client())

        working = threading.BoundedSemaphore(jobs)

        def one(i: int) -> None:
            case, target = runs[i]
            name = f"{case.name}.log" if one_target else f"{i:03d}-{case.name}.log"
            assert logdir is not None
            released = threading.Event()

            def release() -> None:
                with lock:
                    if released.is_set():
                        return
                    released.set()
                working.release()

            working.acquire()
            try:
                v = _run_case(
                    case, target, aws, os.path.join(logdir, name), release if jobs > 1 else None
                )
            finally:
                release()
            with lock:
                results[i] = v
                if on_verdict is not None:
                    on_verdict(v)

        order = sorted(range(len(runs)), key=lambda i: not runs[i][0].long)
        if jobs == 1:
            for i in order:
                one(i)
        else:
            # Enough threads for ``jobs`` working runs besides every idle one.
            threads = min(len(runs), jobs + sum(c.long for c, _ in runs)) or 1
            with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="conformance") as pool:
                for f in [pool.submit(one, i) for i in order]:
                    f.result()
    out = [v for v in results if v is not None]
    assert len(out) == len(runs)
    return out


def run_suite(
    cases: Sequence[Case],
    target: Target,
    *,
    jobs: int = 1,
    on_verdict: Callable[[Verdict], None] | None = None,
    logdir: str | None = None,
) -> list[Verdict]:
    """Run ``cases`` against ``target``; return one :class:`Verdict` each, in order.

    :func:`run_matrix` over ``(case, target)`` pairs: up to ``jobs`` cases at
    once; ``on_verdict`` is called after each case; runner output goes to
    ``logdir/<case>.log`` (a temporary directory when ``None``).

    Raises:
        ValueError: ``target`` has neither or both of command and URL; ``jobs``
            < 1, or > 1 with a runner URL.
    """
    return run_matrix([(c, target) for c in cases], jobs=jobs, on_verdict=on_verdict, logdir=logdir)
