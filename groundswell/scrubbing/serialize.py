"""JSON-safe snapshots of user values, with registered secrets redacted.

Everything the tree records (payloads, state snapshots, errors) passes through
`jsonable`, so a tree always serializes and never holds a registered secret
or a ``SecretStr``; base64 content sources (images, PDFs) are recorded as
their media type and size. What leaves the process goes through the whole scrubber
(``_scrub``): `redact` here, or `scrub_json` on the tree's own JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr

from .scrubber import (
    REDACTED,
    is_secret_key,
    register_secret,
    replace_registered,
    scrub,
    scrub_json,
)

MAX_STRING = 10_000
MAX_ITEMS = 1_000
MAX_DEPTH = 32
_INF = float("inf")

__all__ = [
    "error_record",
    "is_secret_key",
    "jsonable",
    "jsonable_text",
    "redact",
    "register_secret",
    "scrub",
]


def redact(value: Any) -> Any:
    """A JSON-safe copy of ``value`` with every secret removed, for anything leaving the process.

    Values JSON has no form for go through `jsonable` (models, dataclasses,
    ``SecretStr``...); everything then goes through the one scrubber every
    output uses: registered secrets, secret environment
    values, credential shapes and ``name=value`` secrets inside every string
    (`scrub`), and the whole value under any secret-named key
    (`is_secret_key`: ``api_key``, ``password``, ``authorization``,
    ``*_TOKEN``...). Numbers stay numbers; ``token_usage`` or ``session_id``
    are not secret names.
    """
    return scrub_json(value, convert=jsonable)


def jsonable_text(text: str) -> str:
    """`jsonable` of a string: registered secrets redacted, truncated; without the dispatch."""
    # Only the registered secrets here: this runs for every string of every
    # payload. The outputs run the whole scrubber (`redact`, `scrub_json`).
    text = replace_registered(text)
    if len(text) <= MAX_STRING:
        return text
    return f"{text[:MAX_STRING]}…[truncated {len(text) - MAX_STRING} chars]"


_truncate = jsonable_text


def jsonable(value: Any, _depth: int = 0) -> Any:
    """Return a JSON-safe copy of ``value``: registered secrets redacted, long strings truncated.

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
        if value.get("type") == "base64" and value.get("data").__class__ is str:
            return _base64_record(value)  # an image or PDF source: its size, not its bytes
        out: dict[str, Any] = {}
        for k, v in value.items():
            vkind = type(v)
            # Inline the common leaves: this runs for every payload of every node.
            if vkind is str:
                v = _truncate(v)
            elif vkind is float:
                # JSON has no NaN/Infinity (a NaN fails both comparisons).
                v = v if -_INF < v < _INF else repr(v)
            elif not (vkind is int or vkind is bool or v is None):
                v = jsonable(v, _depth + 1)
            out[_truncate(k) if type(k) is str else str(jsonable(k, _depth + 1))] = v
        return out
    if kind is list and _depth < MAX_DEPTH and len(value) <= MAX_ITEMS:
        # e.g. a model turn's content blocks: skips the isinstance chain below.
        return [jsonable(v, _depth + 1) for v in value]
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        # JSON has no NaN/Infinity; keep the value readable instead of failing.
        # (Equality, not order: a float subclass may define only that.)
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


def _base64_record(source: dict[str, Any]) -> dict[str, Any]:
    """A base64 content source (``{"type": "base64", "media_type", "data"}``) as recorded:
    its data replaced by a note of its media type and size (a tree is no place for images)."""
    data: str = source["data"]
    media = source.get("media_type")
    size = len(data) * 3 // 4 - data.endswith("=") - data.endswith("==")
    record = {k: jsonable(v) for k, v in source.items() if k != "data"}
    record["data"] = f"[{size:,} bytes of {media or 'data'}, not recorded]"
    return record


def error_record(exc: BaseException) -> dict[str, Any]:
    """The JSON-safe record of an exception kept on a failed node (never raises)."""
    return {"type": type(exc).__qualname__, "message": _truncate(_safe_str(exc))}
