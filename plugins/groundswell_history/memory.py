"""What agents remember: the memory half of `HistoryStore`.

Memories are kept per agent under a key, with a kind, an importance (0 to 1),
an access count and an optional expiry. ``learn_error`` and
``learn_success`` keep one memory per distinct error or approach.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .schema import clean, summarize

__all__ = ["MEMORY_KINDS", "Memory", "MemoryKind", "MemoryMethods"]

MEMORY_KINDS = ("context", "learning", "preference", "error_pattern", "success_pattern")
MemoryKind = Literal["context", "learning", "preference", "error_pattern", "success_pattern"]


@dataclass
class Memory:
    """One thing an agent remembers."""

    agent_id: str
    key: str
    content: str
    kind: str
    importance: float
    access_count: int
    created_at: float
    last_accessed_at: float | None
    expires_at: float | None
    metadata: dict[str, Any] = field(default_factory=dict)


def memory_from_row(row: Any) -> Memory:
    """A `Memory` from a ``gs_memories`` row."""
    data = dict(row._mapping)
    data["metadata"] = json.loads(data["metadata"] or "{}")
    return Memory(**data)


def digest(text: str) -> str:
    """The key part `HistoryStore.learn_error` and ``learn_success`` derive from a text."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:16]


class MemoryMethods:
    """`HistoryStore`'s memory methods (the store provides ``engine`` and ``_tables``)."""

    engine: Any
    _tables: tuple[Any, ...]

    def remember(
        self,
        agent_id: str,
        key: str,
        content: str,
        *,
        kind: MemoryKind = "context",
        importance: float = 0.5,
        ttl: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Memory:
        """Store (or replace) what ``agent_id`` remembers under ``key``.

        ``importance`` is 0 to 1; ``ttl`` (seconds) makes the memory expire.
        """
        if kind not in MEMORY_KINDS:
            raise ValueError(f"memory kind must be one of {', '.join(MEMORY_KINDS)}; got {kind!r}")
        if not 0.0 <= importance <= 1.0 or math.isnan(importance):
            raise ValueError(f"importance must be between 0 and 1, got {importance}")
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl must be seconds > 0, got {ttl}")
        if not key or not isinstance(key, str):
            raise ValueError(f"memory key must be a non-empty string, got {key!r}")
        from sqlalchemy.exc import IntegrityError

        memories = self._tables[4]
        now = time.time()
        values: dict[str, Any] = {
            "content": summarize(content, limit=20_000),
            "kind": kind,
            "importance": float(importance),
            "created_at": now,
            "last_accessed_at": None,
            "access_count": 0,
            "expires_at": None if ttl is None else now + ttl,
            "metadata": json.dumps(clean(dict(metadata or {}))),
        }
        where = (memories.c.agent_id == agent_id) & (memories.c.key == key)
        with self.engine.begin() as conn:
            updated = conn.execute(memories.update().where(where).values(**values)).rowcount
            if not updated:
                try:
                    with conn.begin_nested():
                        conn.execute(memories.insert().values(agent_id=agent_id, key=key, **values))
                except IntegrityError:  # another writer inserted it first: replace theirs
                    conn.execute(memories.update().where(where).values(**values))
        return Memory(
            agent_id=agent_id,
            key=key,
            content=values["content"],
            kind=kind,
            importance=values["importance"],
            access_count=0,
            created_at=now,
            last_accessed_at=None,
            expires_at=values["expires_at"],
            metadata=json.loads(values["metadata"]),
        )

    def recall(self, agent_id: str, key: str) -> Memory | None:
        """What ``agent_id`` remembers under ``key`` (counted as an access), or ``None``."""
        import sqlalchemy as sa

        memories = self._tables[4]
        now = time.time()
        where = (memories.c.agent_id == agent_id) & (memories.c.key == key)
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(memories).where(where)).first()
            if row is None:
                return None
            if row.expires_at is not None and row.expires_at <= now:
                conn.execute(memories.delete().where(where))
                return None
            conn.execute(
                memories.update()
                .where(where)
                .values(access_count=memories.c.access_count + 1, last_accessed_at=now)
            )
        memory = memory_from_row(row)
        memory.access_count += 1
        memory.last_accessed_at = now
        return memory

    def recall_all(
        self,
        agent_id: str,
        *,
        kind: MemoryKind | None = None,
        min_importance: float = 0.0,
        limit: int | None = None,
    ) -> list[Memory]:
        """An agent's live memories, most important first (then most recent)."""
        import sqlalchemy as sa

        memories = self._tables[4]
        now = time.time()
        query = sa.select(memories).where(
            (memories.c.agent_id == agent_id)
            & (memories.c.importance >= min_importance)
            & ((memories.c.expires_at.is_(None)) | (memories.c.expires_at > now))
        )
        if kind is not None:
            query = query.where(memories.c.kind == kind)
        query = query.order_by(memories.c.importance.desc(), memories.c.created_at.desc())
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return [memory_from_row(row) for row in conn.execute(query)]

    def forget(self, agent_id: str, key: str | None = None) -> int:
        """Forget one memory (or, with no ``key``, all of an agent's); returns how many."""
        memories = self._tables[4]
        where = memories.c.agent_id == agent_id
        if key is not None:
            where = where & (memories.c.key == key)
        with self.engine.begin() as conn:
            return int(conn.execute(memories.delete().where(where)).rowcount)

    def learn_error(
        self, agent_id: str, error: str, *, fix: str | None = None, importance: float = 0.7
    ) -> Memory:
        """Remember an error pattern (and how it was fixed); the same error is one memory."""
        content = error if fix is None else f"{error}\nFix: {fix}"
        return self.remember(
            agent_id,
            f"error:{digest(error)}",
            content,
            kind="error_pattern",
            importance=importance,
        )

    def learn_success(
        self,
        agent_id: str,
        approach: str,
        *,
        task_signature: str | None = None,
        importance: float = 0.6,
    ) -> Memory:
        """Remember an approach that worked (for a task signature, when given)."""
        return self.remember(
            agent_id,
            f"success:{digest(approach)}",
            approach,
            kind="success_pattern",
            importance=importance,
            metadata={"task_signature": str(task_signature)} if task_signature else None,
        )

    def purge_expired(self) -> int:
        """Delete expired memories; returns how many."""
        memories = self._tables[4]
        now = time.time()
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    memories.delete().where(
                        memories.c.expires_at.is_not(None) & (memories.c.expires_at <= now)
                    )
                ).rowcount
            )
