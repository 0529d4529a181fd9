"""Drawing event trees with ``rich``: colours on a terminal, the same lines as ``render()``.

Only the CLI and :meth:`EventTree.print` import this module, so ``import
groundswell`` and running workflows never load ``rich``.
"""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from .tree import EventNode, EventTree, label_parts, label_separator

__all__ = ["print_tree", "rich_tree"]


def _text(node: EventNode) -> Text:
    text = Text()
    for i, (piece, style) in enumerate(label_parts(node)):
        if i:
            text.append(label_separator(i))
        text.append(piece, style=style)
    return text


def rich_tree(tree: EventTree, *, max_nodes: int | None = None) -> Tree | Text:
    """``tree`` as a rich renderable; ``max_nodes`` caps huge trees (the rest is counted)."""
    if tree.root is None:
        return Text("(empty tree)", style="dim")
    top = Tree(_text(tree.root), guide_style="dim")
    # Iterative, like every other traversal of the tree: deep trees must not recurse.
    stack: list[tuple[EventNode, Tree]] = [(tree.root, top)]
    shown = 1
    while stack:
        node, branch = stack.pop()
        pending: list[tuple[EventNode, Tree]] = []
        for child in node._children or ():
            if max_nodes is not None and shown >= max_nodes:
                branch.add(Text(f"… {len(tree) - shown} more nodes", style="dim"))
                stack.clear()
                pending.clear()
                break
            pending.append((child, branch.add(_text(child))))
            shown += 1
        stack.extend(reversed(pending))
    return top


def print_tree(tree: EventTree, *, file: IO[str] | None = None, console: Any = None) -> None:
    """Print ``tree`` with rich (plain text when the output is not a terminal)."""
    (console or Console(file=file, highlight=False)).print(rich_tree(tree))
