"""``inspect_state_snapshot``: a workflow's ``ctx.state``, at a moment or now, and how it changed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from groundswell import EventNode, ToolError

from ._common import (
    Limits,
    anchor,
    clip,
    matches,
    where,
    workflow_in_tree,
    workflow_node,
    workflow_state,
)

__all__ = ["build", "volatility"]

# A timestamp this large is in milliseconds (as in the design documents), not seconds.
_MS_FROM = 1e11
# Timestamps are matched to the millisecond: what the model copies may be rounded.
_TOLERANCE_S = 0.001
_MISSING: Any = object()


def volatility(changes: int, transitions: int, properties: int) -> str:
    """``none``, ``low``, ``medium`` or ``high``: the share of keys a snapshot changes on average."""
    if transitions < 1 or changes == 0:
        return "none"
    share = changes / (transitions * max(1, properties))
    return "low" if share < 0.25 else "medium" if share < 0.6 else "high"


def _changes(before: Any, after: Any, properties: list[str] | None) -> dict[str, Any]:
    """The keys whose value differs between two states, as ``{"from": ..., "to": ...}``."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    out: dict[str, Any] = {}
    for key in sorted(set(old) | set(new)):
        if not matches(key, properties):
            continue
        was, now = old.get(key, _MISSING), new.get(key, _MISSING)
        if was == now:
            continue
        change: dict[str, Any] = {
            "from": None if was is _MISSING else was,
            "to": None if now is _MISSING else now,
        }
        if was is _MISSING:
            change["added"] = True
        if now is _MISSING:
            change["removed"] = True
        out[key] = change
    return out


def build(limits: Limits) -> list[Callable[..., Any]]:
    """The ``inspect_state_snapshot`` tool."""
    max_chars = limits.max_chars

    async def inspect_state_snapshot(
        workflow_id: str | None = None,
        properties: list[str] | None = None,
        include_history: bool = False,
        history_limit: Annotated[int, Field(ge=1, le=100)] = 20,
        snapshot_timestamp: float | None = None,
    ) -> dict[str, Any]:
        """Read a workflow's state (ctx.state), now or as a snapshot recorded it, optionally
        only some keys, how it changed (from/to values) and a summary of its snapshots.

        Args:
            workflow_id: The workflow to read (default: the one you run in).
            properties: Only these top-level keys; shell wildcards allowed (e.g. "draft_*").
            include_history: Include earlier snapshots with the keys each one changed,
                from and to what.
            history_limit: How many snapshots of history to return at most (1-100).
            snapshot_timestamp: Read the state as the snapshot taken at this Unix time
                recorded it (the nearest within a millisecond, else the latest before it;
                a value in milliseconds is understood too). Default: the state now.
        """
        tool = "inspect_state_snapshot"
        frame = where(tool)
        tree = frame.tree
        if workflow_id is None:
            wf_node = workflow_node(tree, anchor(frame))
            if wf_node is None:
                raise ToolError(f"{tool}: this agent is not running in a workflow")
        else:
            wf_node = workflow_in_tree(tree, workflow_id, tool)
        snapshots = sorted(
            (
                (n, e)
                for n in tree.walk(wf_node.id)
                for e in n.events
                if e.get("type") == "state_snapshot" and e.get("workflow_id") == wf_node.id
            ),
            key=lambda pair: float(pair[1].get("timestamp", 0)),
        )
        if snapshot_timestamp is None:
            upto = len(snapshots)
            state = workflow_state(frame, wf_node)
        else:
            upto = _pick(snapshots, snapshot_timestamp, wf_node)
            state = snapshots[upto - 1][1].get("state", {})

        def pick(values: Any) -> Any:
            if not properties or not isinstance(values, dict):
                return values
            return {k: v for k, v in values.items() if matches(k, properties)}

        shown = pick(state)
        out: dict[str, Any] = {
            "workflow_id": wf_node.id,
            "workflow": wf_node.name,
            "state": clip(shown, max_chars),
            "snapshots": len(snapshots),
        }
        if snapshot_timestamp is not None:
            node, event = snapshots[upto - 1]
            out["snapshot"] = {
                "timestamp": event.get("timestamp"),
                "sequence_number": upto,
                "node_id": node.id,
                "node_name": node.name,
                "reason": event.get("reason"),
            }
        considered = snapshots[:upto]
        if include_history:
            first = max(0, upto - history_limit)
            out["history"] = [
                _entry(snapshots, i, properties, pick, max_chars) for i in range(first, upto)
            ]
        changed = Counter[str](
            k
            for _, e in considered[1:]
            for k in e.get("changed", [])
            if not properties or matches(k, properties)
        )
        times = [float(e.get("timestamp", 0)) for _, e in considered]
        count = len(shown) if isinstance(shown, dict) else 0
        out["state_summary"] = {
            "property_count": count,
            "snapshot_count": len(considered),
            "time_span_ms": round((times[-1] - times[0]) * 1000, 3) if times else 0.0,
            "state_volatility": volatility(sum(changed.values()), len(considered) - 1, count),
            "most_changed": [{"property": k, "changes": n} for k, n in changed.most_common(5)],
        }
        return out

    return [inspect_state_snapshot]


def _pick(snapshots: list[tuple[EventNode, dict[str, Any]]], at: float, wf_node: EventNode) -> int:
    """The 1-based number of the snapshot taken at ``at`` (the nearest within a millisecond),
    else of the last one before it."""
    if not snapshots:
        raise ToolError(
            f"inspect_state_snapshot: workflow {wf_node.name!r} has recorded no state "
            "snapshots yet; leave snapshot_timestamp out to read its state now"
        )
    when = at / 1000 if at > _MS_FROM else at
    times = [float(e.get("timestamp", 0)) for _, e in snapshots]
    near = [i for i, t in enumerate(times) if abs(t - when) <= _TOLERANCE_S]
    if near:
        return min(near, key=lambda i: abs(times[i] - when)) + 1
    taken = sum(1 for t in times if t <= when)
    if taken == 0:
        raise ToolError(
            f"inspect_state_snapshot: no snapshot of {wf_node.name!r} at or before {at}; "
            f"the first was taken at {times[0]}"
        )
    return taken


def _entry(
    snapshots: list[tuple[EventNode, dict[str, Any]]],
    index: int,
    properties: list[str] | None,
    pick: Callable[[Any], Any],
    max_chars: int,
) -> dict[str, Any]:
    """One snapshot of the history, with its changes from the one before."""
    node, event = snapshots[index]
    before = snapshots[index - 1][1].get("state", {}) if index else {}
    after = event.get("state", {})
    return {
        "timestamp": event.get("timestamp"),
        "sequence_number": index + 1,
        "node_id": node.id,
        "node_name": node.name,
        "reason": event.get("reason"),
        "changed": [k for k in event.get("changed", []) if matches(k, properties)],
        "changes_from_previous": clip(_changes(before, after, properties), max_chars // 2),
        "state": clip(pick(after), max_chars // 2),
    }
