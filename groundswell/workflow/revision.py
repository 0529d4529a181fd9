"""Revising a prompt's result: what ``ctx.replace_last_prompt_result`` does.

The new prompt runs as the sibling of the one it replaces and names it
(``payload["revises"]``); the old one stays in the tree, marked ``revised``,
its output kept for inspection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..runtime.context import Frame, reset_frame, set_frame
from ..tree.tree import EventNode, NodeStatus, NodeType

if TYPE_CHECKING:
    from .workflow import WorkflowContext

__all__ = ["last_prompt", "replace_last_prompt"]


def last_prompt(scope: EventNode) -> EventNode | None:
    """The most recently started prompt under ``scope`` that no other prompt contains."""
    best: EventNode | None = None
    stack = list(scope.children)
    while stack:
        node = stack.pop()
        if node.type is NodeType.PROMPT:
            if best is None or node.timestamp > best.timestamp:
                best = node
            continue  # a prompt inside a tool of this prompt is not a separate result
        stack.extend(node.children)
    return best


async def replace_last_prompt(
    ctx: WorkflowContext, scope: EventNode, prompt: Any, agent: Any, overrides: Any
) -> Any:
    """Run ``prompt`` on ``agent`` in place of the last prompt under ``scope``; return its output.

    The old prompt is marked ``revised`` only once the new one has succeeded.
    """
    tree = ctx.event_tree
    last = last_prompt(scope)
    if last is None:
        raise ConfigurationError(
            f"replace_last_prompt_result: no prompt has run under {tree.path(scope.id)!r} "
            "yet; run one with agent.prompt(...) first"
        )
    if last.ended_at is None:
        raise ConfigurationError(
            f"replace_last_prompt_result: the last prompt ({tree.path(last.id)!r}) is "
            "still running; await it first"
        )
    parent = tree.get_node(last.parent_id) if last.parent_id else scope
    token = set_frame(Frame(tree, parent, ctx))
    try:
        result = await agent.run(prompt, overrides)
    finally:
        reset_frame(token)
    result.node.payload["revises"] = last.id
    tree.add_event(last, "revised", by=result.node.id)
    tree.set_status(last, NodeStatus.REVISED)
    return result.output
