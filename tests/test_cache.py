"""Response and tool-result caching: keys, agents, dedupe, policies, backends."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import decimal
import enum
import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
from groundswell_lru import LRUCache
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    Prompt,
    PromptOverrides,
    Tool,
    ToolCachePolicy,
    get_cache,
    invalidate,
    tool_cache_stats,
)
from groundswell.cache.backends import request_cache_key
from groundswell.cache.canonical import canonical_json
from groundswell.testing import FakeAnthropicAPI, json_reply, text, tool_use

BASE: dict[str, Any] = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "Judge\n\n<data>\n{}\n</data>"}],
    "system": "You judge.",
    "extra_body": {"temperature": 0.2},
    "stop_sequences": ["END"],
    "tools": [{"name": "add", "description": "Add.", "input_schema": {"type": "object"}}],
    "mcp_servers": [
        {"type": "url", "name": "docs", "url": "https://x", "authorization_token": "tok-secret-1"}
    ],
    "container": {"skills": [{"type": "anthropic", "skill_id": "pptx", "version": "1"}]},
    "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


def shuffled(value: Any, seed: int) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        items = items[seed % max(1, len(items)) :] + items[: seed % max(1, len(items))]
        return {k: shuffled(v, seed + 1) for k, v in reversed(items)}
    if isinstance(value, list):
        return [shuffled(v, seed + 1) for v in value]
    return value


@settings(max_examples=60, deadline=None)
@given(data=st.dictionaries(st.text(max_size=6), json_values, max_size=5), seed=st.integers(0, 50))
def test_key_is_the_same_in_any_key_order(data: dict[str, Any], seed: int) -> None:
    params = {
        **BASE,
        "messages": [{"role": "user", "content": canonical_json(data)}],
        "metadata": data,
    }
    assert request_cache_key("judge", params) == request_cache_key("judge", shuffled(params, seed))


CHANGES = {
    "user": ("messages", [{"role": "user", "content": "Judge differently"}]),
    "system": ("system", "You are harsh."),
    "model": ("model", "claude-opus-4-7"),
    "temperature": ("extra_body", {"temperature": 0.3}),
    "max_tokens": ("max_tokens", 101),
    "stop_sequences": ("stop_sequences", ["STOP"]),
    "tool description": (
        "tools",
        [{"name": "add", "description": "Adds.", "input_schema": {"type": "object"}}],
    ),
    "tool schema": (
        "tools",
        [{"name": "add", "description": "Add.", "input_schema": {"type": "array"}}],
    ),
    "mcp server": ("mcp_servers", [{"type": "url", "name": "docs", "url": "https://y"}]),
    "skills": (
        "container",
        {"skills": [{"type": "anthropic", "skill_id": "xlsx", "version": "1"}]},
    ),
    "response schema": (
        "output_config",
        {"format": {"type": "json_schema", "schema": {"type": "array"}}},
    ),
    "thinking": ("thinking", {"type": "enabled", "budget_tokens": 2048}),
    "tool_choice": ("tool_choice", {"type": "any"}),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_key_changes_when_anything_that_changes_the_answer_changes(change: str) -> None:
    field, value = CHANGES[change]
    assert request_cache_key("judge", {**BASE, field: value}) != request_cache_key("judge", BASE)


def test_key_ignores_headers_and_never_hashes_secrets() -> None:
    with_headers = {**BASE, "extra_headers": {"authorization": "Bearer abc"}}
    assert request_cache_key("judge", with_headers) == request_cache_key("judge", BASE)
    other_token = {
        **BASE,
        "mcp_servers": [{**BASE["mcp_servers"][0], "authorization_token": "tok-2"}],
    }
    assert request_cache_key("judge", other_token) == request_cache_key("judge", BASE)
    key = request_cache_key("judge", BASE)
    assert key.startswith("judge:") and len(key.split(":")[1]) == 64


def test_key_is_stable_across_processes() -> None:
    code = (
        "import json, sys\nfrom groundswell.cache.backends import request_cache_key\n"
        "print(request_cache_key('judge', json.loads(sys.stdin.read())))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(BASE),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    }
    assert keys == {request_cache_key("judge", BASE)}


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Model(BaseModel):
    when: dt.date


def test_canonical_forms_of_non_json_values() -> None:
    value = {
        "dt": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "d": dt.date(2024, 1, 2),
        "dec": decimal.Decimal("1.10"),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "raw": b"\x00\x01",
        "set": {3, 1, 2},
        "tuple": (1, 2),
        "enum": Colour.RED,
        "model": Model(when=dt.date(2024, 5, 6)),
        "dc": Point(1, 2),
        "nan": float("nan"),
    }
    assert json.loads(canonical_json(value)) == {
        "dt": "2024-01-02T03:04:05+00:00", "d": "2024-01-02", "dec": "1.10",
        "id": "12345678-1234-5678-1234-567812345678", "raw": {"$bytes": "AAE="},
        "set": [1, 2, 3], "tuple": [1, 2], "enum": "red", "model": {"when": "2024-05-06"},
        "dc": {"x": 1, "y": 2}, "nan": "NaN",
    }  # fmt: skip


def test_cycles_and_unknown_types_are_type_errors() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(TypeError, match=r"circular reference at \$\.self"):
        canonical_json(loop)
    with pytest.raises(TypeError, match=r"cannot make a canonical JSON form of object at \$\.x"):
        canonical_json({"x": object()})


class Verdict(BaseModel):
    approve: bool
    reason: str


def counting_fake(reply: Any = None) -> FakeAnthropicAPI:
    return FakeAnthropicAPI(lambda request: reply or text(f"answer to {request.last_user_text()}"))


async def test_second_identical_prompt_is_a_hit_without_a_request() -> None:
    fake = counting_fake(json_reply({"approve": True, "reason": "fine"}))
    agent = Agent(name="judge", client=fake.client(), cache=LRUCache())
    prompt = Prompt(user="Judge", data={"diff": "x"}, response_format=Verdict)
    first = await agent.run(prompt)
    second = await agent.run(prompt)
    assert first.output == second.output == Verdict(approve=True, reason="fine")
    assert len(fake.requests) == 1
    assert first.node.metrics["cache"] == "miss" and second.node.metrics["cache"] == "hit"
    assert second.node.children == []  # no model_call on a hit
    (hit,) = [e for e in second.node.events if e["type"] == "cache_hit"]
    assert hit["key"].startswith("judge:") and hit["age_s"] >= 0


async def test_hundred_concurrent_identical_prompts_make_one_request() -> None:
    fake = counting_fake()
    agent = Agent(name="dedupe", client=fake.client(), cache=LRUCache())
    outputs = await asyncio.gather(*(agent.prompt("same") for _ in range(100)))
    assert set(outputs) == {"answer to same"} and len(fake.requests) == 1


async def test_overrides_and_schema_change_the_key() -> None:
    fake = counting_fake(json_reply({"approve": True, "reason": "r"}))
    agent = Agent(name="k", client=fake.client(), cache=LRUCache())

    class Other(BaseModel):
        approve: bool
        reason: str
        score: int = 0

    await agent.prompt(Prompt(user="q", response_format=Verdict))
    await agent.prompt(Prompt(user="q", response_format=Verdict), PromptOverrides(temperature=0.7))
    await agent.prompt(Prompt(user="q", response_format=Other))
    await agent.prompt(
        Prompt(user="q", response_format=Verdict), PromptOverrides(disable_cache=True)
    )
    await agent.prompt(Prompt(user="q", response_format=Verdict))
    assert len(fake.requests) == 4


async def test_failed_and_invalid_answers_are_never_cached() -> None:
    fake = FakeAnthropicAPI([text("not json"), json_reply({"approve": False, "reason": "ok now"})])
    agent = Agent(name="strict", client=fake.client(max_retries=0), cache=LRUCache())
    prompt = Prompt(user="Judge", response_format=Verdict)
    with pytest.raises(groundswell.ResponseValidationError):
        await agent.prompt(prompt)
    assert (await agent.prompt(prompt)).reason == "ok now"
    assert len(fake.requests) == 2


async def test_backend_by_name_env_default_and_unknown_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert get_cache("lru") is get_cache("lru")
    monkeypatch.setenv("GROUNDSWELL_CACHE", "lru")
    assert get_cache() is get_cache("lru")
    with pytest.raises(
        ConfigurationError,
        match=r"no cache backend named 'memcached'; available: lru, redis, sqlite",
    ):
        get_cache("memcached")
    with pytest.raises(ConfigurationError, match="cache must be a backend name"):
        Agent(cache=42)  # type: ignore[arg-type]


class BrokenCache(LRUCache):
    async def get(self, key: str) -> Any:
        raise ConnectionError("cache server gone")

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        raise ConnectionError("cache server gone")


async def test_a_failing_cache_degrades_to_a_miss_with_an_event() -> None:
    fake = counting_fake()
    result = await Agent(name="degrade", client=fake.client(), cache=BrokenCache()).run("q")
    assert result.output == "answer to q"
    errors = [e for e in result.node.events if e["type"] == "cache_error"]
    assert [e["operation"] for e in errors] == ["get", "set"]
    assert "cache server gone" in errors[0]["error"]


async def test_tool_results_cache_per_policy_with_invalidation_and_stats() -> None:
    calls: list[str] = []

    def weather(city: str, unit: str = "C") -> str:
        """Current weather."""
        calls.append(city)
        return f"{city}: 20{unit}"

    def clock() -> str:
        """Not deterministic: never cached without a policy."""
        calls.append("clock")
        return "12:00"

    policy = ToolCachePolicy(
        ttl=60, key=["city"], invalidate_on=["forecast-updated"], hit_message="(cached)"
    )
    replies = [
        tool_use("weather", {"city": "Oslo"}), text("1"),
        tool_use("weather", {"city": "Oslo", "unit": "F"}), text("2"),
        tool_use("clock", {}), text("3"), tool_use("clock", {}), text("4"),
        tool_use("weather", {"city": "Oslo"}), text("5"),
    ]  # fmt: skip
    fake = FakeAnthropicAPI(replies)
    agent = Agent(
        name="tools",
        client=fake.client(),
        tools=[Tool(weather, cache=policy), clock],
        cache=LRUCache(),
    )
    # The statistics are the process's: other tests may have called a "weather" tool.
    earlier = tool_cache_stats().get("weather", {})
    counted = ("hits", "misses", "invalidations")
    await agent.prompt("a")
    second = await agent.run("b")
    assert (
        fake.requests[3].tool_results()[-1]["content"] == "Oslo: 20C\n\n(cached)"
    )  # keyed on city only
    assert second.node.children[1].metrics["cache"] == "hit"
    await agent.prompt("c")
    await agent.prompt("d")
    assert calls == ["Oslo", "clock", "clock"]
    assert await invalidate("forecast-updated") == 1
    await agent.prompt("e")
    assert calls[-1] == "Oslo"
    stats = tool_cache_stats()["weather"]
    assert tuple(stats[k] - earlier.get(k, 0) for k in counted) == (1, 2, 1)


async def test_agent_level_tool_cache_policy_with_key_function() -> None:
    calls: list[int] = []

    def lookup(user_id: int, verbose: bool = False) -> str:
        """Look a user up."""
        calls.append(user_id)
        return f"user {user_id}"

    policy = ToolCachePolicy(key=lambda args: args["user_id"] % 10)
    fake = FakeAnthropicAPI(
        [
            tool_use("lookup", {"user_id": 3}),
            text("a"),
            tool_use("lookup", {"user_id": 13}),
            text("b"),
        ]
    )
    agent = Agent(
        name="agent-policy",
        client=fake.client(),
        tools=[lookup],
        tool_cache={"lookup": policy},
        cache=LRUCache(),
    )
    await agent.prompt("x")
    await agent.prompt("y")
    assert calls == [3]
    with pytest.raises(ConfigurationError, match="must be a ToolCachePolicy"):
        Agent(tool_cache={"lookup": {"ttl": 1}})  # type: ignore[dict-item]


def test_colliding_keys_are_an_error_and_non_string_keys_read_naturally() -> None:
    with pytest.raises(TypeError, match="collide"):
        canonical_json({1: "a", "1": "b"})
    assert (
        canonical_json({Colour.RED: 1, dt.date(2024, 1, 1): 2, 3: 4})
        == '{"2024-01-01":2,"3":4,"red":1}'
    )


async def test_a_workflow_picks_the_backend_for_agents_inside_it() -> None:
    shared = LRUCache()
    fake = counting_fake()
    agent = Agent(name="in-workflow", client=fake.client(), enable_cache=True)

    @groundswell.workflow(name="inner")
    async def inner(ctx: groundswell.WorkflowContext) -> str:
        return await ctx.step("ask", agent.prompt("q"))

    @groundswell.workflow(name="outer", cache=shared)
    async def outer(ctx: groundswell.WorkflowContext) -> str:
        return (await inner.run()).output or ""  # nested runs inherit the choice

    assert (await outer.run()).output == "answer to q"
    assert shared.metrics()["size"] == 1 and shared.metrics()["misses"] == 1
    assert (await outer.run()).output == "answer to q"
    assert len(fake.requests) == 1 and shared.metrics()["hits"] == 1
