"""What the sink keeps per run, and the attribute values it derives from event data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from . import attributes as A
from ._content import Conversation

CONTENT_LIMIT = 8_000
# A tuple, not ``int | float``: isinstance with a tuple skips building a union each call.
_SCALARS = (bool, int, float)
NUMBERS = (int, float)


@dataclass
class Run:
    """What the sink keeps of one run."""

    nodes: dict[str, TreeNode] = field(default_factory=dict)
    # With content capture on: each running prompt attempt's conversation, by node id.
    conversations: dict[str, Conversation] = field(default_factory=dict)
    # Spans of this run not ended yet: a finished run with some is kept (late work).
    open: int = 0


@dataclass(slots=True)
class TreeNode:
    """What the sink keeps of one node of a run."""

    # Only what later events need: ended nodes stay as parents for late children.
    type: str
    parent_id: str | None
    context: trace.SpanContext
    model: str | None
    toolset: str | None
    span: Span | None  # None once ended
    run: Run  # the run whose open spans this node's span counts among
    # The context its children start in, made once for all of them (a step's
    # prompts, a workflow's steps) rather than once per child.
    child_context: otel_context.Context | None = None


def ns(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1e9)


def clip(value: Any) -> Any:
    # Long texts are cut inside the structure, so the attribute stays valid JSON.
    if isinstance(value, str):
        if len(value) > CONTENT_LIMIT:
            return f"{value[:CONTENT_LIMIT]}…[truncated {len(value) - CONTENT_LIMIT} chars]"
        return value
    if isinstance(value, dict):
        return {k: clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clip(v) for v in value]
    return value


def as_json(value: Any) -> str:
    value = clip(value)
    return value if isinstance(value, str) else json.dumps(value, default=str)


#: Fields of node events that hold conversation or user content (a server's log text, a
#: question put to a person, a hook's message): exported only with content capture on.
CONTENT_FIELDS: dict[str, frozenset[str]] = {
    "mcp_log": frozenset({"data"}),
    "mcp_progress": frozenset({"message"}),
    "mcp_elicitation": frozenset({"message", "url", "reason", "error", "content"}),
    "hook_system_message": frozenset({"message"}),
    "stop_blocked": frozenset({"reason"}),
    "permission_decision": frozenset({"message"}),
    "session_title": frozenset({"title"}),
}
_NO_FIELDS: frozenset[str] = frozenset()


def event_attributes(data: dict[str, Any], content: bool) -> dict[str, Any]:
    """A node event's span-event attributes; its content fields only when ``content``."""
    hidden = _NO_FIELDS if content else CONTENT_FIELDS.get(str(data.get("type")), _NO_FIELDS)
    return scalar_attributes(data, hidden)


def scalar_attributes(data: dict[str, Any], hidden: frozenset[str] = _NO_FIELDS) -> dict[str, Any]:
    # Event data as span-event attributes: plain scalars only, secrets already redacted.
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("type", "timestamp") or key in hidden:
            continue
        if isinstance(value, _SCALARS) or (isinstance(value, str) and len(value) <= 200):
            out[f"groundswell.{key}"] = value
    return out


def usage_attributes(usage: Any) -> dict[str, int]:
    if not isinstance(usage, dict) or not usage:
        return {}
    read = int(usage.get("cache_read_input_tokens") or 0)
    created = int(usage.get("cache_creation_input_tokens") or 0)
    out = {
        # Anthropic's input_tokens excludes cache reads and writes; the convention includes them.
        A.GEN_AI_USAGE_INPUT_TOKENS: int(usage.get("input_tokens") or 0) + read + created,
        A.GEN_AI_USAGE_OUTPUT_TOKENS: int(usage.get("output_tokens") or 0),
    }
    if read:
        out[A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = read
    if created:
        out[A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = created
    return out


def system_instructions(payload: dict[str, Any], clean: Any) -> dict[str, Any]:
    """A prompt's ``gen_ai.system_instructions`` (its system prompt, cleaned), if it had one."""
    # The agent settles its system prompt (skills included) after the node
    # starts, so it arrives with the end of the node.
    if not payload.get("system"):
        return {}
    system = clean(payload["system"])
    parts = (
        [{"type": "text", "content": system}]
        if isinstance(system, str)
        else [{"type": "text", "content": b.get("text", "")} for b in system]
    )
    return {A.GEN_AI_SYSTEM_INSTRUCTIONS: as_json(parts)}
