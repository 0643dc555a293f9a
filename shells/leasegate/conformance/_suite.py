"""Running the suite: the world a case runs in, and the verdicts.

:func:`run_suite` starts moto (SSM, STS, IAM) and the SSM request log once,
then for each selected case: a fresh :class:`~leasegate.testing.ReferenceCloud`
(moto reset), a fresh bridge, the seeded assignment, a fresh runner process,
the case's script under its timeout, and one :class:`Verdict`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from leasegate.testing import ReferenceCloud, start_moto

from ._world import (
    ENV_BOOT_ID,
    ENV_BRIDGE_URL,
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
    "run_suite",
]

#: The parts of the protocol a runner may implement; ``lease`` is required.
PARTS = ("lease", "rotation", "narrowing", "deny", "unavailable", "env-replica")

Outcome = Literal["passed", "failed", "not applicable"]

TASK_ID = "conformance-task"
RUN_EPOCH = 1


def canonical(value: Any) -> str:
    """Compact JSON with sorted keys: the form acks are compared in."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
    """

    number: int
    slug: str
    title: str
    part: str
    catalog: tuple[str, ...]
    derives: str
    timeout_s: float
    script: Callable[[Context], None]
    seed: Callable[[ReferenceCloud, str], None] | None = None
    before_send: Callable[[Context, Any], None] | None = None

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
    :class:`CaseFailed` naming the current :attr:`step`.
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
    ) -> None:
        self.case = case
        self.cloud = cloud
        self.bridge = bridge
        self.ssm = ssm
        self.moto_ssm = moto_ssm
        self.boot_id = boot_id
        self.task_id = TASK_ID
        self.run_epoch = RUN_EPOCH
        self.deadline = deadline
        self.step = "start"
        #: The parts the runner declared (``--implements``).
        self.implements = implements
        self.evidence: list[str] = []

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
            seen = [
                f.kind or "non-JSON"
                for f in self.bridge.frames()[since:]
                if f.direction == direction
            ]
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
            raise self.fail(f"no {what}", f"{found.kind or 'non-JSON text'}")

    def settle(self, seconds: float) -> None:
        """Wait ``seconds`` (bounded by the deadline), whatever the runner sends."""
        self.bridge.wait(lambda fs: False, min(seconds, self.left()))

    def send(self, frame: Any) -> int:
        """Inject ``frame`` (raw ``str`` or JSON value); return the mark before it."""
        at = self.mark()
        self.bridge.inject(frame)
        return at

    def expect_equal(self, expected: Any, seen: Any) -> None:
        """Compare two JSON values in :func:`canonical` form."""
        e, s = canonical(expected), canonical(seen)
        if e != s:
            raise self.fail(e, s)

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


def default_seed(cloud: ReferenceCloud, boot_id: str) -> None:
    """One person with one engine credential and a GitHub sign-in; one project
    with two staged env values; run 1 of :data:`TASK_ID` assigned to ``boot_id``."""
    cloud.add_org("acme")
    cloud.add_user("acme", "alice")
    cloud.add_project("acme", "web")
    cloud.add_engine_credential("alice", "claude", env={"ANTHROPIC_API_KEY": "sk-conformance"})
    cloud.set_github("alice", "gh", "ghp_conformance")
    cloud.set_env_value("web", "API_URL", "https://api.example")
    cloud.set_env_value("web", "DATABASE_URL", "postgres://db.example/web")
    cloud.assign(TASK_ID, RUN_EPOCH, "acme", "alice", ["web"], runner_boot_id=boot_id)


@dataclass(frozen=True)
class Target:
    """The runner under test: a command to launch, or a URL it listens on."""

    command: str | None = None
    url: str | None = None
    implements: tuple[str, ...] = PARTS


@contextlib.contextmanager
def _aws() -> Iterator[tuple[Any, SsmRequestLog]]:
    with start_moto() as moto, SsmRequestLog(moto.url) as log:
        moto.ssm_client().describe_parameters()  # moto loads its SSM backend lazily: now
        yield moto, log


def _run_case(case: Case, target: Target, moto: Any, log: SsmRequestLog, logdir: str) -> Verdict:
    started = time.monotonic()
    if case.part not in target.implements:
        return Verdict(case, "not applicable", f"the runner does not implement {case.part}", 0.0)
    moto.reset()
    log.clear()
    boot_id = "boot-" + secrets.token_hex(8)
    cloud = ReferenceCloud(
        ssm=moto.ssm_client(),
        sts=moto.sts_client(),
        region=moto.region,
        clock=now_ms,
        retry_delay_ms=50,
    )
    (case.seed or default_seed)(cloud, boot_id)
    holder: list[Context] = []

    def before_send(value: Any) -> None:
        if case.before_send is not None and holder:
            case.before_send(holder[0], value)

    query = {
        "taskId": TASK_ID,
        "runEpoch": str(RUN_EPOCH),
        "runnerBootId": boot_id,
        "ssmEndpoint": log.url,
        "region": moto.region,
    }
    bridge = Bridge(cloud, runner_url=target.url, query=query, before_send=before_send)
    ctx = Context(
        case,
        cloud,
        bridge,
        log,
        moto.ssm_client(),
        boot_id,
        started + case.timeout_s,
        target.implements,
    )
    holder.append(ctx)
    runner: RunnerProcess | None = None
    logpath = os.path.join(logdir, f"{case.name}.log")
    with open(logpath, "wb") as out:
        try:
            if target.url is None:
                bridge.start()
                assert target.command is not None
                env = {
                    ENV_BRIDGE_URL: bridge.url,
                    ENV_SSM_ENDPOINT: log.url,
                    ENV_REGION: moto.region,
                    ENV_TASK_ID: TASK_ID,
                    ENV_RUN_EPOCH: str(RUN_EPOCH),
                    ENV_BOOT_ID: boot_id,
                }
                runner = RunnerProcess(target.command, env, out)
            else:
                bridge.start()
            if not bridge.connected(min(30.0, ctx.left())):
                raise CaseFailed("connect", "the runner connected to the bridge", "no connection")
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
    verdict.evidence = [
        f"{f.direction} {f.kind or 'non-JSON'} +{f.at_ms - bridge.frames()[0].at_ms} ms"
        for f in bridge.frames()
    ][:200] + [f"ssm {c.action} {list(c.names)} key {c.access_key_id}" for c in log.calls()][:100]
    return verdict


def run_suite(
    cases: Sequence[Case],
    target: Target,
    *,
    on_verdict: Callable[[Verdict], None] | None = None,
    logdir: str | None = None,
) -> list[Verdict]:
    """Run ``cases`` against ``target``; return one :class:`Verdict` each, in order.

    Starts moto on 127.0.0.1 (in this process) and the SSM request log in
    front of it; each case gets a reset moto, a fresh cloud and (for a
    command) a fresh runner process. ``on_verdict`` is called after each
    case; runner output goes to ``logdir/<case>.log`` (a temporary directory
    when ``None``).

    Raises:
        ValueError: ``target`` has neither or both of command and URL.
    """
    if (target.command is None) == (target.url is None):
        raise ValueError("give exactly one of a runner command and a runner URL")
    verdicts: list[Verdict] = []
    lock = threading.Lock()
    with contextlib.ExitStack() as stack:
        if logdir is None:
            logdir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="leasegate-conformance-")
            )
        moto, log = stack.enter_context(_aws())
        for case in cases:
            v = _run_case(case, target, moto, log, logdir)
            with lock:
                verdicts.append(v)
            if on_verdict is not None:
                on_verdict(v)
    return verdicts
