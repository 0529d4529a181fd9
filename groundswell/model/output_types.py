"""How a ``response_format`` is asked for and read back: `OutputType`, `parse_output`."""

from __future__ import annotations

import functools
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from ..errors import ConfigurationError, ResponseValidationError

__all__ = ["RESULT_KEY", "OutputType", "output_type", "parse_output", "type_name"]

_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.S)


def parse_output(text: str, response_format: Any) -> Any:
    """The final answer: the text itself, or the validated value of ``response_format``."""
    if response_format is None:
        return text
    return output_type(response_format).parse(text)


RESULT_KEY = "result"
"""The property a non-object answer is wrapped in: the API wants an object at the top."""


class OutputType:
    """How one ``response_format`` is asked for and read back; made once per type.

    ``adapter`` is the one pydantic ``TypeAdapter`` that both the JSON schema
    sent and the validation of the reply come from. A type whose schema is not
    an object (``int``, ``list[str]``, a ``Literal``, a union of models) is
    ``wrapped``: the model is asked for ``{"result": <value>}`` and the value
    is taken out again. ``value`` is the adapter of the type itself (for
    caching and extraction; it is ``adapter`` when nothing is wrapped).
    """

    __slots__ = ("_json_schema", "_strict", "adapter", "name", "type", "value", "wrapped")

    def __init__(self, fmt: Any) -> None:
        self.type = fmt
        self.name = type_name(fmt)
        problem = _not_a_type(fmt)
        if problem:
            raise ConfigurationError(
                "response_format must be a type (a pydantic model, int, list[str], a Literal, "
                f"an Enum, a union, a TypedDict, a dataclass...) or None, got {problem}"
            )
        self.value: TypeAdapter[Any] = self._adapter(fmt)
        schema = self._describe(self.value)
        top = schema
        ref = schema.get("$ref")
        if isinstance(ref, str):  # a recursive model: {"$ref": ..., "$defs": {...}}
            top = schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {})
        if top.get("type") == "object" and "properties" not in top and not _closed(top):
            raise ConfigurationError(
                f"response_format {self.name} is an open mapping: the API's strict JSON schema "
                "only allows the keys it names, so the model could only answer {}; use a "
                "pydantic model, TypedDict or dataclass with named fields (or a list of them)"
            )
        self.wrapped = top.get("type") != "object"
        self.adapter = self.value
        if self.wrapped:
            wrapper = create_model(  # type: ignore[call-overload]
                "Result", __config__=ConfigDict(extra="forbid"), **{RESULT_KEY: (fmt, ...)}
            )
            self.adapter = TypeAdapter(wrapper)
            schema = self._describe(self.adapter)
            schema.pop("title", None)
            inner = schema["properties"][RESULT_KEY]
            if inner.get("title") == "Result":  # pydantic's title for the field, not the type's
                del inner["title"]
        found = _unsendable(schema, "")
        if found is not None:
            raise self._cannot_send(*found)
        self._json_schema: dict[str, Any] = schema
        self._strict: dict[str, Any] | None = None

    def _cannot_send(self, where: str, kind: str) -> ConfigurationError:
        head, rest = where[: len(RESULT_KEY)], where[len(RESULT_KEY) :]
        if self.wrapped and head == RESULT_KEY and rest[:1] in ("", "[", "."):
            where = rest.lstrip(".")  # the wrapper is ours: name the spot in the user's type
        spot = {"": "the answer itself", "[]": "the answer's items"}.get(where, where)
        if kind == "mapping":
            return ConfigurationError(
                f"response_format {self.name} has an open mapping (a dict) at {spot}: the API's "
                "strict JSON schema only allows the keys it names, so the model could only "
                "answer {} there; use a pydantic model, TypedDict or dataclass with named fields, "
                "or a list of key/value models (list[Entry] where Entry has key and value fields)"
            )
        if kind == "tuple":
            return ConfigurationError(
                f"response_format {self.name} has a fixed-length tuple at {spot}: strict JSON "
                "schema cannot give each position its own type, so the types would be lost; use "
                "a pydantic model, TypedDict or dataclass with named fields (or list[X] / "
                "tuple[X, ...] for any number of values of one type)"
            )
        return ConfigurationError(
            f"response_format {self.name} leaves the JSON type open at {spot} (Any or "
            "object): structured output needs a definite type for every value"
        )

    def _adapter(self, fmt: Any) -> TypeAdapter[Any]:
        try:
            return TypeAdapter(fmt)
        except Exception as exc:  # pydantic's schema errors, or a type that breaks it
            raise self._refused(exc) from exc

    def _describe(self, adapter: TypeAdapter[Any]) -> dict[str, Any]:
        try:
            return adapter.json_schema()
        except Exception as exc:
            raise self._refused(exc) from exc

    def _refused(self, exc: Exception) -> ConfigurationError:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ConfigurationError(
            f"response_format {self.name} is not a type pydantic can validate and describe "
            f"as JSON schema: {why}"
        )

    @property
    def json_schema(self) -> dict[str, Any]:
        """pydantic's JSON schema of what the model is asked for (wrapped when `wrapped`)."""
        return self._json_schema

    @property
    def schema(self) -> dict[str, Any]:
        """The schema sent as ``output_config.format.schema``: `json_schema` made strict.

        Made strict by ``anthropic.transform_schema``, as the SDK does it (every
        object closed with ``additionalProperties: false``, unsupported keywords
        moved into descriptions); built on first use, then kept.
        """
        strict = self._strict
        if strict is None:
            import anthropic

            try:
                strict = anthropic.transform_schema(self._json_schema)
            except ValueError as exc:
                raise ConfigurationError(f"response_format {self.name}: {exc}") from exc
            self._strict = strict
        return strict

    def parse(self, text: str) -> Any:
        """The validated value of the model's reply; `ResponseValidationError` if it does not fit."""
        candidate = text.strip()
        fenced = _FENCE.match(candidate)
        if fenced:  # without structured outputs some models wrap JSON in a code fence
            candidate = fenced.group(1)
        try:
            validated = self.adapter.validate_json(candidate)
        except ValidationError as exc:
            if self.wrapped and not _has_result(candidate):
                # A bare value (a model or a script that left out the wrapper) is fine too.
                try:
                    return self.value.validate_json(candidate)
                except ValidationError:
                    pass
            errors = json.loads(exc.json(include_url=False))
            summary = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in errors[:5]
            )
            raise ResponseValidationError(
                f"the reply does not fit {self.name}: {summary}", raw=text, errors=errors
            ) from exc
        return getattr(validated, RESULT_KEY) if self.wrapped else validated

    def dump(self, value: Any) -> Any:
        """``value`` as JSON-ready data (what the answer cache stores)."""
        return self.value.dump_python(value, mode="json", warnings=False)

    def load(self, data: Any) -> Any:
        """A value back from `dump`'s data, validated again."""
        # Through JSON, the form `dump` made: a strict model accepts its own dump back.
        return self.value.validate_json(json.dumps(data))

    def text(self, value: Any) -> str:
        """``value`` as text to search: compact JSON, a string value as itself."""
        try:
            dumped = self.value.dump_json(value, warnings=False)
        except ValueError:  # not a value of this type (a middleware replaced the answer)
            return value.model_dump_json() if isinstance(value, BaseModel) else str(value)
        if dumped.startswith(b'"'):
            text: str = json.loads(dumped)
            return text
        return dumped.decode()

    def __repr__(self) -> str:
        return f"OutputType({self.name}{', wrapped' if self.wrapped else ''})"

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        # Copied or pickled (inside a Prompt) as its type: made again, or found in the cache.
        return output_type, (self.type,)

    def __copy__(self) -> OutputType:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> OutputType:
        return self


def output_type(response_format: Any) -> OutputType:
    """The `OutputType` of ``response_format``, made once per type and then reused.

    ``response_format`` is anything pydantic's ``TypeAdapter`` takes whose JSON
    schema structured output can express; anything else is a
    `ConfigurationError` saying why.
    """
    try:
        return _cached_output_type(response_format)
    except TypeError:  # an unhashable type form (say, Annotated with unhashable metadata)
        pass
    key = id(response_format)
    with _BY_ID_LOCK:
        held = _BY_ID.get(key)
    if held is not None and held[0] is response_format:
        return held[1]
    made = OutputType(response_format)
    with _BY_ID_LOCK:
        # The type is held too, so its id cannot be reused while the entry lives.
        _BY_ID[key] = (response_format, made)
        while len(_BY_ID) > _BY_ID_LIMIT:
            del _BY_ID[next(iter(_BY_ID))]
    return made


@functools.lru_cache(maxsize=512)
def _cached_output_type(response_format: Any) -> OutputType:
    # A TypeAdapter and its schema cost about a millisecond; a type does not change.
    return OutputType(response_format)


_BY_ID: dict[int, tuple[Any, OutputType]] = {}
_BY_ID_LOCK = threading.Lock()
_BY_ID_LIMIT = 256


def type_name(fmt: Any) -> str:
    """A readable name of a type: ``Verdict``, ``list[Quote]``, ``Literal['a', 'b']``, ``A | B``."""
    if fmt is None or fmt is type(None):
        return "None"
    if fmt is Ellipsis:
        return "..."
    origin = typing.get_origin(fmt)
    args = typing.get_args(fmt)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        base = getattr(origin, "__name__", None) or repr(origin).removeprefix("typing.")
        return f"{base}[{', '.join(type_name(a) for a in args)}]" if args else str(base)
    name = getattr(fmt, "__name__", None)
    if isinstance(name, str):  # classes, NewType, type aliases
        return name
    return repr(fmt).removeprefix("typing.")


def _not_a_type(fmt: Any) -> str | None:
    """What ``fmt`` is when it is not a type or a type form (else ``None``)."""
    if isinstance(fmt, type) or typing.get_origin(fmt) is not None:
        return None
    if isinstance(fmt, str | bytes):
        return f"the string {fmt!r:.60} (pass the type itself, not its name)"
    if isinstance(fmt, BaseModel):
        return f"a {type(fmt).__name__} instance (pass the class {type(fmt).__name__})"
    if inspect.isroutine(fmt) or isinstance(fmt, functools.partial):
        return f"the function {getattr(fmt, '__qualname__', fmt)!r:.60}"
    if type(fmt).__module__ in ("typing", "typing_extensions"):  # Any, NewType, aliases
        return None
    return f"{type(fmt).__name__} {fmt!r:.60}"


def _closed(schema: Mapping[str, Any]) -> bool:
    return schema.get("additionalProperties", False) is False


def _unsendable(schema: Any, where: str) -> tuple[str, str] | None:
    """Where a schema has what strict structured output cannot express, and what, if anywhere.

    The kinds are ``"type"`` (a value left open, which the SDK's strict transform
    refuses), ``"mapping"`` (an object without named properties, which the
    transform closes to ``{}``) and ``"tuple"`` (``prefixItems``, which it moves
    into a description). Follows ``anthropic.transform_schema``: definitions,
    properties, items and the members of ``anyOf``/``oneOf``/``allOf``.
    """
    if not isinstance(schema, Mapping):
        return None
    for name, sub in (schema.get("$defs") or {}).items():
        found = _unsendable(sub, str(name))
        if found is not None:
            return found
    if "$ref" in schema:
        return None
    enum = schema.get("enum")
    definite = (
        any(key in schema for key in ("type", "anyOf", "oneOf", "allOf"))
        or (isinstance(enum, list) and bool(enum) and all(map(_primitive, enum)))
        or ("const" in schema and _primitive(schema["const"]))
    )
    if not definite:
        return where, "type"
    if schema.get("type") == "object" and "properties" not in schema and not _closed(schema):
        return where, "mapping"
    if "prefixItems" in schema:
        return where, "tuple"
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or ():
            found = _unsendable(sub, where)
            if found is not None:
                return found
    for name, sub in (schema.get("properties") or {}).items():
        found = _unsendable(sub, f"{where}.{name}" if where else str(name))
        if found is not None:
            return found
    if isinstance(schema.get("items"), Mapping):
        return _unsendable(schema["items"], f"{where}[]")
    return None


def _primitive(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _has_result(candidate: str) -> bool:
    """True when ``candidate`` is a JSON object with the wrapper's key (or is not JSON)."""
    try:
        decoded = json.loads(candidate)
    except ValueError:
        return True
    return isinstance(decoded, dict) and RESULT_KEY in decoded
