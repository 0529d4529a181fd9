"""``inspect_hierarchy``: a node's place in the run's tree, grouped, with tree metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from groundswell import EventNode, NodeStatus, NodeType

from ._common import FINISHED_OK, Limits, anchor, elapsed_ms, node_in_tree, summary, where

__all__ = ["build"]

DepthMode = Literal["current_only", "parent_only", "ancestors_only", "full_tree"]


class _Progress:
    """How far each node of the run has got, from one pass over the tree."""

    def __init__(self, every: list[EventNode]) -> None:
        # Bottom-up (reverse pre-order): each node's children are counted before it.
        self.below: dict[str, tuple[int, int]] = {}
        for node in reversed(every):
            total = done = 0
            for child in node.children:
                # A child started since the walk (a background task) counts as running.
                child_total, child_done = self.below.get(child.id, (0, 0))
                total += child_total + 1
                done += child_done + (child.ended_at is not None)
            self.below[node.id] = (total, done)

    def percent(self, node: EventNode) -> int:
        """100 once finished; else the share of its descendants that have ended (at most 99)."""
        if node.status in FINISHED_OK:
            return 100
        if node.status is NodeStatus.PENDING:
            return 0
        total, done = self.below.get(node.id, (0, 0))
        share = round(100 * done / total) if total else 0
        return min(share, 99) if node.ended_at is None else share


def build(limits: Limits) -> list[Callable[..., Any]]:
    """The ``inspect_hierarchy`` tool."""

    async def inspect_hierarchy(
        depth_mode: DepthMode = "current_only",
        max_nodes: Annotated[int, Field(ge=1, le=500)] = 200,
        node_id: str | None = None,
        include_metadata: bool = True,
    ) -> dict[str, Any]:
        """Show a node's place in the run's tree: itself, its parent, ancestors and siblings, a
        node listing, and tree metrics (size, depth, leaves, siblings, counts, tokens).

        Args:
            depth_mode: current_only (the node and its children), parent_only (adds its
                parent; lists the parent and its children), ancestors_only (adds every
                ancestor; lists root down to the node), or full_tree (adds siblings;
                lists the whole run, depth-first).
            max_nodes: How many nodes to list at most (1-500), and per group.
            node_id: Any node of this run to look from (default: the step or workflow
                you run in).
            include_metadata: Give status, timing and completion percentage with each
                grouped node (false: id, name and type only).
        """
        frame = where("inspect_hierarchy")
        tree = frame.tree
        node = node_in_tree(tree, node_id, "inspect_hierarchy") if node_id else anchor(frame)
        # One walk gives the depths, the run's metrics and every node's progress.
        every = list(tree.walk())
        depths: dict[str, int] = {}
        tokens = Counter[str]()
        leaves = 0
        for n in every:
            depths[n.id] = depths[n.parent_id] + 1 if n.parent_id in depths else 0
            leaves += not n.children
            usage = n.metrics.get("usage") if n.type is NodeType.MODEL_CALL else None
            if isinstance(usage, dict):
                tokens.update({k: v for k, v in usage.items() if isinstance(v, int)})
        progress = _Progress(every)
        chain = tree.get_ancestors(node.id)
        parent = chain[0] if chain else None
        siblings = [c for c in (parent.children if parent else []) if c is not node]

        def brief(n: EventNode, levels_up: int | None = None) -> dict[str, Any]:
            item: dict[str, Any] = {"id": n.id, "name": n.name, "type": n.type.value}
            if include_metadata:
                item.update(
                    status=n.status.value,
                    started_at=n.timestamp,
                    ended_at=n.ended_at,
                    elapsed_ms=elapsed_ms(n),
                    completion_percentage=progress.percent(n),
                )
            if levels_up is not None:
                item["depth_in_tree"] = levels_up  # how many levels above the node
            return item

        current = brief(node)
        current.update(path=tree.path(node.id), depth=depths.get(node.id, len(chain)))
        descendants = progress.below.get(node.id, (0, 0))[0]
        current.update(children=len(node.children), descendants=descendants)
        out: dict[str, Any] = {
            "depth_mode": depth_mode,
            "current_node_id": node.id,
            "current": current,
        }
        if depth_mode != "current_only":
            out["parent"] = brief(parent, 1) if parent else None
        if depth_mode in ("ancestors_only", "full_tree"):
            out["ancestors"] = [brief(a, i) for i, a in enumerate(chain[:max_nodes], 1)]
        if depth_mode == "full_tree":
            out["siblings"] = [brief(s) for s in siblings[:max_nodes]]

        rows: list[tuple[EventNode, int]]
        if depth_mode == "current_only":
            rows = [(node, 0), *((c, 1) for c in node.children)]
        elif depth_mode == "parent_only":
            top = parent or node
            rows = [(top, 0), *((c, 1) for c in top.children)]
        elif depth_mode == "ancestors_only":
            rows = [(n, i) for i, n in enumerate(reversed([node, *chain]))]
        else:
            rows = [(n, depths[n.id]) for n in every]
        out["nodes"] = [
            {**summary(tree, n, limits.max_chars), "depth": d, "current": n is node}
            for n, d in rows[:max_nodes]
        ]
        out["truncated"] = len(rows) > max_nodes
        out["metrics"] = {
            "total_nodes": len(every),
            "max_depth": max(depths.values(), default=0),
            "leaf_nodes": leaves,
            "siblings_count": len(siblings),
            "by_type": dict(Counter(n.type.value for n in every)),
            "by_status": dict(Counter(n.status.value for n in every)),
            "tokens": dict(tokens),
        }
        return out

    return [inspect_hierarchy]
