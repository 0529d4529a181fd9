"""Which agent was behind a failure: what workflow-level reflection asks by default.

A failed step is usually a failed agent prompt, or code around one. The tree
records each prompt as a ``prompt`` node named after its agent; the agent
objects themselves (their model and client) are noted here, per run tree, as
their prompts start inside a workflow. The agent of the newest prompt at or
under the failed node is then the one whose model reflects.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from ..tree.tree import EventNode, EventTree, NodeType

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["agent_behind", "agents_of"]

# Per run tree (by id, dropped with the tree: trees compare by value, so they
# cannot be weak keys), the agents that prompted in it, by name; the newest
# object of a name wins. Strong values: an agent made inside a step must still
# be there when the step's failure is reflected on.
_seen: dict[int, dict[str, Agent]] = {}
_lock = threading.Lock()  # prompts of one run may start in worker threads


def agents_of(tree: EventTree) -> dict[str, Agent]:
    """The agents that prompted in ``tree``, by name: each prompt in a workflow notes its
    agent here as it starts (through ``WorkflowContext.prompted``, which keeps this dict)."""
    agents = _seen.get(id(tree))
    if agents is None:
        with _lock:
            agents = _seen.get(id(tree))
            if agents is None:
                agents = _seen[id(tree)] = {}
                weakref.finalize(tree, _seen.pop, id(tree), None)
    return agents


def agent_behind(tree: EventTree, *nodes: EventNode) -> Agent | None:
    """The agent of the newest prompt at or under the first of ``nodes`` that has one.

    Prompts inside ``reflection`` nodes (a reflection's own analysis) are not
    counted; ``None`` when no prompt of a known agent ran there.
    """
    agents = _seen.get(id(tree))
    if not agents:
        return None
    for start in nodes:
        newest: EventNode | None = None
        stack = [start]
        while stack:  # iterative: a deep tree must not hit the recursion limit
            node = stack.pop()
            if node.type is NodeType.REFLECTION and node is not start:
                continue
            if (
                node.type is NodeType.PROMPT
                and node.name in agents
                and (newest is None or node.timestamp >= newest.timestamp)
            ):
                newest = node
            stack.extend(node.children)
        if newest is not None:
            return agents[newest.name]
    return None
