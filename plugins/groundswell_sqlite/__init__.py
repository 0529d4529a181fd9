"""A Groundswell cache in one SQLite file: ``Agent(cache="sqlite")``, with no server to run.

For one machine without Redis: answers and tool results outlive the process
and are shared by every process that opens the file. The file is
``GROUNDSWELL_SQLITE_CACHE`` (a path), else ``$GROUNDSWELL_HOME/cache.db``
(``~/.groundswell/cache.db``). Entries expire after their TTL; beyond
``max_items`` the least recently used are evicted (``metrics()`` counts
them). It offers the kernel's optional lock (``try_lock``/``unlock``, see
`groundswell.CacheLock`), so processes sharing the file answer an
identical prompt once between them.

SQLite comes with Python: nothing to install. The file is in WAL mode, so
readers never wait for a writer; each call runs in a worker thread, so a slow
disk never holds up the event loop, and one connection (behind a lock) serves
every thread and event loop of the process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from groundswell import CacheBackend, ConfigurationError, hookimpl

__all__ = ["SQLiteCache", "default_path"]

#: The environment variable that names the cache file.
PATH_ENV = "GROUNDSWELL_SQLITE_CACHE"
T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
    "expires_at REAL NOT NULL, used_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS entries_used ON entries (used_at)",
    "CREATE INDEX IF NOT EXISTS entries_expiry ON entries (expires_at)",
    "CREATE TABLE IF NOT EXISTS locks (key TEXT PRIMARY KEY, owner TEXT NOT NULL, "
    "expires_at REAL NOT NULL)",
)
# A literal prefix: LIKE would read the '_' and '%' of keys as wildcards.
_PREFIXED = "substr(key, 1, ?) = ?"


def default_path() -> Path:
    """``GROUNDSWELL_SQLITE_CACHE``, else ``$GROUNDSWELL_HOME/cache.db`` (``~/.groundswell``)."""
    chosen = os.environ.get(PATH_ENV)
    if chosen:
        return Path(chosen).expanduser()
    return Path(os.environ.get("GROUNDSWELL_HOME") or Path.home() / ".groundswell") / "cache.db"


class SQLiteCache:
    """A `groundswell.Cache` in one SQLite file, shared by the processes of one machine.

    ``path`` is the file (``None``: `default_path`; ``":memory:"`` keeps it in
    this process). ``max_items`` caps the entries (the least recently used
    go first), ``ttl`` is the lifetime of an entry stored without one, and
    ``timeout`` how long a call waits for another process's write.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_items: int = 10_000,
        ttl: float = 3600.0,
        timeout: float = 5.0,
    ) -> None:
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
            raise ConfigurationError(
                f"SQLiteCache: max_items must be an int >= 1, got {max_items!r}"
            )
        for name, value in (("ttl", ttl), ("timeout", timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigurationError(
                    f"SQLiteCache: {name} must be a number of seconds > 0, got {value!r}"
                )
        where = str(path) if path is not None else str(default_path())
        source = "path" if path is not None else (PATH_ENV if os.environ.get(PATH_ENV) else "")
        try:
            if where != ":memory:":
                Path(where).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                where, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            if where != ":memory:":
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                db.execute(statement)
        except (OSError, sqlite3.Error) as exc:
            named = f" ({source})" if source else ""
            raise ConfigurationError(
                f"SQLiteCache: cannot open the cache file {where!r}{named}: {exc}; set "
                f"{PATH_ENV} to a writable path"
            ) from exc
        self.path = where
        self.max_items = max_items
        self.default_ttl = float(ttl)
        self._db = db
        # One connection for every thread: sqlite3 connections are not safe to share without it.
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0

    def _locked(self, work: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        with self._lock:
            db = self._db
            if not write:
                return work(db)
            db.execute("BEGIN IMMEDIATE")  # takes the write lock now: no upgrade deadlock
            try:
                done = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return done

    async def _run(self, work: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        return await asyncio.to_thread(self._locked, work, write)

    async def get(self, key: str) -> Any | None:
        """The value under ``key``, or ``None`` when it is absent or expired."""

        def read(db: sqlite3.Connection) -> str | None:
            now = time.time()
            row = db.execute(
                "SELECT value FROM entries WHERE key = ? AND expires_at > ?", (key, now)
            ).fetchone()
            if row is None:
                self.misses += 1
                return None
            db.execute("UPDATE entries SET used_at = ? WHERE key = ?", (now, key))
            self.hits += 1
            return str(row[0])

        found = await self._run(read, write=True)
        return None if found is None else json.loads(found)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        """Store ``value`` (JSON-safe) for ``ttl`` seconds (``None``: the cache's ``ttl``)."""
        encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        life = self.default_ttl if ttl is None else float(ttl)

        def write(db: sqlite3.Connection) -> None:
            now = time.time()
            db.execute(
                "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)",
                (key, encoded, now + life, now),
            )
            # Expiry is not eviction: those go first, uncounted.
            db.execute("DELETE FROM entries WHERE expires_at <= ?", (now,))
            (count,) = db.execute("SELECT COUNT(*) FROM entries").fetchone()
            if count > self.max_items:
                gone = db.execute(
                    "DELETE FROM entries WHERE key IN "
                    "(SELECT key FROM entries WHERE key != ? ORDER BY used_at LIMIT ?)",
                    (key, count - self.max_items),
                ).rowcount
                self.evictions += max(0, gone)

        await self._run(write, write=True)

    async def bust(self, key: str) -> bool:
        """Remove ``key``; True if it was there (and not expired)."""

        def remove(db: sqlite3.Connection) -> bool:
            now = time.time()
            live = db.execute(
                "DELETE FROM entries WHERE key = ? AND expires_at > ?", (key, now)
            ).rowcount
            db.execute("DELETE FROM entries WHERE key = ?", (key,))
            return live > 0

        return await self._run(remove, write=True)

    async def bust_prefix(self, prefix: str) -> int:
        """Remove every key starting with ``prefix``; returns how many (expired ones not counted)."""

        def remove(db: sqlite3.Connection) -> int:
            now = time.time()
            live = db.execute(
                f"DELETE FROM entries WHERE {_PREFIXED} AND expires_at > ?",
                (len(prefix), prefix, now),
            ).rowcount
            db.execute(f"DELETE FROM entries WHERE {_PREFIXED}", (len(prefix), prefix))
            return max(0, live)

        return await self._run(remove, write=True)

    async def try_lock(self, key: str, owner: str, ttl: float) -> bool:
        """Lock ``key`` for ``owner`` for ``ttl`` seconds if it is free or its holder's time ran
        out, or renew ``owner``'s lock; True if ``owner`` holds it now."""

        def take(db: sqlite3.Connection) -> bool:
            now = time.time()
            row = db.execute("SELECT owner, expires_at FROM locks WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                return False
            db.execute("INSERT OR REPLACE INTO locks VALUES (?, ?, ?)", (key, owner, now + ttl))
            return True

        return await self._run(take, write=True)

    async def unlock(self, key: str, owner: str) -> bool:
        """Release ``owner``'s lock on ``key`` (never another owner's); True if it did."""

        def release(db: sqlite3.Connection) -> bool:
            gone = db.execute("DELETE FROM locks WHERE key = ? AND owner = ?", (key, owner))
            return gone.rowcount > 0

        return await self._run(release, write=True)

    def metrics(self) -> dict[str, Any]:
        """Hits, misses and evictions seen by this process; entries held now (every process's)."""

        def size(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT COUNT(*) FROM entries WHERE expires_at > ?", (time.time(),)
            ).fetchone()
            return int(row[0])

        return {
            "backend": "sqlite",
            "path": self.path,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "size": self._locked(size),
            "max_items": self.max_items,
        }

    def close(self) -> None:
        """Close the file (the cache cannot be used afterwards)."""
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"SQLiteCache({self.path!r})"


@hookimpl
def register_cache_backends() -> CacheBackend:
    return CacheBackend(
        name="sqlite",
        factory=SQLiteCache,
        description="One SQLite file shared by the processes of a machine (no server needed).",
    )
