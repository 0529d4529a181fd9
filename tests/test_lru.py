"""The bundled LRU cache backend, loaded by name like any plugin's backend."""

from __future__ import annotations

import pytest
from groundswell_lru import LRUCache

import groundswell
from groundswell import Cache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(**options: object) -> LRUCache:
    cache = groundswell.get_plugin_manager().cache_backends()["lru"].factory(**options)
    assert isinstance(cache, LRUCache) and isinstance(cache, Cache)
    return cache


async def test_get_set_hit_and_miss_counts() -> None:
    cache = make()
    assert await cache.get("a:1") is None
    await cache.set("a:1", {"answer": 42})
    assert await cache.get("a:1") == {"answer": 42}
    m = cache.metrics()
    assert (m["hits"], m["misses"], m["size"], m["backend"]) == (1, 1, 1, "lru")
    assert m["bytes"] == len('{"answer":42}')


async def test_evicts_least_recently_used_by_count() -> None:
    cache = make(max_items=2)
    await cache.set("k1", 1)
    await cache.set("k2", 2)
    await cache.get("k1")  # k2 is now the least recently used
    await cache.set("k3", 3)
    assert await cache.get("k2") is None
    assert await cache.get("k1") == 1 and await cache.get("k3") == 3
    assert cache.metrics()["evictions"] == 1


async def test_evicts_by_bytes() -> None:
    cache = make(max_bytes=25)
    await cache.set("a", "x" * 10)  # 12 bytes as JSON
    await cache.set("b", "y" * 10)  # 24 bytes in all
    await cache.set("c", "z" * 10)  # 36 > 25: the oldest goes
    assert await cache.get("a") is None
    assert await cache.get("b") is not None and await cache.get("c") is not None
    assert cache.metrics()["evictions"] == 1 and cache.metrics()["bytes"] <= 25
    await cache.set("huge", "h" * 100)  # larger than the cache: not stored, nothing evicted
    assert await cache.get("huge") is None and cache.metrics()["size"] == 2


async def test_ttl_expiry_with_a_controllable_clock() -> None:
    clock = Clock()
    cache = make(ttl=60, timer=clock)
    await cache.set("default", 1)
    await cache.set("short", 2, ttl=5)
    clock.now += 6
    assert await cache.get("short") is None
    assert await cache.get("default") == 1
    clock.now += 60
    assert await cache.get("default") is None
    assert cache.metrics()["size"] == 0 and cache.metrics()["evictions"] == 0


async def test_bust_and_bust_prefix() -> None:
    cache = make()
    for key in ["judge:1", "judge:2", "writer:1"]:
        await cache.set(key, key)
    assert await cache.bust("judge:1") is True
    assert await cache.bust("judge:1") is False
    await cache.set("judge:3", 3)
    assert await cache.bust_prefix("judge:") == 2
    assert await cache.get("writer:1") == "writer:1"
    assert cache.metrics()["size"] == 1


def test_invalid_limits_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="max_items >= 1"):
        LRUCache(max_items=0)


def test_threads_on_their_own_event_loops_keep_it_whole() -> None:
    # One instance serves every thread: unlocked, cachetools' linked lists break
    # (KeyError from get, set and metrics, even after the threads are done).
    import asyncio
    import random
    import sys
    import threading

    cache = make(max_items=50, ttl=0.01)
    errors: list[BaseException] = []

    async def hammer(seed: int) -> None:
        rng = random.Random(seed)
        for i in range(5_000):
            key = f"k{rng.randrange(200)}"
            try:
                if i % 3:
                    await cache.set(key, {"value": i}, rng.choice([None, 0.001, 0.5]))
                else:
                    await cache.get(key)
                if i % 97 == 0:
                    cache.metrics()
                    await cache.bust_prefix("k1")
            except Exception as exc:
                errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=asyncio.run, args=(hammer(seed),)) for seed in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert cache.metrics()["size"] <= 50
