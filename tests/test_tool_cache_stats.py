"""Tool-result cache statistics per tool and per run, ``clear_tool_cache``, and the exported
key functions, through agents on the real SDK against the fake API."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from groundswell_lru import LRUCache
from pydantic import BaseModel

from groundswell import (
    Agent,
    ConfigurationError,
    Prompt,
    PromptOverrides,
    Tool,
    ToolCachePolicy,
    WorkflowContext,
    clear_tool_cache,
    request_cache_key,
    schema_hash,
    tool_cache_stats,
    workflow,
)
from groundswell.cache.backends import answer_scope
from groundswell.testing import FakeAnthropicAPI, text, tool_use

TOOLS_ONLY = PromptOverrides(disable_cache=True)  # answers never cached: tools decide


class Tools:
    """Two cached tools with names of their own (statistics are kept per process)."""

    def __init__(self, policy: ToolCachePolicy | None = None) -> None:
        tag = uuid.uuid4().hex[:6]
        self.weather, self.stock = f"weather_{tag}", f"stock_{tag}"
        self.ran: list[str] = []
        policy = policy or ToolCachePolicy(ttl=600)

        def weather(city: str) -> str:
            """The weather in a city."""
            self.ran.append(city)
            return f"Sunny in {city}"

        def stock(symbol: str) -> str:
            """A share price."""
            self.ran.append(symbol)
            return f"{symbol}: 101.5"

        self.tools = [
            Tool(weather, name=self.weather, cache=policy),
            Tool(stock, name=self.stock, cache=policy),
        ]

    def agent(self, *calls: tuple[str, dict[str, Any]], cache: Any = None) -> Agent:
        script = [r for name, args in calls for r in (tool_use(name, args), text("ok"))]
        return Agent(
            name="stats", tools=self.tools, client=FakeAnthropicAPI(script).client(), cache=cache
        )


async def test_stats_per_tool_and_a_runs_report_on_its_workflow_nodes() -> None:
    t = Tools()
    calls = [
        (t.weather, {"city": "Oslo"}),
        (t.weather, {"city": "Oslo"}),
        (t.stock, {"symbol": "ACME"}),
        (t.weather, {"city": "Bergen"}),
    ]
    agent = t.agent(*calls, cache=LRUCache())

    @workflow
    async def inner(ctx: WorkflowContext) -> None:
        await ctx.step("stock", lambda: agent.run("Stock?", TOOLS_ONLY))

    @workflow
    async def outer(ctx: WorkflowContext) -> None:
        for _ in range(2):
            await ctx.step("oslo", lambda: agent.run("Oslo?", TOOLS_ONLY))
        await inner.run()
        await ctx.step("bergen", lambda: agent.run("Bergen?", TOOLS_ONLY))

    result = await outer.run()
    assert t.ran == ["Oslo", "ACME", "Bergen"]
    report = result.node.metrics["tool_cache"]
    assert (report["hits"], report["misses"], report["hit_rate"], report["evictions"]) == (
        1,
        3,
        0.25,
        0,
    )
    assert report["tools"] == {
        t.weather: {"hits": 1, "misses": 2, "hit_rate": 0.3333, "evictions": 0, "size": 2},
        t.stock: {"hits": 0, "misses": 1, "hit_rate": 0.0, "evictions": 0, "size": 1},
    }
    ((label, backend),) = report["backends"].items()
    assert "LRUCache" in label and backend["size"] == 3 and backend["max_items"] == 1024
    # The nested run reports its own calls; the process keeps every run's.
    (nested,) = result.tree.find(type="workflow", name="inner")
    assert nested.metrics["tool_cache"]["tools"] == {t.stock: report["tools"][t.stock]}
    stats = tool_cache_stats()
    assert stats[t.weather] == {
        "hits": 1,
        "misses": 2,
        "hit_rate": 0.3333,
        "evictions": 0,
        "size": 2,
        "invalidations": 0,
    }
    assert "tool_cache" not in result.tree.find(type="prompt")[0].metrics  # runs only


async def test_an_entry_the_backend_dropped_before_its_ttl_counts_as_an_eviction() -> None:
    t = Tools()
    cities = ["Oslo", "Bergen", "Oslo"]
    agent = t.agent(*[(t.weather, {"city": c}) for c in cities], cache=LRUCache(max_items=1))

    @workflow
    async def tour(ctx: WorkflowContext) -> None:
        for city in cities:
            await ctx.step(city, lambda city=city: agent.run(f"{city}?", TOOLS_ONLY))

    result = await tour.run()
    assert t.ran == cities  # one entry fits: Bergen pushed Oslo out
    mine = result.node.metrics["tool_cache"]["tools"][t.weather]
    assert (mine["hits"], mine["misses"], mine["evictions"]) == (0, 3, 1)
    assert tool_cache_stats()[t.weather]["evictions"] == 1
    ((_, backend),) = result.node.metrics["tool_cache"]["backends"].items()
    assert backend["evictions"] >= 2  # the backend's own count, every key included


async def test_clear_tool_cache_clears_one_tool_or_all_of_them() -> None:
    t = Tools()
    cache = LRUCache()
    calls = [(t.weather, {"city": "Oslo"}), (t.stock, {"symbol": "ACME"})]
    agent = t.agent(*(calls * 4), cache=cache)

    async def both() -> None:
        await agent.run("Oslo?", TOOLS_ONLY)
        await agent.run("Stock?", TOOLS_ONLY)

    await both()
    assert await clear_tool_cache(t.weather) == 1
    await both()
    assert t.ran == ["Oslo", "ACME", "Oslo"]  # the stock price was still cached
    assert tool_cache_stats()[t.weather]["invalidations"] == 1
    assert tool_cache_stats()[t.stock]["invalidations"] == 0
    assert await clear_tool_cache(cache=cache) >= 2  # every tool, in that backend
    await both()
    assert t.ran == ["Oslo", "ACME", "Oslo", "Oslo", "ACME"]
    assert tool_cache_stats()[t.stock]["size"] == 1  # stored again since


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tool_name": ""}, "tool_name must be a tool's name"),
        ({"tool_name": 3}, "tool_name must be a tool's name"),
        ({"cache": 3}, "cache must be a backend name"),
        ({"cache": "nowhere"}, "no cache backend named 'nowhere'"),
    ],
)
async def test_clear_tool_cache_refuses_what_is_not_a_tool_or_a_backend(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        await clear_tool_cache(**kwargs)


class Verdict(BaseModel):
    approve: bool


async def test_a_user_can_compute_a_prompts_cache_key_and_bust_it() -> None:
    cache = LRUCache()
    fake = FakeAnthropicAPI([text('{"approve": true}'), text('{"approve": false}')])
    client = fake.client()
    judge = Agent(name="judge", client=client, cache=cache, max_tokens=512)
    prompt = Prompt(user="Approve this diff?", response_format=Verdict)
    first = await judge.run(prompt)
    # The request the agent sends, as messages.create takes it.
    request = {
        "model": judge.config["model"],
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "Approve this diff?"}],
        "output_config": {
            "format": {"type": "json_schema", "schema": fake.requests[0].output_schema}
        },
    }
    key = request_cache_key("judge", request, answer_scope(client))
    (missed,) = [e for e in first.node.events if e["type"] == "cache_miss"]
    assert missed["key"] == key
    assert (await judge.run(prompt)).node.metrics["cache"] == "hit"
    assert await cache.bust(key)
    again = await judge.run(prompt)
    assert again.node.metrics["cache"] == "miss" and again.output == Verdict(approve=False)

    # The schema enters the key as its hash: stable whatever the key order, new on a change.
    schema = fake.requests[0].output_schema
    assert schema is not None
    reordered = dict(reversed(list(schema.items())))
    assert schema_hash(reordered) == schema_hash(schema)
    changed = {**schema, "required": []}
    assert schema_hash(changed) != schema_hash(schema)
    assert request_cache_key("judge", request) != key  # no scope: a real client's key
