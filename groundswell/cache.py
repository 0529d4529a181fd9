"""The cache protocol every cache backend implements."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Cache"]


@runtime_checkable
class Cache(Protocol):
    """An async key-value cache; keys are ``"<namespace>:<sha256 hex>"`` strings.

    Values are JSON-safe data. ``get`` returns ``None`` on a miss (so ``None``
    itself is never cached).
    """

    async def get(self, key: str) -> Any | None:
        """The value stored under ``key``, or ``None`` if absent or expired."""

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        """Store ``value``; ``ttl`` in seconds overrides the backend's default."""

    async def bust(self, key: str) -> bool:
        """Remove ``key``; True if it was present."""

    async def bust_prefix(self, prefix: str) -> int:
        """Remove every key starting with ``prefix``; returns how many."""

    def metrics(self) -> dict[str, Any]:
        """Counters such as hits, misses, evictions and size."""
