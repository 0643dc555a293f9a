"""``secret-in-error``: no error or log text carries a secret seen so far."""

from __future__ import annotations

import dataclasses
import json
from typing import Final

from ..._secret import Secret
from ...registry import CallDone, ReportError
from ...runtime import Abort, Answer, ConsumerWork, CredentialFailure, Failed, Log, SendAck
from .._mirror import Mirror
from .._stream import Emitted, Fed, Returned
from ._base import Checker, Flag

__all__ = ["MAX_SECRETS", "MIN_SECRET_CHARS", "SecretInError"]

#: Secrets shorter than this are not searched for in error texts (a one- or
#: two-character "secret" would match ordinary words; real ones are long).
MIN_SECRET_CHARS: Final = 6
#: At most this many distinct secret texts are remembered (oldest dropped).
MAX_SECRETS: Final = 50_000

#: JSON keys whose string values are secrets (frames and parameter envelopes).
_SECRET_KEYS: Final = frozenset(
    {
        "secretAccessKey",
        "sessionToken",
        "value",
        "token",
        "accessToken",
        "privateKey",
        "raw",
        "material",
    }
)
#: JSON keys whose object values map names to secrets (engine env and files).
_SECRET_MAPS: Final = frozenset({"env", "files"})
_WALK_DEPTH: Final = 12


class SecretInError(Checker):
    """Property ``secret-in-error`` (``docs/monitor.md``, its section).

    No error or log text carries a secret seen so far: errors are new plain
    errors with fixed texts (LR-157), and no secret reaches a log.

    Secrets are learnt from the step's event and every command before the
    step's texts are judged (at its end): every ``Secret`` anywhere, the
    strings under the secret JSON keys of frames and envelopes (and inside a
    secret that is itself a JSON envelope). Texts: ``Log`` and
    ``ReportError`` messages, ``CallDone.error``, every
    ``CredentialFailure.message`` (with its causes) in ``Failed``, ``Abort``,
    ``Answer`` and consumer requests, and the ``error``/``code`` of
    ``SendAck`` frames; a ``Log`` without the runtime's ``[credentials] task
    <id> run <n>: `` prefix of a task the mirror saw begin. Secrets shorter
    than :data:`MIN_SECRET_CHARS` are not searched; at most
    :data:`MAX_SECRETS` are remembered (oldest dropped), as plain text in
    memory only (never in a repr or a violation).
    """

    PROPERTY = "secret-in-error"

    def __init__(self, mirror: Mirror, flag: Flag) -> None:
        super().__init__(mirror, flag)
        self._secrets: dict[str, None] = {}
        self._seen: set[int] = set()
        self._cmds: list[object] = []
        # type -> its dataclass field names (``()`` for any other type)
        self._fields: dict[type, tuple[str, ...]] = {}

    def fed(self, item: Fed) -> None:
        """Learn the event's secrets."""
        self._seen = set()
        self._cmds = []
        self._walk(item.event, 0)

    def emitted(self, item: Emitted) -> None:
        """Learn a command's secrets; its texts are judged at the step's end."""
        self._walk(item.command, 0)
        self._cmds.append(item.command)

    def returned(self, item: Returned) -> None:
        """Judge the step's texts against every secret learnt so far."""
        cmds, self._cmds, self._seen = self._cmds, [], set()
        if not self._secrets:
            return
        for cmd in cmds:
            for text in _texts(cmd):
                if isinstance(cmd, Log):
                    text = self._without_prefix(text)
                if any(s in text for s in self._secrets):
                    self.flag(
                        item.step,
                        None,
                        None,
                        f"a {type(cmd).__name__} command's text contains a secret value",
                    )
                    break

    # -- learning
    def _remember(self, text: str) -> None:
        if len(text) < MIN_SECRET_CHARS or text in self._secrets:
            return
        self._secrets[text] = None
        if len(self._secrets) > MAX_SECRETS:
            del self._secrets[next(iter(self._secrets))]
        if text[:1] in "{[":
            try:
                parsed = json.loads(text)
            except (ValueError, RecursionError):
                return
            self._json_secrets(parsed, None, 0)

    def _json_secrets(self, value: object, key: str | None, depth: int) -> None:
        if depth > _WALK_DEPTH:
            return
        if isinstance(value, str):
            if key in _SECRET_KEYS:
                self._remember(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                if k in _SECRET_MAPS and isinstance(v, dict):
                    for inner in v.values():
                        if isinstance(inner, str):
                            self._remember(inner)
                self._json_secrets(v, k if isinstance(k, str) else None, depth + 1)
        elif isinstance(value, list):
            for v in value:
                self._json_secrets(v, key, depth + 1)

    def _walk(self, value: object, depth: int) -> None:
        """Learn every secret in ``value`` (objects seen earlier in the step are skipped)."""
        if depth > _WALK_DEPTH or isinstance(value, (int, float, bool, type(None))):
            return
        if isinstance(value, Secret):
            self._remember(value.reveal())
            return
        if isinstance(value, str):
            return
        if id(value) in self._seen:
            return
        self._seen.add(id(value))
        if isinstance(value, dict):
            self._json_secrets(value, None, 0)
            for v in value.values():
                self._walk(v, depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                self._walk(v, depth + 1)
        elif not isinstance(value, type):
            names = self._fields.get(type(value))
            if names is None:
                names = self._fields[type(value)] = _field_names(value)
            for name in names:
                self._walk(getattr(value, name, None), depth + 1)

    def _without_prefix(self, text: str) -> str:
        """A log text without the runtime's ``[credentials] task <id> run <n>: ``
        prefix of a task the mirror saw begin (the runtime builds it from the
        assignment, never from a secret; a secret equal to a task id would
        otherwise be "found" in every log of that task)."""
        head = "[credentials] task "
        if not text.startswith(head):
            return text
        for task in self.mirror.newest:
            lead = f"{head}{task} run "
            if text.startswith(lead):
                rest = text[len(lead) :]
                digits = len(rest) - len(rest.lstrip("0123456789"))
                if digits and rest[digits : digits + 2] == ": ":
                    return rest[digits + 2 :]
        return text


def _field_names(value: object) -> tuple[str, ...]:
    """The field names of a dataclass instance, in order; ``()`` for anything else."""
    if not dataclasses.is_dataclass(value):
        return ()
    return tuple(f.name for f in dataclasses.fields(value))


def _texts(cmd: object) -> list[str]:
    """The error and log texts a command carries."""
    out: list[str] = []

    def failure(f: object, depth: int) -> None:
        if not isinstance(f, CredentialFailure) or depth > _WALK_DEPTH:
            return
        if isinstance(f.message, str):
            out.append(f.message)
        causes = f.causes if isinstance(f.causes, tuple) else ()
        for c in causes:
            failure(c, depth + 1)

    if isinstance(cmd, (Log, ReportError)):
        if isinstance(cmd.message, str):
            out.append(cmd.message)
    elif isinstance(cmd, CallDone):
        if isinstance(cmd.error, str):
            out.append(cmd.error)
    elif isinstance(cmd, Failed):
        failure(cmd.error, 0)
    elif isinstance(cmd, Abort):
        failure(cmd.reason, 0)
    elif isinstance(cmd, Answer):
        failure(cmd.value, 0)
    elif isinstance(cmd, SendAck):
        frame = cmd.frame
        for name in ("error", "code"):
            v = frame.get(name) if isinstance(frame, dict) else getattr(frame, name, None)
            if isinstance(v, str):
                out.append(v)
    elif isinstance(cmd, ConsumerWork):
        failure(getattr(cmd.request, "error", None), 0)
    return out
