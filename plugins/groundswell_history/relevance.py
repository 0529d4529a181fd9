"""Task signatures and the relevance of a past session to a task.

A signature is the SHA-256 of a task's normalized title, category and sorted
file patterns. Relevance (0 to 1) adds three parts:

- signature: 0.5 for the same signature, 0.3 for a partial match (same
  category, a shared file pattern, or the same title), else 0;
- recency: ``0.3 * exp(-0.1 * days)`` since the session started;
- outcome: 0.2 completed, 0.1 running, 0 failed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["TaskSignature", "relevance", "task_signature"]

EXACT, PARTIAL = 0.5, 0.3
RECENCY, DECAY_PER_DAY = 0.3, 0.1
OUTCOME = {"completed": 0.2, "running": 0.1, "failed": 0.0}
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
    :func:`task_signature` also matches partially.
    """
    score = 0.0
    if task_signature:
        stored = _get(session, "task_signature")
        if stored and stored == task_signature:
            score += EXACT
        elif isinstance(task_signature, TaskSignature) and _partial(session, task_signature):
            score += PARTIAL
    started = _get(session, "started_at")
    if isinstance(started, int | float):
        days = max(0.0, ((time.time() if now is None else now) - started) / 86_400)
        score += RECENCY * math.exp(-DECAY_PER_DAY * days)
    score += OUTCOME.get(str(_get(session, "status")), 0.0)
    return round(min(1.0, max(0.0, score)), 6)


def _partial(session: Any, signature: TaskSignature) -> bool:
    category = _normalize(_get(session, "category"))
    if signature.task_category and category == signature.task_category:
        return True
    patterns = set(_get(session, "file_patterns") or ())
    if patterns & set(signature.task_file_patterns):
        return True
    title = _normalize(_get(session, "title"))
    return bool(signature.task_title) and title == signature.task_title
