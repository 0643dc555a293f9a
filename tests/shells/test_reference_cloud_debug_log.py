"""The reference cloud's own boto3 clients log no secret at DEBUG.

botocore's DEBUG lines hold the request body (a ``put_parameter`` value) and
the response body (``assume_role``'s minted keys). The cloud runs its SSM
and STS calls under the runner reader's filter, so a test suite logging
everything at DEBUG sees neither a credential value nor a lease session's
keys; INFO records still pass.
"""

from __future__ import annotations

import logging

import pytest
import shell_kit as kit

from leasegate.core.wire import decode_frame, encode_frame
from leasegate.core.wire.lease import LeaseGrant, LeaseRequest
from leasegate.testing import MotoServer

pytestmark = pytest.mark.integration

TASK = "task-debug"


def test_reference_cloud_writes_and_mints_leave_no_secret_in_a_debug_log(
    moto_server: MotoServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    cloud = kit.reference_cloud(
        moto_server,
        task=TASK,
        boot="boot-debug",
        api_key="CANARY-debug-api-key",
        database_url="CANARY-debug-db",
    )
    cloud.rotate("claude", env={"ANTHROPIC_API_KEY": "CANARY-debug-rotated"})
    cloud.receive(encode_frame(LeaseRequest(op_id="lease-1-a", task_id=TASK, run_epoch=1)))
    grants = [f for f in map(decode_frame, cloud.take_outgoing()) if isinstance(f, LeaseGrant)]

    assert len(grants) == 1
    minted = [s.secret_access_key.reveal() for s in grants[0].lease.sessions]
    minted += [s.session_token.reveal() for s in grants[0].lease.sessions]
    assert minted
    assert all(minted)
    text = caplog.text
    # The filter drops only the AWS stack's DEBUG records: the calls were logged.
    assert "minted a credentials session" in text
    assert any(r.name.startswith("botocore") for r in caplog.records)  # the clients' build
    assert "CANARY" not in text
    assert not [m for m in minted if m in text]
