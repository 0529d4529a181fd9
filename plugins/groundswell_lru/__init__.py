"""Groundswell's default cache backend: an in-memory LRU with TTL and size limits.

Registered as the ``lru`` cache backend through the ``groundswell`` entry-point
group. Entries expire after their TTL; the least recently used entries are
evicted when the cache holds more than ``max_items`` entries or more than
``max_bytes`` bytes (each value's size measured as its compact JSON encoding).
One instance serves every event loop and thread of the process: a lock keeps
its entries whole when threads use it at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from groundswell import CacheBackend, hookimpl

__all__ = ["LRUCache"]


def _size_of(value: Any) -> int:
    try:
        return len(json.dumps(value, separators=(",", ":"), default=repr).encode())
    except (TypeError, ValueError):
        return len(repr(value).encode())


class LRUCache:
    """In-memory LRU cache with per-entry TTL, an item cap and a byte cap."""

    def __init__(
        self,
        *,
        max_items: int = 1024,
        max_bytes: int = 64 * 1024 * 1024,
        ttl: float = 3600.0,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_items < 1 or max_bytes < 1 or ttl <= 0:
            raise ValueError(
                f"LRUCache needs max_items >= 1, max_bytes >= 1 and ttl > 0; "
                f"got max_items={max_items}, max_bytes={max_bytes}, ttl={ttl}"
            )
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.default_ttl = ttl
        self._timer = timer
        # maxsize counts bytes; the item cap is enforced separately in set().
        self._data: TTLCache[str, tuple[Any, float, float]] = TTLCache(
            maxsize=max_bytes, ttl=ttl, timer=timer, getsizeof=lambda entry: entry[2]
        )
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        # cachetools' caches are not thread-safe; no method awaits while holding it.
        self._lock = threading.Lock()

    async def get(self, key: str) -> Any | None:
        """The value under ``key``, or ``None`` on a miss or after expiry."""
        data = self._data
        with self._lock:
            try:
                # Indexing checks the cache's TTL once; .get() would check it twice.
                value, expires_at, _ = data[key]
            except KeyError:
                self.misses += 1
                return None
            if self._timer() >= expires_at:  # a per-entry TTL shorter than the default ran out
                # pop, not del: by now the cache's own TTL may have dropped it too.
                data.pop(key, None)
                self.misses += 1
                return None
            self.hits += 1
        return value

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        """Store ``value`` for ``ttl`` seconds (default: the cache's TTL, which is also the cap)."""
        size = max(1, _size_of(value))
        if size > self.max_bytes:
            return  # larger than the whole cache: storing it would only evict everything
        life = min(ttl, self.default_ttl) if ttl is not None else self.default_ttl
        # No await below: the update is atomic with respect to other tasks (and,
        # under the lock, to other threads).
        with self._lock:
            data = self._data
            data.pop(key, None)
            data.expire()  # expiry is not eviction; drop those first so they are not counted
            before = len(data)
            while len(data) >= self.max_items:
                try:
                    data.popitem()
                except KeyError:  # the rest expired meanwhile (popitem expires first)
                    break
            data[key] = (value, self._timer() + life, float(size))
            # Entries pushed out by the byte cap while inserting count as evictions too.
            self.evictions += max(0, before - len(data) + 1)

    async def bust(self, key: str) -> bool:
        """Remove ``key``; True if it was present."""
        with self._lock:
            return self._data.pop(key, None) is not None

    async def bust_prefix(self, prefix: str) -> int:
        """Remove every key starting with ``prefix``; returns how many were removed."""
        with self._lock:
            keys = [k for k in list(self._data.keys()) if k.startswith(prefix)]
            for key in keys:
                self._data.pop(key, None)
        return len(keys)

    def metrics(self) -> dict[str, Any]:
        """Hits, misses, evictions, entries and bytes currently held."""
        with self._lock:
            self._data.expire()
            return {
                "backend": "lru",
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
                "size": len(self._data),
                "bytes": int(self._data.currsize),
                "max_items": self.max_items,
                "max_bytes": self.max_bytes,
            }


@hookimpl
def register_cache_backends() -> CacheBackend:
    return CacheBackend(
        name="lru",
        factory=LRUCache,
        description="In-memory LRU cache with TTL, item and byte limits (default).",
    )
