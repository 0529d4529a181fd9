"""The event sink that turns a run's event tree into OpenTelemetry spans as it happens."""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode

import groundswell
from groundswell import Event, format_traceback

from . import attributes as A
from ._content import (
    NOT_CAPTURED,
    Conversation,
    first_messages,
    output_messages,
    response_parts,
)
from ._mcp import SpanContexts, mcp_span
from ._values import CONTENT_LIMIT as CONTENT_LIMIT
from ._values import (
    NUMBERS,
    Run,
    TreeNode,
    as_json,
    clip,
    event_attributes,
    ns,
    system_instructions,
    usage_attributes,
)

logger = logging.getLogger("groundswell.otel")

# Finished runs whose span contexts are kept, so late children (background work
# that outlives its run) still join the right trace.
KEEP_FINISHED_RUNS = 8
MAX_RUNS = 1_000
CLOSE_FLUSH_MS = 3_000


@dataclass(frozen=True)
class Capture:
    """What content goes on spans: ``content`` (prompts, completions, tool I/O),
    ``events`` (content also as a span event), ``introspection`` (results of
    the introspection toolset, which describe the whole run)."""

    content: bool = False
    events: bool = False
    introspection: bool = False


_CONTENT_KEYS = (
    A.GEN_AI_SYSTEM_INSTRUCTIONS,
    A.GEN_AI_INPUT_MESSAGES,
    A.GEN_AI_OUTPUT_MESSAGES,
    A.GEN_AI_TOOL_CALL_ARGUMENTS,
    A.GEN_AI_TOOL_CALL_RESULT,
)


# Nodes whose end changes their prompt's conversation (tool calls aside).
_SHAPING = frozenset({"prompt", "summary", "budget"})

# Immutable, so one of each serves every span: the empty context a run's root
# span starts in (a new trace, whatever is current in this thread) and the status
# of a completed node.
_NO_PARENT = otel_context.Context()
_OK = Status(StatusCode.OK)


class OTelSink:
    """Receives every tree event (on its own thread) and mirrors the tree as spans.

    One trace per run; a span starts when its node starts and ends when it
    ends, with the node's own timestamps, so a viewer shows work in progress.
    """

    def __init__(
        self,
        provider: trace.TracerProvider,
        *,
        capture: Capture = Capture(),
        owned: bool = False,
    ) -> None:
        self.provider = provider
        self.capture = capture
        self._owned = owned
        self._tracer = provider.get_tracer("groundswell", groundswell.__version__)
        self._runs: OrderedDict[str, Run] = OrderedDict()
        # Ids of finished runs still in _runs, oldest first: finishing a run looks
        # only at these, never at every run open (1,000 concurrent runs cost no more).
        self._finished: OrderedDict[str, None] = OrderedDict()
        # In how many runs each node id is: a mounted tree can put one in two.
        self._runs_holding: dict[str, int] = {}
        self._closed = False
        self.mcp_spans = SpanContexts()  # MCP calls in flight: trace context for their servers

    # -- event dispatch -----------------------------------------------------------

    def handle(self, event: Event) -> None:
        if self._closed:
            return
        data = event.data
        kind = event.kind
        if kind == "node_start":
            self._start(event.run_id, data)
        elif kind == "node_end":
            self._end(event.run_id, data)
        else:
            self._event(event.run_id, data["id"], data["event"])

    def _run(self, run_id: str) -> Run:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = Run()
        return run

    def _find(self, node_id: str | None) -> TreeNode | None:
        if node_id is None:
            return None
        for run in reversed(self._runs.values()):
            node = run.nodes.get(node_id)
            if node is not None:
                return node
        return None

    def _start(self, run_id: str, data: dict[str, Any]) -> None:
        node_type, payload = data["type"], data.get("payload") or {}
        name = groundswell.scrub(data["name"])  # names come from users' code too
        node_id = data["id"]
        parent_id = data.get("parent_id")
        run = self._run(run_id)
        ctx = _NO_PARENT  # the root of a run starts a new trace
        if parent_id is not None:
            # The parent is nearly always in this run and in no other: then it is
            # what searching every run (newest first) would find, at no cost.
            parent = run.nodes.get(parent_id) if self._runs_holding.get(parent_id) == 1 else None
            if parent is None:
                parent = self._find(parent_id)
            if parent is not None:
                ctx = parent.child_context or self._child_context(parent)
        span_name, kind, attrs = self._describe(node_type, name, payload)
        attrs[A.NODE_ID] = node_id
        if self.capture.content:
            self._start_content(run_id, node_id, node_type, parent_id, payload, attrs)
        if parent_id is None:
            attrs[A.RUN_ID] = run_id  # the trace id groups the rest of the run
        when = data.get("timestamp")
        span = self._tracer.start_span(
            span_name,
            context=ctx,
            kind=kind,
            attributes=attrs,
            start_time=None if when is None else int(when * 1e9),
        )
        if self.capture.events:
            self._content_event(span, attrs, when)
        self.mcp_spans.opened(node_type, node_id, span)
        before = run.nodes.get(node_id)
        if before is None:
            self._runs_holding[node_id] = self._runs_holding.get(node_id, 0) + 1
        elif before.span is not None:
            before.run.open -= 1  # the same id started again: the earlier span is lost
        run.nodes[node_id] = TreeNode(
            node_type,
            parent_id,
            span.get_span_context(),
            str(payload["model"]) if payload.get("model") else None,
            str(payload["toolset"]) if payload.get("toolset") else None,
            span,
            run,
        )
        run.open += 1

    @staticmethod
    def _child_context(parent: TreeNode) -> otel_context.Context:
        # While the parent's span is open its children start under the span itself
        # (what span processors see as the parent); once it ended, under its context.
        if parent.span is not None:
            ctx = parent.child_context = trace.set_span_in_context(parent.span)
            return ctx
        return trace.set_span_in_context(NonRecordingSpan(parent.context))

    def _describe(
        self, node_type: str, name: str, payload: dict[str, Any]
    ) -> tuple[str, SpanKind, dict[str, Any]]:
        internal = SpanKind.INTERNAL
        content = self.capture.content
        if node_type == "workflow":
            attrs: dict[str, Any] = {
                A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_WORKFLOW,
                A.GEN_AI_WORKFLOW_NAME: name,
                A.OPENINFERENCE_SPAN_KIND: A.KIND_CHAIN,
            }
            if content and "input" in payload:
                attrs[A.INPUT_VALUE] = as_json(self._clean(payload["input"]))
            return f"{A.OP_INVOKE_WORKFLOW} {name}", internal, attrs
        if node_type == "step":
            return f"step {name}", internal, {A.OPENINFERENCE_SPAN_KIND: A.KIND_CHAIN}
        if node_type == "prompt":
            agent = str(payload.get("agent") or name)
            attrs = {
                A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                A.GEN_AI_PROVIDER_NAME: A.PROVIDER_ANTHROPIC,
                A.GEN_AI_AGENT_NAME: agent,
                A.OPENINFERENCE_SPAN_KIND: A.KIND_AGENT,
                A.GEN_AI_OUTPUT_TYPE: "json" if payload.get("response_format") else "text",
            }
            if payload.get("model"):
                attrs[A.GEN_AI_REQUEST_MODEL] = str(payload["model"])
            return f"{A.OP_INVOKE_AGENT} {agent}", internal, attrs
        if node_type == "model_call":
            request = payload.get("request") or {}
            attrs = {
                A.GEN_AI_OPERATION_NAME: A.OP_CHAT,
                A.GEN_AI_PROVIDER_NAME: A.PROVIDER_ANTHROPIC,
                A.GEN_AI_REQUEST_MODEL: name,
                A.OPENINFERENCE_SPAN_KIND: A.KIND_LLM,
            }
            for key, attr in (
                ("max_tokens", A.GEN_AI_REQUEST_MAX_TOKENS),
                ("temperature", A.GEN_AI_REQUEST_TEMPERATURE),
                ("top_p", A.GEN_AI_REQUEST_TOP_P),
                ("top_k", A.GEN_AI_REQUEST_TOP_K),
            ):
                if isinstance(request.get(key), NUMBERS):
                    attrs[attr] = request[key]
            if request.get("stop_sequences"):
                attrs[A.GEN_AI_REQUEST_STOP_SEQUENCES] = [str(s) for s in request["stop_sequences"]]
            return f"{A.OP_CHAT} {name}", SpanKind.CLIENT, attrs
        if node_type in ("tool_call", "mcp_call"):
            attrs = {
                A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
                A.GEN_AI_TOOL_NAME: name,
                A.GEN_AI_TOOL_TYPE: (
                    A.TOOL_TYPE_EXTENSION if node_type == "mcp_call" else A.TOOL_TYPE_FUNCTION
                ),
                A.OPENINFERENCE_SPAN_KIND: A.KIND_TOOL,
            }
            if payload.get("tool_use_id"):
                attrs[A.GEN_AI_TOOL_CALL_ID] = str(payload["tool_use_id"])
            if payload.get("toolset"):
                attrs[A.TOOLSET] = str(payload["toolset"])
            if content and "input" in payload:
                attrs[A.GEN_AI_TOOL_CALL_ARGUMENTS] = as_json(self._clean(payload["input"]))
            if node_type == "mcp_call" and isinstance(payload.get("mcp"), dict):
                return mcp_span(name, payload["mcp"], attrs)
            return f"{A.OP_EXECUTE_TOOL} {name}", internal, attrs
        if node_type == "reflection":
            attrs = {A.OPENINFERENCE_SPAN_KIND: A.KIND_CHAIN}
            for key, attr in (
                ("level", A.REFLECTION_LEVEL),
                ("strategy", A.REFLECTION_STRATEGY),
                ("failed_node_id", A.REFLECTION_FAILED_NODE),
            ):
                if isinstance(payload.get(key), str):
                    attrs[attr] = payload[key]
            if isinstance(payload.get("attempt"), int):
                attrs[A.ATTEMPT] = payload["attempt"]
            return f"reflection {name}", internal, attrs
        return f"{node_type} {name}", internal, {A.OPENINFERENCE_SPAN_KIND: A.KIND_CHAIN}

    @staticmethod
    def _clean(value: Any) -> Any:
        # The one scrubber every output uses (registered and environment
        # secrets, key shapes, secret-named keys and assignments).
        return groundswell.redact(value)

    def _content_event(self, span: Span, attrs: dict[str, Any], when: float | None) -> None:
        # SPAN_AND_EVENT: the content attributes are repeated as a span event, for
        # backends that index events rather than attributes.
        if self.capture.events:
            content = {k: attrs[k] for k in _CONTENT_KEYS if k in attrs}
            if content:
                span.add_event(A.GEN_AI_CONTENT_EVENT, content, ns(when))

    def _prepare(self, value: Any) -> Any:
        # Content joining a conversation: secrets out, long strings clipped.
        return clip(self._clean(value))

    def _start_content(
        self,
        run_id: str,
        node_id: str,
        node_type: str,
        parent_id: str | None,
        payload: dict[str, Any],
        attrs: dict[str, Any],
    ) -> None:
        """Content attributes known when a node starts (capture on)."""
        run = self._run(run_id)
        if node_type == "prompt":
            # The attempt's conversation starts; its chat spans read it turn by turn.
            first = first_messages(payload, self._clean, clip)
            conversation = Conversation(first, self._prepare)
            run.conversations[node_id] = conversation
            attrs[A.GEN_AI_INPUT_MESSAGES] = json.dumps(
                conversation.initial(), default=str, ensure_ascii=False
            )
            attrs[A.INPUT_VALUE] = clip(self._clean(payload.get("user") or ""))
        elif node_type == "model_call":
            current = run.conversations.get(parent_id or "")
            if current is not None:
                sent = (payload.get("request") or {}).get("messages")
                attrs[A.GEN_AI_INPUT_MESSAGES] = current.input_json(sent)
                if current.omitted:  # sent, but not in the tree: not shown
                    attrs[A.INPUT_MESSAGES_OMITTED] = current.omitted

    def _end_content(
        self, run_id: str, node_id: str, node: TreeNode, payload: dict[str, Any]
    ) -> None:
        """What a node's end adds to its prompt's conversation (capture on)."""
        run = self._runs.get(run_id)
        if run is None or not run.conversations:
            return
        if node.type == "prompt":
            run.conversations.pop(node_id, None)
            return
        if node.type == "summary":
            # A summarize budget's summary: applied when its budget node ends.
            budget = self._find(node.parent_id)
            conversation = run.conversations.get(budget.parent_id or "") if budget else None
            if conversation is not None and isinstance(payload.get("output"), str):
                conversation.summaries[node.parent_id or ""] = payload["output"]
            return
        conversation = run.conversations.get(node.parent_id or "")
        if conversation is not None:  # a budget node: what it removed or summarized
            summary = conversation.summaries.pop(node_id, None)
            if not payload.get("summarized_turns"):
                summary = None
            conversation.shorten(payload.get("removed") or (), summary)

    def _tool_result(
        self, run_id: str, node: TreeNode, payload: dict[str, Any], output: Any
    ) -> None:
        """A tool call's result (cleaned) joins its prompt's conversation (capture on)."""
        run = self._runs.get(run_id)
        conversation = run.conversations.get(node.parent_id or "") if run else None
        if conversation is not None and payload.get("tool_use_id"):
            conversation.add_result(str(payload["tool_use_id"]), output)

    def _response_content(
        self, run_id: str, node: TreeNode, response: dict[str, Any], attrs: dict[str, Any]
    ) -> None:
        """A chat span's output messages; the answer joins its prompt's conversation."""
        stop_reason = str(response["stop_reason"]) if response.get("stop_reason") else None
        content = response.get("content")
        if isinstance(content, list):
            parts = response_parts(self._prepare(content))
        else:  # a record from before responses kept their content
            parts = [{"type": "text", "content": self._prepare(response.get("text", ""))}]
            parts += [{"type": "tool_call", "name": t} for t in response.get("tool_calls", [])]
        attrs[A.GEN_AI_OUTPUT_MESSAGES] = as_json(output_messages(parts, stop_reason))
        said = "".join(str(p["content"]) for p in parts if p.get("type") == "text")
        if said:
            attrs[A.OUTPUT_VALUE] = said
        run = self._runs.get(run_id)
        conversation = run.conversations.get(node.parent_id or "") if run else None
        if conversation is not None and isinstance(content, list):
            # The loop runs the tools only when the model stopped to call them.
            calls = [
                str(p["id"]) for p in parts if p.get("type") == "tool_call" and "server" not in p
            ]
            conversation.add_response(parts, calls if stop_reason == "tool_use" else [])

    def _end(self, run_id: str, data: dict[str, Any]) -> None:
        run = self._runs.get(run_id)
        node = (run.nodes.get(data["id"]) if run else None) or self._find(data["id"])
        if node is None:
            return  # started before this sink did: nothing to end
        status = data["status"]
        if node.span is None:
            # A finished node changed status later (a prompt marked "revised"):
            # its span is gone, so say it on the nearest span still open.
            self._note_on_open_ancestor(
                node.parent_id,
                "groundswell.status_changed",
                {A.EVENT_NODE_ID: data["id"], A.NODE_STATUS: status},
                data.get("ended_at"),
            )
            return
        span, node.span = node.span, None
        self.mcp_spans.closed(node.type, data["id"])
        node.child_context = None  # later children start under the ended span's context
        node.run.open -= 1
        metrics = data.get("metrics") or {}
        payload = data.get("payload") or {}
        attrs: dict[str, Any] = {A.NODE_STATUS: status}
        if isinstance(metrics.get("attempt"), int):
            attrs[A.ATTEMPT] = metrics["attempt"]
        cost = metrics.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            attrs[A.COST_USD] = float(cost)  # model_call, prompt, step and workflow spans
        if node.type in ("prompt", "model_call"):
            attrs.update(usage_attributes(metrics.get("usage")))
        if node.type == "prompt":
            if "cache" in metrics:
                attrs[A.CACHE] = str(metrics["cache"])
            share = metrics.get("prompt_cache_share")
            if isinstance(share, int | float) and not isinstance(share, bool):
                attrs[A.PROMPT_CACHE_SHARE] = float(share)
            if isinstance(metrics.get("turns"), int):
                attrs[A.TURNS] = metrics["turns"]
            if self.capture.content:
                attrs.update(system_instructions(payload, self._clean))
            if self.capture.content and "output" in payload:
                output = as_json(self._clean(payload["output"]))
                attrs[A.GEN_AI_OUTPUT_MESSAGES] = as_json(
                    output_messages([{"type": "text", "content": output}], "stop")
                )
                attrs[A.OUTPUT_VALUE] = output
        elif node.type == "model_call":
            response = payload.get("response") or {}
            if response.get("id"):
                attrs[A.GEN_AI_RESPONSE_ID] = str(response["id"])
            if response.get("model"):
                attrs[A.GEN_AI_RESPONSE_MODEL] = str(response["model"])
            if response.get("stop_reason"):
                attrs[A.GEN_AI_RESPONSE_FINISH_REASONS] = [str(response["stop_reason"])]
            if self.capture.content and response:
                self._response_content(run_id, node, response, attrs)
        elif node.type in ("tool_call", "mcp_call"):
            allowed = self.capture.content and (
                node.toolset != "introspection" or self.capture.introspection
            )
            seen: Any = NOT_CAPTURED  # what the model read, as its next turn shows it
            if allowed and "output" in payload:
                seen = clip(self._clean(payload["output"]))  # cleaned once, used twice
                result = seen if isinstance(seen, str) else json.dumps(seen, default=str)
                attrs[A.GEN_AI_TOOL_CALL_RESULT] = result
                attrs[A.OUTPUT_VALUE] = result
            if self.capture.content:
                self._tool_result(run_id, node, payload, seen)
        elif node.type == "workflow" and self.capture.content and "output" in payload:
            attrs[A.OUTPUT_VALUE] = as_json(self._clean(payload["output"]))
        if self.capture.content and node.type in _SHAPING:
            self._end_content(run_id, data["id"], node, payload)
        ended = data.get("ended_at")
        end_time = None if ended is None else int(ended * 1e9)
        if self.capture.events:
            self._content_event(span, attrs, ended)
        if status == "failed":
            error = data.get("error")
            error_type = str((error or {}).get("type") or "_OTHER")
            error_message = groundswell.scrub(str((error or {}).get("message") or ""))
            # Set with the rest, in the same (last) place: one call into the SDK.
            attrs[A.ERROR_TYPE] = error_type
            span.set_attributes(attrs)
            exception = {A.EXCEPTION_TYPE: error_type, A.EXCEPTION_MESSAGE: error_message}
            # Where it was raised, in the text form viewers show under "stacktrace".
            stacktrace = format_traceback(error) if isinstance(error, dict) else None
            if stacktrace is not None:
                exception[A.EXCEPTION_STACKTRACE] = stacktrace
            span.add_event(A.EXCEPTION_EVENT, exception, end_time)
            span.set_status(Status(StatusCode.ERROR, f"{error_type}: {error_message}"[:500]))
        else:
            span.set_attributes(attrs)
            if status == "completed":
                span.set_status(_OK)
        span.end(end_time=end_time)
        if node.parent_id is None:
            self._finish_run(run_id)

    def _event(self, run_id: str, node_id: str, event: dict[str, Any]) -> None:
        run = self._runs.get(run_id)
        node = (run.nodes.get(node_id) if run else None) or self._find(node_id)
        if node is None:
            return
        kind = str(event.get("type"))
        when = ns(event.get("timestamp"))
        if kind == "stop_blocked" and self.capture.content and run is not None:
            conversation = run.conversations.get(node_id)
            if conversation is not None:  # a Stop hook sent the agent on with its reason
                conversation.add_user(str(event.get("reason") or "") or "Please continue.")
        if kind == "cache_hit" and node.type == "prompt" and node.span is not None:
            self._cache_hit_span(node, event, when)
        attrs = event_attributes(self._clean(event), self.capture.content)
        if node.span is not None:
            node.span.add_event(kind, attrs, when)
        else:
            attrs[A.EVENT_NODE_ID] = node_id
            self._note_on_open_ancestor(node.parent_id, kind, attrs, event.get("timestamp"))

    def _cache_hit_span(self, node: TreeNode, event: dict[str, Any], when: int | None) -> None:
        # A hit makes no model call; an INTERNAL chat span (no usage) shows where it stood.
        model = node.model or ""
        attrs: dict[str, Any] = {
            A.GEN_AI_OPERATION_NAME: A.OP_CHAT,
            A.GEN_AI_PROVIDER_NAME: A.PROVIDER_ANTHROPIC,
            A.GEN_AI_REQUEST_MODEL: model,
            A.OPENINFERENCE_SPAN_KIND: A.KIND_LLM,
            A.CACHE_HIT: True,
        }
        if isinstance(event.get("key"), str):
            attrs[A.CACHE_KEY] = event["key"]
        if isinstance(event.get("age_s"), NUMBERS):
            attrs[A.CACHE_AGE_S] = event["age_s"]
        assert node.span is not None
        span = self._tracer.start_span(
            f"{A.OP_CHAT} {model}".strip(),
            context=trace.set_span_in_context(node.span),
            kind=SpanKind.INTERNAL,
            attributes=attrs,
            start_time=when,
        )
        span.set_status(Status(StatusCode.OK))
        span.end(end_time=when)

    def _note_on_open_ancestor(
        self, parent_id: str | None, name: str, attrs: dict[str, Any], when: float | None
    ) -> None:
        node = self._find(parent_id)
        while node is not None and node.span is None:
            node = self._find(node.parent_id)
        if node is not None and node.span is not None:
            node.span.add_event(name, attrs, ns(when))

    def _finish_run(self, run_id: str) -> None:
        if run_id not in self._runs:
            return
        self._runs.move_to_end(run_id)
        finished = self._finished
        finished[run_id] = None
        finished.move_to_end(run_id)
        excess = len(finished) - KEEP_FINISHED_RUNS
        if excess <= 0:
            return
        # Only finished runs are looked at: the newest KEEP_FINISHED_RUNS stay, and
        # older ones are forgotten, oldest first.
        for rid in list(islice(finished, excess)):
            # A run whose work outlived it keeps its spans open until that work
            # ends, unless far too many such runs pile up (hung background tasks).
            if len(self._runs) <= MAX_RUNS and self._runs[rid].open:
                continue
            del finished[rid]
            self._forget(self._runs.pop(rid))

    def _forget(self, run: Run) -> None:
        holding = self._runs_holding
        for node_id in run.nodes:
            left = holding.pop(node_id, 1) - 1
            if left:
                holding[node_id] = left
        self._close_run(run)

    @staticmethod
    def _close_run(run: Run) -> None:
        # Work still running when its run is forgotten (or the sink closes): end its
        # span honestly marked incomplete rather than leaking it.
        for node in run.nodes.values():
            if node.span is not None:
                node.span.set_attribute(A.INCOMPLETE, True)
                node.span.end()
                node.span = None
                node.child_context = None
                node.run.open -= 1

    def close(self) -> None:
        """End spans still open, flush, and shut the provider down if this sink made it."""
        self._closed = True
        self.mcp_spans.clear()
        for run in self._runs.values():
            self._close_run(run)
        self._runs.clear()
        self._finished.clear()
        self._runs_holding.clear()
        # Exporters retry a failing collector for many seconds, ignoring flush
        # timeouts; at exit that must not hold the process, so flushing (and
        # shutting down a provider this sink made) gets a bounded wait on a
        # daemon thread.
        worker = threading.Thread(target=self._flush, name="groundswell-otel-close", daemon=True)
        worker.start()
        worker.join(CLOSE_FLUSH_MS / 1000)
        if worker.is_alive():
            logger.warning("spans not exported within %d ms at close; giving up", CLOSE_FLUSH_MS)

    def _flush(self) -> None:
        try:
            flush = getattr(self.provider, "force_flush", None)
            if callable(flush):
                flush(CLOSE_FLUSH_MS)
            shutdown = getattr(self.provider, "shutdown", None)
            if self._owned and callable(shutdown):
                shutdown()
        except Exception as exc:
            logger.warning("exporting spans at close failed: %s", exc)
