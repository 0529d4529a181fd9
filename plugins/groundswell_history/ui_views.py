"""What the dev UI's API answers about one run: its tree, and one node's details.

Labels come from the kernel's own `groundswell.label_parts`, so a node
in the page reads exactly like its line of ``tree.render()`` (same marks,
statuses, tokens, costs, budget gauge). Everything answered goes through
`groundswell.redact`, the scrubber every output uses.
"""

from __future__ import annotations

from typing import Any

from groundswell import (
    EventNode,
    EventTree,
    NodeStatus,
    NodeType,
    format_traceback,
    label_parts,
    redact,
)

__all__ = ["node_detail", "tree_view"]


def _node_line(node: EventNode, origin: float) -> dict[str, Any]:
    parts = label_parts(node)
    return {
        "id": node.id,
        "parent_id": node.parent_id,
        "type": node.type.value,
        "name": node.name,
        "status": node.status.value,
        "mark": parts[0][0],
        # The label after the mark, type and name, as (text, style) pieces.
        "label": [[text, style] for text, style in parts],
        "start": node.timestamp - origin,
        "end": None if node.ended_at is None else node.ended_at - origin,
        "children": [child.id for child in node.children],
    }


def tree_view(tree: EventTree, source: str) -> dict[str, Any]:
    """The run as the page draws it: nodes in pre-order, each with its label and times."""
    root = tree.root
    if root is None:
        return {"run_id": None, "nodes": []}
    origin = root.timestamp
    nodes = [_node_line(node, origin) for node in tree.walk()]
    ends = [n["end"] for n in nodes if n["end"] is not None]
    view = {
        "run_id": root.id,
        "name": root.name,
        "status": root.status.value,
        "source": source,
        "started_at": origin,
        "span": max(ends, default=0.0),
        "nodes": nodes,
    }
    shown: dict[str, Any] = redact(view)
    return shown


def _prompt_of(tree: EventTree, node: EventNode) -> EventNode | None:
    if node.type is NodeType.PROMPT:
        return node
    for ancestor in tree.get_ancestors(node.id):
        if ancestor.type is NodeType.PROMPT:
            return ancestor
    return None


def _conversation(tree: EventTree, call: EventNode, prompt: EventNode) -> list[dict[str, Any]]:
    """The messages of a model call, rebuilt from the prompt's recorded turns before it.

    The tree records each turn (the user's text, each reply's blocks, each tool
    call's input and result), not the raw request: this puts them back in order.
    """
    messages: list[dict[str, Any]] = []
    sent = call.payload.get("request", {}).get("messages")
    user = prompt.payload.get("user")
    if user is not None:
        messages.append({"role": "user", "content": [{"type": "text", "text": user}]})
    for sibling in prompt.children:
        if sibling.id == call.id:
            break
        if sibling.type is NodeType.MODEL_CALL:
            content = sibling.payload.get("response", {}).get("content")
            if isinstance(content, list):
                messages.append({"role": "assistant", "content": content})
        elif sibling.type in (NodeType.TOOL_CALL, NodeType.MCP_CALL):
            block = {
                "type": "tool_result",
                "tool_use_id": sibling.payload.get("tool_use_id"),
                "name": sibling.name,
                "content": sibling.payload.get("output"),
                "is_error": bool(sibling.payload.get("is_error")) or sibling.error is not None,
            }
            if messages and messages[-1]["role"] == "user" and messages[-1].get("tool_results"):
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block], "tool_results": True})
    for message in messages:
        message.pop("tool_results", None)
    if isinstance(sent, int) and sent > len(messages):
        # Earlier history (message_history=..., a continued conversation) is not recorded.
        messages.insert(0, {"role": "note", "earlier": sent - len(messages)})
    return messages


def _budget(metrics: dict[str, Any]) -> dict[str, Any] | None:
    stats = metrics.get("budget")
    if not isinstance(stats, dict):
        return None
    peak, limit = stats.get("peak_tokens"), stats.get("limit")
    gauge: dict[str, Any] = {"stats": stats}
    if isinstance(peak, int | float) and isinstance(limit, int | float) and limit > 0:
        share = peak / limit
        threshold = stats.get("threshold")
        warn = threshold if isinstance(threshold, int | float) else 0.8
        gauge.update(
            share=share,
            peak=peak,
            limit=limit,
            threshold=warn,
            state="over" if share > 1 else "warning" if share >= warn else "ok",
        )
    return gauge


def _error(node: EventNode) -> dict[str, Any] | None:
    error = node.error
    if not error:
        return None
    record = error if isinstance(error, dict) else {"message": str(error)}
    try:
        text = format_traceback(record)
    except Exception:  # a file written by something else: show what is there
        text = None
    return {**record, "formatted": text}


def _reflection(tree: EventTree, node: EventNode) -> dict[str, Any] | None:
    """The node's reflection: its attempt number, and the reflection nodes around it."""
    attempt = node.metrics.get("attempt")
    siblings = tree.get_children(node.parent_id) if node.parent_id else []
    near = [n for n in [*node.children, *siblings] if n.type is NodeType.REFLECTION]
    revised = [
        {"id": n.id, "name": n.name, "attempt": n.metrics.get("attempt")}
        for n in siblings
        if n.status is NodeStatus.REVISED and n.type is node.type
    ]
    if not near and not revised and not (isinstance(attempt, int) and attempt > 1):
        return None
    return {
        "attempt": attempt,
        "revised": revised,
        "reflections": [
            {
                "id": n.id,
                "name": n.name,
                "status": n.status.value,
                "payload": n.payload,
                "error": n.error,
            }
            for n in near
        ],
    }


def node_detail(tree: EventTree, node_id: str) -> dict[str, Any] | None:
    """Everything the details panel shows of one node (``None``: no such node)."""
    try:
        node = tree.get_node(node_id)
    except KeyError:
        return None
    metrics, payload = node.metrics, node.payload
    record = node.to_dict()
    detail: dict[str, Any] = {
        "node": record,
        "label": [[text, style] for text, style in label_parts(node)],
        "path": [a.name for a in reversed(tree.get_ancestors(node.id))] + [node.name],
        "usage": metrics.get("usage"),
        "cost_usd": metrics.get("cost_usd"),
        "cache": metrics.get("cache"),
        "cache_events": [e for e in node.events if str(e.get("type", "")).startswith("cache")],
        "budget": _budget(metrics),
        "error": _error(node),
        "reflection": _reflection(tree, node),
    }
    prompt = _prompt_of(tree, node)
    if prompt is not None:
        detail["prompt"] = {
            "agent": prompt.payload.get("agent"),
            "model": prompt.payload.get("model"),
            "system": prompt.payload.get("system"),
            "user": prompt.payload.get("user"),
            "output": prompt.payload.get("output"),
        }
    if node.type is NodeType.MODEL_CALL and prompt is not None:
        response = payload.get("response") or {}
        content = response.get("content") if isinstance(response, dict) else None
        detail["model_call"] = {
            "request": payload.get("request"),
            "messages": _conversation(tree, node, prompt),
            "reply": response,
            "thinking": [
                b for b in content or [] if isinstance(b, dict) and "thinking" in str(b.get("type"))
            ],
            "tool_calls": [
                b for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_use"
            ],
        }
    if node.type is NodeType.PROMPT:
        detail["model_calls"] = [
            {
                "id": c.id,
                "name": c.name,
                "status": c.status.value,
                "usage": c.metrics.get("usage"),
                "cost_usd": c.metrics.get("cost_usd"),
            }
            for c in node.children
            if c.type is NodeType.MODEL_CALL
        ]
    if node.type in (NodeType.TOOL_CALL, NodeType.MCP_CALL):
        detail["tool"] = {
            "input": payload.get("input"),
            "output": payload.get("output"),
            "is_error": payload.get("is_error"),
        }
    shown: dict[str, Any] = redact(detail)
    return shown
