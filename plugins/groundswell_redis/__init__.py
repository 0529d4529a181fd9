"""A shared Groundswell cache on Redis: ``Agent(cache="redis")``.

Needs the ``redis`` extra: ``pip install "groundswell[redis]"``. The server is
``GROUNDSWELL_REDIS_URL``, else ``REDIS_URL``, else ``redis://127.0.0.1:6379/0``.
Entries are JSON under ``<prefix><key>`` with a TTL. Clearing a prefix uses
``SCAN`` (never ``KEYS``, which blocks the server). Connection errors are
raised to the caller; Groundswell's agents turn them into a cache miss with a
``cache_error`` event, so a Redis outage never fails a run.

It offers the kernel's optional lock (``try_lock``/``unlock``, see
`groundswell.CacheLock`): ``SET <prefix>lock:<key> <owner> NX PX <ttl>``,
renewed and released only by its owner (a Lua script each), so processes
sharing the server answer each request once between them.

A redis.asyncio client belongs to one event loop, so the cache keeps one per
running loop and closes it when that loop shuts down (``asyncio.run()`` and
every runner that calls ``loop.shutdown_asyncgens()``): many short
``asyncio.run()`` calls leave no connections behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import AsyncGenerator
from typing import Any

from groundswell import CacheBackend, ConfigurationError, hookimpl

__all__ = ["RedisCache"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
# Take the lock if it is free, or renew it for its owner; 1 if the owner holds it now.
_TRY_LOCK = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if held then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
# Release the lock, only for its owner; 1 if it did.
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _redis_asyncio() -> Any:
    try:
        import redis.asyncio as redis_asyncio
    except ImportError as exc:
        raise ConfigurationError(
            'the "redis" cache backend needs the redis package: pip install "groundswell[redis]"'
        ) from exc
    return redis_asyncio


class RedisCache:
    """A `groundswell.Cache` on a Redis server, shared across processes and machines."""

    def __init__(
        self,
        url: str | None = None,
        *,
        prefix: str = "groundswell:",
        ttl: float = 3600.0,
        socket_timeout: float = 2.0,
    ) -> None:
        self._redis = _redis_asyncio()
        self._source = "RedisCache(url=...)"
        if not url:
            self._source = next(
                (name for name in ("GROUNDSWELL_REDIS_URL", "REDIS_URL") if os.environ.get(name)),
                "the default URL",
            )
        self.url = (
            url
            or os.environ.get("GROUNDSWELL_REDIS_URL")
            or os.environ.get("REDIS_URL")
            or DEFAULT_URL
        )
        if ttl <= 0:
            raise ConfigurationError(f"RedisCache ttl must be > 0 seconds, got {ttl}")
        self.prefix = prefix
        self.default_ttl = ttl
        self.socket_timeout = socket_timeout
        # Each running loop's client, and the async generator that closes it with its loop.
        self._clients: dict[asyncio.AbstractEventLoop, tuple[Any, AsyncGenerator[None, None]]] = {}
        self.hits = 0
        self.misses = 0
        self.errors = 0

    async def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        held = self._clients.get(loop)
        if held is not None:
            return held[0]
        for old in [other for other in list(self._clients) if other.is_closed()]:
            # A loop closed without shutdown_asyncgens(): its connections cannot be
            # closed politely any more; dropping them lets the sockets go.
            self._clients.pop(old, None)
        try:
            client = self._redis.Redis.from_url(
                self.url,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.socket_timeout,
                retry_on_timeout=False,
            )
        except ValueError as exc:
            raise ConfigurationError(
                f"{self._source} is not a Redis URL: {_without_password(self.url)!r} ({exc}); "
                f"use e.g. {DEFAULT_URL}"
            ) from exc
        closer = self._close_with(loop, client)
        self._clients[loop] = (client, closer)
        await closer.__anext__()  # now the loop knows it, and closes it when shutting down
        return client

    async def _close_with(
        self, loop: asyncio.AbstractEventLoop, client: Any
    ) -> AsyncGenerator[None, None]:
        # An async generator started on a loop is closed by loop.shutdown_asyncgens(),
        # which asyncio.run() calls while the loop can still run the goodbye; asyncio
        # has no other "this loop is ending" hook.
        try:
            yield
        finally:
            if self._clients.get(loop, (None,))[0] is client:
                self._clients.pop(loop, None)
            with contextlib.suppress(Exception):  # a broken connection is gone either way
                await client.aclose()

    async def _call(self, operation: str, *args: Any) -> Any:
        try:
            return await getattr(await self._client(), operation)(*args)
        except Exception:
            self.errors += 1
            raise

    async def get(self, key: str) -> Any | None:
        """The value under ``key``, or ``None``; raises on connection errors."""
        raw = await self._call("get", self.prefix + key)
        if raw is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(raw)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        """Store ``value`` as JSON for ``ttl`` seconds (default: the cache's TTL)."""
        life_ms = max(1, int((ttl or self.default_ttl) * 1000))
        await self._call(
            "set", self.prefix + key, json.dumps(value, separators=(",", ":")), None, life_ms
        )

    async def try_lock(self, key: str, owner: str, ttl: float) -> bool:
        """Lock ``key`` for ``owner`` for ``ttl`` seconds if it is free, or renew ``owner``'s lock.

        The lock lives under ``<prefix>lock:<key>``, apart from the entry; True if
        ``owner`` holds it now.
        """
        life_ms = max(1, int(ttl * 1000))
        held = await self._call("eval", _TRY_LOCK, 1, self.prefix + "lock:" + key, owner, life_ms)
        return bool(held)

    async def unlock(self, key: str, owner: str) -> bool:
        """Release ``owner``'s lock on ``key`` (never another owner's); True if it did."""
        return bool(await self._call("eval", _UNLOCK, 1, self.prefix + "lock:" + key, owner))

    async def bust(self, key: str) -> bool:
        """Remove ``key``; True if it was present."""
        return bool(await self._call("delete", self.prefix + key))

    async def bust_prefix(self, prefix: str) -> int:
        """Remove every key starting with ``prefix`` (SCAN in batches, then UNLINK)."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.prefix + prefix) + "*"
        removed = 0
        try:
            client = await self._client()
            batch: list[Any] = []
            async for name in client.scan_iter(match=pattern, count=500):
                batch.append(name)
                if len(batch) >= 500:
                    removed += await client.unlink(*batch)
                    batch = []
            if batch:
                removed += await client.unlink(*batch)
        except Exception:
            self.errors += 1
            raise
        return int(removed)

    def metrics(self) -> dict[str, Any]:
        """Hits, misses and errors seen by this process."""
        return {"backend": "redis", "url": _without_password(self.url), "hits": self.hits,
                "misses": self.misses, "errors": self.errors}  # fmt: skip

    async def aclose(self) -> None:
        """Close this event loop's connections now (otherwise closed with the loop)."""
        held = self._clients.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held[1].aclose()


def _without_password(url: str) -> str:
    return re.sub(r"//([^:@/]*):[^@/]*@", r"//\1:***@", url)


@hookimpl
def register_cache_backends() -> CacheBackend:
    return CacheBackend(
        name="redis",
        factory=RedisCache,
        description='Shared cache on Redis (pip install "groundswell[redis]").',
    )
