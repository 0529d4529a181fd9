"""What every introspection tool shares: where the caller is, and bounded, redacted views."""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from groundswell import (
    EventNode,
    EventTree,
    Frame,
    NodeStatus,
    NodeType,
    ToolError,
    current_frame,
    redact,
)

__all__ = [
    "FINISHED_OK",
    "Limits",
    "anchor",
    "clip",
    "elapsed_ms",
    "matches",
    "node_in_tree",
    "summary",
    "where",
    "workflow_in_tree",
    "workflow_node",
    "workflow_state",
]


#: The statuses of a node that finished its work (a revised prompt did, then was replaced).
FINISHED_OK = (NodeStatus.COMPLETED, NodeStatus.REVISED)


@dataclass(frozen=True)
class Limits:
    """Bounds on what the tools return and start.

    ``max_chars`` caps each output or payload shown (longer ones are cut and
    marked ``truncated``); ``max_spawn_depth`` is how many spawned workflows
    may nest; ``max_spawns_per_run`` how many one run may start;
    ``spawn_timeout_s`` the default (and maximum) time a spawned workflow gets;
    ``max_prompt_tokens`` the size past which ``generate_dynamic_prompt``
    rejects a prompt.
    """

    max_chars: int = 2_000
    max_spawn_depth: int = 3
    max_spawns_per_run: int = 10
    spawn_timeout_s: float = 300.0
    max_prompt_tokens: int = 8_000


def where(tool: str) -> Frame:
    """The caller's place in the run; a `ToolError` outside any run."""
    frame = current_frame()
    if frame is None:
        raise ToolError(
            f"{tool} can only be used by an agent during a Groundswell run; there is no current run"
        )
    return frame


def anchor(frame: Frame) -> EventNode:
    """The step or workflow the calling agent runs in (else the run's root)."""
    tree = frame.tree
    node: EventNode | None = frame.node
    while node is not None:
        if node.type in (NodeType.STEP, NodeType.WORKFLOW):
            return node
        node = tree.get_node(node.parent_id) if node.parent_id else None
    assert tree.root is not None
    return tree.root


def clip(value: Any, limit: int) -> Any:
    """``value`` redacted, or a truncated JSON preview of it when it is too long."""
    value = redact(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) <= limit:
        return value
    return {"truncated": True, "chars": len(text), "preview": text[:limit]}


def elapsed_ms(node: EventNode) -> float:
    """How long the node ran, or has been running so far, in milliseconds."""
    end = node.ended_at if node.ended_at is not None else time.time()
    return round(max(0.0, end - node.timestamp) * 1000, 3)


def summary(
    tree: EventTree, node: EventNode, max_chars: int, *, output: bool = False
) -> dict[str, Any]:
    """The fields every tool shows for a node (its output only when asked)."""
    out: dict[str, Any] = {
        "id": node.id,
        "type": node.type.value,
        "name": node.name,
        "status": node.status.value,
        "path": tree.path(node.id),
        "parent_id": node.parent_id,
        "started_at": node.timestamp,
        "ended_at": node.ended_at,
        "children": len(node.children),
    }
    duration = node.metrics.get("duration")
    if isinstance(duration, float):
        out["duration_ms"] = round(duration * 1000, 3)
    for key in ("attempt", "usage", "cache", "turns"):
        if key in node.metrics:
            out[key] = node.metrics[key]
    if node.error:
        out["error"] = clip(node.error, max_chars)
    if output and "output" in node.payload:
        out["output"] = clip(node.payload["output"], max_chars)
    return out


def workflow_node(tree: EventTree, node: EventNode) -> EventNode | None:
    """``node`` if it is a workflow, else its nearest workflow ancestor."""
    for candidate in [node, *tree.get_ancestors(node.id)]:
        if candidate.type is NodeType.WORKFLOW:
            return candidate
    return None


def node_in_tree(tree: EventTree, node_id: str, tool: str) -> EventNode:
    """The node ``node_id`` of this run; the tree holds only this run, so nothing else is found."""
    try:
        return tree.get_node(node_id)
    except KeyError:
        raise ToolError(f"{tool}: no node with id {node_id!r} in this run") from None


def workflow_in_tree(tree: EventTree, workflow_id: str, tool: str) -> EventNode:
    """The workflow node ``workflow_id`` of this run; a `ToolError` naming the problem."""
    node = node_in_tree(tree, workflow_id, tool)
    if node.type is not NodeType.WORKFLOW:
        raise ToolError(
            f"{tool}: {workflow_id!r} is a {node.type.value} node ({node.name!r}), not a workflow"
        )
    return node


def workflow_state(frame: Frame, wf_node: EventNode) -> Any:
    """The workflow's ``ctx.state``: live if it runs around the caller, else as last recorded."""
    if frame.workflow is not None and frame.workflow.node is wf_node:
        # A copy through JSON: the model must never get live references.
        return json.loads(json.dumps(frame.workflow.state, default=str))
    if "state" in wf_node.payload:
        return wf_node.payload["state"]
    latest: Any = {}
    latest_at = float("-inf")
    for node in frame.tree.walk(wf_node.id):
        for event in node.events:
            if event.get("type") != "state_snapshot" or event.get("workflow_id") != wf_node.id:
                continue
            at = float(event.get("timestamp", 0))
            if at >= latest_at:
                latest, latest_at = event.get("state", {}), at
    return latest


def matches(name: str, patterns: Collection[str] | None) -> bool:
    """True when no patterns are given or ``name`` matches one (shell wildcards)."""
    if not patterns:
        return True
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
