"""What the fake API answers with: replies, errors, and the models that choose them."""

from __future__ import annotations

import functools
import itertools
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, get_args

from ..errors import ConfigurationError

__all__ = [
    "ErrorReply",
    "FunctionModel",
    "MessagesRequest",
    "RawReply",
    "Reply",
    "SchemaModel",
    "ScriptedModel",
    "error",
    "json_reply",
    "raw_reply",
    "sample_from_schema",
    "text",
    "tool_calls",
    "tool_use",
]

_ids = itertools.count(1)

# Error types and messages the real API uses for each status code.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def new_id(prefix: str) -> str:
    """A fresh id like the API's (``msg_…``, ``toolu_…``), unique per process."""
    return f"{prefix}_fake{next(_ids):06d}"


@dataclass
class Reply:
    """A successful Messages API answer: content blocks plus stop reason and usage.

    ``stop_reason`` is any the installed SDK knows (``refusal``,
    ``model_context_window_exceeded``, ``compaction``...). ``stream_error``
    makes a streamed reply break off with an ``event: error`` after its content;
    ``cut_stream=True`` ends the answer halfway through its content, cleanly, as
    a dropped connection does: a stream without its ``message_stop``, a JSON body
    cut in two. ``delay`` (seconds) holds the answer back.
    """

    content: list[dict[str, Any]]
    stop_reason: str = "end_turn"
    usage: dict[str, int] | None = None
    model: str | None = None
    stream_error: ErrorReply | None = None
    delay: float = 0.0
    cut_stream: bool = False

    def __post_init__(self) -> None:
        # Checked here: a malformed answer only fails inside the SDK, which retries it.
        if not isinstance(self.content, list):
            raise ConfigurationError(
                f"groundswell.testing: Reply content must be a list of content blocks, got "
                f"{type(self.content).__name__}; e.g. Reply([{{'type': 'text', 'text': 'hi'}}])"
            )
        for index, block in enumerate(self.content):
            problem = _block_problem(block)
            if problem:
                raise ConfigurationError(
                    f"groundswell.testing: Reply content block {index} {problem}: {block!r:.80}"
                )
        if self.stop_reason not in _COMMON_STOPS and self.stop_reason not in stop_reasons():
            raise ConfigurationError(
                f"groundswell.testing: Reply stop_reason {self.stop_reason!r} is not one the API "
                f"sends; use one of {', '.join(sorted(stop_reasons()))}"
            )
        if not isinstance(self.delay, int | float) or self.delay < 0:
            raise ConfigurationError(
                f"groundswell.testing: Reply delay is in seconds (>= 0), got {self.delay!r}"
            )


# The stop reasons every SDK since tool use knows: checked without importing the SDK
# (a replies script is often built when a test module is imported).
_COMMON_STOPS = frozenset({"end_turn", "max_tokens", "stop_sequence", "tool_use"})


@functools.cache
def stop_reasons() -> frozenset[str]:
    """The SDK's own lists, so a newer API's stop reasons are accepted as soon as it knows them."""
    from anthropic.types import StopReason
    from anthropic.types.beta import BetaStopReason

    return frozenset(get_args(StopReason)) | frozenset(get_args(BetaStopReason))


def _block_problem(block: Any) -> str | None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return "must be a dict with a 'type'"
    kind = block["type"]
    if kind == "text" and not isinstance(block.get("text"), str):
        return "is a text block without a string 'text'"
    if kind == "tool_use" and not (
        isinstance(block.get("id"), str)
        and isinstance(block.get("name"), str)
        and isinstance(block.get("input"), dict)
    ):
        return "is a tool_use block without a string 'id' and 'name' and a dict 'input'"
    if kind == "thinking" and not isinstance(block.get("thinking"), str):
        return "is a thinking block without a string 'thinking'"
    # Left out, the fake fills them in (a signature for the block, opaque data).
    if kind == "thinking" and not isinstance(block.get("signature", ""), str):
        return "is a thinking block whose 'signature' is not a string"
    if kind == "redacted_thinking" and not isinstance(block.get("data", ""), str):
        return "is a redacted_thinking block whose 'data' is not a string"
    return None


@dataclass
class ErrorReply:
    """An API error with the real status code, error type and headers."""

    status: int
    message: str
    type: str
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": self.type, "message": self.message},
            "request_id": new_id("req"),
        }


@dataclass
class RawReply:
    """A 200 answer whose body is sent exactly as given, malformed or not (see `raw_reply`)."""

    body: Any
    delay: float = 0.0


Answer: TypeAlias = "Reply | ErrorReply | RawReply"


def raw_reply(body: Any) -> RawReply:
    """A 200 answer with ``body`` as it is: to test what a malformed answer does.

    A plain request gets ``body`` as its JSON; a streamed one the events of a
    stream built from it, as far as it goes (its ``content`` blocks, then its
    ``stop_reason`` and ``usage``, as given). E.g. a reply without content, or
    a tool call whose input is a string::

        raw_reply({"type": "message", "role": "assistant", "stop_reason": "end_turn"})
    """
    try:
        json.dumps(body)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"groundswell.testing: raw_reply() sends its body as JSON, but {body!r:.60} is "
            f"not JSON: {exc}"
        ) from None
    return RawReply(body)


def text(
    value: str, *, stop_reason: str = "end_turn", usage: dict[str, int] | None = None
) -> Reply:
    """A reply with one text block."""
    return Reply([{"type": "text", "text": value}], stop_reason=stop_reason, usage=usage)


def json_reply(value: Any) -> Reply:
    """A reply whose text is ``value`` as JSON (what structured output returns)."""
    try:
        return text(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"groundswell.testing: json_reply() needs a JSON value (dict, list, str, number, "
            f"bool or None), got {type(value).__name__} {value!r:.60}: {exc}; for a pydantic "
            "model pass model.model_dump(mode='json')"
        ) from None


def tool_use(
    name: str, input: dict[str, Any], *, id: str | None = None, text: str | None = None
) -> Reply:
    """A reply asking for one tool call (optionally after some text)."""
    if not isinstance(input, dict):
        raise ConfigurationError(
            f"groundswell.testing: tool_use({name!r}, ...) takes the tool's input as a dict "
            f"of arguments, e.g. tool_use('add', {{'a': 1, 'b': 2}}); got {input!r:.60}"
        )
    return tool_calls((name, input), text=text, ids=[id] if id else None)


def tool_calls(
    *calls: tuple[str, dict[str, Any]], text: str | None = None, ids: list[str] | None = None
) -> Reply:
    """A reply asking for several tool calls at once (the model's parallel tool use)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for i, call in enumerate(calls):
        if not (
            isinstance(call, tuple)
            and len(call) == 2
            and isinstance(call[0], str)
            and isinstance(call[1], dict)
        ):
            raise ConfigurationError(
                f"groundswell.testing: tool call {i} is {call!r:.60}; each call is a "
                "(tool name, input dict) pair, e.g. tool_calls(('add', {'a': 1, 'b': 2}))"
            )
        name, args = call
        call_id = ids[i] if ids and i < len(ids) else new_id("toolu")
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
    return Reply(content, stop_reason="tool_use")


def error(
    status: int,
    message: str | None = None,
    *,
    type: str | None = None,
    retry_after: float | None = None,
) -> ErrorReply:
    """An error answer. ``retry_after`` (seconds) sets ``retry-after`` and ``retry-after-ms``."""
    if not isinstance(status, int) or not 400 <= status <= 599:
        raise ConfigurationError(
            f"groundswell.testing: error() takes an HTTP error status from 400 to 599 "
            f"(the API's own: {', '.join(map(str, ERROR_TYPES))}), got {status!r}"
        )
    kind = type or ERROR_TYPES.get(status, "api_error")
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["retry-after"] = str(max(0, round(retry_after)))
        headers["retry-after-ms"] = str(int(retry_after * 1000))
    return ErrorReply(status, message or kind.replace("_", " "), kind, headers)


@dataclass
class MessagesRequest:
    """One request the fake received, decoded.

    For a request in a Message Batch, ``body`` is its ``params`` and
    ``custom_id`` its ``custom_id``.
    """

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    custom_id: str | None = None

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def system(self) -> Any:
        return self.body.get("system")

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools", []))

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema asked for through ``output_config.format``, if any."""
        fmt = (self.body.get("output_config") or {}).get("format") or {}
        schema = fmt.get("schema") if fmt.get("type") == "json_schema" else None
        return schema if isinstance(schema, dict) else None

    def last_user_text(self) -> str:
        """The text of the last user message (tool results excluded)."""
        for message in reversed(self.messages):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                return content
            texts = [b.get("text", "") for b in content if b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
        return ""

    def tool_results(self) -> list[dict[str, Any]]:
        """Every ``tool_result`` block in the conversation, oldest first.

        Cumulative: a request resends the whole conversation, so the third
        request of a prompt holds the results of the first two turns' calls.
        `latest_tool_results` has only those the model is answering now.
        """
        out: list[dict[str, Any]] = []
        for message in self.messages:
            content = message.get("content")
            if message.get("role") == "user" and isinstance(content, list):
                out += [b for b in content if b.get("type") == "tool_result"]
        return out

    def latest_tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of the last user turn: what this request answers with.

        Empty when the last turn is not tool results (a new prompt).
        """
        messages = self.body.get("messages") or []
        if not messages or messages[-1].get("role") != "user":
            return []
        content = messages[-1].get("content")
        if not isinstance(content, list):
            return []
        return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]

    def tools_called(self) -> list[str]:
        """Names of the tools the assistant has called so far in this conversation."""
        out: list[str] = []
        for message in self.messages:
            content = message.get("content")
            if message.get("role") == "assistant" and isinstance(content, list):
                out += [b["name"] for b in content if b.get("type") == "tool_use"]
        return out


class FakeModel(Protocol):
    """Chooses the answer to a request."""

    def respond(self, request: MessagesRequest) -> Answer: ...


def as_answer(value: Any, where: str) -> Answer:
    """A script entry as an answer: a `Reply` or `ErrorReply` as is, a string as ``text(...)``.

    Anything else is refused here, when the script is written, not when the
    SDK meets a broken answer (and retries it) mid-test.
    """
    if isinstance(value, Reply | ErrorReply | RawReply):
        return value
    if isinstance(value, str):
        return text(value)
    hint = ""
    if isinstance(value, dict):
        hint = " (a content block? wrap it: Reply([block]); JSON output? use json_reply(obj))"
    raise ConfigurationError(
        f"groundswell.testing: {where} is {type(value).__name__} {value!r:.80}; a fake's "
        "answers are text('...') (or a plain string), json_reply(obj), tool_use(name, input), "
        f"tool_calls(...), Reply([...]), raw_reply(body) or error(status){hint}"
    )


class ScriptedModel:
    """Answers with the given replies in order; an exhausted script is a 400 naming the request.

    A plain string in the script means ``text(string)``; anything that is not
    an answer is refused when the script is built.
    """

    def __init__(self, replies: Iterable[Answer | str] = ()) -> None:
        if isinstance(replies, str | Reply | ErrorReply | RawReply):
            raise ConfigurationError(
                "groundswell.testing: a script is a list of answers, e.g. [text('hi')]; "
                f"got a single {type(replies).__name__}"
            )
        self._replies = [as_answer(r, f"script entry {i}") for i, r in enumerate(replies)]
        self._lock = threading.Lock()

    def add(self, *replies: Answer | str) -> None:
        """Queue more replies (a plain string means ``text(string)``)."""
        checked = [as_answer(r, f"add() argument {i}") for i, r in enumerate(replies)]
        with self._lock:
            self._replies.extend(checked)

    @property
    def remaining(self) -> int:
        return len(self._replies)

    def respond(self, request: MessagesRequest) -> Answer:
        with self._lock:
            if self._replies:
                return self._replies.pop(0)
        return error(
            400,
            "groundswell.testing: the script has no reply left for this request "
            f"(last user text: {request.last_user_text()[:80]!r}); queue more replies",
        )


class FunctionModel:
    """Answers with ``fn(request)``; return a `Reply`, an error, or a plain string."""

    def __init__(self, fn: Callable[[MessagesRequest], Answer | str]) -> None:
        self.fn = fn

    def respond(self, request: MessagesRequest) -> Answer:
        return as_answer(self.fn(request), f"the answer of {getattr(self.fn, '__name__', 'fn')}()")


class SchemaModel:
    """A model that needs no script, like pydantic-ai's TestModel.

    It first calls every offered custom tool once (all in one turn, with
    arguments valid for each tool's input schema), then answers: with JSON valid
    for the requested output schema when there is one, otherwise with
    ``final_text`` (default: the tool results as JSON, or a fixed sentence).
    """

    def __init__(self, *, call_tools: bool = True, final_text: str | None = None) -> None:
        self.call_tools = call_tools
        self.final_text = final_text

    def respond(self, request: MessagesRequest) -> Answer:
        if self.call_tools:
            called = set(request.tools_called())
            pending = [
                t for t in request.tools if "input_schema" in t and t.get("name") not in called
            ]
            if pending:
                return tool_calls(
                    *((t["name"], sample_from_schema(t["input_schema"])) for t in pending)
                )
        schema = request.output_schema
        if schema is not None:
            return json_reply(sample_from_schema(schema))
        if self.final_text is not None:
            return text(self.final_text)
        results = request.tool_results()
        if results:
            return text(json.dumps([_result_text(r) for r in results]))
        return text("This is a reply from the offline test model.")


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if b.get("type") == "text")
    return str(content or "")


_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "email": "user@example.com",
    "uri": "https://example.com",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def sample_from_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A value valid for a JSON schema: every property filled, arrays with their minimum."""
    return _sample(schema, defs if defs is not None else schema.get("$defs", {}), 0)


# Past this depth optional values stay empty, so recursive models terminate.
_DEEP = 6


def _sample(schema: Any, defs: dict[str, Any], depth: int) -> Any:
    if not isinstance(schema, dict) or depth > 40:
        return None
    if "$ref" in schema:
        return _sample(defs.get(schema["$ref"].split("/")[-1], {}), defs, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            if depth > _DEEP and any(o.get("type") == "null" for o in schema[key]):
                return None
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return _sample(options[0], defs, depth + 1)
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return _sample(merged, defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties", {})
        required: set[str] = set(schema.get("required") or props)
        return {
            name: _sample(sub, defs, depth + 1)
            for name, sub in props.items()
            if name in required or depth <= _DEEP
        }
    if kind == "array":
        if "prefixItems" in schema:  # tuples
            return [_sample(item, defs, depth + 1) for item in schema["prefixItems"]]
        min_items = int(schema.get("minItems", 0))
        count = min_items if depth > _DEEP else max(1, min_items)
        return [_sample(schema.get("items", {}), defs, depth + 1) for _ in range(count)]
    if kind == "string":
        sample = _FORMATS.get(schema.get("format", ""), "example")
        sample = sample.ljust(int(schema.get("minLength", 0)), "x")
        return sample[: int(schema["maxLength"])] if "maxLength" in schema else sample
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = 0 if low is None else (low + 1 if "exclusiveMinimum" in schema else low)
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        if high is not None and value >= high:
            value = high if "maximum" in schema else high - 1
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "example"
