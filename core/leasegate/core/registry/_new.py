"""Positional constructors of the commands and values built on every run's way to an open gate.

Each ``new_X = constructor(X)`` builds an ``X`` from its fields in
declaration order, every field given, without the frozen dataclass
``__init__`` (one ``object.__setattr__`` per field): the same instance,
equal and of the same class, at a fraction of the cost
(:func:`leasegate.core._model.constructor`). Only for values the registry
builds itself from values it already holds; never for input.
"""

from __future__ import annotations

from typing import Final

from .._model import constructor
from ..wire.lease import LeaseRequest, TaskLease
from ._vocab import (
    Assignment,
    CallDone,
    CancelTimer,
    CloseGate,
    CredentialEntry,
    GrantAccepted,
    GrantSettled,
    InstallRequest,
    OpenGate,
    OpenReader,
    ReadParameters,
    RunInstall,
    SendFrame,
    StartTimer,
    TaskView,
)

__all__ = [
    "new_assignment",
    "new_call_done",
    "new_cancel_timer",
    "new_close_gate",
    "new_credential_entry",
    "new_grant_accepted",
    "new_grant_settled",
    "new_install_request",
    "new_lease_request",
    "new_open_gate",
    "new_open_reader",
    "new_read_parameters",
    "new_run_install",
    "new_send_frame",
    "new_start_timer",
    "new_task_lease",
    "new_task_view",
]

#: ``Assignment(task_id, run_epoch)``.
new_assignment: Final = constructor(Assignment)
#: ``CallDone(call_id, error)``.
new_call_done: Final = constructor(CallDone)
#: ``CancelTimer(timer_id)``.
new_cancel_timer: Final = constructor(CancelTimer)
#: ``CloseGate(cmd_id, assignment, reason)``.
new_close_gate: Final = constructor(CloseGate)
#: ``CredentialEntry(manifest, availability, material, observed_version)``.
new_credential_entry: Final = constructor(CredentialEntry)
#: ``GrantAccepted(cmd_id, assignment)``.
new_grant_accepted: Final = constructor(GrantAccepted)
#: ``GrantSettled(cmd_id)``.
new_grant_settled: Final = constructor(GrantSettled)
#: ``InstallRequest(assignment, owner_org_id, owner_user_id, previous, next, files, reason,
#: project_set_changed)``.
new_install_request: Final = constructor(InstallRequest)
#: ``LeaseRequest(op_id, task_id, run_epoch)``.
new_lease_request: Final = constructor(LeaseRequest)
#: ``OpenGate(cmd_id, assignment, view)``.
new_open_gate: Final = constructor(OpenGate)
#: ``OpenReader(reader_id, assignment, region, session)``.
new_open_reader: Final = constructor(OpenReader)
#: ``ReadParameters(cmd_id, reader_id, selectors)``.
new_read_parameters: Final = constructor(ReadParameters)
#: ``RunInstall(cmd_id, request)``.
new_run_install: Final = constructor(RunInstall)
#: ``SendFrame(cmd_id, frame)``.
new_send_frame: Final = constructor(SendFrame)
#: ``StartTimer(timer_id, delay_ms)``.
new_start_timer: Final = constructor(StartTimer)
#: ``TaskLease(task_id, run_epoch, lease_id, org_id, user_id, region, manifest_revision,
#: manifest_digest, manifest, sessions, files, expires_at)``.
new_task_lease: Final = constructor(TaskLease)
#: ``TaskView(assignment, lease_id, manifest_revision, manifest_digest, expires_at,
#: project_ids, engines, mcp, github, ssh)``.
new_task_view: Final = constructor(TaskView)
