"""A cache backend that hangs or keeps failing never holds a prompt up for long.

Every backend call has a deadline; a backend that keeps failing is skipped for
a while, then tried again; each outage is logged once on ``groundswell.cache.backends``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from groundswell_lru import LRUCache
from groundswell_redis import RedisCache

from groundswell import (
    Agent,
    ConfigurationError,
    PromptResult,
    StepTimeout,
    Tool,
    ToolCachePolicy,
    WorkflowContext,
    invalidate,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, text, tool_use


@pytest.fixture(autouse=True)
def quick_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short deadlines and skip windows, so a hung backend costs the suite little."""
    monkeypatch.setenv("GROUNDSWELL_CACHE_TIMEOUT_S", "0.05")
    monkeypatch.setenv("GROUNDSWELL_CACHE_BUST_TIMEOUT_S", "0.05")
    monkeypatch.setenv("GROUNDSWELL_CACHE_SKIP_AFTER", "3")
    monkeypatch.setenv("GROUNDSWELL_CACHE_SKIP_FOR_S", "60")


class HangingCache(LRUCache):
    """An LRU cache whose chosen operations never return; counts every call."""

    def __init__(self, *hanging: str) -> None:
        super().__init__()
        self.hanging = set(hanging)
        self.calls: dict[str, int] = {"get": 0, "set": 0, "bust_prefix": 0}

    async def _maybe_hang(self, operation: str) -> None:
        self.calls[operation] += 1
        if operation in self.hanging:
            await asyncio.Event().wait()

    async def get(self, key: str) -> Any:
        await self._maybe_hang("get")
        return await super().get(key)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        await self._maybe_hang("set")
        await super().set(key, value, ttl)

    async def bust_prefix(self, prefix: str) -> int:
        await self._maybe_hang("bust_prefix")
        return await super().bust_prefix(prefix)


class FlakyCache(LRUCache):
    """An LRU cache that raises ConnectionError while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.calls = 0

    async def get(self, key: str) -> Any:
        self.calls += 1
        if self.down:
            raise ConnectionError("cache server unreachable")
        return await super().get(key)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("cache server unreachable")
        await super().set(key, value, ttl)

    async def bust_prefix(self, prefix: str) -> int:
        self.calls += 1
        if self.down:
            raise ConnectionError("cache server unreachable")
        return await super().bust_prefix(prefix)


def events(result: PromptResult[Any]) -> list[tuple[str, str]]:
    return [
        (e["type"], e["operation"])
        for e in result.node.events
        if e["type"] in ("cache_error", "cache_skipped")
    ]


def answering() -> FakeAnthropicAPI:
    return FakeAnthropicAPI(lambda request: text(f"answer to {request.last_user_text()}"))


async def run(agent: Agent, question: str) -> PromptResult[Any]:
    # Only a safety net: a regression would otherwise hang the suite.
    async with asyncio.timeout(30):
        return await agent.run(question)


async def test_a_get_that_never_returns_becomes_a_miss_then_the_backend_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = HangingCache("get")
    fake = answering()
    agent = Agent(name="hung-get", client=fake.client(), cache=cache)
    with caplog.at_level(logging.WARNING, "groundswell.cache"):
        results = [await run(agent, f"q{i}") for i in range(5)]
    assert [r.output for r in results] == [f"answer to q{i}" for i in range(5)]
    assert all(r.node.metrics["cache"] == "miss" for r in results)
    first = next(e for e in results[0].node.events if e["type"] == "cache_error")
    assert first["operation"] == "get" and first["error"] == "no answer within 0.05 s"
    assert first["backend"] == "HangingCache"
    # Three gets ran into their deadline; after that prompts no longer ask.
    assert cache.calls["get"] == 3
    assert events(results[3]) == [("cache_skipped", "get")]
    skipped = next(e for e in results[4].node.events if e["type"] == "cache_skipped")
    assert skipped["backend"] == "HangingCache" and skipped["retry_in_s"] > 0
    # set still works: the per-operation breaker leaves it alone.
    assert cache.calls["set"] == 5 and cache.metrics()["size"] == 5
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "cache backend HangingCache failed on get (no answer within 0.05 s)" in warnings[0]


async def test_a_set_that_never_returns_never_holds_the_answer_back() -> None:
    cache = HangingCache("set")
    agent = Agent(name="hung-set", client=answering().client(), cache=cache)
    results = [await run(agent, "same") for _ in range(4)]
    assert [r.output for r in results] == ["answer to same"] * 4
    assert events(results[0]) == [("cache_error", "set")]
    assert events(results[3]) == [("cache_skipped", "set")]
    assert cache.calls == {"get": 4, "set": 3, "bust_prefix": 0}


async def test_a_failing_backend_is_logged_once_per_outage_and_tried_again_later(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GROUNDSWELL_CACHE_SKIP_FOR_S", "0.2")
    cache = FlakyCache()
    fake = answering()
    agent = Agent(name="flaky", client=fake.client(), cache=cache)
    with caplog.at_level(logging.WARNING, "groundswell.cache"):
        await run(agent, "q")  # stored while the backend is up
        cache.down = True
        outage = [await run(agent, "q") for _ in range(4)]
        assert events(outage[0]) == [("cache_error", "get"), ("cache_error", "set")]
        assert events(outage[1]) == [("cache_error", "get"), ("cache_skipped", "set")]
        assert events(outage[3]) == [("cache_skipped", "get"), ("cache_skipped", "set")]
        calls_while_skipped = cache.calls
        assert (await run(agent, "q")).output == "answer to q"
        assert cache.calls == calls_while_skipped  # skipped: not even asked
        cache.down = False
        await asyncio.sleep(0.3)  # past the skip window: the next call tries it again
        back = await run(agent, "q")
    assert back.node.metrics["cache"] == "hit" and events(back) == []
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "cache backend FlakyCache failed on get (ConnectionError: cache server" in messages[0]
    assert "skipped for 0.2 s" in messages[0]
    assert messages[1] == "cache backend FlakyCache works again"


async def test_a_hung_tool_cache_still_returns_the_tool_result() -> None:
    calls: list[str] = []

    def hung_weather(city: str) -> str:
        """Current weather."""
        calls.append(city)
        return f"{city}: 20C"

    cache = HangingCache("get", "set")
    fake = FakeAnthropicAPI([tool_use("hung_weather", {"city": "Oslo"}), text("done")])
    agent = Agent(
        name="hung-tools",
        client=fake.client(),
        tools=[Tool(hung_weather, cache=ToolCachePolicy(ttl=60))],
        cache=cache,
    )
    result = await run(agent, "weather?")
    assert result.output == "done" and calls == ["Oslo"]
    assert fake.requests[1].tool_results()[-1]["content"] == "Oslo: 20C"
    (tool_node,) = result.tree.find(type="tool_call")
    assert [e["operation"] for e in tool_node.events if e["type"] == "cache_error"] == [
        "get",
        "set",
    ]


async def test_invalidate_gives_up_on_a_hung_backend_and_still_clears_the_others() -> None:
    def find_user(user: str) -> str:
        """Look a user up."""
        return f"user {user}"

    policy = ToolCachePolicy(invalidate_on=["users-changed"])
    good, hung = LRUCache(), HangingCache("bust_prefix")
    for cache in (good, hung):
        fake = FakeAnthropicAPI([tool_use("find_user", {"user": "ada"}), text("ok")])
        agent = Agent(
            name="users",
            client=fake.client(),
            tools=[find_user],
            tool_cache={"find_user": policy},
            cache=cache,
        )
        await run(agent, "who?")
    assert good.metrics()["size"] == 2  # the answer and the tool result
    with pytest.raises(TimeoutError, match=r"HangingCache: bust_prefix: no answer within 0.05 s"):
        async with asyncio.timeout(30):
            await invalidate("users-changed")
    assert good.metrics()["size"] == 1  # the tool result is gone
    assert hung.calls["bust_prefix"] == 1


async def test_invalidate_raises_a_failing_backends_own_error_naming_it() -> None:
    def find_order(order: str) -> str:
        """Look an order up."""
        return f"order {order}"

    cache = FlakyCache()
    fake = FakeAnthropicAPI([tool_use("find_order", {"order": "7"}), text("ok")])
    agent = Agent(
        name="orders",
        client=fake.client(),
        tools=[find_order],
        tool_cache={"find_order": ToolCachePolicy(invalidate_on=["orders-changed"])},
        cache=cache,
    )
    await run(agent, "which order?")
    cache.down = True
    with pytest.raises(ConnectionError, match="cache server unreachable") as raised:
        await invalidate("orders-changed")
    assert raised.value.__notes__ == ["from cache backend FlakyCache, clearing 'tool.find_order:'"]


async def test_a_redis_url_that_is_not_a_url_is_logged_once_naming_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GROUNDSWELL_REDIS_URL", "not a url")
    agent = Agent(name="bad-url", client=answering().client(), cache=RedisCache())
    with caplog.at_level(logging.WARNING, "groundswell.cache"):
        results = [await run(agent, "q") for _ in range(5)]
    assert [r.output for r in results] == ["answer to q"] * 5
    (message,) = [r.getMessage() for r in caplog.records]
    assert "cache backend RedisCache at not a url failed on get" in message
    assert "GROUNDSWELL_REDIS_URL is not a Redis URL: 'not a url'" in message
    error = next(e for e in results[0].node.events if e["type"] == "cache_error")
    assert "ConfigurationError: GROUNDSWELL_REDIS_URL is not a Redis URL" in error["error"]


async def test_a_bad_deadline_setting_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_CACHE_TIMEOUT_S", "soon")
    agent = Agent(name="bad-setting", client=answering().client(), cache=LRUCache())
    with pytest.raises(ConfigurationError, match=r"GROUNDSWELL_CACHE_TIMEOUT_S must be a number"):
        await agent.prompt("q")


async def test_a_step_timeout_during_a_slow_cache_call_is_not_a_cache_failure(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GROUNDSWELL_CACHE_TIMEOUT_S", "30")
    cache = HangingCache("get")
    agent = Agent(name="cancelled", client=answering().client(), cache=cache)

    @workflow(name="impatient")
    async def impatient(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", agent.prompt("q"), timeout=0.05)

    with caplog.at_level(logging.WARNING, "groundswell.cache"), pytest.raises(StepTimeout):
        await impatient.run()
    assert caplog.records == []  # the caller gave up; the backend did not fail
    cache.hanging.clear()
    result = await run(agent, "q")  # and it is not being skipped
    assert events(result) == [] and result.output == "answer to q"
