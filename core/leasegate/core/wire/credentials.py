"""Leased credential values: SSM parameter names, locations and envelopes.

Theory of operation
===================

Every credential a lease names lives in one SSM ``SecureString`` parameter.
Its *name* says whose credential it is and of which class; its *value* is a
JSON envelope that repeats those facts next to the secret material. Reading
a value therefore takes two steps, both here:

1. :func:`parse_parameter_name` turns the manifest's parameter name into a
   :class:`CredentialLocation` (or ``None``: the registry then refuses the
   grant with "manifest credential is incomplete", LR-028);
2. :func:`parse_leased_value` decodes the decrypted text strictly and
   *authenticates* it against that location: the envelope's class, org, user
   and credential id must equal the location's, so a value copied to another
   credential's parameter is refused (LR-032). It returns a typed
   :data:`LeasedValue` or ``None`` and never raises.

Parameter names (decided here; the reference imports
``parseLeaseParameterName`` without defining it)::

    /uai/orgs/{orgId}/credentials/{class}/{credentialId}              org-wide
    /uai/orgs/{orgId}/users/{userId}/credentials/{class}/{credentialId}  a person's

``class`` is ``engine``, ``mcp``, ``github`` or ``ssh``; GitHub sign-ins and
SSH keys are always a person's. Each segment matches
:data:`~._common.PATH_SEGMENT_PATTERN`.

The project env parameters the registry reads for the env replica
(``/uai/projects/{projectId}/env-values/{sha256(key)}/{stagingId}`` and the
legacy ``/uai/projects/{projectId}/env/{key}`` read as ``name:version``) are
built by :func:`project_env_staged_parameter` and
:func:`project_env_legacy_selector`; their envelopes belong to the env
replica's codec (``docs/protocol-env.md``).

Secrets (env values, file contents, header values, tokens, keys) are
:class:`~leasegate.core.Secret` values; an error never quotes them.
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal, TypeAlias

from leasegate.core._model import DecodeError, Model, constructor, decoder, encode, spec

from .._json import JsonError, canonical_dumps, loads, sha256_hex
from .._secret import Secret
from ._common import (
    MAX_SAFE_INTEGER,
    PATH_SEGMENT_PATTERN,
    PROJECT_ENV_KEY_PATTERN,
    PROJECT_ENV_KEY_RE,
    PROJECT_ENV_STAGING_ID_RE,
    PROJECT_PATH_SEGMENT_RE,
)

__all__ = [
    "CREDENTIAL_CLASSES",
    "ENVELOPE_KIND",
    "CredentialClass",
    "CredentialLocation",
    "EngineValue",
    "GithubValue",
    "LeasedValue",
    "McpHeader",
    "McpValue",
    "SshValue",
    "credential_parameter_name",
    "decode_leased_value",
    "encode_leased_value",
    "parse_leased_value",
    "parse_parameter_name",
    "project_env_legacy_parameter",
    "project_env_legacy_selector",
    "project_env_staged_parameter",
]

#: The four credential classes (also the cleanup identity's ``class``).
CredentialClass: TypeAlias = Literal["engine", "mcp", "github", "ssh"]
CREDENTIAL_CLASSES: Final[tuple[CredentialClass, ...]] = ("engine", "mcp", "github", "ssh")

#: The ``kind`` of every leased credential envelope (``v`` is 1).
ENVELOPE_KIND: Final = "leased-credential"


_SEG: Final = r"(?!\.\.?(?:/|\Z))[A-Za-z0-9_.-]{1,128}"
_NAME_RE: Final = re.compile(
    rf"/uai/orgs/(?P<org>{_SEG})(?:/users/(?P<user>{_SEG}))?"
    rf"/credentials/(?P<cls>engine|mcp|github|ssh)/(?P<cred>{_SEG})"
)
#: A relative file path inside a credential's files: 1–16 segments, none of
#: them ``.`` or ``..``, no leading or doubled ``/``.
_FILE_SEG: Final = r"(?!\.\.?(?:/|\Z))[A-Za-z0-9_.-]{1,255}"
_FILE_PATH: Final = rf"(?:{_FILE_SEG}/){{0,15}}{_FILE_SEG}"
_HEADER_NAME: Final = r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}"
_HEADER_VALUE: Final = r"[^\x00-\x08\x0a-\x1f\x7f]+"
_NO_NUL: Final = r"[^\x00]*"


# ---------------------------------------------------------------------------
# Locations


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CredentialLocation:
    """Where a credential lives: the facts its parameter name encodes.

    Attributes:
        org_id: the organization segment.
        user_id: the person's segment, or ``None`` for an org-wide
            credential (``github`` and ``ssh`` always have one).
        credential_class: ``engine``, ``mcp``, ``github`` or ``ssh``.
        credential_id: the credential's id segment.

    Reference: ``CredentialLocation`` (opaque there; decided here). Not a
    secret: it may appear in views and traces.
    """

    org_id: str
    user_id: str | None
    credential_class: CredentialClass
    credential_id: str

    @property
    def parameter(self) -> str:
        """The SSM parameter name (without a version) this location encodes."""
        return credential_parameter_name(
            self.org_id, self.user_id, self.credential_class, self.credential_id
        )


def credential_parameter_name(
    org_id: str, user_id: str | None, credential_class: CredentialClass, credential_id: str
) -> str:
    """Build a credential's SSM parameter name (no version).

    Returns ``/uai/orgs/{org_id}/credentials/{class}/{credential_id}`` when
    ``user_id`` is ``None``, else
    ``/uai/orgs/{org_id}/users/{user_id}/credentials/{class}/{credential_id}``.

    Raises:
        ValueError: a segment does not match
            :data:`~._common.PATH_SEGMENT_PATTERN`, the class is unknown, or a
            ``github``/``ssh`` credential has no user. The message never
            quotes the input.
    """
    name = (
        f"/uai/orgs/{org_id}/credentials/{credential_class}/{credential_id}"
        if user_id is None
        else f"/uai/orgs/{org_id}/users/{user_id}/credentials/{credential_class}/{credential_id}"
    )
    if parse_parameter_name(name) is None:
        raise ValueError("not a valid credential location")
    return name


def parse_parameter_name(name: object) -> CredentialLocation | None:
    """Parse a credential parameter name into its location.

    Args:
        name: the manifest entry's ``parameter`` (an unversioned SSM name).

    Returns:
        The :class:`CredentialLocation`, or ``None`` when ``name`` is not a
        ``str`` of one of the two shapes (module docstring), a segment is
        ``.``/``..`` or breaks :data:`~._common.PATH_SEGMENT_PATTERN`, a
        version suffix (``:3``) is present, or a ``github``/``ssh`` credential
        is org-wide. Never raises. Reference: ``parseLeaseParameterName``
        (LR-028).
    """
    if type(name) is not str or len(name) > 1024:
        return None
    known = _LOCATIONS.get(name)
    if known is not None:
        return known
    m = _NAME_RE.fullmatch(name)
    if m is None:
        return None
    cls: CredentialClass = m.group("cls")  # type: ignore[assignment]
    user = m.group("user")
    if user is None and cls in ("github", "ssh"):
        return None
    location = CredentialLocation(
        org_id=m.group("org"), user_id=user, credential_class=cls, credential_id=m.group("cred")
    )
    if len(_LOCATIONS) >= _LOCATIONS_MAX:
        _LOCATIONS.clear()  # bounded: start again, the names that recur come back
    _LOCATIONS[name] = location
    return location


#: Parsed names (exact ``str`` only), so that every grant naming a parameter
#: shares one immutable location instead of parsing and building it again.
#: Only valid names are remembered; the answer is the same with or without.
_LOCATIONS: dict[str, CredentialLocation] = {}
_LOCATIONS_MAX: Final = 4096


# ---------------------------------------------------------------------------
# Envelopes (wire models)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class McpHeader(Model):
    """The one HTTP header an MCP ``token`` connection sends.

    Wire: ``{name, value}``: an RFC 9110 token name (≤ 256) and a non-empty
    :class:`~leasegate.core.Secret` value with no control character but tab.
    """

    name: str = spec("name", pattern=_HEADER_NAME)
    value: Secret = spec("value", pattern=_HEADER_VALUE, max_len=8192)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Envelope(Model):
    v: Literal[1] = spec("v")
    kind: Literal["leased-credential"] = spec("kind")
    org_id: str = spec("orgId", pattern=PATH_SEGMENT_PATTERN)
    user_id: str | None = spec("userId", pattern=PATH_SEGMENT_PATTERN)
    credential_id: str = spec("credentialId", pattern=PATH_SEGMENT_PATTERN)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _EngineEnvEnvelope(_Envelope):
    credential_class: Literal["engine"] = spec("class")
    auth_kind: Literal["env"] = spec("authKind")
    env: dict[str, Secret] = spec(
        "env", key_pattern=PROJECT_ENV_KEY_PATTERN, min_items=1, max_items=256, pattern=_NO_NUL
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _EngineFilesEnvelope(_Envelope):
    credential_class: Literal["engine"] = spec("class")
    auth_kind: Literal["config-dir", "oauth", "token"] = spec("authKind")
    files: dict[str, Secret] = spec(
        "files", key_pattern=_FILE_PATH, min_items=1, max_items=64, max_len=1 << 20
    )

    def _check(self) -> tuple[str, str] | None:
        for path in self.files:
            if len(path) > 1024:
                return ("files", "a path is longer than 1024 characters")
        return None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _McpTokenEnvelope(_Envelope):
    credential_class: Literal["mcp"] = spec("class")
    auth_kind: Literal["token"] = spec("authKind")
    header: McpHeader = spec("header")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _McpOauthEnvelope(_Envelope):
    credential_class: Literal["mcp"] = spec("class")
    auth_kind: Literal["oauth"] = spec("authKind")
    access_token: Secret = spec("accessToken", min_len=1, max_len=16384, no_control=True)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _GithubEnvelope(_Envelope):
    credential_class: Literal["github"] = spec("class")
    token: Secret = spec("token", min_len=1, max_len=4096, no_control=True)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _SshEnvelope(_Envelope):
    credential_class: Literal["ssh"] = spec("class")
    private_key: Secret = spec("privateKey", min_len=1, max_len=16384, pattern=_NO_NUL)


# (class, authKind or None) → envelope model. The pair picks the one model
# whose exact key set the value must then have.
_ENVELOPES: Final[dict[tuple[str, str | None], type[_Envelope]]] = {
    ("engine", "env"): _EngineEnvEnvelope,
    ("engine", "config-dir"): _EngineFilesEnvelope,
    ("engine", "oauth"): _EngineFilesEnvelope,
    ("engine", "token"): _EngineFilesEnvelope,
    ("mcp", "token"): _McpTokenEnvelope,
    ("mcp", "oauth"): _McpOauthEnvelope,
    ("github", None): _GithubEnvelope,
    ("ssh", None): _SshEnvelope,
}


# ---------------------------------------------------------------------------
# Leased values (what consumers see)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class EngineValue:
    """An engine credential's material.

    Attributes:
        location: where it was read from (authenticated).
        auth_kind: ``env``, ``config-dir``, ``oauth`` or ``token``.
        env: for ``env``: variable name → value (a read-only mapping of
            :class:`~leasegate.core.Secret`); ``None`` otherwise.
        files: for the other kinds: relative path → file content (read-only
            mapping of secrets); ``None`` for ``env``.

    Reference: ``Extract<LeasedValue, {class: "engine"}>``, ``freezeMaterial``.
    """

    credential_class: ClassVar[Literal["engine"]] = "engine"
    location: CredentialLocation
    auth_kind: Literal["env", "config-dir", "oauth", "token"]
    env: Mapping[str, Secret] | None
    files: Mapping[str, Secret] | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class McpValue:
    """An MCP connection's material.

    Attributes:
        location: where it was read from.
        auth_kind: ``token`` (``header`` set) or ``oauth``
            (``access_token`` set, sent as a bearer token).
        header: the header to send, for ``token``; else ``None``.
        access_token: the bearer token, for ``oauth``; else ``None``.

    Reference: ``Extract<LeasedValue, {class: "mcp"}>``.
    """

    credential_class: ClassVar[Literal["mcp"]] = "mcp"
    location: CredentialLocation
    auth_kind: Literal["token", "oauth"]
    header: McpHeader | None
    access_token: Secret | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class GithubValue:
    """The owner's GitHub sign-in: a token for Git over HTTPS and the API.

    Reference: ``Extract<LeasedValue, {class: "github"}>``.
    """

    credential_class: ClassVar[Literal["github"]] = "github"
    location: CredentialLocation
    token: Secret


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class SshValue:
    """The owner's SSH private key (OpenSSH or PEM text).

    Reference: ``Extract<LeasedValue, {class: "ssh"}>``.
    """

    credential_class: ClassVar[Literal["ssh"]] = "ssh"
    location: CredentialLocation
    private_key: Secret


#: Any leased credential value, discriminated by ``credential_class``.
LeasedValue: TypeAlias = EngineValue | McpValue | GithubValue | SshValue


def decode_leased_value(raw: object, location: object) -> LeasedValue | DecodeError:
    """Decode and authenticate one decrypted SSM value; explain a refusal.

    Like :func:`parse_leased_value` but a refusal is a
    :class:`~leasegate.core.DecodeError` naming the offending field (``""``
    for the text itself; ``"class"``/``"authKind"`` for an unknown pair).
    Never raises; the error never quotes the value.

    The value decoded from the same text for the same location object is
    returned again, the same instance, as long as something else still holds
    it (values are immutable and the decode is a function of the text and
    the location): the runs that read one credential at one version share
    its value (:data:`_DECODED`).
    """
    if type(raw) is str:
        ref = _DECODED.get(raw)
        if ref is not None:
            known = ref()
            if known is not None and known.location is location:
                return known
    out = _decode(raw, location)
    if type(raw) is str and len(raw) <= _DECODED_MAX_CHARS and not isinstance(out, DecodeError):
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()  # bounded: the values still held are decoded again when read
        _DECODED[raw] = weakref.KeyedRef(out, _forget, raw)
    return out


#: Envelope text → a weak reference to the value decoded from it (the last
#: one), so that every run reading a credential at one version shares one
#: value (its secrets, mappings and header) instead of decoding its own. A
#: value's entry goes when the value does (:func:`_forget`): the text is kept
#: no longer than the value that holds the same secrets. Bounded in entries
#: and in the length of the texts kept.
_DECODED: dict[str, weakref.KeyedRef[str, LeasedValue]] = {}
_DECODED_MAX: Final = 1024
_DECODED_MAX_CHARS: Final = 16384


def _forget(ref: weakref.KeyedRef[str, LeasedValue]) -> None:
    """Drop the entry of a value that is gone (unless a newer one took its key)."""
    key = ref.key
    if _DECODED.get(key) is ref:
        _DECODED.pop(key, None)


def _decode(raw: object, location: object) -> LeasedValue | DecodeError:
    """:func:`decode_leased_value` without its shared values: every call decodes ``raw``."""
    if not isinstance(location, CredentialLocation):
        return DecodeError("", "no credential location")
    if type(raw) is not str:
        return DecodeError("", "expected string")
    try:
        value = loads(raw)
    except JsonError:
        return DecodeError("", "not JSON")
    if type(value) is not dict:
        return DecodeError("", "expected object")
    cls = value.get("class")
    if type(cls) is not str or cls not in CREDENTIAL_CLASSES:
        return DecodeError("class", "missing key" if "class" not in value else "unknown value")
    if cls in ("github", "ssh"):
        route = _ROUTES.get((cls, None)) or _route(cls, None)
    else:
        auth = value.get("authKind")
        route = (_ROUTES.get((cls, auth)) or _route(cls, auth)) if type(auth) is str else None
    if route is None:  # never for github and ssh: one model each, whatever the authKind
        return DecodeError(
            "authKind", "missing key" if "authKind" not in value else "unknown value"
        )
    dec, make = route
    env = dec(value)
    if isinstance(env, DecodeError):
        return env
    if cls != location.credential_class:
        return DecodeError("class", "does not match the parameter")
    if env.org_id != location.org_id:
        return DecodeError("orgId", "does not match the parameter")
    if env.user_id != location.user_id:
        return DecodeError("userId", "does not match the parameter")
    if env.credential_id != location.credential_id:
        return DecodeError("credentialId", "does not match the parameter")
    return make(env, location)


# The leased values are built from decoded envelopes, whose fields are
# already checked: positional constructors, no __init__ (fields in
# declaration order).
_new_engine: Final = constructor(EngineValue)
_new_mcp: Final = constructor(McpValue)
_new_github: Final = constructor(GithubValue)
_new_ssh: Final = constructor(SshValue)

#: Envelope type → its leased value (the envelope's own field is not kept:
#: the mappings are read-only views of the decoded dicts).
_VALUE_OF: Final[dict[type[_Envelope], Callable[[Any, CredentialLocation], LeasedValue]]] = {
    _EngineEnvEnvelope: lambda e, loc: _new_engine(loc, "env", MappingProxyType(e.env), None),
    _EngineFilesEnvelope: lambda e, loc: _new_engine(
        loc, e.auth_kind, None, MappingProxyType(e.files)
    ),
    _McpTokenEnvelope: lambda e, loc: _new_mcp(loc, "token", e.header, None),
    _McpOauthEnvelope: lambda e, loc: _new_mcp(loc, "oauth", None, e.access_token),
    _GithubEnvelope: lambda e, loc: _new_github(loc, e.token),
    _SshEnvelope: lambda e, loc: _new_ssh(loc, e.private_key),
}


#: (class, authKind or None) → the envelope model's ready decoder and its leased
#: value's builder (filled on first use by :func:`_route`).
_ROUTES: dict[
    tuple[str, str | None],
    tuple[Callable[[object], Any], Callable[[Any, CredentialLocation], LeasedValue]],
] = {}


def _route(
    cls: str, auth: str | None
) -> tuple[Callable[[object], Any], Callable[[Any, CredentialLocation], LeasedValue]] | None:
    """The decoder and builder of the envelope model of ``(cls, auth)``, or ``None``."""
    model = _ENVELOPES.get((cls, auth))
    if model is None:
        return None
    route = _ROUTES[(cls, auth)] = (decoder(model), _VALUE_OF[model])
    return route


def parse_leased_value(raw: object, location: object) -> LeasedValue | None:
    """Decode one decrypted SSM credential value and authenticate it.

    Args:
        raw: the parameter's decrypted value text.
        location: the :class:`CredentialLocation` of the parameter it was
            read from (from :func:`parse_parameter_name`).

    Returns:
        The :data:`LeasedValue`, or ``None`` when the text is not JSON, not an
        envelope of exactly the keys of its class and auth kind
        (``docs/protocol.md`` § Credential envelopes), breaks a type or limit,
        or names another class, org, user or credential than ``location``.
        Never raises. Reference: ``parseLeasedValue`` (LR-032).
    """
    out = decode_leased_value(raw, location)
    return None if isinstance(out, DecodeError) else out


def encode_leased_value(value: LeasedValue) -> str:
    """The envelope text of a leased value (canonical JSON; secrets revealed).

    What the cloud writes into the credential's SSM parameter; the exact
    inverse of :func:`parse_leased_value` for ``value.location``.

    Raises:
        TypeError: ``value`` is not a leased value.
    """
    loc = value.location
    base: dict[str, Any] = {
        "v": 1,
        "kind": ENVELOPE_KIND,
        "org_id": loc.org_id,
        "user_id": loc.user_id,
        "credential_id": loc.credential_id,
    }
    env: _Envelope
    if isinstance(value, EngineValue):
        if value.auth_kind == "env":
            env = _EngineEnvEnvelope(
                **base, credential_class="engine", auth_kind="env", env=dict(value.env or {})
            )
        else:
            env = _EngineFilesEnvelope(
                **base,
                credential_class="engine",
                auth_kind=value.auth_kind,
                files=dict(value.files or {}),
            )
    elif isinstance(value, McpValue):
        if value.auth_kind == "token":
            if value.header is None:
                raise TypeError("an MCP token value needs a header")
            env = _McpTokenEnvelope(
                **base, credential_class="mcp", auth_kind="token", header=value.header
            )
        else:
            if value.access_token is None:
                raise TypeError("an MCP oauth value needs an access token")
            env = _McpOauthEnvelope(
                **base, credential_class="mcp", auth_kind="oauth", access_token=value.access_token
            )
    elif isinstance(value, GithubValue):
        env = _GithubEnvelope(**base, credential_class="github", token=value.token)
    elif isinstance(value, SshValue):
        env = _SshEnvelope(**base, credential_class="ssh", private_key=value.private_key)
    else:
        raise TypeError("not a leased value")
    return canonical_dumps(encode(env))


# ---------------------------------------------------------------------------
# Project env parameters (read by the registry for the env replica)


def project_env_staged_parameter(project_id: str, key: str, staging_id: str) -> str | None:
    """The staged project env value parameter, or ``None`` if an input is invalid.

    ``/uai/projects/{project_id}/env-values/{sha256(key) hex}/{staging_id}``,
    read without a version (any version is accepted). ``project_id`` must
    match ``PROJECT_PATH_SEGMENT``, ``key`` ``PROJECT_ENV_KEY`` and
    ``staging_id`` ``PROJECT_ENV_STAGING_ID``. Never raises. Reference:
    ``#readProjectValueFrom`` (LR-145).
    """
    if not (
        _is_project(project_id)
        and _is_key(key)
        and type(staging_id) is str
        and PROJECT_ENV_STAGING_ID_RE.fullmatch(staging_id)
    ):
        return None
    return f"/uai/projects/{project_id}/env-values/{sha256_hex(key)}/{staging_id}"


def project_env_legacy_parameter(project_id: str, key: str) -> str | None:
    """The legacy project env parameter name, or ``None`` if an input is invalid.

    ``/uai/projects/{project_id}/env/{key}``. Never raises. Reference:
    ``#readProjectValueFrom`` (LR-146).
    """
    if not (_is_project(project_id) and _is_key(key)):
        return None
    return f"/uai/projects/{project_id}/env/{key}"


def project_env_legacy_selector(project_id: str, key: str, version: int) -> str | None:
    """The legacy read's selector ``{parameter}:{version}``, or ``None``.

    ``version`` must be a safe integer ≥ 1 (``bool`` refused). Never raises.
    Reference: ``#readProjectValueFrom`` (LR-146).
    """
    name = project_env_legacy_parameter(project_id, key)
    if name is None or type(version) is not int or not 1 <= version <= MAX_SAFE_INTEGER:
        return None
    return f"{name}:{version}"


def _is_project(value: object) -> bool:
    return type(value) is str and PROJECT_PATH_SEGMENT_RE.fullmatch(value) is not None


def _is_key(value: object) -> bool:
    return type(value) is str and PROJECT_ENV_KEY_RE.fullmatch(value) is not None
