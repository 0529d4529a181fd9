"""Cost in USD: every model call priced from the table (cache reads and writes each at
their own price), summed up the tree; `set_prices`; ``max_usd``; and where the cost
shows (``render()``, ``groundswell tree``, the OTel spans). Model calls go through the
real SDK to the fake API, which answers with the usage each test scripts; expected
prices come from genai-prices' own calculation."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import genai_prices
import groundswell_otel
import pytest
from groundswell_otel import attributes as A
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    EventTree,
    NodeStatus,
    NodeType,
    Prompt,
    TokenBudget,
    TokenBudgetExceeded,
    WorkflowContext,
    WorkflowError,
    set_prices,
    workflow,
)
from groundswell.budget.token_budget import SUMMARIZER_SYSTEM
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, json_reply, text, tool_use

MODEL = "claude-sonnet-4-6"
#: Tiered in the table (as written): above 200k input tokens every token costs more.
TIERED = "claude-haiku-5-5"
SUMMED = (NodeType.PROMPT, NodeType.STEP, NodeType.WORKFLOW)
NO_CACHE = {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}

# Each scripted reply has input_tokens of its own, so a model call's node finds its
# scripted usage (the 1-hour share of cache writes is not among the recorded counts).
_inputs = itertools.count(101)
SCRIPTED: dict[int, dict[str, Any]] = {}


def usage(*, read: int = 0, write: int = 0, hour: int = 0) -> dict[str, Any]:
    """A reply's usage; ``hour`` of the ``write`` cache-write tokens have a 1-hour TTL."""
    n = next(_inputs)
    scripted: dict[str, Any] = {
        "input_tokens": n,
        "output_tokens": 7 + n % 50,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
    }
    if write:
        scripted["cache_creation"] = {
            "ephemeral_5m_input_tokens": write - hour,
            "ephemeral_1h_input_tokens": hour,
        }
    SCRIPTED[n] = scripted
    return scripted


def table_cost(model: str, scripted: dict[str, Any]) -> float:
    """What genai-prices' own calculation says one call with this usage costs."""
    read = scripted["cache_read_input_tokens"]
    write = scripted["cache_creation_input_tokens"]
    hour = scripted.get("cache_creation", {}).get("ephemeral_1h_input_tokens", 0)
    counts = genai_prices.Usage(
        # genai-prices counts every input token in input_tokens; the API leaves the cache out.
        input_tokens=scripted["input_tokens"] + read + write,
        output_tokens=scripted["output_tokens"],
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_1h_tokens=hour,
    )
    return float(genai_prices.calc_price(counts, model, provider_id="anthropic").total_price)


TURN = {"input_tokens": 1_000, "output_tokens": 100}
TURN_COST = table_cost(MODEL, {**TURN, **NO_CACHE})


def costing(reply: Reply, scripted: dict[str, Any]) -> Reply:
    """``reply``, answered with the usage ``scripted``."""
    reply.usage = dict(scripted)
    return reply


def model_calls(tree: EventTree, start: str | None = None) -> list[Any]:
    return [n for n in tree.walk(start) if n.type is NodeType.MODEL_CALL]


def assert_costs_add_up(tree: EventTree) -> None:
    """Every prompt, step and workflow costs what the model calls below it cost."""
    for node in tree.walk():
        if node.type in SUMMED:
            below = sum(c.metrics["cost_usd"] for c in model_calls(tree, node.id))
            assert node.metrics.get("cost_usd", 0.0) == pytest.approx(below, abs=1e-12), node


def lookup(city: str) -> str:
    """Look up the weather of a city.

    Args:
        city: The city's name.
    """
    return f"{city}: sunny, 21 C"


def one_tool_loop(answer: str, **cache: int) -> Any:
    """A fake model: a tool call (writing the prompt cache, partly for an hour), then
    ``answer`` (reading or writing the cache as ``cache`` says)."""

    def respond(request: MessagesRequest) -> Reply:
        if request.latest_tool_results():
            return text(answer, usage=usage(**cache))
        return costing(tool_use("lookup", {"city": "Oslo"}), usage(write=1_200, hour=400))

    return respond


def endless() -> FakeAnthropicAPI:
    """A model that keeps calling tools, each turn costing `TURN_COST`."""
    return FakeAnthropicAPI(lambda _: costing(tool_use("lookup", {"city": "Oslo"}), TURN))


# -- what a run costs ---------------------------------------------------------------------


async def test_a_workflows_cost_is_the_sum_of_its_model_calls_each_at_the_table_prices() -> None:
    forecaster = Agent(
        name="forecaster",
        model=MODEL,
        tools=[lookup],
        client=FakeAnthropicAPI(one_tool_loop("Sunny.", read=1_200)).client(),
    )
    # 250k cached tokens: priced at the table's rates above 200k.
    planner = Agent(
        name="planner",
        model=TIERED,
        tools=[lookup],
        client=FakeAnthropicAPI(one_tool_loop("Go.", read=250_000)).client(),
    )
    results: dict[str, Any] = {}

    @workflow(name="trip")
    async def trip(ctx: WorkflowContext) -> str:
        async def ask(agent: Agent, question: str) -> str:
            results[agent.name] = result = await agent.run(question)
            return str(result.output)

        first = await ctx.step("forecast", lambda: ask(forecaster, "Weather in Oslo?"))
        second = await ctx.step("plan", lambda: ask(planner, "Plan a day in Oslo."))
        return f"{first} {second}"

    run = await trip.run()
    calls = model_calls(run.tree)
    assert len(calls) == 4
    for call in calls:
        scripted = SCRIPTED[call.metrics["usage"]["input_tokens"]]
        expected = table_cost(call.name, scripted)  # a model_call node is named for its model
        assert call.metrics["cost_usd"] == pytest.approx(expected, rel=1e-9)
    assert run.cost_usd == pytest.approx(sum(c.metrics["cost_usd"] for c in calls), rel=1e-12)
    assert run.cost_usd == run.node.metrics["cost_usd"]
    assert_costs_add_up(run.tree)
    for name, step in zip(("forecaster", "planner"), run.node.children, strict=True):
        result = results[name]
        assert result.cost_usd == result.node.metrics["cost_usd"]
        assert result.cost_usd == pytest.approx(step.metrics["cost_usd"], rel=1e-12)


async def test_nested_prompts_spawned_workflows_reflection_and_summaries_all_count() -> None:
    inner = Agent(
        name="inner",
        model=MODEL,
        client=FakeAnthropicAPI(lambda _: text("from inside", usage=usage())).client(),
    )

    async def consult(question: str) -> str:
        """Ask the inner agent.

        Args:
            question: What to ask.
        """
        return str(await inner.prompt(question))

    def outer_model(request: MessagesRequest) -> Reply:
        if request.latest_tool_results():
            return text("done", usage=usage(read=300))
        return costing(tool_use("consult", {"question": "what?"}), usage(write=300))

    outer = Agent(
        name="outer", model=MODEL, tools=[consult], client=FakeAnthropicAPI(outer_model).client()
    )

    # A reader whose conversation outgrows its budget: a summarizer runs on its behalf.
    turns = itertools.count()

    def reader_model(request: MessagesRequest) -> Reply:
        if request.system == SUMMARIZER_SYSTEM:
            return text("Summary: pages were read.", usage=usage())
        done = next(turns)
        if done >= 6:
            return text("All read.", usage=usage())
        return costing(tool_use("page", {"n": done + 1}), usage())

    def page(n: int) -> str:
        """Read one page.

        Args:
            n: The page number.
        """
        return f"Page {n}. " + "word " * 300

    reader = Agent(
        name="reader",
        model=MODEL,
        tools=[page],
        client=FakeAnthropicAPI(reader_model).client(),
        token_budget=TokenBudget(
            max_total=2_500, reserve_for_output=100, strategy="summarize", keep_last_turns=1
        ),
        max_turns=20,
    )
    verdict = {
        "analysis": "It was flaky.",
        "should_retry": True,
        "guidance": "Try again.",
        "revised_system": None,
        "revised_data_json": None,
    }
    critic = Agent(
        name="critic", model=MODEL, client=FakeAnthropicAPI([json_reply(verdict)]).client()
    )

    @workflow(name="child")
    async def child(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: inner.prompt("child question"))

    tries: list[int] = []

    @workflow(name="everything", enable_reflection=True, reflection_agent=critic)
    async def everything(ctx: WorkflowContext) -> str:
        await ctx.step("nested", lambda: outer.prompt("consult the inner agent"))
        await ctx.step("spawned", lambda: ctx.spawn_workflow(child))
        await ctx.step("long", lambda: reader.prompt("read every page"))

        def flaky() -> str:
            tries.append(1)
            if len(tries) == 1:
                raise RuntimeError("flaky")
            return "ok"

        return await ctx.step("flaky", flaky)

    run = await everything.run()
    kinds = {
        "nested prompt": [p for p in run.tree.find(type=NodeType.PROMPT) if p.name == "inner"],
        "summary": run.tree.find(type=NodeType.SUMMARY),
        "reflection": run.tree.find(type=NodeType.REFLECTION),
        "spawned workflow": run.tree.find(type=NodeType.WORKFLOW, name="child"),
    }
    for what, found in kinds.items():
        assert found, f"no {what} in the run"
        assert any(model_calls(run.tree, n.id) for n in found), f"the {what} made no model call"
    assert_costs_add_up(run.tree)
    every_call = [c.metrics["cost_usd"] for c in model_calls(run.tree)]
    assert all(isinstance(c, float) and c > 0 for c in every_call)
    assert run.cost_usd == pytest.approx(sum(every_call), rel=1e-12)


# -- the price table and set_prices --------------------------------------------------------


async def test_set_prices_overrides_the_table_with_anthropics_cache_multipliers() -> None:
    model = "claude-3-5-haiku-20241022"  # in the table; used by no other test
    scripted = usage(read=1_000, write=2_000, hour=500)
    fake = FakeAnthropicAPI(lambda _: text("hi", usage=scripted))
    agent = Agent(name="priced", model=model, client=fake.client())

    from_table = await agent.run("hi")
    assert from_table.cost_usd == pytest.approx(table_cost(model, scripted), rel=1e-9)

    per = 1e-6
    fresh, out = scripted["input_tokens"], scripted["output_tokens"]
    set_prices(model, input=2.0, output=10.0)
    defaults = await agent.run("hi")
    expected = (
        fresh * 2.0 * per
        + out * 10.0 * per
        + 1_000 * 0.2 * per  # cache reads: 0.1x input
        + 1_500 * 2.5 * per  # 5-minute cache writes: 1.25x input
        + 500 * 4.0 * per  # 1-hour cache writes: 2x input
    )
    assert defaults.cost_usd == pytest.approx(expected, rel=1e-12)

    set_prices(model, input=2.0, output=10.0, cache_read=0.5, cache_write=3.0)
    explicit = await agent.run("hi")
    expected = (
        fresh * 2.0 * per
        + out * 10.0 * per
        + 1_000 * 0.5 * per
        + 1_500 * 3.0 * per
        + 500 * 4.0 * per
    )
    assert explicit.cost_usd == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("model", "prices", "wrong"),
    [
        ("", {"input": 1, "output": 1}, "model must be"),
        ("m", {"input": -1, "output": 1}, "input must be a price"),
        ("m", {"input": 1, "output": math.nan}, "output must be a price"),
        ("m", {"input": 1, "output": math.inf}, "output must be a price"),
        ("m", {"input": True, "output": 1}, "input must be a price"),
        ("m", {"input": "3", "output": 1}, "input must be a price"),
        ("m", {"input": 1, "output": 1, "cache_read": -0.1}, "cache_read must be a price"),
    ],
)
def test_set_prices_rejects_bad_values(model: str, prices: dict[str, Any], wrong: str) -> None:
    with pytest.raises(ConfigurationError, match=wrong):
        set_prices(model, **prices)


async def test_an_unknown_model_costs_none_not_zero_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeAnthropicAPI(lambda _: text("hi"))
    agent = Agent(name="mystery", model="not-a-model-the-table-knows", client=fake.client())

    @workflow(name="unpriced")
    async def unpriced(ctx: WorkflowContext) -> None:
        await ctx.step("one", lambda: agent.prompt("a"))
        await ctx.step("two", lambda: agent.prompt("b"))

    with caplog.at_level(logging.WARNING, "groundswell.budget.pricing"):
        run = await unpriced.run()
    assert run.cost_usd is None
    for node in run.tree.walk():
        if node.type in (*SUMMED, NodeType.MODEL_CALL):
            assert node.metrics["cost_usd"] is None, node
    warnings = [r.getMessage() for r in caplog.records if r.name == "groundswell.budget.pricing"]
    assert len(warnings) == 1
    assert "not-a-model-the-table-knows" in warnings[0] and "set_prices" in warnings[0]
    assert "$?" in run.tree.render()


def test_the_price_table_loads_only_when_needed_and_never_goes_online() -> None:
    # A fresh process that records every connection to, and DNS lookup of, a host that
    # is not this machine: pricing a call must make none.
    script = textwrap.dedent(
        """
        import asyncio, json, sys

        LOCAL = {"127.0.0.1", "::1", "localhost", None}
        online = []

        def watch(event, args):
            if event == "socket.connect":
                address = args[1]
                host = address[0] if isinstance(address, tuple) else None
                if host not in LOCAL:
                    online.append(repr(address))
            elif event == "socket.getaddrinfo" and args[0] not in LOCAL:
                online.append(repr(args[0]))

        sys.addaudithook(watch)
        import groundswell
        from groundswell.testing import FakeAnthropicAPI, text

        loaded_at_import = "genai_prices" in sys.modules
        turn = {"input_tokens": 1000, "output_tokens": 10}
        fake = FakeAnthropicAPI([text("hi", usage=turn)])
        agent = groundswell.Agent(name="a", model="claude-haiku-4-5", client=fake.client())
        result = asyncio.run(agent.run("hi"))
        print(json.dumps({
            "cost": result.cost_usd,
            "loaded_at_import": loaded_at_import,
            "loaded_after": "genai_prices" in sys.modules,
            "online": online,
        }))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["online"] == []
    assert seen["loaded_at_import"] is False and seen["loaded_after"] is True
    turn = {"input_tokens": 1000, "output_tokens": 10, **NO_CACHE}
    assert seen["cost"] == pytest.approx(table_cost("claude-haiku-4-5", turn), rel=1e-9)


# -- max_usd -----------------------------------------------------------------------------


async def test_max_usd_stops_a_workflow_before_the_turn_that_would_pass_it() -> None:
    fake = endless()
    agent = Agent(name="looper", model=MODEL, tools=[lookup], client=fake.client(), max_turns=50)
    limit = 1.8 * TURN_COST  # after two turns (2.0 TURN_COST) the third is refused

    @workflow(name="capped", token_budget=TokenBudget(max_usd=limit))
    async def capped(ctx: WorkflowContext) -> str:
        return await ctx.step("loop", lambda: agent.prompt("go on forever"))

    with pytest.raises(WorkflowError) as caught:
        await capped.run()
    error = caught.value.__cause__
    assert isinstance(error, TokenBudgetExceeded)
    # Two turns fitted the checks before them (their output could not be known then).
    assert len(fake.requests) == 2
    assert error.max_usd == limit
    assert error.spent_usd == pytest.approx(2 * TURN_COST)
    message = str(error)
    assert f"spent ${2 * TURN_COST:.6f}" in message and f"max_usd={limit}" in message
    assert "To fix: raise max_usd" in message
    # The tree is kept, with the prompt failed where the budget stopped it.
    result = caught.value.result
    assert result is not None and result.status is NodeStatus.FAILED
    (prompt,) = result.tree.find(type=NodeType.PROMPT)
    assert prompt.status is NodeStatus.FAILED
    assert prompt.error is not None and prompt.error["type"] == "TokenBudgetExceeded"
    assert result.cost_usd == pytest.approx(error.spent_usd)
    assert_costs_add_up(result.tree)


async def test_max_usd_holds_for_a_task_that_outlives_the_block_that_set_it() -> None:
    # The task keeps the block's budget (use_budget's promise) after the block has ended,
    # when no other dollar budget is open anywhere in the process.
    fake = endless()
    agent = Agent(name="late", model=MODEL, tools=[lookup], client=fake.client(), max_turns=50)
    start = asyncio.Event()

    async def later() -> str:
        await start.wait()
        return await agent.prompt("go on forever")

    with groundswell.use_budget(TokenBudget(max_usd=1.8 * TURN_COST)):
        task = asyncio.create_task(later())
    start.set()
    with pytest.raises(TokenBudgetExceeded, match="max_usd"):
        await task
    assert len(fake.requests) == 2


async def test_max_usd_on_an_agent_holds_for_each_prompt() -> None:
    fake = endless()
    agent = Agent(
        name="frugal",
        model=MODEL,
        tools=[lookup],
        client=fake.client(),
        token_budget=TokenBudget(max_usd=1.02 * TURN_COST),  # one turn fits, not a second
        max_turns=50,
    )
    for sent in (1, 2):
        with pytest.raises(TokenBudgetExceeded, match="the prompt has spent"):
            await agent.prompt("go on forever")
        assert len(fake.requests) == sent  # each prompt has the whole allowance


async def test_a_workflows_max_usd_holds_inside_an_agent_with_a_token_budget_of_its_own() -> None:
    fake = endless()
    agent = Agent(
        name="own-budget",
        model=MODEL,
        tools=[lookup],
        client=fake.client(),
        token_budget=TokenBudget(max_total=100_000),  # more specific, but in tokens only
        max_turns=50,
    )

    @workflow(name="capped-outside", token_budget=TokenBudget(max_usd=1.8 * TURN_COST))
    async def capped(ctx: WorkflowContext) -> str:
        return await ctx.step("loop", lambda: agent.prompt("go on forever"))

    with pytest.raises(WorkflowError) as caught:
        await capped.run()
    assert isinstance(caught.value.__cause__, TokenBudgetExceeded)
    assert len(fake.requests) == 2


async def test_max_usd_for_a_model_without_a_price_says_to_set_one() -> None:
    agent = Agent(
        name="unknown-price",
        model="another-unknown-model",
        client=FakeAnthropicAPI(lambda _: text("hi")).client(),
        token_budget=TokenBudget(max_usd=1.0),
    )
    with pytest.raises(ConfigurationError, match=r"set_prices\('another-unknown-model'"):
        await agent.prompt("hi")


@pytest.mark.parametrize(
    ("kwargs", "wrong"),
    [
        ({}, "give max_total"),
        ({"max_usd": 0}, "max_usd must be"),
        ({"max_usd": -1.0}, "max_usd must be"),
        ({"max_usd": math.nan}, "max_usd must be"),
        ({"max_usd": True}, "max_usd must be"),
        ({"max_usd": "1"}, "max_usd must be"),
    ],
)
def test_a_budget_needs_a_token_or_a_dollar_limit(kwargs: dict[str, Any], wrong: str) -> None:
    with pytest.raises(ConfigurationError, match=wrong):
        TokenBudget(**kwargs)


def test_a_dollar_only_budget_and_an_old_token_budget_are_both_valid() -> None:
    assert TokenBudget(max_usd=0.5).max_total is None
    assert TokenBudget(max_total=1_000).max_usd is None
    both = TokenBudget(max_total=1_000, max_usd=2, reserve_for_output=100)
    assert (both.max_total, both.max_usd) == (1_000, 2)


# -- where it shows -----------------------------------------------------------------------


def shown_costs(rendered: str) -> list[float]:
    """The costs a rendered tree shows (``$0.0123``), line by line."""
    return [float(m) for m in re.findall(r"\$(\d+\.\d+)", rendered)]


async def test_render_and_the_tree_command_show_each_nodes_cost(tmp_path: Path) -> None:
    fake = FakeAnthropicAPI(
        [costing(tool_use("lookup", {"city": "Oslo"}), TURN), text("Sunny.", usage=dict(TURN))]
    )
    agent = Agent(name="shown", model=MODEL, tools=[lookup], client=fake.client())

    @workflow(name="shown")
    async def shown(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: agent.prompt("weather?"))

    run = await shown.run()
    priced = [n for n in run.tree.walk() if n.type in (*SUMMED, NodeType.MODEL_CALL)]
    kinds = [n.type.value for n in priced]
    assert kinds == ["workflow", "step", "prompt", "model_call", "model_call"]
    expected = [pytest.approx(n.metrics["cost_usd"], abs=1e-6) for n in priced]
    assert shown_costs(run.tree.render()) == expected
    path = run.tree.save(tmp_path / "trace.jsonl")
    drawn = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "groundswell.cli", "tree", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert drawn.returncode == 0, drawn.stderr
    assert shown_costs(drawn.stdout) == expected


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.delenv(groundswell_otel.CONTENT_ENV, raising=False)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    groundswell_otel.instrument(provider)
    yield memory
    groundswell_otel.uninstrument()


async def test_otel_spans_carry_the_cost_of_their_node(exporter: InMemorySpanExporter) -> None:
    fake = FakeAnthropicAPI(one_tool_loop("Sunny.", read=1_200))
    agent = Agent(name="traced", model=MODEL, tools=[lookup], client=fake.client())

    @workflow(name="traced")
    async def traced(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: agent.prompt("weather?"))

    run = await traced.run()
    assert groundswell.flush_sinks()
    spans = {(s.attributes or {})[A.NODE_ID]: s for s in exporter.get_finished_spans()}
    assert A.COST_USD == "groundswell.cost_usd"
    for node in run.tree.walk():
        attributes = spans[node.id].attributes or {}
        if node.type in (*SUMMED, NodeType.MODEL_CALL):
            assert attributes[A.COST_USD] == pytest.approx(node.metrics["cost_usd"], rel=1e-12)
            assert attributes[A.COST_USD] > 0
        else:
            assert A.COST_USD not in attributes


async def test_an_agents_max_usd_counts_every_attempt_of_a_reflecting_prompt() -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        value: int

    # Every reply fails validation, so reflection keeps trying: each try costs TURN_COST.
    fake = FakeAnthropicAPI(lambda _: costing(text("not json"), TURN))
    agent = Agent(
        name="retrier",
        model=MODEL,
        client=fake.client(),
        enable_reflection=True,
        # One try fits, a second fits only if the first's cost is not counted.
        token_budget=TokenBudget(max_usd=1.5 * TURN_COST),
    )
    # Counted per attempt, every try would fit and the prompt would end with the
    # validation error; counted per prompt, the limit stops the third try.
    with pytest.raises(TokenBudgetExceeded, match="the prompt has spent"):
        await agent.prompt(Prompt(user="a number", response_format=Answer))
