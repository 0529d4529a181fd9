"""Building Messages API requests and calling ``anthropic.AsyncAnthropic``.

Fields pass through by their API names: every field of the installed SDK's
request types (`groundswell.model.request_fields`). ``temperature``, ``top_p`` and
``top_k`` travel in ``extra_body`` (the SDK no longer names them); a
``response_format`` (any type pydantic's ``TypeAdapter`` takes, see
`output_type`) fills ``output_config.format`` with its JSON schema, beside
any ``effort``; requests with ``betas``, remote ``mcp_servers`` or a field
only the beta request type has use the SDK's beta namespace. SDK errors become `ModelAPIError` with the SDK's exception
as ``__cause__``. Failed requests are retried as the SDK would, with a cap on
the wait a ``Retry-After`` asks for (`groundswell.model.retries`); a stream that
ends before its ``message_stop`` is an error, never a complete answer.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from ..errors import ConfigurationError, ModelAPIError, ResponseValidationError
from ..scrubbing import sdk_logs as _sdk_logs
from .retries import (
    DEFAULT_MAX_RETRY_WAIT,
    error_body,
    retry_after,
    retry_delay,
    without_sdk_retries,
)

if TYPE_CHECKING:
    import anthropic

# anthropic (and httpx2 under it) take about a second to import: they are imported
# where a model is called or an error classified, so that importing the agent's
# building blocks (e.g. to define a Middleware in a plugin) stays cheap.

__all__ = [
    "OutputType",
    "api_error",
    "build_request",
    "call_model",
    "is_retryable_stream_error",
    "output_type",
    "parse_output",
    "type_name",
    "uses_beta",
]

SAMPLING_FIELDS = ("temperature", "top_p", "top_k")
# Error types that mean "try that turn again" when they arrive mid-stream.
_RETRYABLE_STREAM_ERRORS = {"overloaded_error": 529, "api_error": 500, "timeout_error": 504}


def build_request(
    settings: Mapping[str, Any],
    messages: list[dict[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]],
    system: Any,
    response_format: Any,
) -> dict[str, Any]:
    """The keyword arguments for ``messages.create`` (see `uses_beta`).

    ``settings`` holds the request fields by their API names: every field of
    the installed SDK's request types that is set is sent as it is
    (`groundswell.model.request_fields`), but ``output_config``, which is merged:
    ``effort`` fills its ``effort`` and a ``response_format`` its ``format``,
    keeping whatever else it holds.
    """
    params: dict[str, Any] = {
        "model": settings["model"],
        "max_tokens": settings["max_tokens"],
        "messages": messages,
    }
    if system:
        params["system"] = system
    if tools:
        params["tools"] = list(tools)
    # One lookup per field (this runs for every model turn), and no extra_body
    # dict unless something goes in it.
    get = settings.get
    names = _passthrough or _load_passthrough()
    # Read in C (map), and walked in Python only when one of them is set.
    values = tuple(map(get, names))
    if values.count(None) != len(values):
        for name, value in zip(names, values, strict=True):
            if value is not None:
                params[name] = value
    value = get("extra_headers")
    if value is not None:
        params["extra_headers"] = value
    given = get("extra_body")
    extra_body = dict(given) if given else {}
    for name in SAMPLING_FIELDS:
        value = get(name)
        if value is not None:
            extra_body[name] = value
    if extra_body:
        params["extra_body"] = extra_body
    config = get("output_config")
    effort = get("effort")
    if config is not None or effort is not None or response_format is not None:
        merged = dict(config) if config else {}
        if effort is not None:
            merged["effort"] = effort
        if response_format is not None:
            merged["format"] = {
                "type": "json_schema",
                "schema": output_type(response_format).schema,
            }
        params["output_config"] = merged
    value = get("betas")
    if value:
        params["betas"] = list(value)
    value = params.get("mcp_servers")
    if value:
        params["mcp_servers"] = [dict(s) for s in value]
    return params


_passthrough: tuple[str, ...] = ()


def _load_passthrough() -> tuple[str, ...]:
    global _passthrough
    from .request_fields import passthrough_fields

    _passthrough = passthrough_fields()
    return _passthrough


def uses_beta(params: Mapping[str, Any]) -> bool:
    """True when a request needs the SDK's beta namespace: ``betas``, remote MCP servers,
    or a field only the beta request type has."""
    if params.get("betas") or params.get("mcp_servers"):
        return True
    return not (_beta_only or _load_beta_only()).isdisjoint(params)


_beta_only: frozenset[str] = frozenset()


def _load_beta_only() -> frozenset[str]:
    global _beta_only
    from .request_fields import beta_only

    _beta_only = beta_only()
    return _beta_only


def api_error(exc: Exception, model: str) -> ModelAPIError:
    """A `ModelAPIError` describing an SDK exception (raise it ``from exc``).

    A `ModelAPIError` already (a wait too long, say) is returned as it is.
    """
    import anthropic
    import httpx2

    if isinstance(exc, ModelAPIError):
        return exc
    if isinstance(exc, anthropic.APIStatusError):
        kind, message = error_body(exc)
        status = exc.status_code
        if status == 200 and kind:  # an error event in the middle of a stream
            status = _RETRYABLE_STREAM_ERRORS.get(kind, 500)
        hint = {
            401: " (check ANTHROPIC_API_KEY or the client's api_key)",
            403: " (the key lacks permission for this model or feature)",
            404: f" (is {model!r} a model name your key can use?)",
            402: " (billing: check the account's credit balance)",
            429: " (rate limited; the retries are used up)",
        }.get(status, "")
        return ModelAPIError(
            f"Anthropic API error {status} {kind}: {message}{hint}",
            status_code=status,
            error_type=kind or None,
            retry_after=retry_after(exc.response.headers),
        )
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelAPIError("request to the Anthropic API timed out", status_code=None)
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelAPIError(f"could not reach the Anthropic API: {exc}", status_code=None)
    if isinstance(exc, httpx2.TransportError):
        return ModelAPIError(
            f"the connection to the Anthropic API broke: {type(exc).__name__}: {exc}",
            status_code=None,
        )
    if isinstance(exc, _IncompleteStream):
        return ModelAPIError(
            f"the connection to the Anthropic API broke: {exc}, so the answer is incomplete",
            status_code=None,
        )
    if isinstance(exc, json.JSONDecodeError):  # the SDK reads a 200 body that is not JSON
        return ModelAPIError(
            f"the Anthropic API answered with a body that is not JSON ({exc}): a proxy or a "
            "broken connection cut it off; try again",
            status_code=200,
        )
    return ModelAPIError(f"model call failed: {type(exc).__name__}: {exc}", status_code=None)


def is_retryable_stream_error(exc: Exception) -> bool:
    """True for an overload/server error event or a dropped connection in mid-stream."""
    import anthropic
    import httpx2

    if isinstance(exc, anthropic.APIStatusError) and exc.status_code == 200:
        return error_body(exc)[0] in _RETRYABLE_STREAM_ERRORS
    # Failed connections are retried by `call_model`, but not a body that breaks off.
    return isinstance(exc, httpx2.TransportError | _IncompleteStream)


# The logging module's registry of loggers (one dict for the process).
_LOGGERS = logging.Logger.manager.loggerDict


async def call_model(
    client: anthropic.AsyncAnthropic,
    params: dict[str, Any],
    on_delta: Callable[[str, str], None] | None = None,
    *,
    max_wait: float | None = None,
    on_wait: Callable[[float, int | None, int], None] | None = None,
) -> Any:
    """One model round trip; streams when ``on_delta(kind, text)`` is given.

    Retries as the SDK would, the client's ``max_retries`` times, but waits at
    most ``max_wait`` seconds (None: `DEFAULT_MAX_RETRY_WAIT`) for a ``Retry-After``
    (`groundswell.model.retries`);
    ``on_wait(seconds, status, retry)`` hears of each wait before it starts.
    """
    if len(_LOGGERS) != _sdk_logs.known:  # loggers made since (the transport's): filtered too
        _sdk_logs.install()
    sender: Any = client
    retries = getattr(client, "max_retries", 0)
    if retries:
        sender = without_sdk_retries(client)
        if sender is None:  # a client that runs its own retries
            sender, retries = client, 0
    api: Any = sender.beta.messages if uses_beta(params) else sender.messages
    taken = 0
    while True:
        try:
            if on_delta is None:
                try:
                    return await api.create(**params)
                except ValueError as exc:
                    # The SDK refuses non-streaming requests that may run past ten
                    # minutes (a large max_tokens); stream those, keep the final message.
                    if "streaming" not in str(exc).lower():
                        raise
            event: Any = None
            async with api.stream(**params) as stream:
                async for event in stream:
                    if on_delta is None:
                        continue
                    if event.type == "text":
                        on_delta("text", event.text)
                    elif event.type == "input_json":
                        on_delta("tool_input", event.partial_json)
                if event is None or event.type != "message_stop":
                    raise _IncompleteStream(stream)
                return await stream.get_final_message()
        except Exception as exc:
            if taken >= retries:
                raise
            if max_wait is None:
                max_wait = DEFAULT_MAX_RETRY_WAIT
            delay = retry_delay(exc, taken, max_wait=max_wait, model=str(params["model"]))
            if delay is None:
                raise
            taken += 1
            if on_wait is not None:
                on_wait(delay[0], delay[1], taken)
            await asyncio.sleep(delay[0])


class _IncompleteStream(Exception):
    """The answer's stream ended, cleanly, before its ``message_stop``: the answer is partial."""

    def __init__(self, stream: Any) -> None:
        try:
            blocks = stream.current_message_snapshot.content
        except AssertionError:  # not even a message_start
            blocks = ()
        got = sum(len(getattr(b, "text", "") or "") for b in blocks)
        super().__init__(f"the answer's stream ended before message_stop, after {got} characters")


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
