"""``inspect_cache_status``: entries with age, size, hits and staleness, checks, statistics."""

from __future__ import annotations

import time
from typing import Any

from groundswell_lru import LRUCache

from groundswell import Agent, Tool, ToolCachePolicy, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, FunctionModel, MessagesRequest, text, tool_calls

from .test_introspection_hierarchy import answers


def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


async def test_cache_entries_checks_statistics_and_configuration() -> None:
    store = LRUCache(ttl=600)

    def model(req: MessagesRequest) -> Any:
        seen = answers(req)
        if not seen:
            return tool_calls(("weather", {"city": "Oslo"}))
        if len(seen) == 1:
            time.sleep(0.1)  # the weather result's 50 ms run out
            return tool_calls(("inspect_cache_status", {}))
        if len(seen) == 2:
            run_id = seen[1]["workflow_id"]
            return tool_calls(
                ("inspect_cache_status", {"node_id": run_id, "cache_key_pattern": "answerer:*"}),
                (
                    "inspect_cache_status",
                    {
                        "prompt": "What is 2+2?",
                        "include_statistics": False,
                        "check_ancestors": False,
                    },
                ),
                ("inspect_cache_status", {"node_id": run_id}),
                ("inspect_cache_status", {"cache_key": "other-agent:0123"}),
            )
        return text("the sum is cached, the weather is stale")

    fake = FakeAnthropicAPI(FunctionModel(model))
    inspector = Agent(
        name="inspector",
        tools=["introspection", Tool(weather, cache=ToolCachePolicy(ttl=0.05))],
        client=fake.client(),
    )
    answerer = Agent(
        name="answerer", enable_cache=True, client=FakeAnthropicAPI([text("4")]).client()
    )

    @workflow(name="quiz", cache=store)
    async def quiz(ctx: WorkflowContext) -> str:
        await ctx.step("first", lambda: answerer.prompt("What is 2+2?"))
        await ctx.step("second", lambda: answerer.prompt("What is 2+2?"))
        return await ctx.step("inspect", lambda: inspector.prompt("Check the cache"))

    run = await quiz.run()
    assert run.output == "the sum is cached, the weather is stale"
    here, answers_only, checks, whole, foreign = answers(fake.requests[-1])[1:]
    (quiz_node,) = run.tree.find(type="workflow", name="quiz")
    (step,) = run.tree.find(type="step", name="inspect")
    (first_prompt, _) = run.tree.find(type="prompt", name="answerer")
    key = first_prompt.events[0]["key"]

    assert here["node_id"] == step.id and here["workflow_id"] == quiz_node.id
    config = here["cache_configuration"]
    assert config["enabled"] is False  # the inspector's own answers are not cached
    assert config["backend"] == "LRUCache" and config["ttl_seconds"] == 600
    assert config["max_items"] == 1024
    assert config["tool_policies"] == {"weather": {"ttl_seconds": 0.05, "invalidate_on": []}}
    (expired,) = here["cache_entries"]
    assert expired["kind"] == "tool_result" and expired["name"] == "weather"
    assert expired["ttl_seconds"] == 0.05 and expired["miss_count"] == 1
    assert expired["is_cached"] is False and expired["stale"] is True
    tool_results = here["cache_statistics"]["tool_results"]
    assert tool_results["tools"]["weather"]["misses"] == 1
    assert here["ancestor_cache_summary"] == [
        {
            "ancestor_id": quiz_node.id,
            "name": "quiz",
            "type": "workflow",
            "entries": 2,
            "hits": 1,
            "misses": 2,
            "cache_hit_rate": 0.333,
        }
    ]

    (sum_entry,) = answers_only["cache_entries"]
    assert sum_entry["cache_key"] == key and sum_entry["kind"] == "answer"
    assert sum_entry["name"] == "answerer" and sum_entry["source_workflow_id"] == quiz_node.id
    assert sum_entry["is_cached"] is True and sum_entry["stale"] is False
    assert sum_entry["hit_count"] == 1 and sum_entry["miss_count"] == 1
    assert 0 <= sum_entry["age_seconds"] < 60 and sum_entry["size_bytes"] > 20
    assert sum_entry["ttl_seconds"] == 600
    assert 540 < sum_entry["expires_in_seconds"] <= 600
    stats = answers_only["cache_statistics"]
    assert stats["hits"] == 1 and stats["misses"] == 1 and stats["cache_hit_rate"] == 0.5
    assert stats["total_entries"] == 1 and stats["total_size_bytes"] == sum_entry["size_bytes"]
    # The shared backend's own counters cover every run of the process: never shown.
    assert "backend" not in stats

    (asked,) = checks["checks"]
    assert asked["prompt"] == "What is 2+2?" and asked["found_in_run"] is True
    assert asked["cache_key"] == key and asked["is_cached"] is True
    assert "cache_statistics" not in checks and "ancestor_cache_summary" not in checks

    assert {e["name"] for e in whole["cache_entries"]} == {"answerer", "weather"}
    assert whole["run"]["hits"] == 1 and whole["run"]["misses"] == 2  # the earlier shape
    assert whole["tool_cache"] == {"weather": {"hits": 0, "misses": 1, "hit_rate": 0.0}}
    # Keys this run did not use are not for it to probe.
    assert foreign == {
        "error": "ToolError: inspect_cache_status: cache_key 'other-agent:0123' is not used in "
        "this run; only keys this run used can be checked (list them with cache_key_pattern, "
        "or check a prompt of this run with prompt)"
    }


async def test_a_prompt_that_never_ran_or_ran_uncached_is_told_apart() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_calls(
                ("inspect_cache_status", {"prompt": "Never asked"}),
                ("inspect_cache_status", {"prompt": "Check*"}),
            ),
            text("ok"),
        ]
    )
    agent = Agent(name="plain", tools=["introspection"], client=fake.client())
    result = await agent.run("Check the cache")
    never, uncached = answers(fake.requests[-1])
    assert never["checks"] == [
        {
            "prompt": "Never asked",
            "found_in_run": False,
            "is_cached": None,
            "note": "no prompt of this run has this user text; give its cache_key instead",
        }
    ]
    assert uncached["checks"] == [
        {
            "prompt": "Check*",
            "node_id": result.node.id,
            "found_in_run": True,
            "is_cached": False,
            "note": "this prompt ran without the answer cache",
        }
    ]


async def test_an_agent_sees_nothing_of_another_runs_calls_to_a_same_named_tool() -> None:
    store = LRUCache(ttl=600)
    seen_keys: list[str] = []

    def model(req: MessagesRequest) -> Any:
        seen = answers(req)
        if not seen:  # both agents: one weather call of their own
            city = "Oslo" if "Oslo" in str(req.messages[0]) else "Rome"
            return tool_calls(("weather", {"city": city}))
        if len(seen) == 1 and "Rome" in str(req.messages[0]):
            probes = [("inspect_cache_status", {"cache_key": k}) for k in seen_keys]
            return tool_calls(("inspect_cache_status", {}), *probes)
        return text("done")

    def agent(name: str) -> tuple[Agent, FakeAnthropicAPI]:
        fake = FakeAnthropicAPI(FunctionModel(model))
        policy = ToolCachePolicy(ttl=600)
        tools = ["introspection", Tool(weather, cache=policy)]
        return Agent(name=name, tools=tools, client=fake.client()), fake

    a, _ = agent("a")
    b, fake_b = agent("b")

    @workflow(name="forecast", cache=store)
    async def forecast(ctx: WorkflowContext, who: str, city: str) -> str:
        chosen = a if who == "a" else b
        return await ctx.step("ask", lambda: chosen.prompt(f"Weather in {city}"))

    first = await forecast.run(who="a", city="Oslo")
    (call,) = first.tree.find(type="tool_call", name="weather")
    seen_keys.append(call.events[0]["key"])
    await forecast.run(who="b", city="Rome")

    own, probe = answers(fake_b.requests[-1])[1:]
    # B's run: its own Rome call only, nothing of A's Oslo call or of the shared backend.
    (entry,) = own["cache_entries"]
    assert entry["cache_key"] != seen_keys[0] and entry["miss_count"] == 1
    assert own["tool_cache"] == {"weather": {"hits": 0, "misses": 1, "hit_rate": 0.0}}
    report = own["cache_statistics"]["tool_results"]
    assert report["tools"] == {"weather": {"hits": 0, "misses": 1, "hit_rate": 0.0, "evictions": 0}}
    assert "backends" not in report and "backend" not in own["cache_statistics"]
    assert "stats" not in own["agent_cache"]
    # A's key is a weather key too, and still cached, but not B's to probe.
    assert probe["error"].startswith(
        f"ToolError: inspect_cache_status: cache_key {seen_keys[0]!r} is not used in this run"
    )
