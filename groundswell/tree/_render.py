"""Drawing event trees with ``rich``: the lines of ``render()``, in colour on a terminal.

Only the CLI and `EventTree.print` import this module, so ``import
groundswell`` and running workflows never load ``rich``.
"""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console, Group
from rich.text import Text

from .labels import label_parts, label_separator
from .node import EventNode
from .tree import EventTree

__all__ = ["print_tree", "rich_tree"]


def _line(prefix: str, node: EventNode, crop: bool) -> Text:
    # no_wrap: a tree line stays one line (logs and grep rely on it), however long.
    text = Text(prefix, style="dim", no_wrap=True, overflow="ellipsis" if crop else "ignore")
    for i, (piece, style) in enumerate(label_parts(node)):
        if i:
            text.append(label_separator(i))
        text.append(piece, style=style)
    return text


def rich_tree(tree: EventTree, *, max_nodes: int | None = None, crop: bool = False) -> Group:
    """``tree`` as a rich renderable, line for line as ``render()``.

    ``max_nodes`` caps huge trees (the rest is counted on a last line).
    ``crop=True`` ends a line wider than the console with "…" (for a live
    view, which the terminal would otherwise cut without a mark).
    """
    if tree.root is None:
        return Group(Text("(empty tree)", style="dim"))
    lines: list[Text] = []
    for lead, node in tree.guided(tree.root):
        if max_nodes is not None and len(lines) >= max_nodes:
            lines.append(Text(f"… {len(tree) - len(lines)} more nodes", style="dim"))
            break
        lines.append(_line(lead, node, crop))
    return Group(*lines)


def print_tree(tree: EventTree, *, file: IO[str] | None = None, console: Any = None) -> None:
    """Print ``tree`` with rich: colours on a terminal, the plain lines when piped."""
    (console or Console(file=file, highlight=False, soft_wrap=True)).print(rich_tree(tree))
