"""Telling agents apart in a run's tree: the note for two agents left unnamed."""

from __future__ import annotations

import logging
import weakref
from typing import Any

from ..tree.tree import EventTree

__all__ = ["UNNAMED", "note_unnamed"]

logger = logging.getLogger("groundswell.agent")

#: The name of an agent built without ``name=``.
UNNAMED = "agent"
# Per live tree (by id: trees compare by value and are not hashable), the unnamed
# agents seen prompting in it; an entry goes when its tree does.
_SEEN: dict[int, tuple[weakref.ref[EventTree], set[int]]] = {}
_WARNED: set[str] = set()


def note_unnamed(tree: EventTree, agent: Any) -> None:
    """Warn when a second unnamed agent prompts in ``tree`` (once per workflow name).

    One unnamed agent is plain in its tree; two both show as ``agent``, and
    nothing tells their nodes apart.
    """
    key = id(tree)
    entry = _SEEN.get(key)
    if entry is None or entry[0]() is not tree:
        entry = (weakref.ref(tree, lambda _: _SEEN.pop(key, None)), set())
        _SEEN[key] = entry
    seen = entry[1]
    if id(agent) in seen:
        return
    seen.add(id(agent))
    root = tree.root.name if tree.root is not None else "?"
    if len(seen) == 2 and root not in _WARNED:  # once per workflow: not every run of it
        _WARNED.add(root)
        logger.warning(
            "two different agents prompt in run %r, both unnamed: their nodes in the tree "
            "are both called %r; give each a name, e.g. Agent(name='researcher')",
            root,
            UNNAMED,
        )
