"""Credential parameter names, locations and leased value envelopes."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from lease_kit import envelope_header

from leasegate.core import DecodeError, Secret, canonical_dumps
from leasegate.core.wire.credentials import (
    CredentialLocation,
    EngineValue,
    GithubValue,
    McpHeader,
    McpValue,
    SshValue,
    credential_parameter_name,
    decode_leased_value,
    encode_leased_value,
    parse_leased_value,
    parse_parameter_name,
    project_env_legacy_parameter,
    project_env_legacy_selector,
    project_env_staged_parameter,
)

ORG, USER = "org-1", "user-1"


def loc(cls: Any = "engine", cid: str = "cred-1", user: str | None = USER) -> CredentialLocation:
    return CredentialLocation(org_id=ORG, user_id=user, credential_class=cls, credential_id=cid)


def L(org: str, user: str | None, cls: Any, cid: str) -> CredentialLocation:
    return CredentialLocation(org_id=org, user_id=user, credential_class=cls, credential_id=cid)


def envelope(cls: str = "engine", **fields: Any) -> dict[str, Any]:
    """A valid envelope dict for ``loc(cls)``; ``fields`` override/add keys."""
    base = envelope_header(cls)
    if cls == "engine":
        base |= {"authKind": "env", "env": {"API_KEY": "CANARY-env", "OTHER": "x\ny"}}
    elif cls == "mcp":
        base |= {"authKind": "token", "header": {"name": "Authorization", "value": "CANARY-h"}}
    elif cls == "github":
        base |= {"token": "CANARY-gh"}
    elif cls == "ssh":
        base |= {"privateKey": "-----BEGIN KEY-----\nCANARY\n-----END KEY-----\n"}
    base |= fields
    return base


def text(value: dict[str, Any]) -> str:
    return json.dumps(value)


# ---------------------------------------------------------------------------
# Parameter names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("/uai/orgs/o/credentials/engine/c", L("o", None, "engine", "c")),
        ("/uai/orgs/o/credentials/mcp/c.1", L("o", None, "mcp", "c.1")),
        (
            "/uai/orgs/o-1/users/u_2/credentials/engine/c",
            L("o-1", "u_2", "engine", "c"),
        ),
        (
            "/uai/orgs/o/users/u/credentials/github/gh",
            L("o", "u", "github", "gh"),
        ),
        (
            "/uai/orgs/o/users/u/credentials/ssh/key",
            L("o", "u", "ssh", "key"),
        ),
    ],
)
def test_LR_028_parameter_names_parse_into_locations(
    name: str, expected: CredentialLocation
) -> None:
    got = parse_parameter_name(name)
    assert got == expected
    assert got is not None
    assert got.parameter == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/uai/orgs/o/credentials/github/gh",  # a person's class without a person
        "/uai/orgs/o/credentials/ssh/k",
        "/uai/orgs/o/credentials/engine/c:3",  # a version suffix
        "/uai/orgs/o/credentials/engine/c\n",  # trailing newline ($ is end of input)
        "/uai/orgs/o/credentials/engine/c/",
        "/uai/orgs/../credentials/engine/c",
        "/uai/orgs/o/credentials/engine/.",
        "/uai/orgs/o/credentials/engine/..",
        "/uai/orgs/o/credentials/password/c",
        "/uai/orgs/o/credentials/engine/",
        "/uai/orgs//credentials/engine/c",
        "uai/orgs/o/credentials/engine/c",
        "/uai/projects/p/env/KEY",
        "/uai/orgs/o/users/u/credentials/engine/c/extra",
        "/uai/orgs/o/credentials/engine/" + "c" * 129,
        "/uai/orgs/o/credentials/engine/c é",
        "/uai/orgs/o/credentials/engine/" + "c" * 5000,
    ],
)
def test_LR_028_parse_parameter_name_refuses_other_names(name: str) -> None:
    assert parse_parameter_name(name) is None


@pytest.mark.parametrize("bad", [None, 3, b"/uai/orgs/o/credentials/engine/c", ["x"], True])
def test_LR_028_parse_parameter_name_never_raises_for_non_strings(bad: Any) -> None:
    assert parse_parameter_name(bad) is None


def test_LR_028_parse_parameter_name_shares_one_location_per_name_and_answers_alike() -> None:
    from leasegate.core.wire import credentials as mod

    name = "/uai/orgs/o-share/users/u/credentials/engine/c1"
    mod._LOCATIONS.clear()
    first = parse_parameter_name(name)
    again = parse_parameter_name(name)
    assert first is not None
    assert again is first
    mod._LOCATIONS.clear()
    fresh = parse_parameter_name(name)
    assert fresh == first
    assert fresh is not first
    # A refused name is never remembered; a str subclass is refused as before.
    assert parse_parameter_name("/uai/orgs/o/credentials/github/gh") is None
    assert "/uai/orgs/o/credentials/github/gh" not in mod._LOCATIONS

    class _Name(str):
        __slots__ = ()

    assert parse_parameter_name(_Name(name)) is None


def test_LR_028_parse_parameter_name_memo_stays_bounded() -> None:
    from leasegate.core.wire import credentials as mod

    mod._LOCATIONS.clear()
    for i in range(mod._LOCATIONS_MAX + 10):
        got = parse_parameter_name(f"/uai/orgs/o/credentials/engine/c{i}")
        assert got is not None
        assert got.credential_id == f"c{i}"
    assert len(mod._LOCATIONS) <= mod._LOCATIONS_MAX


def test_LR_028_credential_parameter_name_builds_and_refuses() -> None:
    assert (
        credential_parameter_name("o", "u", "ssh", "k") == "/uai/orgs/o/users/u/credentials/ssh/k"
    )
    assert credential_parameter_name("o", None, "mcp", "m") == "/uai/orgs/o/credentials/mcp/m"
    for args in [("o", None, "github", "g"), ("o/x", "u", "engine", "c"), ("o", "u", "x", "c")]:
        with pytest.raises(ValueError, match="not a valid credential location") as info:
            credential_parameter_name(*args)  # type: ignore[arg-type]
        assert "o/x" not in str(info.value)


# ---------------------------------------------------------------------------
# Envelopes round-trip


ROUND_TRIPS: list[tuple[str, dict[str, Any], type]] = [
    ("engine", envelope("engine"), EngineValue),
    (
        "engine",
        envelope(
            "engine",
            authKind="config-dir",
            env=None,
            files={"settings.json": "{}", "auth/.token": "CANARY-file"},
        ),
        EngineValue,
    ),
    (
        "engine",
        envelope("engine", authKind="oauth", env=None, files={"creds": "CANARY"}),
        EngineValue,
    ),
    ("engine", envelope("engine", authKind="token", env=None, files={"t": "CANARY"}), EngineValue),
    ("mcp", envelope("mcp"), McpValue),
    ("mcp", envelope("mcp", authKind="oauth", accessToken="CANARY-at"), McpValue),
    ("github", envelope("github"), GithubValue),
    ("ssh", envelope("ssh"), SshValue),
]


def _clean(value: dict[str, Any]) -> dict[str, Any]:
    # The builder leaves the other variant's key as None; drop such keys.
    out = {k: v for k, v in value.items() if v is not None or k == "userId"}
    if out.get("authKind") == "oauth" and out["class"] == "mcp":
        out.pop("header", None)
    return out


@pytest.mark.parametrize(("cls", "raw", "value_type"), ROUND_TRIPS)
def test_LR_032_each_envelope_round_trips(cls: str, raw: dict[str, Any], value_type: type) -> None:
    raw = _clean(raw)
    location = loc(cls)
    value = parse_leased_value(text(raw), location)
    assert type(value) is value_type
    assert value is not None
    assert value.location == location
    assert value.credential_class == cls
    encoded = encode_leased_value(value)
    assert json.loads(encoded) == raw
    assert encoded == canonical_dumps(raw)
    assert parse_leased_value(encoded, location) == value


def test_LR_032_engine_env_material() -> None:
    value = parse_leased_value(text(envelope()), loc())
    assert isinstance(value, EngineValue)
    assert value.auth_kind == "env"
    assert value.files is None
    assert value.env is not None
    assert dict(value.env) == {"API_KEY": Secret("CANARY-env"), "OTHER": Secret("x\ny")}
    with pytest.raises(TypeError):
        value.env["NEW"] = Secret("x")  # type: ignore[index]


def test_LR_032_mcp_token_material_is_one_header() -> None:
    value = parse_leased_value(text(envelope("mcp")), loc("mcp"))
    assert isinstance(value, McpValue)
    assert value.header == McpHeader(name="Authorization", value=Secret("CANARY-h"))
    assert value.access_token is None


def test_LR_032_org_wide_location_round_trips() -> None:
    raw = envelope("mcp", userId=None)
    value = parse_leased_value(text(raw), loc("mcp", user=None))
    assert isinstance(value, McpValue)
    assert json.loads(encode_leased_value(value)) == raw


# ---------------------------------------------------------------------------
# Authentication against the location


@pytest.mark.parametrize(
    ("field", "location"),
    [
        ("class", loc("mcp")),
        ("orgId", L("org-2", USER, "engine", "cred-1")),
        ("userId", loc(user="user-2")),
        ("userId", loc(user=None)),
        ("credentialId", loc(cid="cred-2")),
    ],
)
def test_LR_032_envelope_must_match_the_parameter_it_was_read_from(
    field: str, location: CredentialLocation
) -> None:
    raw = text(envelope())
    assert parse_leased_value(raw, location) is None
    err = decode_leased_value(raw, location)
    assert isinstance(err, DecodeError)
    assert (err.field, err.reason) == (field, "does not match the parameter")


# ---------------------------------------------------------------------------
# Strictness


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("not json", ""),
        ('{"v": NaN}', ""),
        ("[1]", ""),
        ("null", ""),
        (text(envelope() | {"extra": 1}), "extra"),
        (text({k: v for k, v in envelope().items() if k != "orgId"}), "orgId"),
        (text({k: v for k, v in envelope().items() if k != "class"}), "class"),
        (text({k: v for k, v in envelope().items() if k != "authKind"}), "authKind"),
        (text(envelope(v=True)), "v"),
        (text(envelope(v="1")), "v"),
        (text(envelope(v=2)), "v"),
        (text(envelope(v=1.0)), "v"),
        (text(envelope(kind="project-env")), "kind"),
        (text(envelope(**{"class": "password"})), "class"),
        (text(envelope(authKind="none")), "authKind"),
        (text(envelope(authKind="config-dir")), "env"),  # files expected, env given
        (text(envelope(env={})), "env"),
        (text(envelope(env={"1BAD": "x"})), "env"),
        (text(envelope(env={"A": 1})), "env.A"),
        (text(envelope(env={"A": "nul\x00"})), "env.A"),
        (text(envelope(authKind="token", env=None, files={"../x": "y"})), "env"),
        (text(envelope("mcp", header={"name": "Bad Name", "value": "v"})), "header.name"),
        (text(envelope("mcp", header={"name": "X", "value": "a\r\nInjected: 1"})), "header.value"),
        (text(envelope("mcp", header={"name": "X", "value": ""})), "header.value"),
        (text(envelope("mcp", authKind="env", env={"A": "b"})), "authKind"),
        (text(envelope("github", token="tok\nen")), "token"),
        (text(envelope("github", token="")), "token"),
        (text(envelope("github", authKind="token")), "authKind"),
        (text(envelope("ssh", privateKey="")), "privateKey"),
        (text(envelope(orgId="../o")), "orgId"),
    ],
)
def test_LR_032_envelope_strictness(raw: str, field: str) -> None:
    cls = json.loads(raw).get("class", "engine") if raw.startswith("{") else "engine"
    location = loc(cls if cls in ("engine", "mcp", "github", "ssh") else "engine")
    assert parse_leased_value(raw, location) is None
    err = decode_leased_value(raw, location)
    assert isinstance(err, DecodeError)
    assert err.field == field
    assert "CANARY" not in str(err)


@pytest.mark.parametrize(
    "path",
    ["../x", "./x", "/abs", "a//b", "a/", "a/../b", "..", ".", "sp ace", "a\\b"],
)
def test_LR_032_engine_file_paths_stay_inside_their_directory(path: str) -> None:
    raw = text(_clean(envelope(authKind="config-dir", env=None, files={path: "x"})))
    err = decode_leased_value(raw, loc())
    assert isinstance(err, DecodeError)
    assert err.field == "files"


def test_LR_032_engine_file_paths_may_be_nested_and_dotted() -> None:
    files = {".config/tool/auth.json": "CANARY", "a/b/c": "d", "..hidden": "e"}
    raw = text(_clean(envelope(authKind="config-dir", env=None, files=files)))
    value = parse_leased_value(raw, loc())
    assert isinstance(value, EngineValue)
    assert value.files is not None
    assert set(value.files) == set(files)


@pytest.mark.parametrize("raw", [None, 5, b"{}", ["x"]])
def test_LR_032_parse_leased_value_never_raises_for_non_text(raw: Any) -> None:
    assert parse_leased_value(raw, loc()) is None


def test_LR_032_parse_leased_value_needs_a_location() -> None:
    assert parse_leased_value(text(envelope()), None) is None
    assert parse_leased_value(text(envelope()), {"orgId": ORG}) is None


def test_LR_032_duplicate_keys_keep_the_last_value_as_json_parse_does() -> None:
    raw = text(envelope()).replace('"v": 1', '"v": 2, "v": 1', 1)
    assert parse_leased_value(raw, loc()) is not None
    raw = text(envelope()).replace('"v": 1', '"v": 1, "v": 2', 1)
    assert parse_leased_value(raw, loc()) is None


def test_LR_158_values_and_errors_never_show_secrets() -> None:
    for cls, raw, _t in ROUND_TRIPS:
        value = parse_leased_value(text(_clean(raw)), loc(cls))
        assert value is not None
        assert "CANARY" not in repr(value)
        assert "CANARY" not in str(value)
    bad = envelope(env={"A": "CANARY\x00"}, extra="CANARY")
    err = decode_leased_value(text(bad), loc())
    assert isinstance(err, DecodeError)
    assert "CANARY" not in str(err)
    assert "CANARY" not in repr(err)


# ---------------------------------------------------------------------------
# Project env parameters


def test_LR_145_staged_project_env_parameter() -> None:
    sid = "0123abcd-0000-4000-8000-00000000beef"
    key_digest = hashlib.sha256(b"API_KEY").hexdigest()
    assert (
        project_env_staged_parameter("proj.1", "API_KEY", sid)
        == f"/uai/projects/proj.1/env-values/{key_digest}/{sid}"
    )
    assert project_env_staged_parameter("proj.1", "API_KEY", sid.upper()) is None
    assert project_env_staged_parameter("proj.1", "API_KEY", sid + "\n") is None
    assert project_env_staged_parameter("proj/1", "API_KEY", sid) is None
    assert project_env_staged_parameter("proj", "1KEY", sid) is None


def test_LR_146_legacy_project_env_parameter_and_selector() -> None:
    assert project_env_legacy_parameter("p", "KEY_1") == "/uai/projects/p/env/KEY_1"
    assert project_env_legacy_selector("p", "KEY_1", 7) == "/uai/projects/p/env/KEY_1:7"
    assert project_env_legacy_parameter("p", "KEY-1") is None
    assert project_env_legacy_parameter("", "K") is None
    for bad in (0, -1, True, 2**53, 1.0, "7"):
        assert project_env_legacy_selector("p", "K", bad) is None  # type: ignore[arg-type]
    assert project_env_legacy_selector("p", "K", 2**53 - 1) == f"/uai/projects/p/env/K:{2**53 - 1}"
