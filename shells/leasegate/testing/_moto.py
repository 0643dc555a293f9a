"""A moto server on 127.0.0.1 as the local SSM and STS endpoint.

The project's shared helper (``leasegate.shells.testing.moto_server``) had
not landed when this was written, so this module starts
``moto.server.ThreadedMotoServer`` itself. Clients are always built with
explicit dummy keys and ``endpoint_url``: never the ambient AWS
credentials, never the internet.
"""

from __future__ import annotations

import dataclasses
import urllib.request
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

__all__ = ["DUMMY_ACCESS_KEY_ID", "DUMMY_SECRET_ACCESS_KEY", "MotoEndpoint", "start_moto_endpoint"]

#: The dummy keys every client of the local endpoint is built with.
DUMMY_ACCESS_KEY_ID = "AKIALEASEGATETEST000"
DUMMY_SECRET_ACCESS_KEY = "leasegate-test-not-a-secret"  # noqa: S105 - a dummy


@dataclasses.dataclass(slots=True)
class MotoEndpoint:
    """A running moto server (SSM, STS, IAM, ...) on loopback.

    Attributes:
        url: ``http://127.0.0.1:<port>``.
        region: the region clients are built for.
    """

    url: str
    region: str
    _server: Any = dataclasses.field(repr=False)

    def client(
        self,
        service: str,
        *,
        access_key_id: str = DUMMY_ACCESS_KEY_ID,
        secret_access_key: str = DUMMY_SECRET_ACCESS_KEY,
        session_token: str | None = None,
    ) -> Any:
        """A boto3 client of ``service`` for this endpoint, with explicit keys.

        The keys default to dummies; pass a lease session's keys to read as
        that session.
        """
        session = boto3.session.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            aws_session_token=session_token,
            region_name=self.region,
        )
        return session.client(service, endpoint_url=self.url)  # type: ignore[call-overload]

    def ssm_client(self) -> Any:
        """A boto3 ``ssm`` client with the dummy keys."""
        return self.client("ssm")

    def sts_client(self) -> Any:
        """A boto3 ``sts`` client with the dummy keys."""
        return self.client("sts")

    def reset(self) -> None:
        """Forget every resource moto holds (``POST /moto-api/reset``)."""
        req = urllib.request.Request(self.url + "/moto-api/reset", method="POST")  # noqa: S310
        with urllib.request.urlopen(req, timeout=10):  # noqa: S310 - loopback only
            pass

    def stop(self) -> None:
        """Stop the server (joins its thread)."""
        self._server.stop()


def start_moto_endpoint(region: str = "us-east-1") -> MotoEndpoint:
    """Start a moto server on 127.0.0.1 on a free port.

    Returns:
        The running :class:`MotoEndpoint`; call :meth:`MotoEndpoint.stop`.

    Raises:
        OSError: the server could not bind.
    """
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return MotoEndpoint(url=f"http://{host}:{port}", region=region, _server=server)
