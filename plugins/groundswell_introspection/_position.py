"""Where the caller is: its node, ancestors, siblings, children and earlier outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from groundswell import ToolError, current_agent

from ._common import Limits, anchor, clip, node_in_tree, summary, where, workflow_node

__all__ = ["build"]


def build(limits: Limits) -> list[Callable[..., Any]]:
    """The five tools that show the caller's neighbourhood in the tree."""
    max_chars = limits.max_chars

    async def inspect_current_node(include_output: bool = True) -> dict[str, Any]:
        """Describe the step (or workflow) you are running in: id, name, status, timing, metrics.

        Args:
            include_output: Include the node's output if it has finished.
        """
        frame = where("inspect_current_node")
        tree, node = frame.tree, anchor(frame)
        workflow = workflow_node(tree, node)
        agent = current_agent()
        return {
            "node": summary(tree, node, max_chars, output=include_output),
            "depth": len(tree.get_ancestors(node.id)),
            "workflow": {"id": workflow.id, "name": workflow.name} if workflow else None,
            "agent": getattr(agent, "name", None),
            "tool_call_node_id": frame.node.id,
        }

    async def read_ancestor_chain(
        max_depth: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> dict[str, Any]:
        """List the ancestors of the current node, nearest first, up to the root.

        Args:
            max_depth: How many ancestors to return at most (1-50).
        """
        frame = where("read_ancestor_chain")
        tree, node = frame.tree, anchor(frame)
        chain = tree.get_ancestors(node.id)
        return {
            "node_id": node.id,
            "ancestors": [summary(tree, a, max_chars) for a in chain[:max_depth]],
            "total": len(chain),
            "truncated": len(chain) > max_depth,
        }

    async def list_siblings_children(
        relation: Literal["siblings", "children"] = "children",
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
        include_output: bool = False,
    ) -> dict[str, Any]:
        """List the current node's children, or its siblings (same parent, itself excluded).

        Args:
            relation: "children" or "siblings".
            limit: How many nodes to return at most (1-200), in start order.
            include_output: Include each finished node's output (truncated).
        """
        frame = where("list_siblings_children")
        tree, node = frame.tree, anchor(frame)
        if relation == "children":
            items = list(node.children)
        else:
            parent = tree.get_node(node.parent_id) if node.parent_id else None
            items = [c for c in (parent.children if parent else []) if c is not node]
        return {
            "node_id": node.id,
            "relation": relation,
            "total": len(items),
            "truncated": len(items) > limit,
            "nodes": [summary(tree, n, max_chars, output=include_output) for n in items[:limit]],
        }

    async def inspect_prior_outputs(
        node_id: str | None = None,
        count: Annotated[int, Field(ge=1, le=50)] = 5,
    ) -> dict[str, Any]:
        """Read outputs of earlier work: one node by id, or the latest finished steps before yours.

        Args:
            node_id: A node id (for example a spawned workflow's id) to read.
            count: Without node_id, how many earlier finished siblings to return (1-50).
        """
        frame = where("inspect_prior_outputs")
        tree, node = frame.tree, anchor(frame)
        if node_id is not None:
            target = node_in_tree(tree, node_id, "inspect_prior_outputs")
            return {"nodes": [summary(tree, target, max_chars, output=True)]}
        parent = tree.get_node(node.parent_id) if node.parent_id else None
        earlier = [
            c
            for c in (parent.children if parent else [])
            if c is not node and c.ended_at is not None and c.timestamp <= node.timestamp
        ]
        chosen = earlier[-count:]
        return {
            "node_id": node.id,
            "total": len(earlier),
            "nodes": [summary(tree, n, max_chars, output=True) for n in reversed(chosen)],
        }

    async def read_ancestor_outputs(
        ancestor_id: str | None = None,
        ancestor_name: str | None = None,
        max_ancestry_depth: Annotated[int, Field(ge=1, le=50)] = 3,
        include_metadata: bool = False,
        include_error_details: bool = True,
    ) -> dict[str, Any]:
        """Read the inputs and outputs of ancestors: one by id or name, or the nearest few.

        Args:
            ancestor_id: The id of one ancestor to read.
            ancestor_name: The name of an ancestor to read (the nearest with that name).
            max_ancestry_depth: Without id or name, how many ancestors to read (1-50).
            include_metadata: Include each node's metrics and events count.
            include_error_details: Include the error of a failed ancestor.
        """
        frame = where("read_ancestor_outputs")
        tree, node = frame.tree, anchor(frame)
        chain = tree.get_ancestors(node.id)
        if ancestor_id is not None:
            chosen = [a for a in chain if a.id == ancestor_id]
            if not chosen:
                raise ToolError(
                    f"read_ancestor_outputs: {ancestor_id!r} is not an ancestor of {node.id!r}"
                )
        elif ancestor_name is not None:
            chosen = [a for a in chain if a.name == ancestor_name][:1]
            if not chosen:
                names = [a.name for a in chain]
                raise ToolError(
                    f"read_ancestor_outputs: no ancestor named {ancestor_name!r} (ancestors: {names})"
                )
        else:
            chosen = chain[:max_ancestry_depth]
        out = []
        for ancestor in chosen:
            item = summary(tree, ancestor, max_chars, output=True)
            if not include_error_details:
                item.pop("error", None)
            if "input" in ancestor.payload:
                item["input"] = clip(ancestor.payload["input"], max_chars)
            if include_metadata:
                item["metrics"] = clip(ancestor.metrics, max_chars)
                item["events"] = len(ancestor.events)
            out.append(item)
        return {"node_id": node.id, "ancestors": out}

    return [
        inspect_current_node,
        read_ancestor_chain,
        list_siblings_children,
        inspect_prior_outputs,
        read_ancestor_outputs,
    ]
