"""The delegation ledger's pure rules (DL-).

Implements the decisions of ``reference/orchestration/delegation-ledger.ts``
that need no store: the managed task id and its validation (DL-003, DL-004),
objective selection (DL-006), the goal status table (DL-017), and minimal
goal helpers the reference imports but does not include (orchestration.md,
"Goal helpers"): ``goal_objective_id``, ``project_goal_objective``,
``project_goal_acceptance_evidence``, ``has_goal_acceptance_override`` and
``derive_worker_task_label``. Goals keep only the fields the reference reads.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Final

from .._json import MAX_SAFE_INTEGER
from ._errors import DurableTaskRuntimeError

__all__ = [
    "DEFAULT_OWNER_PREFIX",
    "MANAGED_EXECUTION_KIND",
    "GoalEvidence",
    "GoalRequirement",
    "GoalState",
    "derive_worker_task_label",
    "goal_objective_id",
    "goal_sync_call",
    "has_goal_acceptance_override",
    "managed_task_id",
    "project_goal_acceptance_evidence",
    "project_goal_objective",
    "select_objective_id",
]

#: ``dispatch.executionKind`` of a managed process (absent = in-process).
MANAGED_EXECUTION_KIND: Final = "managed-process"
#: The default lease owner is ``in-process:<sessionId>`` (DL-019).
DEFAULT_OWNER_PREFIX: Final = "in-process:"
_WS: Final = re.compile(r"\s+")


@dataclasses.dataclass(frozen=True, slots=True)
class GoalRequirement:
    """One acceptance requirement of a goal: id, text and its evidence ids."""

    id: str
    text: str
    evidence_ids: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class GoalEvidence:
    """One evidence item: only trusted items count as acceptance evidence."""

    id: str
    kind: str
    summary: str
    created_at: str
    trusted: bool


@dataclasses.dataclass(frozen=True, slots=True)
class GoalState:
    """The minimal goal the ledger reads (``GoalState``).

    Attributes:
        goal_id: the goal's id; its objective is ``goal:<goal_id>``.
        status: ``active``, ``paused``, ``blocked``, ``usage_limited``,
            ``budget_limited``, ``cancelled``, ``completed`` (others ignored).
        user_goal: the objective's description.
        requirements, evidence: acceptance requirements and evidence.
        acceptance_override: complete without evidence.
    """

    goal_id: str
    status: str
    user_goal: str
    requirements: tuple[GoalRequirement, ...] = ()
    evidence: tuple[GoalEvidence, ...] = ()
    acceptance_override: bool = False


def goal_objective_id(goal_id: str) -> str:
    """``goal:<goal_id>``."""
    return f"goal:{goal_id}"


def project_goal_objective(goal: GoalState) -> dict[str, Any]:
    """The objective a goal maps to: id ``goal:<id>``, title ``Goal <id>``,
    description the user goal, one required criterion per requirement."""
    return {
        "objectiveId": goal_objective_id(goal.goal_id),
        "title": f"Goal {goal.goal_id}",
        "description": goal.user_goal,
        "acceptanceCriteria": [
            {"id": r.id, "description": r.text, "required": True} for r in goal.requirements
        ],
        "riskBudget": {},
    }


def project_goal_acceptance_evidence(goal: GoalState) -> list[dict[str, Any]]:
    """For each requirement and each of its trusted evidence items, in order,
    an evidence record with the stable id
    ``goal-evidence:<goalId>:<requirementId>:<evidenceId>``."""
    by_id = {e.id: e for e in goal.evidence}
    out: list[dict[str, Any]] = []
    for req in goal.requirements:
        for evidence_id in req.evidence_ids:
            ev = by_id.get(evidence_id)
            if ev is None or not ev.trusted:
                continue
            out.append(
                {
                    "evidenceId": f"goal-evidence:{goal.goal_id}:{req.id}:{ev.id}",
                    "criterionId": req.id,
                    "kind": ev.kind,
                    "summary": ev.summary,
                    "createdAt": ev.created_at,
                    "artifactIds": [],
                    "trusted": True,
                }
            )
    return out


def has_goal_acceptance_override(goal: GoalState) -> bool:
    """The goal's acceptance override (default ``False``)."""
    return goal.acceptance_override is True


def derive_worker_task_label(instructions: str, fallback: str) -> str:
    """Collapse whitespace and trim; empty → ``fallback``; more than 120
    characters → the first 119, right-stripped, plus ``…``."""
    text = _WS.sub(" ", instructions).strip()
    if not text:
        return fallback
    if len(text) <= 120:
        return text
    return text[:119].rstrip() + "…"


def managed_task_id(lane_id: str, dispatch_sequence: Any) -> str | DurableTaskRuntimeError:
    """``<lane_id>:turn:<dispatch_sequence>`` (DL-004), or the DL-003 error
    for a sequence that is not an integer in 1..2**53-1 (bools refused)."""
    if type(dispatch_sequence) is not int or not 1 <= dispatch_sequence <= MAX_SAFE_INTEGER:
        return DurableTaskRuntimeError("Managed dispatch sequence must be a positive integer.")
    return f"{lane_id}:turn:{dispatch_sequence}"


def select_objective_id(
    *,
    subject_objective_id: str | None,
    goal: GoalState | None,
    goal_id: str | None,
    session_id: str,
) -> str:
    """DL-006: the verification subject's objective, else the goal's, else
    ``goal:<goal_id>``, else ``session:<session_id>``."""
    if subject_objective_id is not None:
        return subject_objective_id
    if goal is not None:
        return goal_objective_id(goal.goal_id)
    if goal_id:
        return goal_objective_id(goal_id)
    return f"session:{session_id}"


def goal_sync_call(goal_status: str, objective_status: str | None) -> str | None:
    """DL-017's table: the runtime call for a goal status given the
    objective's status (``None`` = missing): ``resume``, ``pause``,
    ``cancel``, ``complete`` or ``None``."""
    if goal_status == "active":
        return "resume" if objective_status == "paused" else None
    if goal_status in ("paused", "blocked", "usage_limited", "budget_limited"):
        return "pause" if objective_status == "active" else None
    if goal_status == "cancelled":
        return "cancel" if objective_status != "cancelled" else None
    if goal_status == "completed":
        return "complete" if objective_status != "completed" else None
    return None
