"""The ASGI application: ``POST /`` takes a ``RunAgentInput`` and streams AG-UI events (SSE).

Pure ASGI, no web framework: any ASGI server (uvicorn, hypercorn) serves it,
and any framework mounts it. ``GET /`` answers a short JSON description.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from ..agent.core import Agent
from ..errors import ConfigurationError
from ..runtime.context import RunWatch, current_frame, unwatch_runs, watch_runs
from ..scrubbing.scrubber import scrub
from ..scrubbing.serialize import jsonable, redact
from ..tree.events import Event
from ..workflow.workflow import Workflow
from .inputs import agent_call, workflow_call

__all__ = ["MAX_BODY", "AGUIApp"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: The largest request body taken, in bytes (a conversation with long messages fits).
MAX_BODY = 16 * 1024 * 1024
_DONE = object()


class AGUIApp:
    """An ASGI application that runs ``target`` for each AG-UI request (see `groundswell.agui.app`)."""

    def __init__(
        self,
        target: Workflow[..., Any] | Agent[Any],
        *,
        arguments: Callable[[Any], Mapping[str, Any]] | None = None,
    ) -> None:
        if not isinstance(target, Workflow | Agent):
            raise ConfigurationError(
                f"groundswell.agui.app() serves a Workflow or an Agent, got {type(target).__name__}"
            )
        if arguments is not None and not isinstance(target, Workflow):
            raise ConfigurationError(
                "app(arguments=...) builds a workflow's arguments; an agent takes the conversation"
            )
        if arguments is not None and not callable(arguments):
            raise ConfigurationError(
                f"app(arguments=...) must be a callable taking the RunAgentInput, got {arguments!r}"
            )
        from ag_ui.core import RunAgentInput
        from ag_ui.encoder import EventEncoder

        self.target = target
        self.arguments = arguments
        self._input = RunAgentInput
        self._encoder = EventEncoder()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":
            return  # a websocket: not served (the server closes it)
        root = scope.get("root_path") or ""
        path = scope["path"]
        if root and path.startswith(root):
            path = path[len(root) :]
        if path not in ("", "/"):
            await _json(send, 404, {"error": f"no such path {scope['path']!r}: POST to /"})
            return
        method = scope["method"]
        if method in ("GET", "HEAD"):
            await _json(send, 200, self.describe())
            return
        if method != "POST":
            await _json(
                send, 405, {"error": f"{method} is not allowed: POST a RunAgentInput"}, allow=True
            )
            return
        body = await _body(receive)
        if body is None:
            await _json(send, 413, {"error": f"the body is larger than {MAX_BODY} bytes"})
            return
        try:
            run_input, call = self.parse(body)
        except ConfigurationError as exc:
            await _json(send, 422, {"error": scrub(str(exc))})
            return
        await self.stream(run_input, call, receive, send)

    def describe(self) -> dict[str, Any]:
        """What ``GET /`` answers: the target and how to call it."""
        kind = "workflow" if isinstance(self.target, Workflow) else "agent"
        return {
            "protocol": "ag-ui",
            "kind": kind,
            "name": self.target.name,
            "usage": "POST a RunAgentInput as JSON to this path; AG-UI events stream back as SSE",
        }

    def parse(self, body: bytes) -> tuple[Any, Any]:
        """The request's ``RunAgentInput`` and the target's call; `ConfigurationError` if bad."""
        from pydantic import ValidationError

        try:
            data = json.loads(body)
        except ValueError as exc:
            raise ConfigurationError(f"the body is not JSON: {exc}") from None
        try:
            run_input = self._input.model_validate(data)
        except ValidationError as exc:
            wrong = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
            )
            raise ConfigurationError(f"the body is not a RunAgentInput: {wrong}") from None
        if isinstance(self.target, Workflow):
            return run_input, workflow_call(self.target, run_input, self.arguments)
        return run_input, agent_call(run_input)

    async def stream(self, run_input: Any, call: Any, receive: Receive, send: Send) -> None:
        """Run the target and send its AG-UI events as they happen."""
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", self._encoder.get_content_type().encode()),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
                ],
            }
        )
        events = self.events(run_input, call)
        watcher = asyncio.ensure_future(_disconnected(receive))
        try:
            while True:
                next_event = asyncio.ensure_future(anext(events, None))
                await asyncio.wait([next_event, watcher], return_when=asyncio.FIRST_COMPLETED)
                if not next_event.done():  # the client went away: stop the run
                    next_event.cancel()
                    await asyncio.gather(next_event, return_exceptions=True)
                    break
                event = next_event.result()
                if event is None:
                    break
                await send(
                    {"type": "http.response.body", "body": event.encode(), "more_body": True}
                )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            await events.aclose()

    async def events(self, run_input: Any, call: Any) -> AsyncGenerator[str, None]:
        """The run's AG-UI events, encoded as SSE, from RUN_STARTED to RUN_FINISHED or RUN_ERROR."""
        from ag_ui.core import RunErrorEvent, RunFinishedEvent, RunStartedEvent

        from .translate import Translator, clean

        encode = self._encoder.encode
        loop = asyncio.get_running_loop()
        thread = threading.get_ident()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def put(item: Any) -> None:
            # Sync steps and tools run on other threads; the queue is the loop's.
            if threading.get_ident() == thread:
                queue.put_nowait(item)
            else:
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def on_event(event: Event) -> None:
            state = None
            if event.kind == "node_start" and event.node.type == "step":
                # The kernel notes changes of ctx.state when a step ends; the served
                # workflow's state as a step starts shows the changes made between steps.
                frame = current_frame()
                ctx = frame.workflow if frame is not None else None
                if ctx is not None and ctx.node.parent_id is None:
                    state = jsonable(ctx.state)
            put(("tree", event, state))

        def on_stream(run: Any, event: Any) -> None:
            put(("stream", run.node.id if run.has_node else None, event))

        workflow = isinstance(self.target, Workflow)
        watch = RunWatch(on_event, on_stream, call.state if workflow else None)
        outcome: dict[str, Any] = {}

        async def run() -> None:
            token = watch_runs(watch)
            try:
                if workflow:
                    outcome["output"] = (await self.target.run(**call.kwargs)).output
                else:
                    result = await self.target.run(call.prompt, message_history=call.history)
                    outcome["output"] = result.output
            except Exception as exc:
                outcome["error"] = exc
            finally:
                unwatch_runs(token)
                put(_DONE)

        ids = {"thread_id": run_input.thread_id, "run_id": run_input.run_id}
        yield encode(clean(RunStartedEvent(**ids, parent_run_id=run_input.parent_run_id)))
        translator = Translator()
        if workflow:
            for event in translator.snapshot(call.state):
                yield encode(clean(event))
        task = asyncio.ensure_future(run())
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    break
                kind, first, second = item
                out = (
                    translator.tree(first, second)
                    if kind == "tree"
                    else translator.stream(first, second)
                )
                for event in out:
                    yield encode(clean(event))
        finally:
            if not task.done():  # the client left: the run is cancelled with its nodes
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        error = outcome.get("error")
        if error is not None:
            message = scrub(f"{type(error).__name__}: {error}")
            yield encode(clean(RunErrorEvent(message=message, code=type(error).__name__)))
        else:
            result = redact(outcome.get("output"))
            yield encode(clean(RunFinishedEvent(**ids, result=result)))


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _body(receive: Receive) -> bytes | None:
    """The request body, or None when it is larger than `MAX_BODY`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _disconnected(receive: Receive) -> None:
    """Returns when the client goes away."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _json(send: Send, status: int, body: dict[str, Any], *, allow: bool = False) -> None:
    payload = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    if allow:
        headers.append((b"allow", b"GET, HEAD, POST"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
