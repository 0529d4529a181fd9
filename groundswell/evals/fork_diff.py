"""What a fork changed: the two trees' nodes matched by path, and drawn side by side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..tree.tree import EventNode, EventTree, NodeType

__all__ = ["NodeChange", "diff_trees", "short"]

# Per node type, the payload fields compared besides status and output.
_FIELDS: dict[NodeType, tuple[str, ...]] = {
    NodeType.PROMPT: ("system", "model", "user"),
    NodeType.TOOL_CALL: ("input",),
    NodeType.MCP_CALL: ("input",),
}


@dataclass(frozen=True)
class NodeChange:
    """One node that differs between the original and the forked tree.

    ``path`` names it from the root by type and name (``#2`` for the second of
    siblings of the same type and name; model calls, named for a model a fork
    may change, are matched by their order among a prompt's model calls and
    named by the original's model); ``kind`` is ``"changed"``, ``"only in
    original"`` or ``"only in forked"``; ``differences`` says what changed, in
    words (``"status: completed → failed"``).
    """

    path: str
    kind: str
    node_type: str
    differences: tuple[str, ...] = ()
    original_id: str | None = None
    forked_id: str | None = None

    def __str__(self) -> str:
        if self.kind != "changed":
            return f"{self.path}: {self.kind}"
        return f"{self.path}: " + "; ".join(self.differences)


# A node's place in its tree: (type, name, occurrence among such siblings) from the root.
_Key = tuple[tuple[str, str, int], ...]


def _keyed(tree: EventTree) -> dict[_Key, tuple[EventNode, str]]:
    """Every node, with its path in words, by its path of (type, name, occurrence).

    A model call's name is its model's: those are keyed by type and place among
    their siblings' model calls alone, so a fork with ``model=`` compares the
    calls instead of losing one and adding another. The words keep the model.
    """
    keyed: dict[_Key, tuple[EventNode, str]] = {}
    root = tree.root
    if root is None:
        return keyed
    stack: list[tuple[EventNode, _Key, str]] = [
        (root, ((root.type.value, root.name, 1),), f"{root.type.value} {root.name}")
    ]
    while stack:
        node, key, path = stack.pop()
        keyed[key] = (node, path)
        seen: dict[tuple[str, str], int] = {}
        for child in node.children:
            pair = (child.type.value, "" if child.type is NodeType.MODEL_CALL else child.name)
            seen[pair] = count = seen.get(pair, 0) + 1
            words = f"{path} / {child.type.value} {child.name}" + (
                f" #{count}" if count > 1 else ""
            )
            stack.append((child, (*key, (*pair, count)), words))
    return keyed


def short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else f"{text[: limit - 1]}…")


def _compared(node: EventNode) -> dict[str, Any]:
    payload = node.payload
    values: dict[str, Any] = {"status": node.status.value, "output": payload.get("output")}
    if node.type == NodeType.MODEL_CALL:
        response = payload.get("response") or {}
        values["model"] = (payload.get("request") or {}).get("model")
        values["text"] = response.get("text")
        values["tool calls"] = response.get("tool_calls")
    for name in _FIELDS.get(node.type, ()):
        values[name] = payload.get(name)
    if node.error is not None:
        values["error"] = node.error.get("message")
    return values


def diff_trees(original: EventTree, forked: EventTree, fork_node: EventNode) -> list[NodeChange]:
    """The nodes that differ from the fork node on, in the original's walk order.

    A node counts when it had not ended when the fork node started (the fork
    node, what follows it, their ancestors); nodes in only one tree count always.
    """
    before, after = _keyed(original), _keyed(forked)
    start = fork_node.timestamp
    changes: list[NodeChange] = []
    for key, (old, path) in before.items():
        found = after.get(key)
        if found is None:
            changes.append(NodeChange(path, "only in original", old.type.value, (), old.id))
            continue
        new = found[0]
        if old.ended_at is not None and old.ended_at < start:
            continue  # done before the fork: replayed as it was
        was, now = _compared(old), _compared(new)
        differences = tuple(
            f"{name}: {short(was.get(name))} → {short(now.get(name))}"
            for name in dict.fromkeys([*was, *now])
            if was.get(name) != now.get(name)
        )
        if differences:
            changes.append(NodeChange(path, "changed", old.type.value, differences, old.id, new.id))
    changes += [
        NodeChange(path, "only in forked", new.type.value, (), None, new.id)
        for key, (new, path) in after.items()
        if key not in before
    ]
    order = {node.id: i for i, node in enumerate([*original.walk(), *forked.walk()])}
    changes.sort(key=lambda c: order.get(c.original_id or c.forked_id or "", 0))
    return changes
