"""Prompt caching (``prompt_cache=``): what reaches the API, what the fake's cache reads back,
and how the tree, ``render()`` and the OTel spans show it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import anthropic
import groundswell_otel
import pytest
from groundswell_otel import attributes as A
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import groundswell
from groundswell import (
    Agent,
    Middleware,
    ModelAPIError,
    Prompt,
    PromptOverrides,
    PromptRun,
    WorkflowContext,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, text, tool_use

# Over the 1,024-token minimum of claude-sonnet-4-6 (the default model), about 1,300 tokens.
LONG = "You review Python code for a bank: be exact, cite the line, say what to change. " * 64
TOO_MANY = "A maximum of 4 blocks with cache_control may be provided. Found 5."


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def markers(body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every ``cache_control`` in a request body, with where it is."""
    found: list[tuple[str, Any]] = []
    if body.get("cache_control"):
        found.append(("top", body["cache_control"]))
    for tool in body.get("tools") or ():
        if tool.get("cache_control"):
            found.append((f"tool {tool.get('name')}", tool["cache_control"]))
    system = body.get("system")
    for block in system if isinstance(system, list) else ():
        if block.get("cache_control"):
            found.append(("system", block["cache_control"]))
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if block.get("cache_control"):
                found.append((f"messages.{i}", block["cache_control"]))
    return found


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.delenv(groundswell_otel.CONTENT_ENV, raising=False)
    monkeypatch.delenv(groundswell_otel.INTROSPECTION_ENV, raising=False)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    groundswell_otel.instrument(provider)
    yield memory
    groundswell_otel.uninstrument()


# -- automatic caching ------------------------------------------------------------------


async def test_the_second_prompt_of_a_conversation_reads_its_prefix_from_the_cache(
    exporter: InMemorySpanExporter,
) -> None:
    fake = FakeAnthropicAPI([text("Line 3 rounds wrongly."), text("Use Decimal.")])
    agent = Agent(name="reviewer", system=LONG, prompt_cache=True, client=fake.client())

    @workflow(name="review")
    async def review(ctx: WorkflowContext) -> str:
        first = await agent.run("Review: total = round(x, 2)")
        second = await agent.run("How do I fix it?", message_history=first.messages)
        assert isinstance(second.output, str)
        return second.output

    result = await review.run()
    assert [r.body["cache_control"] for r in fake.requests] == [{"type": "ephemeral"}] * 2
    first_prompt, second_prompt = [n for n in result.tree.walk() if n.type.value == "prompt"]
    (first_call,) = [n for n in result.tree.walk() if n.parent_id == first_prompt.id]
    (second_call,) = [n for n in result.tree.walk() if n.parent_id == second_prompt.id]

    # The first prompt writes the system prompt and its question; the second reads them.
    written = first_call.metrics["usage"]["cache_creation_input_tokens"]
    assert written > 1024 and first_call.metrics["usage"]["cache_read_input_tokens"] == 0
    usage = second_call.metrics["usage"]
    assert usage["cache_read_input_tokens"] == written
    assert usage["cache_read_input_tokens"] > 10 * usage["input_tokens"]
    assert first_prompt.metrics["prompt_cache_share"] == 0.0
    share = second_prompt.metrics["prompt_cache_share"]
    inputs = sum(usage[k] for k in usage if "input" in k)  # read, written and the rest
    assert share == round(written / inputs, 4)
    assert share > 0.9

    rendered = result.tree.render()
    # On the workflow's line (its tokens summed), the second prompt's and its call's.
    assert rendered.count(f"({written} cached)") == 3

    assert groundswell.flush_sinks()
    spans = {(s.attributes or {}).get(A.NODE_ID): s for s in exporter.get_finished_spans()}
    call_span = spans[second_call.id].attributes or {}
    assert call_span[A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == written
    assert call_span[A.GEN_AI_USAGE_INPUT_TOKENS] == inputs
    first_span = spans[first_call.id].attributes or {}
    assert first_span[A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == written
    assert (spans[second_prompt.id].attributes or {})[A.PROMPT_CACHE_SHARE] == share


async def test_a_one_hour_ttl_arrives_and_outlives_five_minutes() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b"), text("c"), text("d")])
    now = [1000.0]
    fake.prompt_cache.clock = lambda: now[0]
    hour = Agent(name="hour", system=LONG, prompt_cache="1h", client=fake.client())
    first = await hour.run("Question one")
    assert fake.requests[-1].body["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    now[0] += 30 * 60
    second = await hour.run("Question two", message_history=first.messages)
    assert second.usage["cache_read_input_tokens"] > 1024

    five = Agent(name="five", system=LONG + "!", prompt_cache="5m", client=fake.client())
    first = await five.run("Question one")
    assert fake.requests[-1].body["cache_control"] == {"type": "ephemeral"}
    now[0] += 6 * 60  # the entry expired: the prefix is written again
    second = await five.run("Question two", message_history=first.messages)
    assert second.usage["cache_read_input_tokens"] == 0
    assert second.usage["cache_creation_input_tokens"] > 1024


async def test_a_prefix_below_the_models_minimum_is_never_cached() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b"), text("c"), text("d")])
    short = Agent(name="short", system="Be brief.", prompt_cache=True, client=fake.client())
    first = await short.run("Hi")
    second = await short.run("Again", message_history=first.messages)
    assert fake.requests[-1].body["cache_control"] == {"type": "ephemeral"}  # sent anyway...
    for result in (first, second):  # ...and nothing is written or read, as the API does
        assert result.usage["cache_creation_input_tokens"] == 0
        assert result.usage["cache_read_input_tokens"] == 0
        assert result.node.metrics["prompt_cache_share"] == 0.0
    # Haiku 4.5 caches from 4,096 tokens: the same 1,300-token prompt is not cached there.
    haiku = Agent(
        name="haiku",
        model="claude-haiku-4-5",
        system=LONG,
        prompt_cache=True,
        client=fake.client(),
    )
    done = await haiku.run("Hi")
    assert done.usage["cache_creation_input_tokens"] == 0


async def test_a_scripted_usage_still_wins() -> None:
    usage = {"input_tokens": 7, "cache_read_input_tokens": 93}
    fake = FakeAnthropicAPI([text("ok", usage=usage)])
    agent = Agent(name="scripted", system=LONG, prompt_cache=True, client=fake.client())
    result = await agent.run("Hi")
    assert result.usage["cache_read_input_tokens"] == 93
    assert result.node.metrics["prompt_cache_share"] == 0.93


# -- the default policy -----------------------------------------------------------------


async def test_a_one_shot_prompt_with_a_unique_input_gets_no_cache_control_by_default() -> None:
    fake = FakeAnthropicAPI([text("Looks fine.")])
    agent = Agent(name="once", system=LONG, tools=[add], client=fake.client())
    result = await agent.run("Review: x = 1")
    (request,) = fake.requests
    assert markers(request.body) == []
    assert request.body["system"] == LONG
    assert result.usage["cache_creation_input_tokens"] == 0


async def test_the_later_turns_of_a_default_tool_loop_are_cached() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use("add", {"a": 1, "b": 2}),
            tool_use("add", {"a": 3, "b": 3}),
            tool_use("add", {"a": 6, "b": 4}),
            text("10"),
        ]
    )
    agent = Agent(name="sums", system=LONG, tools=[add], client=fake.client())
    result = await agent.run("Add 1 and 2, then 3, then 4 to the result")
    # Turns 1 and 2 write nothing: a loop that ends at turn 2 (the commonest) would
    # never read a turn-2 write back. From turn 3 the loop has shown it goes on.
    assert [markers(r.body) for r in fake.requests] == [
        [],
        [],
        [("top", {"type": "ephemeral"})],
        [("top", {"type": "ephemeral"})],
    ]
    calls = [n for n in result.tree.walk() if n.type.value == "model_call"]
    usage = [c.metrics["usage"] for c in calls]
    assert usage[0]["cache_creation_input_tokens"] == usage[1]["cache_creation_input_tokens"] == 0
    assert usage[2]["cache_creation_input_tokens"] > 1024
    assert usage[3]["cache_read_input_tokens"] == usage[2]["cache_creation_input_tokens"]
    assert 0 < result.node.metrics["prompt_cache_share"] < 1


async def test_a_prompt_with_one_tool_call_costs_no_more_than_without_caching() -> None:
    replies = [tool_use("add", {"a": 1, "b": 2}), text("3")]
    costs = []
    for setting in (None, False):
        fake = FakeAnthropicAPI(list(replies))
        agent = Agent(
            name="one", system=LONG, tools=[add], prompt_cache=setting, client=fake.client()
        )
        costs.append((await agent.run("1 + 2?")).cost_usd)
    assert costs[0] == costs[1]


async def test_a_short_default_tool_loop_is_left_alone() -> None:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    agent = Agent(name="tiny", system="Add.", tools=[add], client=fake.client())
    await agent.run("1 + 2?")
    assert [markers(r.body) for r in fake.requests] == [[], []]


async def test_a_continued_conversation_is_cached_by_default() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b"), text("c")])
    agent = Agent(name="chat", system=LONG, client=fake.client())
    first = await agent.run("First question")
    assert markers(fake.requests[-1].body) == []
    second = await agent.run("Second question", message_history=first.messages)
    # Automatic caching for the conversation, and a breakpoint after the system prompt
    # this client sent before (other conversations read that part).
    assert markers(fake.requests[-1].body) == [
        ("top", {"type": "ephemeral"}),
        ("system", {"type": "ephemeral"}),
    ]
    third = await agent.run("Third question", message_history=second.messages)
    assert third.usage["cache_read_input_tokens"] == second.usage["cache_creation_input_tokens"]
    assert third.node.metrics["prompt_cache_share"] > 0.9


async def test_a_long_system_prompt_shared_across_prompts_is_cached_from_the_second() -> None:
    fake = FakeAnthropicAPI([text(str(i)) for i in range(3)])
    agent = Agent(name="triage", system=LONG, tools=[add], client=fake.client())
    results = [await agent.run(f"Ticket #{i}: the export button fails") for i in range(3)]
    assert markers(fake.requests[0].body) == []
    for request in fake.requests[1:]:  # a breakpoint after the system prompt, not the ticket
        assert markers(request.body) == [("system", {"type": "ephemeral"})]
        assert request.body["system"] == [
            {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}
        ]
    assert results[1].usage["cache_creation_input_tokens"] > 1024
    written = results[1].usage["cache_creation_input_tokens"]
    assert results[2].usage["cache_read_input_tokens"] == written
    assert agent.config["system"] == LONG  # the agent's own setting is untouched


async def test_prompts_on_another_client_do_not_count_as_shared() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b")])
    for _ in range(2):
        agent = Agent(name="apart", system=LONG, client=fake.client())
        await agent.run("Same question")
    assert [markers(r.body) for r in fake.requests] == [[], []]


# -- explicit places and the limit of four ----------------------------------------------


async def test_explicit_places_put_breakpoints_where_asked() -> None:
    system = [{"type": "text", "text": "Rules."}, {"type": "text", "text": LONG}]
    fake = FakeAnthropicAPI([text("a"), text("b"), text("c")])
    agent = Agent(name="places", system=system, tools=[add], client=fake.client())
    ephemeral = {"type": "ephemeral"}
    await agent.run(Prompt(user="Q1", prompt_cache=["system"]))
    await agent.run("Q2", overrides=PromptOverrides(prompt_cache=["tools", "messages"]))
    with agent.override(prompt_cache=["messages", "system", "tools"]):
        await agent.run("Q3")
    first, second, third = (r.body for r in fake.requests)
    assert markers(first) == [("system", ephemeral)]
    assert first["system"][0] == {"type": "text", "text": "Rules."}
    assert markers(second) == [("tool add", ephemeral), ("messages.0", ephemeral)]
    assert second["messages"][0]["content"] == [
        {"type": "text", "text": "Q2", "cache_control": ephemeral}
    ]
    assert markers(third) == [
        ("tool add", ephemeral),
        ("system", ephemeral),
        ("messages.0", ephemeral),
    ]
    # What the agent was given is never changed in place.
    assert all("cache_control" not in block for block in system)


OWN = {"type": "ephemeral"}


def _own_history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": "Earlier", "cache_control": OWN}]},
        {"role": "assistant", "content": "Earlier answer"},
    ]


PLACES = ["system", "tools", "messages"]
SETTINGS: list[Any] = [
    None,
    True,
    "1h",
    *(list(c) for n in (1, 2, 3) for c in itertools.combinations(PLACES, n)),
]


@pytest.mark.parametrize("own_top", [False, True], ids=["three-own", "four-own"])
@pytest.mark.parametrize("setting", SETTINGS, ids=repr)
async def test_the_request_never_carries_more_than_four_breakpoints(
    setting: Any, own_top: bool
) -> None:
    system = [
        {"type": "text", "text": LONG, "cache_control": OWN},
        {"type": "text", "text": "Today is Monday."},
    ]
    lookup = {"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}}
    tools: list[Any] = [{**lookup, "cache_control": OWN}, add]
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    agent = Agent(
        name="limits",
        system=system,
        tools=tools,
        prompt_cache=setting,
        cache_control=OWN if own_top else None,
        client=fake.client(),
    )
    history = _own_history()
    result = await agent.run("Add 1 and 2", message_history=history)
    assert result.output == "3"  # the fake took every request (it refuses a fifth marker)
    own = 4 if own_top else 3
    for request in fake.requests:
        found = markers(request.body)
        assert own <= len(found) <= 4, found
        # The caller's own markers are all still there, as they were.
        assert request.body["system"][0]["cache_control"] == OWN
        assert request.body["tools"][0]["cache_control"] == OWN
        assert request.body["messages"][0]["content"][0]["cache_control"] == OWN
    assert history == _own_history() and "cache_control" not in system[1]


async def test_the_fake_refuses_a_fifth_breakpoint_as_the_api_does() -> None:
    fake = FakeAnthropicAPI([text("never")])
    client = fake.client(max_retries=0)
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": OWN} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as raised:
        await client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=10,
            system=blocks,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "Hi"}],
        )
    assert raised.value.status_code == 400
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"] == {"type": "invalid_request_error", "message": TOO_MANY}
    # Four markers and automatic caching are five too: an agent passes the caller's own
    # through as they are, and the API's answer is a typed error.
    agent = Agent(
        name="five", system=blocks[:4], cache_control=OWN, prompt_cache=False, client=client
    )
    with pytest.raises(ModelAPIError, match="400 invalid_request_error: A maximum of 4"):
        await agent.prompt("Hi")
    assert fake.requests == []  # refused before any answer, as the API does


async def test_prompt_cache_false_sends_no_marker() -> None:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3"), text("4")])
    agent = Agent(name="off", system=LONG, tools=[add], prompt_cache=False, client=fake.client())
    first = await agent.run("1 + 2?")
    await agent.run("And 4?", message_history=first.messages)
    assert [markers(r.body) for r in fake.requests] == [[], [], []]
    assert all(isinstance(r.body["system"], str) for r in fake.requests)


async def test_a_one_hour_marker_never_follows_the_callers_five_minute_one() -> None:
    # The API wants longer lifetimes first; the caller's 5-minute marker binds ours.
    fake = FakeAnthropicAPI([text("a")])
    system = [{"type": "text", "text": LONG, "cache_control": OWN}]
    agent = Agent(name="order", system=system, prompt_cache="1h", client=fake.client())
    await agent.run("Hi")
    assert fake.requests[-1].body["cache_control"] == {"type": "ephemeral"}


async def test_one_hour_writes_are_reported_apart_and_priced_at_their_own_rate() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b")])
    five = Agent(name="five", system=LONG, prompt_cache="5m", client=fake.client())
    hour = Agent(name="hour", system=LONG + "?", prompt_cache="1h", client=fake.client())
    short, long = await five.run("Question"), await hour.run("Question")
    (short_call,) = [n for n in short.tree.walk() if n.type.value == "model_call"]
    (long_call,) = [n for n in long.tree.walk() if n.type.value == "model_call"]
    written = short.usage["cache_creation_input_tokens"]
    assert written > 1024 and long.usage["cache_creation_input_tokens"] >= written
    # Same input, but the hour's writes cost 2x the input price, the five minutes' 1.25x.
    assert long.cost_usd > short.cost_usd
    assert long_call.metrics["cost_usd"] > short_call.metrics["cost_usd"]


async def test_steps_and_workflows_sum_their_tokens_and_show_the_share_read_from_the_cache() -> (
    None
):
    fake = FakeAnthropicAPI([text("a"), text("b")])
    agent = Agent(name="reviewer", system=LONG, prompt_cache=True, client=fake.client())

    @workflow(name="review")
    async def review(ctx: WorkflowContext) -> None:
        first = await ctx.step("first", agent.run("Question one"))
        await ctx.step("second", agent.run("Question two", message_history=first.messages))

    result = await review.run()
    calls = [n for n in result.tree.walk() if n.type.value == "model_call"]
    read = sum(c.metrics["usage"]["cache_read_input_tokens"] for c in calls)
    seen = sum(
        c.metrics["usage"][k]
        for c in calls
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    workflow_node = next(n for n in result.tree.walk() if n.type.value == "workflow")
    assert read > 0
    assert workflow_node.metrics["usage"]["cache_read_input_tokens"] == read
    assert workflow_node.metrics["prompt_cache_share"] == round(read / seen, 4)
    steps = [n for n in result.tree.walk() if n.type.value == "step"]
    assert steps[0].metrics.get("prompt_cache_share", 0) == 0  # wrote the prefix
    assert steps[1].metrics["prompt_cache_share"] > 0.5  # read it back
    rendered = result.tree.render()
    assert "to cache)" in rendered and "% from cache" in rendered


class _FourSystemMarks(Middleware):
    """A user layer that puts the API's limit of breakpoints (four) on the system blocks."""

    name = "four_system_marks"
    order = 500

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        request["system"] = [
            {"type": "text", "text": f"part {i} " * 400, "cache_control": {"type": "ephemeral"}}
            for i in range(4)
        ]
        return request


async def test_automatic_caching_counts_the_markers_other_layers_add() -> None:
    # Set after every before_model layer: a layer's four breakpoints leave no room for
    # a fifth, so the request goes out without the top-level one (the API refuses five).
    fake = FakeAnthropicAPI(lambda request: text("ok"))
    agent = Agent(
        name="a",
        system="s",
        prompt_cache=True,
        middleware=[_FourSystemMarks()],
        client=fake.client(),
    )
    assert await agent.prompt("hi") == "ok"
    assert "cache_control" not in fake.requests[-1].body
    assert len([b for b in fake.requests[-1].body["system"] if b.get("cache_control")]) == 4


async def test_the_answer_cache_key_does_not_depend_on_automatic_prompt_caching() -> None:
    from groundswell_lru import LRUCache

    fake = FakeAnthropicAPI(lambda request: text("4"))
    store, client = LRUCache(ttl=600), fake.client()
    await Agent(name="judge", cache=store, client=client).prompt("2+2?")
    second = await Agent(name="judge", cache=store, prompt_cache=True, client=client).run("2+2?")
    assert second.node.metrics.get("cache") == "hit"
    assert len(fake.requests) == 1
