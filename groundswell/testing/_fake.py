"""A fake Anthropic Messages API that speaks the real wire protocol.

Use it in-process (``fake.client()``: the real ``anthropic.AsyncAnthropic``
over an ``httpx2.MockTransport``) or on a loopback port (``fake.serve()``: a
real HTTP server thread). Either way the SDK does its real work: request
encoding, SSE decoding, retries, error classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, cast

from ..cache.backends import scope_answers
from ..errors import ConfigurationError
from ._batches import BATCHES, FakeBatches
from ._prompt_cache import PromptCacheLedger
from ._replay import Mismatch, ReplayModel
from ._replies import (
    Answer,
    ErrorReply,
    FakeModel,
    FunctionModel,
    MessagesRequest,
    RawReply,
    Reply,
    SchemaModel,
    ScriptedModel,
    error,
    new_id,
)
from ._thinking import ThinkingLedger

if TYPE_CHECKING:
    import anthropic
    import httpx2

    from ..agent.overrides import Scope
    from ..tree.tree import EventTree

__all__ = ["FakeAnthropicAPI", "LoopbackServer", "auto_client", "use_fake"]

FAKE_API_KEY = "sk-ant-fake-key-for-tests"
# How handle() tells its transport to hold a reply back; never sent over the wire.
DELAY_HEADER = "x-groundswell-fake-delay"


def estimate_tokens(value: Any) -> int:
    """About four characters a token, as the API's own rule of thumb; at least 1."""
    size = len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
    return max(1, (size + 3) // 4)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _chunks(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class FakeAnthropicAPI:
    """The fake API: answers ``/v1/messages``, ``count_tokens`` and the Message Batches API.

    ``model`` chooses the answers: ``None`` for `SchemaModel` (no script
    needed), a list of replies for a `ScriptedModel`, a function of the
    request for a `FunctionModel`, or any object with ``respond(request)``.
    Every request is recorded in `requests`. With ``api_key`` set, other
    keys get a real 401. The model answers each batch request too; `batches`
    records the batches, and ``batch_polls`` is how many retrieves see a
    batch in progress before it ends (see `FakeBatches`).

    Each fake has an answer cache of its own: agents with a cache, put on it
    (by `use_fake`, the ``fake_agents`` fixture, ``agent.override(client=...)``
    or ``Agent(client=fake.client())``), never get an answer that another fake
    gave, in any backend, so no test reads another test's answers. With
    ``share_cache=True`` (or setting `share_cache` later, e.g. in a test using
    ``fake_agents``) its answers go to the agents' ordinary cache instead,
    shared with every other sharing fake and real client, in this process and
    others on a shared backend.
    """

    def __init__(
        self,
        model: FakeModel
        | Sequence[Answer | str]
        | Callable[[MessagesRequest], Answer | str]
        | None = None,
        *,
        api_key: str | None = None,
        share_cache: bool = False,
        batch_polls: int | None = 0,
    ) -> None:
        if model is None:
            self.model: FakeModel = SchemaModel()
        elif isinstance(model, list | tuple):
            self.model = ScriptedModel(model)
        elif callable(model) and not hasattr(model, "respond"):
            self.model = FunctionModel(model)
        elif callable(getattr(model, "respond", None)):
            self.model = cast(FakeModel, model)
        else:
            raise ConfigurationError(
                "groundswell.testing: FakeAnthropicAPI(model) takes a list of replies (a script), "
                "a function of the request, an object with respond(request), or nothing (the "
                f"schema-aware model); got {type(model).__name__} {model!r:.60}"
                + (" (a single reply? put it in a list)" if isinstance(model, str | Reply) else "")
            )
        self.api_key = api_key
        #: False (the default): this fake's answers are cached apart from all others'.
        self.share_cache = share_cache
        self._cache_scope = f"fake-{uuid.uuid4().hex}"
        self.requests: list[MessagesRequest] = []
        self.count_token_requests: list[MessagesRequest] = []
        self._lock = threading.Lock()
        # Signs the thinking blocks sent and checks those sent back, as the API does.
        self._thinking = ThinkingLedger()
        #: What this fake's prompt cache holds (``cache_control``), for usage's cache counts.
        self.prompt_cache = PromptCacheLedger()
        #: The Message Batches received, and the knobs on their processing.
        self.batches = FakeBatches(self._refusal, self._respond, self._message, batch_polls)

    @classmethod
    def from_trace(
        cls, trace: str | os.PathLike[str] | EventTree | dict[str, Any], *, strict: bool = True
    ) -> FakeAnthropicAPI:
        """A fake that answers each model request with the reply a saved run recorded.

        ``trace`` is a trace file (``tree.save(path)``, ``groundswell run ...
        --save path``), a directory of them (``GROUNDSWELL_TRACE_DIR``), an
        ``EventTree`` or its ``to_json()`` dict. Each request is matched to the recorded prompt it
        continues (by user text and turn) and compared with it: model, tools,
        system prompt, user text, sampling settings and the tool results sent.
        With ``strict`` (the default) a request that differs is answered with a
        400 listing every difference (the agent raises it as a
        ``ModelAPIError``); with ``strict=False`` the recorded reply is sent
        anyway. Differences are kept in `mismatches` either way, and
        `remaining` counts recorded calls not replayed.
        """
        return cls(ReplayModel.from_trace(trace, strict=strict))

    @property
    def mismatches(self) -> list[Mismatch]:
        """Requests that differed from the recorded run (for a fake made by `from_trace`)."""
        return list(getattr(self.model, "mismatches", []))

    @property
    def remaining(self) -> int:
        """Replies the script (or the recorded run) still holds; 0 for other models."""
        return int(getattr(self.model, "remaining", 0))

    # -- scripting ------------------------------------------------------------------

    def add(self, *replies: Answer | str) -> FakeAnthropicAPI:
        """Queue replies (switching to a scripted model if needed); returns self.

        A plain string means ``text(string)``.
        """
        if not isinstance(self.model, ScriptedModel):
            self.model = ScriptedModel()
        self.model.add(*replies)
        return self

    @property
    def message_requests(self) -> list[MessagesRequest]:
        """The ``/v1/messages`` requests received, oldest first."""
        return list(self.requests)

    # -- the protocol ---------------------------------------------------------------

    def handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, base_url: str = ""
    ) -> tuple[int, dict[str, str], Iterator[bytes]]:
        """Answer one HTTP request: status, headers, body chunks.

        ``base_url`` is where the client reached the fake (default: ``http://``
        and the ``host`` header), for a batch's ``results_url``.
        """
        headers = {k.lower(): v for k, v in headers.items()}
        route = path.split("?", 1)[0]
        batch = route == BATCHES or route.startswith(BATCHES + "/")
        if not batch and (
            method != "POST" or route not in ("/v1/messages", "/v1/messages/count_tokens")
        ):
            return self._error(error(404, f"no route for {method} {route}"))
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        if not key or (self.api_key is not None and key != self.api_key):
            return self._error(error(401, "invalid x-api-key"))
        # Never keep the key itself in what tests can read back.
        safe_headers = {k: v for k, v in headers.items() if k not in ("x-api-key", "authorization")}
        if batch:
            base_url = base_url or f"http://{headers.get('host', 'fake-anthropic.invalid')}"
            return self.batches.handle(method, path, safe_headers, raw, base_url)
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            return self._error(error(400, f"request body is not JSON: {exc}"))
        request = MessagesRequest(path=path, headers=safe_headers, body=body)
        if route.endswith("count_tokens"):
            with self._lock:
                self.count_token_requests.append(request)
            parts = [body.get("system"), body.get("messages"), body.get("tools")]
            tokens = sum(estimate_tokens(p) for p in parts if p)
            return self._json(200, {"input_tokens": tokens})
        refused = self._refusal(body)
        if refused is not None:
            return self._error(refused)
        answer = self._respond(request)
        if isinstance(answer, ErrorReply):
            return self._error(answer)
        sse = {"content-type": "text/event-stream", DELAY_HEADER: str(answer.delay)}
        if isinstance(answer, RawReply):
            if request.stream:
                return 200, sse, self._raw_stream(answer.body)
            return self._json(200, answer.body, {DELAY_HEADER: str(answer.delay)})
        message = self._message(request, answer)
        if request.stream:
            return 200, sse, self._stream(message, answer)
        status, headers, body = self._json(
            200, message, {DELAY_HEADER: str(answer.delay)} if answer.delay else None
        )
        if answer.cut_stream:  # the connection drops halfway through the body
            whole = b"".join(body)
            body = iter([whole[: len(whole) // 2]])
        return status, headers, body

    def _refusal(self, body: dict[str, Any]) -> ErrorReply | None:
        """The 400 the real API gives a Messages request body, or None if it accepts it."""
        missing = [f for f in ("model", "messages", "max_tokens") if f not in body]
        if missing:
            return error(400, f"{', '.join(missing)}: Field required")
        for i, message in enumerate(body["messages"]):
            if not message.get("content") and i < len(body["messages"]) - 1:
                # The real API refuses empty turns (all but a final assistant prefill).
                return error(400, f"messages.{i}: all messages must have non-empty content")
        refused = self._thinking.check(body) or self.prompt_cache.check(body)
        return None if refused is None else error(400, refused)

    def _respond(self, request: MessagesRequest, answer: Answer | None = None) -> Answer:
        """Record an accepted request; its answer is ``answer`` if given, else the model's."""
        with self._lock:
            self.requests.append(request)
        if answer is not None:
            return answer
        try:
            return self.model.respond(request)
        except Exception as exc:
            # A bug in a test's model function: say so, and tell the SDK not to retry.
            reply = error(
                500, f"groundswell.testing: the fake model raised {type(exc).__name__}: {exc}"
            )
            reply.headers["x-should-retry"] = "false"
            return reply

    def _message(self, request: MessagesRequest, reply: Reply) -> dict[str, Any]:
        body = request.body
        total = estimate_tokens([body.get("system"), body["messages"], body.get("tools")])
        read, written, hour = self.prompt_cache.account(body, estimate_tokens)
        if reply.usage:  # a scripted usage says it all (unscripted counts as before caching)
            read = written = hour = 0
        read = min(read, total)
        written = min(written, total - read)
        hour = min(hour, written)
        usage: dict[str, Any] = {
            "input_tokens": total - read - written,
            "output_tokens": estimate_tokens(reply.content),
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            # The API splits the writes by lifetime (they are priced apart).
            "cache_creation": {
                "ephemeral_5m_input_tokens": written - hour,
                "ephemeral_1h_input_tokens": hour,
            },
        }
        if reply.usage:
            usage.update(reply.usage)
            if "cache_creation" not in reply.usage:
                del usage["cache_creation"]  # the script's writes have no split: 5-minute
        return {
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": reply.model or request.model,
            "content": self._thinking.sign(body, reply.content),
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def _stream(self, message: dict[str, Any], reply: Reply) -> Iterator[bytes]:
        start = {**message, "content": [], "stop_reason": None}
        start["usage"] = {**message["usage"], "output_tokens": 1}
        yield _sse("message_start", {"type": "message_start", "message": start})
        yield _sse("ping", {"type": "ping"})
        blocks = [e for i, b in enumerate(message["content"]) for e in self._stream_block(i, b)]
        if reply.cut_stream:  # the connection drops halfway, cleanly: no message_stop
            yield from blocks[: len(blocks) // 2]
            return
        yield from blocks
        if reply.stream_error is not None:
            yield _sse("error", reply.stream_error.body())
            return
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})

    def _stream_block(self, index: int, block: dict[str, Any]) -> Iterator[bytes]:
        kind = block.get("type")
        first: dict[str, Any]
        deltas: list[dict[str, Any]]
        if kind == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"])]
        elif kind == "tool_use":
            first = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": c}
                for c in _chunks(json.dumps(block.get("input", {})))
            ]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": c} for c in _chunks(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "sig")})
        else:  # server tool blocks and the like arrive whole
            first, deltas = block, []
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": first},
        )
        for delta in deltas:
            yield _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})

    def _raw_stream(self, body: Any) -> Iterator[bytes]:
        """A `raw_reply`'s body as a stream, as far as its shape goes."""
        message = body if isinstance(body, dict) else {}
        start = {k: v for k, v in message.items() if k not in ("content", "stop_reason")}
        start.update(content=[], stop_reason=None)
        yield _sse("message_start", {"type": "message_start", "message": start})
        content = message.get("content")
        for index, block in enumerate(content if isinstance(content, list) else ()):
            if isinstance(block, dict) and (
                block.get("type") == "tool_use"
                or (block.get("type") == "text" and isinstance(block.get("text"), str))
            ):
                yield from self._stream_block(index, block)
                continue
            start_block = {"type": "content_block_start", "index": index, "content_block": block}
            yield _sse("content_block_start", start_block)
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        usage = message.get("usage")
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens")}
            if isinstance(usage, dict)
            else usage,
        }
        yield _sse("message_delta", delta)
        yield _sse("message_stop", {"type": "message_stop"})

    @staticmethod
    def _json(
        status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], Iterator[bytes]]:
        payload = json.dumps(body).encode()
        out = {"content-type": "application/json", "request-id": new_id("req"), **(headers or {})}
        return status, out, iter([payload])

    def _error(self, reply: ErrorReply) -> tuple[int, dict[str, str], Iterator[bytes]]:
        return self._json(reply.status, reply.body(), reply.headers)

    # -- in-process -----------------------------------------------------------------

    def transport(self) -> httpx2.MockTransport:
        import httpx2  # with the SDK, only once a fake client is made (see `client`)

        """An ``httpx2`` transport that answers in-process."""

        async def handler(request: httpx2.Request) -> httpx2.Response:
            status, headers, chunks = self.handle(
                request.method,
                request.url.raw_path.decode(),
                dict(request.headers),
                request.content,
                f"{request.url.scheme}://{request.url.netloc.decode()}",
            )
            delay = float(headers.pop(DELAY_HEADER, 0) or 0)
            if delay:
                await asyncio.sleep(delay)  # in-process: never block the event loop
            return httpx2.Response(status, headers=headers, content=b"".join(chunks))

        return httpx2.MockTransport(handler)

    def client(self, **kwargs: Any) -> anthropic.AsyncAnthropic:
        """A real ``anthropic.AsyncAnthropic`` wired to this fake in-process.

        Keyword arguments go to the client (e.g. ``max_retries=0``).
        """
        kwargs.setdefault("api_key", self.api_key or FAKE_API_KEY)
        # Imported here: the SDK takes seconds to import, and a test module that only
        # builds replies (or imports groundswell.testing) never needs it.
        import anthropic
        import httpx2

        kwargs.setdefault("base_url", "http://fake-anthropic.invalid")
        kwargs.setdefault("http_client", httpx2.AsyncClient(transport=self.transport()))
        return self.scoped(anthropic.AsyncAnthropic(**kwargs))

    def scoped(self, client: anthropic.AsyncAnthropic) -> anthropic.AsyncAnthropic:
        """``client`` (one talking to this fake), given this fake's answer cache; returned.

        `client` and ``serve().client()`` do this already; use it for a client
        you make yourself, e.g. ``AsyncAnthropic(base_url=server.base_url)``.
        """
        scope_answers(client, self.cache_scope)
        return client

    def cache_scope(self) -> str | None:
        """The scope this fake's answers are cached under; ``None`` when `share_cache` is set."""
        return None if self.share_cache else self._cache_scope

    # -- on a port ------------------------------------------------------------------

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> LoopbackServer:
        """Start a real HTTP server thread for this fake (use as a context manager)."""
        return LoopbackServer(self, host, port)


def use_fake(
    fake: FakeAnthropicAPI
    | FakeModel
    | Sequence[Answer | str]
    | Callable[[MessagesRequest], Answer | str]
    | None = None,
    *,
    share_cache: bool | None = None,
    **settings: Any,
) -> Scope[FakeAnthropicAPI]:
    """Put every agent in the process on a fake API while the block runs; yields the fake.

    ``fake`` is a `FakeAnthropicAPI` or anything its constructor takes (a
    script, a function, nothing for the schema-aware model). Agents defined
    anywhere (module-level ones included, in any task or thread) send their
    requests to it, whatever client they were built with; ``settings``
    (``model=...`` and the like) are forced on them too. An agent's own
    ``agent.override(...)`` still wins. Agents with a cache get the fake's own
    answer cache, so answers cached before the block (or by another fake) are
    not used; ``share_cache=True`` sets the fake's `share_cache` to use the
    agents' ordinary cache instead. It also decorates a test function,
    sync or async. The ``fake_agents`` pytest fixture does this for one test::

        with use_fake([text("Hello!")]) as fake:
            assert await greeter.prompt("Hi") == "Hello!"
        assert fake.requests[0].last_user_text() == "Hi"
    """
    from ..agent.overrides import Scope, override_agents

    sdk = sys.modules.get("anthropic")  # not imported yet: fake can be no client of it
    if sdk is not None and isinstance(fake, sdk.AsyncAnthropic):
        raise ConfigurationError(
            "use_fake() takes the FakeAnthropicAPI itself (or a script), not a client: "
            "use_fake(fake), not use_fake(fake.client()); to put agents on any client, "
            "use agent.override(client=...)"
        )
    if isinstance(fake, str | Reply | ErrorReply | RawReply):
        raise ConfigurationError(
            f"use_fake() takes a script as a list of replies; got a single "
            f"{type(fake).__name__}: write use_fake([{fake!r:.40}])"
        )
    api = fake if isinstance(fake, FakeAnthropicAPI) else FakeAnthropicAPI(fake)
    if share_cache is not None:
        api.share_cache = share_cache
    every = override_agents(api.client(), **settings)

    @contextlib.contextmanager
    def block() -> Iterator[FakeAnthropicAPI]:
        with every:
            yield api

    return Scope(block)


def auto_client(
    model: FakeModel | list[Answer] | Callable[[MessagesRequest], Answer | str] | None = None,
    **kwargs: Any,
) -> anthropic.AsyncAnthropic:
    """A real client when ``ANTHROPIC_API_KEY`` is set, else one wired to a fake.

    Lets the same script run offline by default and against the real API when
    a key is present; ``model`` chooses the fake's answers.
    """
    if os.environ.get("ANTHROPIC_API_KEY"):
        import anthropic

        return anthropic.AsyncAnthropic(**kwargs)
    return FakeAnthropicAPI(model).client(**kwargs)


class LoopbackServer:
    """The fake on a real loopback port; ``base_url`` points at it."""

    def __init__(self, fake: FakeAnthropicAPI, host: str, port: int) -> None:
        self.fake = fake
        handler = type("Handler", (_Handler,), {"fake": fake})
        self._server = _Server((host, port), handler)
        self._server.daemon_threads = True
        self.base_url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-anthropic", daemon=True
        )
        self._thread.start()

    def client(self, **kwargs: Any) -> anthropic.AsyncAnthropic:
        """A real ``anthropic.AsyncAnthropic`` talking to this server over TCP."""
        kwargs.setdefault("api_key", self.fake.api_key or FAKE_API_KEY)
        kwargs.setdefault("base_url", self.base_url)
        import anthropic

        return self.fake.scoped(anthropic.AsyncAnthropic(**kwargs))

    def close(self) -> None:
        """Stop the server and its thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-stream is normal in tests; anything else is not.
        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropicAPI
    protocol_version = "HTTP/1.1"
    # Without this, small SSE writes sit in Nagle's buffer and streams stutter.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        status, headers, chunks = self.fake.handle(self.command, self.path, dict(self.headers), raw)
        delay = float(headers.pop(DELAY_HEADER, 0) or 0)
        if delay:
            time.sleep(delay)  # a server thread of its own: sleeping here blocks nobody else
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if headers.get("content-type") == "text/event-stream":
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        else:
            payload = b"".join(chunks)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    do_GET = do_DELETE = do_POST

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass
