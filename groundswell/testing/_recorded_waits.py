"""The decisions a saved run recorded on its ``wait`` nodes, given again in a replay.

`RecordedWaits` reads every ``wait`` node of a trace and, asked about a wait
opened during a replay, returns the decision recorded on the matching node:
the next unused one with the same kind at the same path in the tree
(``workflow/step/.../wait``), preferring one whose request is the same (an
approval's ``tool_use_id``, a question's text), since calls of one model turn
may open their waits in any order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..runtime.context import current_tree
from ..waits.core import Decision, Wait
from ._replay import load_trees

__all__ = ["NoRecordedDecision", "RecordedWaits"]


class NoRecordedDecision(AssertionError):
    """A wait opened in a replay has no decision left in the trace for it.

    ``waits`` names each such wait (``"question at release/plan/question"``).
    Raised where the wait opened (it fails at once rather than wait for
    nobody) and again, listing them all, when the ``auto_answer`` block ends.
    """

    def __init__(self, message: str, waits: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.waits = list(waits)


@dataclass
class _Recorded:
    request: dict[str, Any]
    decision: Decision | None  # None: the wait failed or was cancelled, nobody decided
    used: bool = False


def _decision(payload: dict[str, Any]) -> Decision | None:
    kind = payload.get("decision")
    if kind == "approve":
        edited = payload.get("input")
        return Decision.approve(edited if isinstance(edited, dict) else None)
    if kind == "reject":
        return Decision.reject(str(payload.get("reason") or "rejected in the recorded run"))
    if kind == "answer":
        return Decision.answer(payload.get("answer"))
    return None


class RecordedWaits:
    """The recorded decisions of a trace's waits, by kind and path, in the order they opened."""

    def __init__(self, trace: Any) -> None:
        self._by_place: dict[tuple[str, str], list[_Recorded]] = {}
        self._lock = threading.Lock()
        self.missing: list[str] = []
        for tree, _ in load_trees(trace, "auto_answer(from_trace=...)"):
            waits = [n for n in tree.walk() if n.type.value == "wait"]
            # Walk order is start order within a parent; the start time orders across branches.
            for node in sorted(waits, key=lambda n: n.timestamp):
                payload = node.payload
                place = (str(payload.get("kind", "")), tree.path(node.id))
                request = payload.get("request")
                entry = _Recorded(request if isinstance(request, dict) else {}, _decision(payload))
                self._by_place.setdefault(place, []).append(entry)

    @property
    def remaining(self) -> int:
        """Recorded decisions not given yet."""
        return sum(1 for queue in self._by_place.values() for r in queue if not r.used)

    def decide(self, wait: Wait) -> Decision:
        """The recorded decision on ``wait``; `NoRecordedDecision` when there is none left."""
        tree = current_tree()
        path = tree.path(wait.node_id) if tree is not None and wait.node_id in tree else "?"
        where = f"{wait.kind} at {path}"
        about = wait.request.get("question") or wait.request.get("tool")
        if about:
            where += f" ({str(about)[:60]!r})"
        with self._lock:
            queue = [r for r in self._by_place.get((wait.kind, path), []) if not r.used]
            found = next((r for r in queue if r.request == wait.request), None)
            found = found or (queue[0] if queue else None)
            if found is not None:
                found.used = True
            if found is None or found.decision is None:
                self.missing.append(where)
        if found is None:
            raise NoRecordedDecision(
                f"wait {wait.id!r} ({where}) has no recorded decision left in the trace: the "
                "recorded run opened no such wait, or fewer of them. Record the run again if "
                "the change is intended",
                [where],
            )
        if found.decision is None:
            raise NoRecordedDecision(
                f"wait {wait.id!r} ({where}) was not decided in the recorded run (it timed out "
                "with no default, failed or was cancelled), so the replay cannot decide it",
                [where],
            )
        return found.decision
