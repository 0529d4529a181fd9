"""`Agent.reflect`: answer once, then critique and revise that answer in a second prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..prompt.prompt import Prompt, PromptOverrides
from ..runtime.context import Frame, current_frame, new_run_tree, reset_frame, set_frame
from ..tree.tree import NodeStatus, NodeType

if TYPE_CHECKING:
    from .core import Agent

__all__ = ["answer_then_revise"]


async def answer_then_revise(
    agent: Agent[Any], prompt: Prompt[Any], overrides: PromptOverrides | None, deps: Any
) -> Any:
    """Both passes as prompt nodes under one ``reflection`` node; returns the revised output."""
    frame = current_frame()
    tree = frame.tree if frame else new_run_tree()
    node = tree.start_node(
        NodeType.REFLECTION, f"{agent.name}:reflect", frame.node if frame else None
    )
    token = set_frame(
        Frame(tree, node, frame.workflow, frame.agent) if frame else Frame(tree, node)
    )
    try:
        first = await agent.prompt(prompt, overrides, deps=deps)
        made = prompt.output_type
        # As JSON in the output's own shape (a list, a number...), so the
        # critique sees exactly what the format asks for.
        answer = made.text(first) if made is not None else str(first)
        revision = prompt.with_(
            user=(
                f"{prompt.user}\n\nA previous answer to this request was:\n<answer>\n{answer}\n"
                "</answer>\n\nCritique that answer against the request: look for mistakes, "
                "omissions and unclear parts. Then reply with a complete, corrected answer in "
                "the same format."
            )
        )
        revised = await agent.prompt(revision, overrides, deps=deps)
    except BaseException as exc:
        tree.end_node_after(node, exc)
        raise
    finally:
        reset_frame(token)
    tree.end_node(node, NodeStatus.COMPLETED, output=revised, record_output=True)
    return revised
