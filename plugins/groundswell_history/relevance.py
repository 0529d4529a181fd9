"""Task signatures and the relevance of a past session to a task.

A signature is the SHA-256 of a task's normalized title, category and sorted
file patterns. Relevance (0 to 1) adds three parts:

- signature: 0.5 for the same signature, 0.3 for a partial match (same
  category, a shared file pattern, or the same title), else 0;
- recency: ``0.3 * exp(-0.1 * days)`` since the session started;
- outcome: 0.2 completed, 0.1 running or terminated, 0 failed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["TaskSignature", "relevance", "scorer", "task_signature"]

EXACT, PARTIAL = 0.5, 0.3
RECENCY, DECAY_PER_DAY = 0.3, 0.1
OUTCOME = {"completed": 0.2, "running": 0.1, "terminated": 0.1, "failed": 0.0}
_SPACES = re.compile(r"\s+")


class TaskSignature(str):
    """A task signature: the hex SHA-256, carrying the normalized parts it was made from."""

    task_title: str
    task_category: str
    task_file_patterns: tuple[str, ...]

    def __new__(
        cls, digest: str, title: str = "", category: str = "", file_patterns: tuple[str, ...] = ()
    ) -> TaskSignature:
        made = super().__new__(cls, digest)
        made.task_title, made.task_category = title, category
        made.task_file_patterns = file_patterns
        return made


def _normalize(text: str | None) -> str:
    return _SPACES.sub(" ", (text or "").strip().lower())


def task_signature(
    title: str, category: str | None = None, file_patterns: Iterable[str] = ()
) -> TaskSignature:
    """The signature of a task: the same for the same task however it is spelled.

    Titles and categories are compared without case and with whitespace
    collapsed; file patterns are stripped, deduplicated and sorted.
    """
    if not isinstance(title, str) or not title.strip():
        raise ValueError(f"task_signature: title must be a non-empty string, got {title!r}")
    if isinstance(file_patterns, str):
        raise ValueError("task_signature: file_patterns must be a list of patterns, not a string")
    parts = (
        _normalize(title),
        _normalize(category),
        tuple(sorted({p.strip() for p in file_patterns if p and p.strip()})),
    )
    digest = hashlib.sha256(
        json.dumps([parts[0], parts[1], list(parts[2])], separators=(",", ":")).encode()
    ).hexdigest()
    return TaskSignature(digest, *parts)


def _get(session: Any, name: str) -> Any:
    if isinstance(session, Mapping):
        return session.get(name)
    return getattr(session, name, None)


def relevance(session: Any, task_signature: str | None = None, now: float | None = None) -> float:
    """How relevant a past session is to a task, from 0 to 1.

    ``session`` is a stored session (or a mapping with ``task_signature``,
    ``title``, ``category``, ``file_patterns``, ``status`` and ``started_at``,
    a Unix time). Without a ``task_signature`` only recency and outcome count.
    A plain signature string matches exactly or not at all; one made by
    `task_signature` also matches partially.
    """
    return scorer(task_signature, now)(
        _get(session, "status"),
        _get(session, "started_at"),
        _get(session, "task_signature"),
        _get(session, "title"),
        _get(session, "category"),
        _get(session, "file_patterns"),
    )


def scorer(
    task_signature: str | None = None, now: float | None = None
) -> Callable[[Any, Any, Any, Any, Any, Any], float]:
    """`relevance` for many sessions of one query, without per-call set-up.

    The returned function takes ``(status, started_at, task_signature, title,
    category, file_patterns)``; ``file_patterns`` may be a list or its JSON
    text, which is parsed only when nothing cheaper decides a partial match.
    """
    now = time.time() if now is None else now
    parts = task_signature if isinstance(task_signature, TaskSignature) else None
    partial = parts is not None
    category = parts.task_category if parts else ""
    title = parts.task_title if parts else ""
    patterns = set(parts.task_file_patterns) if parts else set()
    outcome, exp = OUTCOME.get, math.exp

    def score(
        status: Any,
        started_at: Any,
        stored: Any,
        stored_title: Any,
        stored_category: Any,
        stored_patterns: Any,
    ) -> float:
        total = 0.0
        if task_signature:
            if stored and stored == task_signature:
                total += EXACT
            elif partial and (
                (category and _normalize(stored_category) == category)
                or (title and _normalize(stored_title) == title)
                or (patterns and not patterns.isdisjoint(_pattern_list(stored_patterns)))
            ):
                total += PARTIAL
        if isinstance(started_at, int | float):
            days = max(0.0, (now - started_at) / 86_400)
            total += RECENCY * exp(-DECAY_PER_DAY * days)
        total += outcome(str(status), 0.0)
        return round(min(1.0, max(0.0, total)), 6)

    return score


def _pattern_list(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value or "[]")
        except ValueError:
            return ()
    return value if isinstance(value, list | tuple | set) else ()
