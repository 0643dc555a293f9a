"""The demo's world: an SSM endpoint, the reference cloud on it, and every secret it minted.

* :func:`open_endpoint` starts a moto server on 127.0.0.1 (the default) or
  uses the caller's ``--ssm-endpoint URL``. Every client is built with
  explicit dummy keys on an isolated botocore session (never the ambient
  AWS configuration).
* :class:`MintLog` remembers, as :class:`~leasegate.core.Secret` values,
  every secret the demo's cloud minted or stored: credential values, env
  values, and the secret key and session token of every STS session
  (:class:`RecordingSts` wraps the STS client; without STS at the endpoint,
  :class:`SyntheticSts` makes random session keys and remembers them). The demo checks at the end
  that none of them appears in its output, its logs or its trace.
* :func:`build_cloud` builds the :class:`~leasegate.testing.ReferenceCloud`
  with the demo's directory (one org, one person, one project, two engine
  credentials, an MCP connection, a GitHub sign-in and an SSH key).
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

from botocore.config import Config

from leasegate.core import Secret
from leasegate.shells.ssm import client_proxies, isolated_botocore_session
from leasegate.testing import ReferenceCloud

__all__ = [
    "DUMMY_ACCESS_KEY_ID",
    "ORG",
    "PROJECT",
    "USER",
    "DemoCloud",
    "Endpoint",
    "MintLog",
    "RecordingSts",
    "SyntheticSts",
    "build_cloud",
    "fresh",
    "open_endpoint",
]

#: The dummy access key id of the demo's setup clients (not a secret).
DUMMY_ACCESS_KEY_ID: Final = "AKIALEASEGATEDEMO000"
_DUMMY_SECRET: Final = "leasegate-demo-dummy-secret"  # noqa: S105 - a dummy, never minted
_REGION: Final = "us-east-1"
ORG: Final = "acme"
USER: Final = "alice"
PROJECT: Final = "web"


class MintLog:
    """Every secret the demo's cloud minted or stored, as :class:`Secret` values.

    ``add`` takes a plain ``str`` (or a ``Secret``) and keeps it as a
    ``Secret``; :meth:`values` returns them for the final leak check. The
    log's ``repr`` shows only a count.
    """

    def __init__(self) -> None:
        self._values: list[Secret] = []

    def __repr__(self) -> str:
        return f"MintLog({len(self._values)} secrets)"

    def add(self, value: str) -> str:
        """Remember ``value``; return it unchanged (for inline use)."""
        if value:
            self._values.append(value if isinstance(value, Secret) else Secret(value))
        return value

    def values(self) -> tuple[Secret, ...]:
        """The secrets remembered so far, oldest first."""
        return tuple(self._values)

    def found_in(self, text: str) -> int:
        """How many remembered secrets occur in ``text`` (0: none leaked)."""
        return sum(1 for s in self._values if s.reveal() in text)


class RecordingSts:
    """An STS client whose ``assume_role`` answers are remembered in a :class:`MintLog`.

    Args:
        client: a boto3/botocore ``sts`` client.
        log: where each session's ``SecretAccessKey`` and ``SessionToken`` go.
    """

    def __init__(self, client: Any, log: MintLog) -> None:
        self._client = client
        self._log = log

    def assume_role(self, **kwargs: Any) -> Any:
        """``AssumeRole`` on the wrapped client; remember the session's secrets."""
        out = self._client.assume_role(**kwargs)
        creds = out.get("Credentials", {})
        self._log.add(str(creds.get("SecretAccessKey", "")))
        self._log.add(str(creds.get("SessionToken", "")))
        return out


class SyntheticSts:
    """An STS stand-in for an endpoint without ``AssumeRole``: random session
    keys, each remembered in a :class:`MintLog` (the cloud's own synthetic
    keys would not be, so the leak check could not search for them).

    Args:
        log: where each session's secret key and token go.
    """

    def __init__(self, log: MintLog) -> None:
        self._log = log

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        """An ``AssumeRole``-shaped answer with fresh random keys (no I/O)."""
        return {
            "Credentials": {
                "AccessKeyId": "ASIA" + secrets.token_hex(8).upper(),
                "SecretAccessKey": self._log.add(secrets.token_urlsafe(30)),
                "SessionToken": self._log.add(secrets.token_urlsafe(96)),
            }
        }


@dataclasses.dataclass(slots=True)
class Endpoint:
    """The SSM (and maybe STS) endpoint the demo runs against.

    Attributes:
        url: ``http://127.0.0.1:<port>`` (moto) or the user's URL.
        region: the region every client is built for.
        embedded: ``True`` when the demo started a moto server itself.
        has_sts: whether ``AssumeRole`` works at ``url`` (else synthetic keys).
    """

    url: str
    region: str
    embedded: bool
    has_sts: bool = True
    _stop: Callable[[], None] | None = dataclasses.field(default=None, repr=False)

    def client(self, service: str) -> Any:
        """A botocore client of ``service`` at :attr:`url` with the dummy setup keys."""
        session = isolated_botocore_session(region=self.region, max_attempts=2)
        return session.create_client(
            service,
            region_name=self.region,
            endpoint_url=self.url,
            aws_access_key_id=DUMMY_ACCESS_KEY_ID,
            aws_secret_access_key=_DUMMY_SECRET,
            config=Config(
                retries={"mode": "standard", "total_max_attempts": 2}, proxies=client_proxies(None)
            ),
        )

    def stop(self) -> None:
        """Stop the embedded server (nothing for a user's endpoint); idempotent."""
        stop, self._stop = self._stop, None
        if stop is not None:
            with contextlib.suppress(Exception):
                stop()


def open_endpoint(url: str | None) -> Endpoint:
    """Start moto on 127.0.0.1, or check and use the caller's endpoint.

    Args:
        url: ``None`` for the embedded moto server; else an ``http(s)://``
            URL of an endpoint that serves SSM ``PutParameter`` and
            ``GetParameters`` (STS ``AssumeRole`` at the same URL is used when
            it answers; otherwise each lease gets synthetic session keys,
            which the endpoint must then accept, as moto and LocalStack do).

    Raises:
        ValueError: ``url`` is not an http(s) URL.
        ImportError: moto is not installed (``pip install -e '.[demo]'``).
        OSError: the embedded server could not bind.
    """
    if url is None:
        from leasegate.testing.moto import start_moto

        server = start_moto(_REGION)
        return Endpoint(url=server.url, region=server.region, embedded=True, _stop=server.stop)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("--ssm-endpoint must be an http:// or https:// URL")
    ep = Endpoint(url=url.rstrip("/"), region=_REGION, embedded=False)
    try:
        ep.client("sts").assume_role(
            RoleArn="arn:aws:iam::123456789012:role/leasegate-demo-probe",
            RoleSessionName="leasegate-demo-probe",
            DurationSeconds=900,
        )
    except Exception:  # noqa: BLE001 - no STS there: synthetic session keys
        ep.has_sts = False
    return ep


@dataclasses.dataclass(slots=True)
class DemoCloud:
    """The reference cloud and the demo's directory in it.

    Attributes:
        cloud: the :class:`~leasegate.testing.ReferenceCloud`.
        org, user, project: the ids (with a random suffix on a user's endpoint).
        values: credential id or env key -> its current secret value (the
            walk checks files and env against these; they are never printed).
    """

    cloud: ReferenceCloud
    org: str
    user: str
    project: str
    values: dict[str, str]

    def __repr__(self) -> str:
        return f"DemoCloud({self.org}/{self.user}/{self.project}, {len(self.values)} values)"


def build_cloud(
    endpoint: Endpoint, mint: MintLog, *, prefix: str, clock: Callable[[], int]
) -> DemoCloud:
    """The reference cloud on ``endpoint`` with the demo's directory.

    Every credential and env value is a fresh random string starting with
    ``prefix`` (tests pass ``"CANARY-"``), remembered in ``mint``; so is
    every session the cloud mints (from the endpoint's STS, or random keys
    of :class:`SyntheticSts` when it has none). With a user's endpoint the org and
    person ids get a random suffix so that runs never share parameters.

    Args:
        endpoint: where the cloud writes parameters and mints sessions.
        mint: the log of minted secrets.
        prefix: the start of every generated secret value.
        clock: milliseconds since the epoch (lease and session expiries).

    Raises:
        botocore errors: the endpoint refused a write.
    """
    sts: RecordingSts | SyntheticSts = (
        RecordingSts(endpoint.client("sts"), mint) if endpoint.has_sts else SyntheticSts(mint)
    )
    cloud = ReferenceCloud(
        ssm=endpoint.client("ssm"),
        sts=sts,
        region=endpoint.region,
        clock=clock,
        retry_delay_ms=50,
    )
    suffix = "" if endpoint.embedded else "-" + secrets.token_hex(4)
    d = DemoCloud(cloud, ORG + suffix, USER + suffix, PROJECT + suffix, {})
    v = d.values
    cloud.add_org(d.org)
    cloud.add_user(d.org, d.user)
    cloud.add_project(d.org, d.project)
    v["claude"] = fresh(mint, prefix)
    cloud.add_engine_credential(d.user, "claude", env={"ANTHROPIC_API_KEY": v["claude"]})
    v["codex"] = fresh(mint, prefix)
    cloud.add_engine_credential(d.user, "codex", engine="codex", env={"OPENAI_API_KEY": v["codex"]})
    v["linear"] = fresh(mint, prefix)
    cloud.add_mcp(
        d.user, "linear", server="linear", auth_kind="token", header=("Authorization", v["linear"])
    )
    v["gh"] = fresh(mint, prefix)
    cloud.set_github(d.user, "gh", v["gh"])
    v["ssh"] = fresh(mint, prefix, ssh=True)
    cloud.set_ssh(d.user, "ssh", v["ssh"])
    v["DATABASE_URL"] = fresh(mint, prefix, url=True)
    cloud.set_env_value(d.project, "DATABASE_URL", v["DATABASE_URL"])
    return d


def fresh(mint: MintLog, prefix: str, *, url: bool = False, ssh: bool = False) -> str:
    """A new random secret value starting with ``prefix``, remembered in ``mint``.

    ``url``: shaped like a database URL; ``ssh``: shaped like an OpenSSH
    private key block. The random part is 24 hex characters.
    """
    body = prefix + secrets.token_hex(12)
    if url:
        value = f"postgres://app:{body}@db.internal:5432/app"
    elif ssh:
        value = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n"
    else:
        value = body
    mint.add(body)
    return mint.add(value)
