"""JSON-safe snapshots of user values, with secrets redacted.

Everything the tree records (payloads, state snapshots, errors) passes through
`jsonable`, so a tree always serializes and never holds a secret.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import re
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr

REDACTED = "**********"
# Keys whose values are credentials whatever they hold: redacted by `redact`.
# "token" alone is a credential; "input_tokens" or "max_tokens" are counts.
SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|token(?!s|_count|izer)|password|passwd|authorization|credential"
    r"|private[_-]?key|cookie|session[_-]?id)",
    re.IGNORECASE,
)
MAX_STRING = 10_000
MAX_ITEMS = 1_000
MAX_DEPTH = 32

_secrets: tuple[str, ...] = ()
_secrets_lock = threading.Lock()


def register_secret(value: str) -> None:
    """Scrub ``value`` from every string the tree records from now on (API keys, env values)."""
    # Very short values would redact ordinary words; they are not secrets worth hiding.
    global _secrets
    if isinstance(value, str) and len(value) >= 6 and value not in _secrets:
        with _secrets_lock:
            # Longest first, so a secret containing another is replaced whole.
            _secrets = tuple(sorted({*_secrets, value}, key=len, reverse=True))


def scrub(text: str) -> str:
    """Replace every registered secret inside ``text`` with the redaction marker.

    Unlike `redact`, it leaves text of any length whole and touches nothing
    else; ``scrub(text) != text`` tells whether ``text`` holds a registered secret.
    """
    for secret in _secrets:  # an immutable tuple: safe to read while another thread adds
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def is_secret_key(name: str) -> bool:
    """Whether a key or attribute name looks like it holds a credential (``api_key``, ``*token``)."""
    return SECRET_KEY.search(name) is not None


def redact(value: Any) -> Any:
    """A JSON-safe copy of ``value`` with secrets removed, for anything leaving the process.

    Registered secrets (API keys, ``env`` values, `register_secret`) are
    replaced inside every string, and the value under any secret-looking key
    (``api_key``, ``password``, ``authorization``, ``*token*``...) is replaced
    whole. Use it before sending tree data to spans, logs or stores.
    """
    return _redact_keys(jsonable(value))


def _redact_keys(value: Any) -> Any:
    # jsonable() already bounded depth and size, so this walk is bounded too.
    if isinstance(value, dict):
        return {k: REDACTED if SECRET_KEY.search(k) else _redact_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_keys(v) for v in value]
    return value


def _truncate(text: str) -> str:
    if len(text) <= MAX_STRING:
        for secret in _secrets:
            if secret in text:
                return scrub(text)
        return text
    text = scrub(text)
    if len(text) > MAX_STRING:
        return f"{text[:MAX_STRING]}…[truncated {len(text) - MAX_STRING} chars]"
    return text


def jsonable(value: Any, _depth: int = 0) -> Any:
    """Return a JSON-safe copy of ``value``: secrets redacted, long strings truncated.

    Pydantic models and dataclasses become dicts, sets become sorted lists, bytes
    become base64, datetimes ISO 8601 strings; objects with a ``__gs_jsonable__()``
    method give their own summary; anything else becomes its ``repr``. Never
    raises: a value that cannot even be printed becomes ``"<unprintable T>"``.
    """
    try:
        return _jsonable(value, _depth)
    except Exception:
        return f"<unprintable {type(value).__qualname__}>"


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__qualname__}>"


def _jsonable(value: Any, _depth: int = 0) -> Any:
    # Exact-type fast paths first: most recorded values are plain str/int/dict/list.
    kind = type(value)
    if kind is str:
        return _truncate(value)
    if kind is int or kind is bool or value is None:
        return value
    if kind is dict and _depth < MAX_DEPTH and len(value) <= MAX_ITEMS:
        out: dict[str, Any] = {}
        for k, v in value.items():
            vkind = type(v)
            # Inline the common leaves: this runs for every payload of every node.
            if vkind is str:
                v = _truncate(v)
            elif not (vkind is int or vkind is bool or v is None):
                v = jsonable(v, _depth + 1)
            out[_truncate(k) if type(k) is str else str(jsonable(k, _depth + 1))] = v
        return out
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        # JSON has no NaN/Infinity; keep the value readable instead of failing.
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
        )
    if isinstance(value, str):
        return _truncate(value)
    if isinstance(value, SecretStr | SecretBytes):
        return REDACTED
    if _depth >= MAX_DEPTH:
        return "…[too deep]"
    if isinstance(value, enum.Enum):
        return jsonable(value.value, _depth + 1)
    if isinstance(value, Mapping):
        out = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= MAX_ITEMS:
                out["…"] = f"[{len(value) - MAX_ITEMS} more items]"
                break
            out[_truncate(k) if isinstance(k, str) else str(jsonable(k, _depth + 1))] = jsonable(
                v, _depth + 1
            )
        return out
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        if isinstance(value, set | frozenset):
            items.sort(key=repr)
        result = [jsonable(v, _depth + 1) for v in items[:MAX_ITEMS]]
        if len(items) > MAX_ITEMS:
            result.append(f"…[{len(items) - MAX_ITEMS} more items]")
        return result
    if isinstance(value, BaseModel):
        # JSON mode already masks SecretStr/SecretBytes; the walk then scrubs and truncates.
        return jsonable(value.model_dump(mode="json"), _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(
            {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, _depth + 1
        )
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value[:MAX_STRING])).decode("ascii")
    if isinstance(value, BaseException):
        return error_record(value)
    summary = getattr(value, "__gs_jsonable__", None)
    if callable(summary):
        return jsonable(summary(), _depth + 1)
    return _truncate(repr(value))


def error_record(exc: BaseException) -> dict[str, Any]:
    """The JSON-safe record of an exception kept on a failed node (never raises)."""
    return {"type": type(exc).__qualname__, "message": _truncate(_safe_str(exc))}
