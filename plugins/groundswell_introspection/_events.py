"""``read_event_history``: what happened in the run, failures and warnings marked, summarized."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from groundswell import EventNode, NodeStatus, NodeType, ToolError

from ._common import Limits, anchor, clip, where, workflow_in_tree, workflow_node

__all__ = ["INTERNAL_EVENTS", "READ_ONLY_TOOLS", "build", "level_of"]

#: Events about the machinery rather than the work (cache coordination, the durable
#: engine's bookkeeping, the history API's audit records, context providers' sizes, raw
#: hook outputs): never shown to an agent.
INTERNAL_EVENTS = frozenset(
    {
        "cache_wait",
        "cache_skipped",
        "context",
        "enqueued",
        "hook_ignored",
        "hook_output",
        "introspection.query",
        "recorded",
        "recovered",
    }
)
#: Introspection tools that only look: their own calls are left out of the history.
READ_ONLY_TOOLS = frozenset(
    {
        "inspect_current_node",
        "read_ancestor_chain",
        "list_siblings_children",
        "inspect_prior_outputs",
        "read_ancestor_outputs",
        "inspect_hierarchy",
        "read_event_history",
        "inspect_state_snapshot",
        "inspect_cache_status",
        "list_mount_points",
    }
)
_ERRORS = frozenset({"tool_timeout", "call_timeout", "revision_rejected", "output_truncated"})
_WARNINGS = frozenset(
    {
        "truncated",
        "extraction_missed",
        "strategy_fallback",
        "reflection_skipped",
        "detached",
        "stop_blocked",
        "tool_result_blocked",
        "hook_stopped",
        "retry_wait",
        "stream_retry",
        "max_tokens_continue",
        "summarize_failed",
    }
)
_MCP_ERROR_LEVELS = frozenset({"error", "critical", "alert", "emergency"})
_TOOL_TYPES = (NodeType.TOOL_CALL, NodeType.MCP_CALL)


def level_of(kind: str, data: dict[str, Any] | None, node: EventNode) -> str:
    """``error``, ``warning`` or ``info`` for one event of the history."""
    if kind == "node_end":
        if node.status is NodeStatus.FAILED:
            return "error"
        return "warning" if node.status is NodeStatus.CANCELLED else "info"
    if kind == "mcp_log" and data:
        level = str(data.get("level", "")).lower()
        if level in _MCP_ERROR_LEVELS:
            return "error"
        return "warning" if level == "warning" else "info"
    if kind in _WARNINGS or kind.endswith("_warning"):
        return "warning"
    if kind in _ERRORS or kind.endswith(("_error", "_failed")):
        return "error"
    return "info"


def _internal(node: EventNode) -> bool:
    """An agent's own look-only introspection call: noise in the history it reads."""
    return (
        node.type is NodeType.TOOL_CALL
        and node.name in READ_ONLY_TOOLS
        and node.payload.get("toolset") == "introspection"
    )


def build(limits: Limits) -> list[Callable[..., Any]]:
    """The ``read_event_history`` tool."""
    max_chars = limits.max_chars

    async def read_event_history(
        event_types: list[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        order: Literal["asc", "desc"] = "desc",
        scope: Literal["run", "current"] = "run",
        workflow_id: str | None = None,
        include_full_context: bool = False,
    ) -> dict[str, Any]:
        """Read the run's events (node starts and ends, events recorded on nodes), failures
        with their error type and message, and a summary: counts, types, time span.

        Args:
            event_types: Only these types (e.g. node_start, node_end, cache_hit,
                state_snapshot), or levels: "error" (failed nodes, error events) and
                "warning".
            since: Only events at or after this Unix time.
            until: Only events at or before this Unix time.
            limit: How many events to return at most (1-1000); the summary counts all.
            order: "desc" (newest first) or "asc".
            scope: "run" (the whole run) or "current" (your node and below).
            workflow_id: Only events of this workflow of the run (it and everything
                under it).
            include_full_context: Give each event's whole data, node inputs and outputs,
                and failures' tracebacks (each cut at the size limit).
        """
        frame = where("read_event_history")
        tree = frame.tree
        if workflow_id is not None:
            if scope == "current":
                raise ToolError("read_event_history: give workflow_id or scope='current', not both")
            start = workflow_in_tree(tree, workflow_id, "read_event_history")
        elif scope == "current":
            start = anchor(frame)
        else:
            assert tree.root is not None  # a run's tree always has its root
            start = tree.root
        wanted = set(event_types) if event_types else None
        size = max_chars if include_full_context else 300
        found: list[dict[str, Any]] = []
        levels: Counter[str] = Counter()
        tools: Counter[str] = Counter()
        hidden = 0
        workflow_of: dict[str, EventNode | None] = {}
        for n in tree.walk(start.id):
            if n.type is NodeType.WORKFLOW:
                wf: EventNode | None = n
            elif n.parent_id in workflow_of:
                wf = workflow_of[n.parent_id]
            else:
                wf = workflow_node(tree, n)
            workflow_of[n.id] = wf
            happenings: list[tuple[str, float, dict[str, Any] | None]] = [
                ("node_start", n.timestamp, None)
            ]
            if n.ended_at is not None:
                happenings.append(("node_end", n.ended_at, {"status": n.status.value}))
            for event in n.events:
                fields = {k: v for k, v in event.items() if k not in ("type", "timestamp")}
                at = float(event.get("timestamp", 0))
                happenings.append((str(event.get("type")), at, fields))
            internal = _internal(n)
            for kind, at, data in happenings:
                if internal or kind in INTERNAL_EVENTS:
                    hidden += 1
                    continue
                level = level_of(kind, data, n)
                if wanted is not None and kind not in wanted and level not in wanted:
                    continue
                if (since is not None and at < since) or (until is not None and at > until):
                    continue
                item: dict[str, Any] = {
                    "type": kind,
                    "timestamp": at,
                    "node_id": n.id,
                    "node_type": n.type.value,
                    "node_name": n.name,
                    "workflow_id": wf.id if wf else None,
                    "workflow_name": wf.name if wf else None,
                    "level": level,
                }
                if data:
                    item["data"] = clip(data, size)
                if kind == "node_end" and n.error:
                    item["error_type"] = n.error.get("type")
                    item["message"] = clip(n.error.get("message", ""), size)
                    if include_full_context:
                        item["error"] = clip(n.error, max_chars)
                if include_full_context:
                    context = _context(n, kind, max_chars)
                    if context:
                        item["context"] = context
                levels[level] += 1
                if kind == "node_end" and n.type in _TOOL_TYPES:
                    tools[n.status.value] += 1
                found.append(item)
        found.sort(key=lambda e: e["timestamp"], reverse=order == "desc")
        times = [e["timestamp"] for e in found]
        return {
            "total": len(found),
            "truncated": len(found) > limit,
            "events": found[:limit],
            "summary": {
                "total_events": len(found),
                "event_types_found": sorted({e["type"] for e in found}),
                "errors_count": levels["error"],
                "warnings_count": levels["warning"],
                "successful_tools": tools[NodeStatus.COMPLETED.value],
                "failed_tools": tools[NodeStatus.FAILED.value],
                "first_at": min(times, default=None),
                "last_at": max(times, default=None),
                "time_span_ms": round((max(times) - min(times)) * 1000, 3) if times else 0.0,
                "internal_events_hidden": hidden,
            },
        }

    return [read_event_history]


def _context(node: EventNode, kind: str, max_chars: int) -> Any:
    """What a start or end event carries in full: the node's input, or its output and metrics."""
    if kind == "node_start":
        given = {k: v for k, v in node.payload.items() if k != "output"}
        return clip(given, max_chars) if given else None
    if kind == "node_end":
        ended: dict[str, Any] = {"metrics": node.metrics}
        if "output" in node.payload:
            ended["output"] = node.payload["output"]
        return clip(ended, max_chars)
    return None
