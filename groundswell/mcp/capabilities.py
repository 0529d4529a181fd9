"""The MCP client of a local server: what it offers, and what it does with what the server sends.

Every local server is connected with a `GroundswellClient` (an ``mcp.Client``)
that advertises elicitation always, sampling when the server's config sets
``sampling``, and roots when it sets ``roots``. Each tool call carries a
progress token; the server's progress and log notifications become
``mcp_progress`` and ``mcp_log`` events on the call's ``mcp_call`` node (and
``agent.stream()`` events), scrubbed of secrets. A server's request for input
goes to the ``on_elicitation`` handler (the server's, else the agent's; with
neither, to a person through a ``question`` wait, `groundswell.waits`), and
one for a completion to `groundswell.mcp.sampling`.

A server's requests and log messages name no call (the ``mcp`` client tells
a callback only the server's own request id): they go to the call the code
runs in when the ``mcp`` client delivers them inside the call (the 2026
protocol), else to the server's one call in flight. With several calls in
flight Groundswell does not guess: an elicitation or log message is recorded
on the server's ``mcp_connect`` node, and ``"sampling": True`` (which answers
with the calling prompt's settings) is refused with an error. With no call in
flight they go to the ``groundswell.mcp`` logger at DEBUG.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from mcp import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import (
    INTERNAL_ERROR,
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    InputResponses,
    ListRootsResult,
    LoggingMessageNotificationParams,
    RequestParamsMeta,
    Root,
)

from ..runtime.context import current_frame
from ..scrubbing.serialize import redact, scrub
from ..tree.tree import EventNode, EventTree, NodeType
from ..waits.core import open_wait
from .client import ClientOptions, Elicitation, current_prompt, elicitation_handler

__all__ = ["GroundswellClient", "ServerLink", "client_for"]

logger = logging.getLogger("groundswell.mcp")

#: Answers a server's ``sampling/createMessage`` (`groundswell.mcp.sampling.answer_sampling`);
#: set by the MCP middleware, which sits above the agent loop that answers it.
SAMPLER: Callable[..., Coroutine[Any, Any, Any]] | None = None

T = TypeVar("T")
#: Events of one kind kept on one call's node; more are counted, not recorded.
MAX_EVENTS = 200
#: A virtual tool of a connection (a server's resources or prompts): (client, arguments) -> result.
VirtualTool = Callable[[Client, dict[str, Any]], Awaitable[CallToolResult]]


class Call:
    """One tool call of a server, in flight: its node, its prompt and the context it runs in."""

    def __init__(self, server: str, tool: str) -> None:
        frame = current_frame()
        in_tool = frame is not None and frame.node.type == NodeType.MCP_CALL
        self.server = server
        self.tree: EventTree | None = frame.tree if frame is not None and in_tool else None
        self.node: EventNode | None = frame.node if frame is not None and in_tool else None
        #: The ``mcp__<server>__<tool>`` name when known, else the server's own name.
        self.tool = self.node.name if self.node is not None else tool
        self.run = current_prompt()
        #: The caller's context: handlers run in it, so what they start mounts under the call.
        self.context = contextvars.copy_context()
        self._counts: dict[str, int] = {}
        #: Completions the server asked for during the call (`groundswell.mcp.sampling`).
        self.samplings = 0
        #: Its questions to a person still open: cancelled when the call ends.
        self.asking: set[asyncio.Task[ElicitResult]] = set()

    def record(self, kind: str, *, stream: bool = True, **data: Any) -> None:
        """An ``mcp_progress``/``mcp_log``/... event on the node (and, with ``stream``, on the
        prompt's ``agent.stream()``)."""
        if self.node is None or self.tree is None:
            return
        seen = self._counts[kind] = self._counts.get(kind, 0) + 1
        if seen > MAX_EVENTS:  # a chatty server must not grow the tree without bound
            self.node.metrics[f"{kind}_dropped"] = seen - MAX_EVENTS
            return
        self.tree.add_event(self.node, kind, **data)
        if stream and self.run is not None:
            tool_use_id = self.node.payload.get("tool_use_id")
            details = {"tool_use_id": tool_use_id, "name": self.tool, **data}
            self.run.emit_mcp(kind, details)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        data: dict[str, Any] = {"progress": progress, "total": total}
        if message:
            data["message"] = scrub(message)
        self.record("mcp_progress", **data)

    async def within(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` in the call's context (a task of its own: the caller's may be busy)."""
        return await asyncio.get_running_loop().create_task(make(), context=self.context.copy())


class ServerLink:
    """One server's side of the client: its calls in flight and the callbacks the client gets."""

    def __init__(self, server: str, options: ClientOptions) -> None:
        self.server = server
        self.options = options
        self.calls: list[Call] = []
        #: Tools the connection adds to the server's own (its resources and prompts), by name.
        self.virtual: dict[str, VirtualTool] = {}
        #: The server's ``mcp_connect`` node (and its tree), set by the bridge that started it.
        self.connect: tuple[EventTree, EventNode] | None = None
        self._connect_counts: dict[str, int] = {}

    def current(self) -> Call | None:
        """The call a request or notification of the server belongs to (see the module doc):
        ``None`` when no call is in flight, or several are and none is known to be it."""
        frame = current_frame()
        if frame is not None:
            for call in reversed(self.calls):
                if call.node is frame.node:
                    return call
        return self.calls[0] if len(self.calls) == 1 else None

    def note(self, kind: str, calls_in_flight: int, **data: Any) -> None:
        """Record ``kind`` on the server's ``mcp_connect`` node (several calls in flight:
        which one it belongs to is not known)."""
        if self.connect is None:
            return
        tree, node = self.connect
        seen = self._connect_counts[kind] = self._connect_counts.get(kind, 0) + 1
        if seen > MAX_EVENTS:
            node.metrics[f"{kind}_dropped"] = seen - MAX_EVENTS
            return
        tree.add_event(node, kind, calls_in_flight=calls_in_flight, **data)

    async def log(self, params: LoggingMessageNotificationParams) -> None:
        data = redact(params.data)
        logger.debug("MCP server %r logged (%s): %s", self.server, params.level, data)
        record: dict[str, Any] = {"level": params.level, "data": data}
        if params.logger:
            record["logger"] = scrub(params.logger)
        call = self.current()
        if call is not None:
            call.record("mcp_log", **record)
        elif len(self.calls) > 1:
            self.note("mcp_log", len(self.calls), **record)

    async def list_roots(self, context: Any) -> ListRootsResult:
        logger.debug("MCP server %r asked for its roots", self.server)
        roots = [
            Root.model_validate({"uri": uri, "name": name}) for uri, name in self.options.roots
        ]
        return ListRootsResult(roots=roots)

    async def sample(self, context: Any, params: Any) -> Any:
        answer_sampling = SAMPLER
        if answer_sampling is None:  # pragma: no cover - set whenever the MCP middleware runs
            return ErrorData(
                code=INTERNAL_ERROR, message="sampling is not available in this process"
            )
        call = self.current()
        if call is None and len(self.calls) > 1 and self.options.sampling is True:
            message = (
                f"MCP server {self.server!r} asked for a completion while {len(self.calls)} of "
                f"its tool calls ran, and the request does not say for which; 'sampling': True "
                f"answers with the calling prompt's model and limits, so Groundswell will not "
                f"guess: give 'sampling' an Agent (it answers whatever the call), or let the "
                f"model call this server's tools one at a time"
            )
            logger.info("%s", message)
            self.note("mcp_sampling", len(self.calls), error=message)
            return ErrorData(code=INTERNAL_ERROR, message=message)
        if call is None:
            return await answer_sampling(self.server, self.options.sampling, params, None)
        return await call.within(
            lambda: answer_sampling(self.server, self.options.sampling, params, call)
        )

    async def elicit(self, context: Any, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        call = self.current()
        # Several calls in flight, none known as the asker: its connect node, not a guess.
        shared = len(self.calls) if call is None and len(self.calls) > 1 else 0
        handler, source = elicitation_handler(self.options, call.run if call else self._run())
        tool = call.tool if call is not None else None
        if isinstance(params, ElicitRequestFormParams):
            schema = dict(params.requested_schema)
            request = Elicitation(self.server, params.message, "form", schema, tool=tool)
        else:
            request = Elicitation(self.server, params.message, "url", url=params.url, tool=tool)
        event: dict[str, Any] = {"message": scrub(request.message), "mode": request.mode}
        if request.url is not None:
            event["url"] = scrub(request.url)
        asking: Callable[[], Awaitable[ElicitResult]]
        if handler is None:
            where = self._where(call)
            if where is None:
                reason = (
                    f"no on_elicitation handler, and no run in progress to ask a person in: "
                    f"Groundswell declined MCP server {self.server!r}'s request for input; set "
                    f"Agent(on_elicitation=...) or the server config's 'on_elicitation' to "
                    f"answer it"
                )
                logger.info("%s", reason)
                self._record(call, shared, event, action="decline", reason=reason)
                return ElicitResult(action="decline", _meta={"groundswell/reason": reason})
            asking = functools.partial(self._ask_a_person, call, request, where)
            what = "asking a person"
        else:
            asking = functools.partial(_handled, handler, call, request)
            what = "the on_elicitation handler"
        event["handler"] = source or "wait"
        try:
            answer = await asking()
        except Exception as exc:  # the handler's bug: the server gets an error, the prompt goes on
            problem = scrub(f"{type(exc).__name__}: {exc}")
            self._record(call, shared, event, error=problem)
            return ErrorData(code=INTERNAL_ERROR, message=f"{what} failed: {problem}")
        if answer.content is not None:
            event["content"] = redact(answer.content)
        self._record(call, shared, event, action=answer.action)
        return answer

    def _where(self, call: Call | None) -> tuple[EventTree, EventNode, Any] | None:
        """Where a person is asked for the server's input: under the asking call's node, else
        the server's connect node (several calls in flight); ``None`` outside any call."""
        if call is not None and call.node is not None and call.tree is not None:
            return call.tree, call.node, call.run.workflow if call.run is not None else None
        if self.calls and self.connect is not None:
            run = self._run()
            return *self.connect, run.workflow if run is not None else None
        return None

    async def _ask_a_person(
        self, call: Call | None, request: Elicitation, where: tuple[EventTree, EventNode, Any]
    ) -> ElicitResult:
        """The server's request as a ``question`` wait; ended with the call that asked."""
        if call is None:
            return await ask_person(request, *where)
        task = asyncio.get_running_loop().create_task(
            ask_person(request, *where), context=call.context.copy()
        )
        call.asking.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or not current.cancelling()):
                return ElicitResult(action="cancel")  # the call ended while the person was asked
            raise
        finally:
            call.asking.discard(task)

    def _run(self) -> Any:
        """The prompt of every call in flight, when they all belong to one (else None)."""
        runs = {id(c.run): c.run for c in self.calls}
        return next(iter(runs.values())) if len(runs) == 1 else None

    def _record(self, call: Call | None, shared: int, event: dict[str, Any], **more: Any) -> None:
        if call is not None:
            call.record("mcp_elicitation", stream=False, **event, **more)
        elif shared:
            self.note("mcp_elicitation", shared, **event, **more)


async def _handled(
    handler: Callable[[Elicitation], Any], call: Call | None, request: Elicitation
) -> ElicitResult:
    """The answer of an ``on_elicitation`` handler, run in the asking call's context."""
    raw = await (call.within(lambda: _call(handler, request)) if call else _call(handler, request))
    return _answer(raw, request)


async def _call(handler: Callable[[Elicitation], Any], request: Elicitation) -> Any:
    """Call a handler: a coroutine function awaited, a plain one in a thread (it may wait
    for a person)."""
    if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an async __call__ counts too
    ):
        result = await handler(request)
    else:
        result = await asyncio.to_thread(handler, request)
    if inspect.isawaitable(result):
        result = await result
    return result


async def ask_person(
    request: Elicitation, tree: EventTree, parent: EventNode, workflow: Any
) -> ElicitResult:
    """A server's request for input, answered by a person through a ``question`` wait.

    Its request holds the ``question`` (the server's message), the JSON
    ``schema`` the answer must fit (the server's form; for a URL, ``true`` when
    the person agrees to open it), the ``server``, the ``mode``, the ``url`` and
    the ``mcp_call`` that asked, when known. An answer is accepted; a rejection
    (``groundswell.waits.reject``) declines.
    """
    schema: dict[str, Any]
    validate: Callable[[Any], Any]
    if request.mode == "url":
        schema = {"type": "boolean", "description": "true: the person agrees to open the URL"}
        validate = _agreed
    else:
        schema = request.schema or {"type": "object", "properties": {}}
        validate = _form(schema)
    asked: dict[str, Any] = {
        "question": request.message,
        "schema": schema,
        "server": request.server,
        "mode": request.mode,
    }
    if request.url is not None:
        asked["url"] = request.url
    if request.tool is not None:
        asked["mcp_call"] = request.tool
    decision = await open_wait(
        "question",
        asked,
        tree=tree,
        parent=parent,
        name="elicitation",
        validate=validate,
        workflow=workflow,
        verbs=("answer", "reject"),
    )
    if decision.kind == "reject":
        return ElicitResult(action="decline", _meta={"groundswell/reason": decision.reason})
    if request.mode == "url":
        return ElicitResult(action="accept" if decision.value else "decline")
    return ElicitResult(action="accept", content=decision.value)


def _form(schema: Mapping[str, Any]) -> Callable[[Any], dict[str, Any]]:
    """How a person's answer to a form is checked: an object (or JSON text of one) that fits."""

    def validate(value: Any) -> dict[str, Any]:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                value = None
        if not isinstance(value, Mapping):
            fields = sorted(schema.get("properties") or {})
            raise ValueError(
                f"the server asks for a form with the fields {fields}: answer with an object "
                "of them (a dict, or its JSON text), or reject the question to decline"
            )
        problem = _schema_problem(schema, value)
        if problem is not None:
            raise ValueError(problem)
        return dict(value)

    return validate


def _agreed(value: Any) -> bool:
    """A person's answer to "open this URL?": true or false (or their JSON text)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ValueError(f"answer true (open the URL) or false, got {value!r:.40}")
    return value


class BadAnswer(ValueError):
    """An ``on_elicitation`` handler's answer the server cannot take."""


def _answer(raw: Any, request: Elicitation) -> ElicitResult:
    if isinstance(raw, ElicitResult):
        answer = raw
    elif isinstance(raw, Mapping):
        try:
            answer = ElicitResult.model_validate(dict(raw))
        except Exception as exc:
            raise BadAnswer(
                f"the answer {dict(raw)!r:.200} is no elicitation result: {exc}"
            ) from None
    else:
        raise BadAnswer(
            f"it returned {type(raw).__name__}; return request.accept({{...}}), "
            f"request.decline() or request.cancel()"
        )
    if answer.action != "accept":
        return ElicitResult(action=answer.action)  # content goes only with an acceptance
    if request.mode == "url":
        return ElicitResult(action="accept")
    problem = _schema_problem(request.schema or {}, answer.content or {})
    if problem is not None:
        raise BadAnswer(f"the content does not fit the requested schema: {problem}")
    return answer


def _schema_problem(schema: Mapping[str, Any], content: Mapping[str, Any]) -> str | None:
    """Why ``content`` does not fit an elicitation schema (MCP's flat object of primitives)."""
    fields = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if content.get(name) is None:
            return f"{name!r} is required"
    for name, value in content.items():
        spec = fields.get(name)
        if not isinstance(spec, Mapping):
            return f"{name!r} is no field the server asked for (it asked for {sorted(fields)})"
        problem = None if value is None else _field_problem(spec, value)
        if problem is not None:
            return f"{name}: {problem}"
    return None


def _field_problem(spec: Mapping[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    allowed = _choices(spec) if kind != "array" else _choices(spec.get("items") or {})
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    if kind in ("integer", "number"):
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{value!r} is not a number"
        if kind == "integer" and not whole:
            return f"{value!r} is not an integer"
        low, high = spec.get("minimum"), spec.get("maximum")
        if low is not None and value < low:
            return f"{value!r} is below the minimum {low!r}"
        if high is not None and value > high:
            return f"{value!r} is above the maximum {high!r}"
        return None
    if kind == "string":
        if not isinstance(value, str):
            return f"{value!r} is not a string"
        if allowed is not None and value not in allowed:
            return f"{value!r} is not one of {allowed}"
        return _size(len(value), spec.get("minLength"), spec.get("maxLength"), "characters")
    if kind == "array":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"{value!r} is not a list of strings"
        stray = [v for v in value if allowed is not None and v not in allowed]
        if stray:
            return f"{stray} are not among {allowed}"
        return _size(len(value), spec.get("minItems"), spec.get("maxItems"), "items")
    return None  # a type the schema subset does not have: the server checks it itself


def _size(size: int, low: Any, high: Any, what: str) -> str | None:
    if low is not None and size < low:
        return f"{size} {what}, fewer than {low}"
    if high is not None and size > high:
        return f"{size} {what}, more than {high}"
    return None


def _choices(spec: Mapping[str, Any]) -> list[Any] | None:
    if "enum" in spec:
        return list(spec["enum"])
    options = spec.get("oneOf") or spec.get("anyOf")
    if options:
        return [o.get("const") for o in options if isinstance(o, Mapping)]
    return None


class GroundswellClient(Client):
    """An ``mcp.Client`` whose calls carry a progress token and tell the run what the server sends.

    ``link`` (a `ServerLink`) holds the callbacks and the calls in flight;
    tools named in ``link.virtual`` are answered by the client itself.
    """

    link: ServerLink

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: ProgressFnT | None = None,
        *,
        input_responses: InputResponses | None = None,
        request_state: str | None = None,
        meta: RequestParamsMeta | None = None,
    ) -> CallToolResult:
        link = self.link
        call = Call(link.server, name)
        link.calls.append(call)
        try:
            virtual = link.virtual.get(name)
            if virtual is not None:
                return await virtual(self, dict(arguments or {}))
            return await super().call_tool(
                name,
                arguments,
                read_timeout_seconds,
                # A progress callback makes the mcp client send a progress token.
                _both(call.progress, progress_callback),
                input_responses=input_responses,
                request_state=request_state,
                meta=meta,
            )
        finally:
            link.calls.remove(call)
            for asking in call.asking:  # nobody is left to take the person's answer
                asking.cancel()


def _both(ours: ProgressFnT, theirs: ProgressFnT | None) -> ProgressFnT:
    if theirs is None:
        return ours

    async def both(progress: float, total: float | None, message: str | None) -> None:
        await ours(progress, total, message)
        await theirs(progress, total, message)

    return both


def client_for(
    target: Any, server: str, options: ClientOptions, **kwargs: Any
) -> GroundswellClient:
    """The client of one local server (``target`` as ``mcp.Client`` takes it)."""
    link = ServerLink(server, options)
    client = GroundswellClient(
        target,
        elicitation_callback=link.elicit,
        sampling_callback=link.sample if options.sampling is not None else None,
        list_roots_callback=link.list_roots if options.roots else None,
        logging_callback=link.log,
        # On the 2026 protocol a server sends log messages only to requests that ask.
        log_level="debug",
        **kwargs,
    )
    client.link = link
    return client
