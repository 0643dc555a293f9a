"""The durable task runtime's projection and transition checks (pure).

Theory of operation
===================

The runtime is event-sourced: its whole state is a JSON object (the
*projection*) rebuilt from the store's snapshot plus tail, and it is also
what compaction snapshots. This module owns:

* :meth:`TaskRuntimeProjection.apply`: the reducer, one event at a time;
* ``plan_*`` methods: check a requested transition against the current
  state and return the :class:`PlannedEvent` to append, ``None`` when the
  request is a no-op (the target status is already current), or a
  :class:`~.DurableTaskRuntimeError` (returned, never raised).

The shell (``leasegate.shells.store.task_runtime``) refreshes the projection
from the store, asks for a plan, appends it with ``expected_last_ordinal``,
and applies the committed event. The design is orchestration.md's
"Proposed minimal design" for ``DurableTaskRuntime``; times are epoch
milliseconds (``int``) carried in payloads, so the reducer never reads a
clock. No secret ever enters the projection.

State shape::

    {"lastOrdinal": int,
     "objectives": {id: {"objective": {...}, "taskIds": [...], "evidence": [...]}},
     "tasks":      {id: {"task": {...}, "attemptIds": [...]}},
     "attempts":   {id: {...}}}

State machines (tables, as data): :data:`ATTEMPT_TRANSITIONS`,
:data:`OBJECTIVE_TERMINAL`, :data:`TASK_TERMINAL`.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from .._json import MAX_SAFE_INTEGER
from ._errors import DurableTaskRuntimeError
from ._format import is_json_object

__all__ = [
    "ACTIVE_ATTEMPT_STATUSES",
    "ATTEMPT_TRANSITIONS",
    "MAX_ISO_MS",
    "OBJECTIVE_TERMINAL",
    "TASK_TERMINAL",
    "PlannedEvent",
    "TaskRuntimeProjection",
    "iso_from_ms",
]

#: Attempt statuses that count as active (queued, leased, running).
ACTIVE_ATTEMPT_STATUSES: Final = ("queued", "leased", "running")
#: Allowed attempt transitions: from → allowed targets.
ATTEMPT_TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    "queued": frozenset({"leased", "cancelled"}),
    "leased": frozenset({"running", "cancelled", "expired"}),
    "running": frozenset({"completed", "failed", "cancelled", "expired"}),
    "cancelled": frozenset(),
    "expired": frozenset(),
    "completed": frozenset(),
    "failed": frozenset(),
}
OBJECTIVE_TERMINAL: Final = frozenset({"cancelled", "completed"})
TASK_TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: The last instant ``iso_from_ms`` can format: 9999-12-31T23:59:59.999Z.
MAX_ISO_MS: Final = 253_402_300_799_999

# How deep a caller-supplied JSON value sits in the projection (the state
# object is depth 1). Planners check values at these depths, so that every
# accepted event keeps the projection within is_json_object's nesting limit
# and compaction can always snapshot it (ES-049).
_OBJECTIVE_DEPTH: Final = 4  # state.objectives[id].objective
_TASK_DEPTH: Final = 4  # state.tasks[id].task
_DISPATCH_DEPTH: Final = 4  # state.attempts[id].dispatch
_EVIDENCE_DEPTH: Final = 5  # state.objectives[id].evidence[i]


def _key_part(value: str) -> str:
    """One caller-chosen part of a multi-part idempotency key, escaped so
    that joining parts with ``:`` is unambiguous (``%`` → ``%25``, ``:`` →
    ``%3A``); ids without either character are unchanged."""
    return value.replace("%", "%25").replace(":", "%3A")


def iso_from_ms(ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (``Date.toISOString``).

    Raises:
        OverflowError: ``ms`` is outside years 1..9999 (planners check
            :data:`MAX_ISO_MS` first).
    """
    dt = _EPOCH + datetime.timedelta(milliseconds=ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedEvent:
    """An event the shell must append (the store assigns ordinal and id).

    Attributes:
        type, aggregate_id, actor, payload, idempotency_key: the append input
            (orchestration.md's event table).
    """

    type: str
    aggregate_id: str
    actor: str
    payload: dict[str, Any]
    idempotency_key: str | None


Plan = PlannedEvent | DurableTaskRuntimeError | None


def _err(message: str) -> DurableTaskRuntimeError:
    return DurableTaskRuntimeError(message)


_F = TypeVar("_F", bound=Callable[..., Any])


def _total(fn: _F) -> _F:
    """Make a planner total: malformed arguments become a returned error.

    The typed checks of each planner come first; this only turns a shape the
    caller broke (a non-mapping where a mapping is due, ...) into
    ``DurableTaskRuntimeError("Invalid runtime request.")`` instead of an
    exception, so no input makes the core raise.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            IndexError,
            RecursionError,
            OverflowError,
        ):
            return _err("Invalid runtime request.")

    return typing.cast(_F, wrapper)


def _ev(
    type_: str, aggregate: str, payload: dict[str, Any], key: str | None, actor: str = "runtime"
) -> PlannedEvent:
    return PlannedEvent(type_, aggregate, actor, payload, key)


def _text(value: Any) -> bool:
    return type(value) is str and value.strip() != ""


def _str_list(value: Any) -> bool:
    return type(value) in (list, tuple) and all(type(v) is str for v in value)


def _risk_budget_error(budget: Any) -> str | None:
    if not is_json_object(budget):
        return "Risk budget must be a JSON object."
    if "maxAttempts" in budget:
        m = budget["maxAttempts"]
        if type(m) is not int or not 0 <= m <= MAX_SAFE_INTEGER:
            return "Risk budget maxAttempts must be a non-negative integer."
    return None


class TaskRuntimeProjection:
    """The runtime's state and its pure transition logic.

    Args:
        state: a projection previously returned by :attr:`state` (e.g. from
            a snapshot); ``None`` for an empty runtime. Use
            :meth:`from_snapshot` for untrusted input.

    :meth:`apply` mutates the state in place; after it returns an error the
    instance must be discarded and rebuilt (the shell does so).
    """

    __slots__ = ("state",)

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self.state: dict[str, Any] = (
            state
            if state is not None
            else {"lastOrdinal": 0, "objectives": {}, "tasks": {}, "attempts": {}}
        )

    @classmethod
    def from_snapshot(
        cls, projection: Any, through_ordinal: int
    ) -> TaskRuntimeProjection | DurableTaskRuntimeError:
        """Load a snapshot projection (copied); checks its top-level shape."""
        if (
            type(projection) is not dict
            or not all(type(projection.get(k)) is dict for k in ("objectives", "tasks", "attempts"))
            or projection.get("lastOrdinal") != through_ordinal
        ):
            return _err("Invalid durable task runtime projection snapshot.")
        return cls(copy.deepcopy(projection))

    # -- views -----------------------------------------------------------

    @property
    def last_ordinal(self) -> int:
        """The ordinal of the last applied event."""
        return int(self.state["lastOrdinal"])

    def objective(self, objective_id: str) -> dict[str, Any] | None:
        """The objective record (``objective``, ``taskIds``, ``evidence``)."""
        return self.state["objectives"].get(objective_id)  # type: ignore[no-any-return]

    def task(self, task_id: str) -> dict[str, Any] | None:
        """The task record (``task``, ``attemptIds``)."""
        return self.state["tasks"].get(task_id)  # type: ignore[no-any-return]

    def attempt(self, attempt_id: str) -> dict[str, Any] | None:
        """The attempt record."""
        return self.state["attempts"].get(attempt_id)  # type: ignore[no-any-return]

    def active_attempt(self, task_id: str) -> dict[str, Any] | None:
        """The newest queued/leased/running attempt of a task, if any."""
        rec = self.task(task_id)
        if rec is None:
            return None
        for attempt_id in reversed(rec["attemptIds"]):
            att = self.attempt(attempt_id)
            if att is not None and att["status"] in ACTIVE_ATTEMPT_STATUSES:
                return att
        return None

    # -- reducer ---------------------------------------------------------

    def apply(self, event: Mapping[str, Any]) -> DurableTaskRuntimeError | None:
        """Reduce one committed event (any ``cleanup.*`` event is skipped).

        Returns an error (never raises) when the event does not fit the
        state; the event must then be treated as corruption.
        """
        try:
            self._apply(event)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):
            return _err(f"Invalid durable task runtime event at ordinal {event.get('ordinal')}.")
        return None

    def _set_task_status(self, task: dict[str, Any], status: str, at: int) -> None:
        task["status"] = status
        task["updatedAtMs"] = at

    def _end_attempt(self, att: dict[str, Any], status: str, reason: str | None, at: int) -> None:
        att["status"] = status
        att["updatedAtMs"] = at
        if reason is not None:
            att["reasonCode"] = reason
        task = self.state["tasks"][att["taskId"]]["task"]
        if task["status"] == "running" and status in ("cancelled", "expired", "failed"):
            self._set_task_status(task, "ready", at)

    def _apply(self, event: Mapping[str, Any]) -> None:
        etype: str = event["type"]
        agg: str = event["aggregateId"]
        p: dict[str, Any] = event["payload"]
        at = int(p.get("atMs", 0))
        s = self.state
        if etype == "objective.created":
            obj = copy.deepcopy(p["objective"])
            s["objectives"][obj["objectiveId"]] = {"objective": obj, "taskIds": [], "evidence": []}
        elif etype == "objective.updated":
            obj = s["objectives"][agg]["objective"]
            for k, v in p["objective"].items():
                if k not in ("status", "objectiveId", "createdAtMs"):
                    obj[k] = copy.deepcopy(v)
            obj["updatedAtMs"] = at
        elif etype == "objective.evidence_recorded":
            s["objectives"][agg]["evidence"].append(copy.deepcopy(p["evidence"]))
        elif etype in ("objective.paused", "objective.resumed", "objective.cancelled"):
            rec = s["objectives"][agg]
            status = {
                "objective.paused": "paused",
                "objective.resumed": "active",
                "objective.cancelled": "cancelled",
            }[etype]
            rec["objective"]["status"] = status
            rec["objective"]["updatedAtMs"] = at
            for task_id in rec["taskIds"]:
                task_rec = s["tasks"][task_id]
                task = task_rec["task"]
                if status == "paused" and task["status"] == "ready":
                    self._set_task_status(task, "blocked", at)
                elif status == "active" and task["status"] == "blocked":
                    self._set_task_status(task, "ready", at)
                elif status == "cancelled" and task["status"] not in TASK_TERMINAL:
                    self._cancel_task_attempts(task_rec, "objective_cancelled", at)
                    self._set_task_status(task, "cancelled", at)
        elif etype == "objective.completed":
            obj = s["objectives"][agg]["objective"]
            obj["status"] = "completed"
            obj["completionPolicy"] = p["completionPolicy"]
            obj["updatedAtMs"] = at
        elif etype == "task.created":
            task = copy.deepcopy(p["task"])
            s["tasks"][task["taskId"]] = {"task": task, "attemptIds": []}
            s["objectives"][task["objectiveId"]]["taskIds"].append(task["taskId"])
        elif etype == "task.failed":
            task_rec = s["tasks"][agg]
            self._cancel_task_attempts(task_rec, p["reasonCode"], at)
            task_rec["task"]["status"] = "failed"
            task_rec["task"]["reasonCode"] = p["reasonCode"]
            task_rec["task"]["updatedAtMs"] = at
        elif etype == "attempt.queued":
            attempt_id = p["attemptId"]
            s["attempts"][attempt_id] = {
                "attemptId": attempt_id,
                "taskId": p["taskId"],
                "status": "queued",
                "dispatch": copy.deepcopy(p["dispatch"]),
                "createdAtMs": at,
                "updatedAtMs": at,
            }
            s["tasks"][p["taskId"]]["attemptIds"].append(attempt_id)
        elif etype == "attempt.leased":
            lease = copy.deepcopy(p["lease"])
            att = s["attempts"][agg]
            att["status"] = "leased"
            att["lease"] = lease
            att["updatedAtMs"] = at
            s["tasks"][att["taskId"]]["task"]["lastFencingToken"] = lease["fencingToken"]
        elif etype == "attempt.started":
            att = s["attempts"][agg]
            att["status"] = "running"
            att["updatedAtMs"] = at
            self._set_task_status(s["tasks"][att["taskId"]]["task"], "running", at)
        elif etype == "attempt.finished":
            att = s["attempts"][agg]
            task = s["tasks"][att["taskId"]]["task"]
            if p["outcome"] == "completed":
                att["status"] = "completed"
                att["updatedAtMs"] = at
                self._set_task_status(task, "completed", at)
            else:
                self._end_attempt(att, "failed", p.get("reasonCode"), at)
        elif etype == "attempt.cancelled":
            self._end_attempt(s["attempts"][agg], "cancelled", p["reasonCode"], at)
        elif etype == "attempt.lease_expired":
            self._end_attempt(s["attempts"][agg], "expired", p["reasonCode"], at)
        s["lastOrdinal"] = int(event["ordinal"])

    def _cancel_task_attempts(self, task_rec: dict[str, Any], reason: str, at: int) -> None:
        for attempt_id in task_rec["attemptIds"]:
            att = self.state["attempts"][attempt_id]
            if att["status"] in ACTIVE_ATTEMPT_STATUSES:
                att["status"] = "cancelled"
                att["reasonCode"] = reason
                att["updatedAtMs"] = at

    # -- objectives ------------------------------------------------------

    @_total
    def plan_create_objective(
        self,
        *,
        objective_id: str,
        title: str,
        description: str,
        now_ms: int,
        acceptance_criteria: Any = (),
        risk_budget: Any = None,
    ) -> Plan:
        """``createObjective``: unique id; non-blank title and description."""
        if not _text(objective_id) or not _text(title) or not _text(description):
            return _err("Objective id, title and description must be non-empty.")
        if self.objective(objective_id) is not None:
            return _err(f"Objective '{objective_id}' already exists.")
        objective = self._objective_record(
            objective_id, title, description, acceptance_criteria, risk_budget, now_ms
        )
        if isinstance(objective, DurableTaskRuntimeError):
            return objective
        return _ev(
            "objective.created",
            objective_id,
            {"objective": objective, "atMs": now_ms},
            f"objective-created:{objective_id}",
        )

    def _objective_record(
        self,
        objective_id: str,
        title: str,
        description: str,
        criteria: Any,
        risk_budget: Any,
        now_ms: int,
    ) -> dict[str, Any] | DurableTaskRuntimeError:
        crit = [dict(c) for c in criteria] if type(criteria) in (list, tuple) else None
        if crit is None or not all(
            _text(c.get("id")) and type(c.get("required", True)) is bool for c in crit
        ):
            return _err("Acceptance criteria must be objects with an id.")
        budget = {} if risk_budget is None else dict(risk_budget)
        problem = _risk_budget_error(budget)
        if problem is not None:
            return _err(problem)
        record = {
            "objectiveId": objective_id,
            "title": title,
            "description": description,
            "status": "active",
            "acceptanceCriteria": crit,
            "riskBudget": budget,
            "createdAtMs": now_ms,
            "updatedAtMs": now_ms,
        }
        if not is_json_object(record, depth=_OBJECTIVE_DEPTH):
            return _err("Objective fields must be JSON values.")
        return record

    @_total
    def plan_ensure_objective(self, objective: Mapping[str, Any], now_ms: int) -> Plan:
        """``ensureObjective``: create, or ``objective.updated`` when the title,
        description, criteria or budget differ; ``None`` when equal."""
        oid = objective.get("objectiveId")
        existing = self.objective(oid) if type(oid) is str else None
        if existing is None:
            return self.plan_create_objective(
                objective_id=oid,  # type: ignore[arg-type]
                title=objective.get("title"),  # type: ignore[arg-type]
                description=objective.get("description"),  # type: ignore[arg-type]
                acceptance_criteria=objective.get("acceptanceCriteria", ()),
                risk_budget=objective.get("riskBudget"),
                now_ms=now_ms,
            )
        record = self._objective_record(
            oid,  # type: ignore[arg-type]
            objective.get("title"),  # type: ignore[arg-type]
            objective.get("description"),  # type: ignore[arg-type]
            objective.get("acceptanceCriteria", ()),
            objective.get("riskBudget"),
            now_ms,
        )
        if isinstance(record, DurableTaskRuntimeError):
            return record
        cur = existing["objective"]
        fields = ("title", "description", "acceptanceCriteria", "riskBudget")
        if all(cur.get(k) == record[k] for k in fields):
            return None
        return _ev(
            "objective.updated",
            oid,  # type: ignore[arg-type]
            {"objective": {k: record[k] for k in fields}, "atMs": now_ms},
            None,
        )

    @_total
    def plan_record_evidence(
        self, objective_id: str, evidence: Mapping[str, Any], now_ms: int
    ) -> Plan:
        """``recordObjectiveEvidence``: same id and content → no-op; same id
        with other content → error."""
        rec = self.objective(objective_id)
        if rec is None:
            return _err(f"Unknown objective '{objective_id}'.")
        ev = dict(evidence)
        if not _text(ev.get("evidenceId")) or not is_json_object(ev, depth=_EVIDENCE_DEPTH):
            return _err("Evidence must be a JSON object with an evidenceId.")
        for old in rec["evidence"]:
            if old.get("evidenceId") == ev["evidenceId"]:
                if old == ev:
                    return None
                return _err(f"Evidence '{ev['evidenceId']}' already recorded with other content.")
        return _ev(
            "objective.evidence_recorded",
            objective_id,
            {"evidence": ev, "atMs": now_ms},
            f"objective-evidence:{_key_part(objective_id)}:{_key_part(ev['evidenceId'])}",
        )

    @_total
    def plan_objective_status(self, objective_id: str, target: str, now_ms: int) -> Plan:
        """``pauseObjective`` / ``resumeObjective`` / ``cancelObjective``
        (``target`` = ``paused`` / ``active`` / ``cancelled``)."""
        rec = self.objective(objective_id)
        if rec is None:
            return _err(f"Unknown objective '{objective_id}'.")
        status = rec["objective"]["status"]
        if status == target:
            return None
        if status in OBJECTIVE_TERMINAL:
            return _err(f"Objective '{objective_id}' is terminal.")
        etype = {
            "paused": "objective.paused",
            "active": "objective.resumed",
            "cancelled": "objective.cancelled",
        }[target]
        return _ev(
            etype,
            objective_id,
            {"atMs": now_ms},
            f"{etype}:{objective_id}:{self.last_ordinal}",
        )

    @_total
    def plan_complete_objective(self, objective_id: str, override: bool, now_ms: int) -> Plan:
        """``completeObjectiveFromOwner``: needs trusted evidence for every
        required criterion unless ``override``."""
        rec = self.objective(objective_id)
        if rec is None:
            return _err(f"Unknown objective '{objective_id}'.")
        status = rec["objective"]["status"]
        if status == "completed":
            return None
        if status in OBJECTIVE_TERMINAL:
            return _err(f"Objective '{objective_id}' is terminal.")
        if not override:
            for crit in rec["objective"]["acceptanceCriteria"]:
                if not crit.get("required", True):
                    continue
                if not any(
                    e.get("criterionId") == crit["id"] and e.get("trusted") is True
                    for e in rec["evidence"]
                ):
                    return _err(
                        f"Objective '{objective_id}' lacks trusted evidence for criterion "
                        f"'{crit['id']}'."
                    )
        policy = "owner_override" if override else "owner_evidence"
        return _ev(
            "objective.completed",
            objective_id,
            {"completionPolicy": policy, "atMs": now_ms},
            f"objective.completed:{objective_id}:{self.last_ordinal}",
        )

    # -- tasks -----------------------------------------------------------

    @_total
    def plan_create_task(self, spec: Mapping[str, Any], now_ms: int) -> Plan:
        """``createTask``: objective exists and is active; unique task id."""
        task_id = spec.get("taskId")
        objective_id = spec.get("objectiveId")
        if not _text(task_id):
            return _err("Task id must be non-empty.")
        if self.task(task_id) is not None:  # type: ignore[arg-type]
            return _err(f"Task '{task_id}' already exists.")
        obj = self.objective(objective_id) if type(objective_id) is str else None
        if obj is None:
            return _err(f"Unknown objective '{objective_id}'.")
        if obj["objective"]["status"] != "active":
            return _err(f"Objective '{objective_id}' is not active.")
        budget = dict(spec.get("riskBudget") or {})
        problem = _risk_budget_error(budget)
        if problem is not None:
            return _err(problem)
        caps = spec.get("requiredCapabilities", ())
        crit = spec.get("acceptanceCriterionIds", ())
        if not _str_list(caps) or not _str_list(crit):
            return _err("Capabilities and criterion ids must be lists of strings.")
        task: dict[str, Any] = {
            "taskId": task_id,
            "objectiveId": objective_id,
            "title": spec.get("title"),
            "description": spec.get("description"),
            "role": spec.get("role"),
            "status": "ready",
            "requiredCapabilities": list(caps),
            "acceptanceCriterionIds": list(crit),
            "riskBudget": budget,
            "lastFencingToken": 0,
            "createdAtMs": now_ms,
            "updatedAtMs": now_ms,
        }
        if spec.get("verificationOfTaskId"):
            task["verificationOfTaskId"] = spec["verificationOfTaskId"]
        if not all(type(task[k]) is str for k in ("title", "description", "role")):
            return _err("Task title, description and role must be strings.")
        if not is_json_object(task, depth=_TASK_DEPTH):
            return _err("Task fields must be JSON values.")
        return _ev(
            "task.created", str(task_id), {"task": task, "atMs": now_ms}, f"task-created:{task_id}"
        )

    @_total
    def plan_fail_task(self, task_id: str, reason_code: str, now_ms: int) -> Plan:
        """``failTask``: unknown → error; terminal → no-op."""
        rec = self.task(task_id)
        if rec is None:
            return _err(f"Unknown task '{task_id}'.")
        if rec["task"]["status"] in TASK_TERMINAL:
            return None
        if not _text(reason_code):
            return _err("A reason code is required.")
        return _ev(
            "task.failed",
            task_id,
            {"taskId": task_id, "reasonCode": reason_code, "atMs": now_ms},
            f"task-failed:{_key_part(task_id)}:{_key_part(reason_code)}",
        )

    # -- attempts --------------------------------------------------------

    @_total
    def plan_queue_attempt(
        self, task_id: str, dispatch: Mapping[str, Any], attempt_id: str, now_ms: int
    ) -> Plan:
        """``queueAttempt``: task exists and is ready, objective active, no
        active attempt, ``dispatch.taskId`` = task id, attempts < maxAttempts."""
        rec = self.task(task_id)
        if rec is None:
            return _err(f"Unknown task '{task_id}'.")
        task = rec["task"]
        obj = self.objective(task["objectiveId"])
        if task["status"] != "ready" or obj is None or obj["objective"]["status"] != "active":
            return _err(f"Task '{task_id}' is not dispatchable from '{task['status']}'.")
        active = self.active_attempt(task_id)
        if active is not None:
            return _err(f"Task '{task_id}' already owns active attempt '{active['attemptId']}'.")
        d = dict(dispatch)
        if d.get("taskId") != task_id or not is_json_object(d, depth=_DISPATCH_DEPTH):
            return _err("Dispatch must be a JSON object whose taskId is the task's.")
        max_attempts = task["riskBudget"].get("maxAttempts")
        if max_attempts is not None and len(rec["attemptIds"]) >= max_attempts:
            return _err(f"Task '{task_id}' exhausted its attempt budget.")
        return _ev(
            "attempt.queued",
            task_id,
            {"attemptId": attempt_id, "taskId": task_id, "dispatch": d, "atMs": now_ms},
            f"attempt-queued:{attempt_id}",
        )

    @_total
    def plan_lease(
        self, attempt_id: str, owner_id: str, ttl_ms: Any, lease_id: str, now_ms: int
    ) -> Plan:
        """``leaseAttempt``: a queued attempt, active objective, ready task,
        non-empty owner, ttl > 0. The fencing token is the task's last + 1."""
        att = self.attempt(attempt_id)
        if att is None:
            return _err(f"Unknown attempt '{attempt_id}'.")
        if type(ttl_ms) is not int or ttl_ms <= 0 or ttl_ms > MAX_SAFE_INTEGER:
            return _err("Lease TTL must be positive.")
        if not _text(owner_id):
            return _err("Lease owner must be non-empty.")
        task = self.state["tasks"][att["taskId"]]["task"]
        obj = self.objective(task["objectiveId"])
        if att["status"] != "queued":
            return _err(f"Attempt '{attempt_id}' is not queued.")
        if task["status"] != "ready" or obj is None or obj["objective"]["status"] != "active":
            return _err(f"Task '{task['taskId']}' is not dispatchable from '{task['status']}'.")
        expires = now_ms + ttl_ms
        if expires > MAX_ISO_MS:
            return _err("Lease TTL is too large.")
        lease = {
            "attemptId": attempt_id,
            "leaseId": lease_id,
            "ownerId": owner_id,
            "fencingToken": int(task["lastFencingToken"]) + 1,
            "issuedAtMs": now_ms,
            "expiresAtMs": expires,
            "expiresAt": iso_from_ms(expires),
        }
        return _ev(
            "attempt.leased",
            attempt_id,
            {"lease": lease, "atMs": now_ms},
            f"attempt-leased:{lease_id}",
        )

    def _check_lease(
        self, attempt_id: str, lease_id: str, token: Any, now_ms: int, status: str
    ) -> dict[str, Any] | DurableTaskRuntimeError:
        att = self.attempt(attempt_id)
        if att is None:
            return _err(f"Unknown attempt '{attempt_id}'.")
        lease = att.get("lease")
        if (
            lease is None
            or att["status"] != status
            or lease["leaseId"] != lease_id
            or type(token) is not int
            or lease["fencingToken"] != token
        ):
            return _err(f"Attempt '{attempt_id}' lease or fencing token is stale.")
        if now_ms >= lease["expiresAtMs"]:
            return _err(f"Attempt '{attempt_id}' lease expired.")
        return att

    @_total
    def plan_start(self, attempt_id: str, lease_id: str, token: Any, now_ms: int) -> Plan:
        """``startAttempt``: the current lease id and token, before expiry."""
        att = self._check_lease(attempt_id, lease_id, token, now_ms, "leased")
        if isinstance(att, DurableTaskRuntimeError):
            return att
        return _ev(
            "attempt.started",
            attempt_id,
            {"attemptId": attempt_id, "leaseId": lease_id, "fencingToken": token, "atMs": now_ms},
            f"attempt-started:{attempt_id}:{token}",
            actor="worker",
        )

    @_total
    def plan_finish(
        self,
        attempt_id: str,
        lease_id: str,
        token: Any,
        outcome: str,
        reason_code: str,
        now_ms: int,
    ) -> Plan:
        """``finishAttempt``: a running attempt with the current lease and token."""
        if outcome not in ("completed", "failed"):
            return _err("Outcome must be 'completed' or 'failed'.")
        att = self._check_lease(attempt_id, lease_id, token, now_ms, "running")
        if isinstance(att, DurableTaskRuntimeError):
            return att
        return _ev(
            "attempt.finished",
            attempt_id,
            {
                "attemptId": attempt_id,
                "leaseId": lease_id,
                "fencingToken": token,
                "outcome": outcome,
                "reasonCode": reason_code,
                "atMs": now_ms,
            },
            f"attempt-finished:{attempt_id}:{token}",
            actor="worker",
        )

    @_total
    def plan_cancel_attempt(self, attempt_id: str, reason_code: str, now_ms: int) -> Plan:
        """``cancelAttempt``: unknown → error; terminal → no-op."""
        att = self.attempt(attempt_id)
        if att is None:
            return _err(f"Unknown attempt '{attempt_id}'.")
        if att["status"] not in ACTIVE_ATTEMPT_STATUSES:
            return None
        if not _text(reason_code):
            return _err("A reason code is required.")
        return _ev(
            "attempt.cancelled",
            attempt_id,
            {"attemptId": attempt_id, "reasonCode": reason_code, "atMs": now_ms},
            f"attempt-cancelled:{attempt_id}",
        )

    def _plan_expire(self, att: dict[str, Any], reason: str, now_ms: int) -> PlannedEvent:
        lease = att.get("lease")
        payload: dict[str, Any] = {"attemptId": att["attemptId"], "reasonCode": reason}
        if lease is not None:
            payload["leaseId"] = lease["leaseId"]
            payload["fencingToken"] = lease["fencingToken"]
        payload["atMs"] = now_ms
        lease_part = lease["leaseId"] if lease is not None else "none"
        return _ev(
            "attempt.lease_expired",
            att["attemptId"],
            payload,
            f"attempt-expired:{att['attemptId']}:{lease_part}",
        )

    def plan_expire_leases(self, now_ms: int) -> list[PlannedEvent]:
        """``expireLeases``: one ``lease_expired`` per leased/running attempt
        whose ``expiresAt`` ≤ now, in attempt order."""
        return [
            self._plan_expire(att, "lease_expired", now_ms)
            for att in self.state["attempts"].values()
            if att["status"] in ("leased", "running") and att["lease"]["expiresAtMs"] <= now_ms
        ]

    def plan_recover_interrupted(
        self, predicate: Callable[[dict[str, Any]], bool], now_ms: int
    ) -> list[PlannedEvent]:
        """``recoverInterruptedUnboundAttempts``: expire (``worker_process_
        interrupted``) every leased/running attempt matching ``predicate``,
        whatever its expiry, in attempt order. ``predicate`` gets a copy."""
        return [
            self._plan_expire(att, "worker_process_interrupted", now_ms)
            for att in self.state["attempts"].values()
            if att["status"] in ("leased", "running") and predicate(copy.deepcopy(att))
        ]
