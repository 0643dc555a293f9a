"""leasegate.conformance: judge any runner that speaks the protocol, black-box.

``leasegate conformance --runner-cmd "…" | --runner-url ws://…`` runs the
numbered :data:`CASES` (``docs/conformance.md``) against a runner: the
reference cloud behind a WebSocket bridge, moto (SSM, STS, IAM) on 127.0.0.1
behind an SSM request log, one fresh runner process per case (``--jobs`` of
them at once, :func:`run_suite`; several runners at once, :func:`run_matrix`),
one :class:`Verdict` per case, and a terminal table, a JSON and a self-contained
HTML report (:mod:`leasegate.conformance._report`).

Needs the ``demo`` extra (moto, boto3).
"""

from ._cases import CASES, expected_ack
from ._report import render_html, render_json, render_table, run
from ._suite import (
    PARTS,
    Case,
    CaseFailed,
    Context,
    Target,
    Verdict,
    canonical,
    run_matrix,
    run_suite,
)
from ._world import (
    ENV_BOOT_ID,
    ENV_BRIDGE_URL,
    ENV_REFRESH_CREDENTIAL,
    ENV_REFRESH_REQUESTS,
    ENV_REGION,
    ENV_RUN_EPOCH,
    ENV_SSM_ENDPOINT,
    ENV_TASK_ID,
    SsmCall,
    SsmRequestLog,
)

__all__ = [
    "CASES",
    "ENV_BOOT_ID",
    "ENV_BRIDGE_URL",
    "ENV_REFRESH_CREDENTIAL",
    "ENV_REFRESH_REQUESTS",
    "ENV_REGION",
    "ENV_RUN_EPOCH",
    "ENV_SSM_ENDPOINT",
    "ENV_TASK_ID",
    "PARTS",
    "Case",
    "CaseFailed",
    "Context",
    "SsmCall",
    "SsmRequestLog",
    "Target",
    "Verdict",
    "canonical",
    "expected_ack",
    "render_html",
    "render_json",
    "render_table",
    "run",
    "run_matrix",
    "run_suite",
]
