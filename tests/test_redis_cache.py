"""The Redis cache backend against a real redis-server."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from groundswell_redis import RedisCache

from groundswell import Agent, get_cache
from groundswell.testing import FakeAnthropicAPI, check_cache_backend, text

from .conftest import service_unavailable


@pytest.fixture
async def cache(redis_server_url: str, redis_prefix: str):  # type: ignore[no-untyped-def]
    backend = RedisCache(redis_server_url, prefix=redis_prefix, ttl=30)
    yield backend
    await backend.bust_prefix("")
    await backend.aclose()


async def test_get_set_ttl_bust(cache: RedisCache) -> None:
    assert await cache.get("judge:1") is None
    await cache.set("judge:1", {"value": [1, "two"], "stored_at": 1.0})
    assert await cache.get("judge:1") == {"value": [1, "two"], "stored_at": 1.0}
    await cache.set("judge:short", "x", ttl=0.05)
    await asyncio.sleep(0.15)
    assert await cache.get("judge:short") is None
    assert await cache.bust("judge:1") is True and await cache.bust("judge:1") is False
    assert cache.metrics()["hits"] == 1 and cache.metrics()["backend"] == "redis"


async def test_bust_prefix_scans_many_keys_and_escapes_glob_characters(cache: RedisCache) -> None:
    for i in range(1_200):
        await cache.set(f"judge:{i}", i)
    await cache.set("ju*ge:1", "star")
    await cache.set("writer:1", "keep")
    assert await cache.bust_prefix("judge:") == 1_200
    assert await cache.get("ju*ge:1") == "star"
    assert await cache.bust_prefix("ju*") == 1
    assert await cache.get("writer:1") == "keep"


async def test_it_keeps_the_cache_contract_lock_included(cache: RedisCache) -> None:
    await check_cache_backend(cache, ttl=0.5)


async def test_its_lock_is_exclusive_renewable_and_apart_from_entries(cache: RedisCache) -> None:
    assert await cache.try_lock("judge:1", "a", 30) is True
    assert await cache.try_lock("judge:1", "b", 30) is False
    assert await cache.try_lock("judge:1", "a", 0.2) is True  # renewed, for less
    assert await cache.get("judge:1") is None  # a lock is not an entry
    assert await cache.unlock("judge:1", "b") is False  # not b's to release
    await asyncio.sleep(0.3)
    assert await cache.try_lock("judge:1", "b", 30) is True  # a's ran out
    assert await cache.unlock("judge:1", "b") is True
    assert await cache.try_lock("judge:1", "a", 30) is True
    assert await cache.unlock("judge:1", "a") is True


async def test_agents_in_two_processes_share_answers(
    redis_server_url: str, redis_prefix: str
) -> None:
    script = f"""
import asyncio
from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI
from groundswell_redis import RedisCache

async def main():
    fake = FakeAnthropicAPI(lambda r: "computed elsewhere", share_cache=True)
    agent = Agent(name="shared", client=fake.client(), cache=RedisCache({redis_server_url!r}, prefix={redis_prefix!r}))
    print(await agent.prompt("same question"), len(fake.requests))

asyncio.run(main())
"""
    first = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert first.stdout.split() == ["computed", "elsewhere", "1"]
    # Each fake caches apart unless it shares: these two stand for one real API.
    fake = FakeAnthropicAPI(lambda r: "computed here", share_cache=True)
    cache = RedisCache(redis_server_url, prefix=redis_prefix)
    result = await Agent(name="shared", client=fake.client(), cache=cache).run("same question")
    assert result.output == "computed elsewhere" and fake.requests == []
    assert result.node.metrics["cache"] == "hit"
    await cache.bust_prefix("")
    await cache.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def private_redis(tmp_path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:  # type: ignore[no-untyped-def]
    binary = shutil.which("redis-server")
    if binary is None:
        service_unavailable("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0", proc
    proc.kill()
    proc.wait(5)


async def test_redis_going_away_mid_run_degrades_to_misses(private_redis) -> None:  # type: ignore[no-untyped-def]
    url, server = private_redis
    fake = FakeAnthropicAPI(lambda r: f"fresh {len(r.messages)}")
    cache = RedisCache(url, socket_timeout=0.5)
    agent = Agent(name="outage", client=fake.client(), cache=cache)
    assert await agent.prompt("q1") == "fresh 1"
    assert (await agent.run("q1")).node.metrics["cache"] == "hit"
    server.terminate()
    server.wait(5)
    result = await agent.run("q2")  # the server is gone: a miss with events, never a failure
    assert result.output == "fresh 1" and result.node.metrics["cache"] == "miss"
    errors = [e for e in result.node.events if e["type"] == "cache_error"]
    assert [e["operation"] for e in errors] == ["get", "set"]
    assert len(fake.requests) == 2 and cache.metrics()["errors"] >= 2


async def test_redis_backend_by_name(
    monkeypatch: pytest.MonkeyPatch, redis_server_url: str
) -> None:
    monkeypatch.setenv("GROUNDSWELL_REDIS_URL", redis_server_url)
    backend = get_cache("redis")
    assert isinstance(backend, RedisCache) and backend.url == redis_server_url
    fake = FakeAnthropicAPI([text("named")])
    assert (
        await Agent(name="by-name-redis-test", client=fake.client(), cache="redis").prompt(
            os.urandom(4).hex()
        )
        == "named"
    )
    await backend.bust_prefix("by-name-redis-test:")
    await backend.aclose()


def connections(url: str) -> int:
    """How many clients the server has, this one not counted."""
    import redis

    with redis.Redis.from_url(url) as admin:
        return len(admin.client_list()) - 1


def test_many_short_event_loops_leave_no_connections_open(private_redis) -> None:  # type: ignore[no-untyped-def]
    url, _ = private_redis
    fake = FakeAnthropicAPI(lambda r: "ok")
    agent = Agent(name="loops", client=fake.client(), cache=RedisCache(url))
    for i in range(200):
        assert asyncio.run(agent.prompt(f"q{i % 7}")) == "ok"
    # Each asyncio.run() closed its loop's connection on the way out.
    assert connections(url) == 0
    assert len(fake.requests) == 7  # and the cache worked across the loops


async def test_a_hung_redis_costs_a_few_deadlines_then_is_skipped_until_it_answers(
    private_redis,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_CACHE_TIMEOUT_S", "0.2")
    monkeypatch.setenv("GROUNDSWELL_CACHE_SKIP_FOR_S", "0.5")
    url, server = private_redis
    fake = FakeAnthropicAPI(lambda r: f"fresh {len(fake.requests)}")
    cache = RedisCache(url)
    agent = Agent(name="stopped", client=fake.client(), cache=cache)
    assert await agent.prompt("q") == "fresh 1"
    server.send_signal(signal.SIGSTOP)  # accepts connections, never answers
    try:
        with caplog.at_level(logging.WARNING, "groundswell.cache"):
            hung = [await agent.run("q") for _ in range(4)]
            assert [r.output for r in hung] == ["fresh 2", "fresh 3", "fresh 4", "fresh 5"]

            def seen(result):  # type: ignore[no-untyped-def]
                return [
                    (e["type"], e["operation"])
                    for e in result.node.events
                    if e["type"] in ("cache_error", "cache_skipped")
                ]

            assert seen(hung[0]) == [("cache_error", "get"), ("cache_error", "set")]
            assert seen(hung[1]) == [("cache_error", "get"), ("cache_skipped", "set")]
            assert seen(hung[3]) == [("cache_skipped", "get"), ("cache_skipped", "set")]
            error = next(e for e in hung[0].node.events if e["type"] == "cache_error")
            assert error["error"] == "no answer within 0.2 s"
            assert error["backend"] == f"RedisCache at {url}"
            server.send_signal(signal.SIGCONT)
            await asyncio.sleep(0.6)  # past the skip window
            back = await agent.run("q")
    finally:
        server.send_signal(signal.SIGCONT)
    assert back.output == "fresh 1" and back.node.metrics["cache"] == "hit"
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith(f"cache backend RedisCache at {url} failed on get")
    assert messages[1] == f"cache backend RedisCache at {url} works again"
    await cache.aclose()
