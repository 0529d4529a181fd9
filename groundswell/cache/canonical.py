"""Canonical JSON: one text for equal values, whatever their key order or container type.

Used wherever determinism matters: rendering a prompt's ``data`` into the user
turn (`canonical_json`), and cache keys (`canonical_bytes`, the same values
encoded by orjson: what is hashed need not be readable, only fast and the same
in every process). Canonical forms of non-JSON values:

=====================  ==================================================
value                  canonical form
=====================  ==================================================
dict / Mapping         object with keys sorted (keys made strings)
tuple, list            array
set, frozenset         array sorted by each item's canonical text
datetime, date, time   ISO 8601 string (``datetime.isoformat()``)
Decimal                string (``str(d)``), so precision is kept
UUID                   string (canonical hex with hyphens)
bytes, bytearray       ``{"$bytes": "<base64>"}``
Enum                   its ``value`` in canonical form
pydantic model         ``model_dump(mode="json")``
dataclass              object of its fields
float NaN / ±inf       the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
=====================  ==================================================

Anything else is a ``TypeError`` naming the type and where it was found; a
container that contains itself is a ``TypeError`` too.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import BaseModel

__all__ = ["canonical_bytes", "canonical_json", "canonicalize"]

# Whatever orjson would encode in a form of its own (datetimes, dataclasses,
# subclasses of str, int, dict and list) goes to `default` instead, which refuses
# it, so that only the canonical conversion below decides those forms.
_PLAIN = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def canonicalize(value: Any) -> Any:
    """Return ``value`` converted to plain JSON data in its canonical form."""
    return _canon(value, "$", set())


def canonical_json(value: Any, *, indent: int | None = None) -> str:
    """The canonical JSON text of ``value``: sorted keys, no insignificant whitespace."""
    separators = (",", ":") if indent is None else (",", ": ")
    try:
        # Plain JSON data (the usual case) needs no conversion: json.dumps gives the
        # same text several times faster. It refuses everything else (other types,
        # mixed key types, NaN, cycles), and the full conversion below handles that.
        return json.dumps(
            value, sort_keys=True, ensure_ascii=False, separators=separators, indent=indent,
            allow_nan=False, default=_refuse,
        )  # fmt: skip
    except (TypeError, ValueError):
        pass
    return json.dumps(
        canonicalize(value),
        sort_keys=True,
        ensure_ascii=False,
        separators=separators,
        indent=indent,
        allow_nan=False,
    )


def canonical_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON of ``value``'s canonical form, by orjson: what cache keys hash.

    Equal values give equal bytes in every process and on every machine (no
    choice depends on what is installed): plain JSON data (the usual case) is
    encoded as it is, anything else is converted by `canonicalize` first, and
    only what orjson cannot encode at all (ints wider than 64 bits, nesting
    deeper than 254 levels) is encoded by the standard library. Its text differs
    from `canonical_json`'s (floats such as ``1e-07`` are written ``1e-7``), so
    the two are never mixed in one key. Refuses what `canonical_json` refuses.
    """
    try:
        encoded = orjson.dumps(value, option=_PLAIN, default=_refuse)
    except TypeError:  # orjson.JSONEncodeError: not plain JSON data
        pass
    else:
        # orjson writes NaN and infinities as null, where the canonical form is a
        # string; so a null needs the full conversion to tell which it was.
        if b"null" not in encoded:
            return encoded
    canon = canonicalize(value)
    try:
        return orjson.dumps(canon, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # No plain data orjson encodes gives this text (its ints and depth are out
        # of orjson's range), so the two encoders never give one key to two values.
        # Lone surrogates end here too, and fail to encode as they always have.
        text = json.dumps(
            canon, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
        return text.encode()


def _refuse(value: Any) -> Any:
    raise TypeError("not plain JSON")


def _canon(value: Any, where: str, seen: set[int]) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        # A subclass (numpy.float64, say) as the plain float it equals: orjson
        # encodes only plain floats, and the key must not depend on the class.
        return value if value.__class__ is float else float(value)
    if isinstance(value, enum.Enum):
        return _canon(value.value, where, seen)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, BaseModel):
        try:
            dumped = value.model_dump(mode="json")
        except ValueError as exc:  # pydantic's own cycle detection
            raise TypeError(f"cannot dump the {type(value).__name__} at {where}: {exc}") from exc
        return _canon(dumped, where, seen)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _nested(value, fields, where, seen)
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return _nested(value, value, where, seen)
    raise TypeError(
        f"cannot make a canonical JSON form of {type(value).__name__} at {where}; "
        "convert it to JSON data (dict, list, str, number, bool, None) first"
    )


def _key(key: Any, where: str, seen: set[int]) -> str:
    """A mapping key as JSON text: strings as they are, others by their canonical form."""
    if isinstance(key, str):
        # An exact str: the same text in JSON, and orjson takes no subclass as a key.
        return key if type(key) is str else str.__str__(key)
    canon = _canon(key, where, seen)
    # Dates, UUIDs, enums of strings...: their string form, not a quoted JSON string.
    return canon if isinstance(canon, str) else json.dumps(canon, sort_keys=True)


def _nested(owner: Any, value: Any, where: str, seen: set[int]) -> Any:
    marker = id(owner)
    if marker in seen:
        raise TypeError(f"circular reference at {where}: a container contains itself")
    seen.add(marker)
    try:
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for k, v in value.items():
                key = _key(k, where, seen)
                if key in out:
                    # {1: ..., "1": ...} would otherwise keep whichever came last.
                    raise TypeError(
                        f"keys at {where} collide: two keys both become {key!r} in JSON"
                    )
                out[key] = _canon(v, f"{where}.{key}", seen)
            return out
        items = [_canon(v, f"{where}[{i}]", seen) for i, v in enumerate(value)]
        if isinstance(value, set | frozenset):
            items.sort(key=lambda item: json.dumps(item, sort_keys=True))
        return items
    finally:
        seen.discard(marker)
