"""The bundled OpenTelemetry sink: spans mirror the tree, follow the GenAI conventions, hold no secrets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import groundswell_otel
import pytest
from groundswell_introspection import Limits, toolset
from groundswell_otel import RedactingSpanExporter
from groundswell_otel import attributes as A
from mcp.server.mcpserver import Context, MCPServer
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    Prompt,
    ReflectionConfig,
    ToolContext,
    WorkflowContext,
    WorkflowResult,
    workflow,
)
from groundswell.testing import FAKE_API_KEY, FakeAnthropicAPI, json_reply, text, tool_use

ENV_SECRET = "otel-env-secret-value-9931"


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


def spans(memory: InMemorySpanExporter) -> list[ReadableSpan]:
    assert groundswell.flush_sinks()
    return list(memory.get_finished_spans())


def by_node(found: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    out = {}
    for span in found:
        node_id = (span.attributes or {}).get(A.NODE_ID)
        assert isinstance(node_id, str)
        assert node_id not in out, f"two spans for node {node_id}"
        out[node_id] = span
    return out


def assert_mirrors(result: WorkflowResult[Any], found: list[ReadableSpan]) -> None:
    """One span per node, one trace per run, and span parents equal node parents."""
    mapping = by_node([s for s in found if not (s.attributes or {}).get(A.CACHE_HIT)])
    nodes = list(result.tree.walk())
    assert set(mapping) == {n.id for n in nodes}
    trace_ids = {s.context.trace_id for s in mapping.values()}
    assert len(trace_ids) == 1
    for node in nodes:
        span = mapping[node.id]
        if node.parent_id is None:
            assert span.parent is None
        else:
            assert span.parent is not None
            assert span.parent.span_id == mapping[node.parent_id].context.span_id


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def calculator(fake: FakeAnthropicAPI, **kwargs: Any) -> Agent:
    return Agent(name="calc", tools=[add], client=fake.client(), **kwargs)


@workflow(name="child")
async def child(ctx: WorkflowContext, n: int) -> int:
    return await ctx.step("double", lambda: n * 2)


async def test_spans_mirror_the_tree_with_gather_branches_agents_and_spawned_workflows(
    exporter: InMemorySpanExporter,
) -> None:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    agent = calculator(fake)

    @workflow(name="parent")
    async def parent(ctx: WorkflowContext) -> int:
        a, b = await asyncio.gather(ctx.step("left", lambda: 1), ctx.step("right", lambda: 2))
        answer = await ctx.step("ask", agent.prompt("1 + 2?"))
        spawned = await ctx.spawn_workflow(child, 5)
        return a + b + int(answer) + spawned

    result = await parent.run()
    assert result.output == 16
    found = spans(exporter)
    assert_mirrors(result, found)
    names = sorted(s.name for s in found)
    assert names == sorted(
        [
            "invoke_workflow parent",
            "step left",
            "step right",
            "step ask",
            "invoke_agent calc",
            "chat claude-sonnet-4-6",
            "execute_tool add",
            "chat claude-sonnet-4-6",
            "invoke_workflow child",
            "step double",
        ]
    )


async def test_each_run_is_its_own_trace(exporter: InMemorySpanExporter) -> None:
    first, second = await child.run(1), await child.run(2)
    found = spans(exporter)
    roots = [s for s in found if s.parent is None]
    assert len(roots) == 2 and len({s.context.trace_id for s in found}) == 2
    for result in (first, second):
        (root,) = [s for s in roots if s.attributes[A.RUN_ID] == result.node.id]
        assert_mirrors(result, [s for s in found if s.context.trace_id == root.context.trace_id])


async def test_span_names_kinds_and_genai_attributes(exporter: InMemorySpanExporter) -> None:
    usage = {"input_tokens": 10, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 5}
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3", usage=usage)])
    agent = calculator(fake, temperature=0.3, max_tokens=500, stop_sequences=["END"])

    @workflow(name="attrs")
    async def attrs(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", agent.prompt("1 + 2?"))

    result = await attrs.run()
    found = spans(exporter)
    named = {s.name: s for s in found}

    wf = named["invoke_workflow attrs"]
    assert wf.kind is SpanKind.INTERNAL and wf.status.status_code is StatusCode.OK
    assert wf.attributes[A.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert wf.attributes[A.GEN_AI_WORKFLOW_NAME] == "attrs"

    step = named["step ask"]
    assert step.kind is SpanKind.INTERNAL
    assert step.attributes[A.OPENINFERENCE_SPAN_KIND] == "CHAIN"

    agent_span = named["invoke_agent calc"]
    assert agent_span.kind is SpanKind.INTERNAL
    assert agent_span.attributes[A.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert agent_span.attributes[A.GEN_AI_AGENT_NAME] == "calc"
    assert agent_span.attributes[A.GEN_AI_PROVIDER_NAME] == "anthropic"

    chats = sorted((s for s in found if s.name.startswith("chat ")), key=lambda s: s.start_time)
    assert len(chats) == 2
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        a = chat.attributes
        assert a[A.GEN_AI_OPERATION_NAME] == "chat"
        assert a[A.GEN_AI_PROVIDER_NAME] == "anthropic"
        assert a[A.GEN_AI_REQUEST_MODEL] == "claude-sonnet-4-6"
        assert a[A.GEN_AI_REQUEST_MAX_TOKENS] == 500
        assert a[A.GEN_AI_REQUEST_TEMPERATURE] == pytest.approx(0.3)
        assert tuple(a[A.GEN_AI_REQUEST_STOP_SEQUENCES]) == ("END",)
        assert a[A.GEN_AI_RESPONSE_MODEL] == "claude-sonnet-4-6"
        assert str(a[A.GEN_AI_RESPONSE_ID]).startswith("msg_")
    assert tuple(chats[0].attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("tool_use",)
    assert tuple(chats[1].attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("end_turn",)
    # Anthropic's input_tokens excludes the cache; the convention's count includes it.
    second = chats[1].attributes
    assert second[A.GEN_AI_USAGE_INPUT_TOKENS] == 10 + 30 + 5
    assert second[A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 30
    assert second[A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 5
    last_call = result.tree.find(type="model_call")[-1].metrics["usage"]
    assert second[A.GEN_AI_USAGE_OUTPUT_TOKENS] == last_call["output_tokens"]
    prompt_usage = result.tree.find(type="prompt")[0].metrics["usage"]
    assert agent_span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == prompt_usage["output_tokens"]

    tool = named["execute_tool add"]
    assert tool.kind is SpanKind.INTERNAL
    assert tool.attributes[A.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert tool.attributes[A.GEN_AI_TOOL_NAME] == "add"
    assert tool.attributes[A.GEN_AI_TOOL_TYPE] == "function"
    call_id = result.tree.find(type="tool_call")[0].payload["tool_use_id"]
    assert tool.attributes[A.GEN_AI_TOOL_CALL_ID] == call_id


async def test_a_cache_hit_is_an_internal_chat_span_without_usage(
    exporter: InMemorySpanExporter,
) -> None:
    from groundswell_lru import LRUCache

    fake = FakeAnthropicAPI([text("cached answer")])
    agent = Agent(name="memo", client=fake.client(), cache=LRUCache())
    await agent.run("same question")
    await agent.run("same question")
    found = spans(exporter)
    hits = [s for s in found if (s.attributes or {}).get(A.CACHE_HIT)]
    assert len(hits) == 1
    hit = hits[0]
    assert hit.name == "chat claude-sonnet-4-6" and hit.kind is SpanKind.INTERNAL
    assert not any(k.startswith("gen_ai.usage") for k in hit.attributes)
    assert isinstance(hit.attributes[A.CACHE_KEY], str)
    agents = [s for s in found if s.name == "invoke_agent memo"]
    assert [s.attributes[A.CACHE] for s in agents] == ["miss", "hit"]
    assert hit.parent.span_id == agents[1].context.span_id
    # The hit made no request: only the first run has a CLIENT span.
    assert len([s for s in found if s.kind is SpanKind.CLIENT]) == 1


class Verdict(BaseModel):
    score: int


async def test_reflection_attempts_and_failures_have_their_spans(
    exporter: InMemorySpanExporter,
) -> None:
    fake = FakeAnthropicAPI([text("not json"), json_reply({"score": 4})])
    agent = Agent(
        name="judge",
        client=fake.client(),
        reflection=ReflectionConfig(strategy="feedback", max_attempts=2),
    )

    @workflow(name="judged")
    async def judged(ctx: WorkflowContext) -> int:
        verdict = await ctx.step(
            "judge", agent.prompt(Prompt(user="rate", response_format=Verdict))
        )
        return verdict.score

    result = await judged.run()
    assert result.output == 4
    found = spans(exporter)
    assert_mirrors(result, found)
    reflection = next(s for s in found if s.name.startswith("reflection "))
    assert reflection.attributes[A.REFLECTION_LEVEL] == "agent"
    assert reflection.attributes[A.REFLECTION_STRATEGY] == "feedback"
    assert reflection.attributes[A.ATTEMPT] == 1
    attempts = [s for s in found if s.name == "invoke_agent judge"]
    statuses = sorted(s.attributes[A.NODE_STATUS] for s in attempts)
    assert statuses == ["completed", "failed"]
    failed = next(s for s in attempts if s.attributes[A.NODE_STATUS] == "failed")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[A.ERROR_TYPE] == "ResponseValidationError"
    assert any(e.name == "exception" for e in failed.events)


async def test_a_failed_step_marks_its_spans_as_errors(exporter: InMemorySpanExporter) -> None:
    @workflow(name="crash")
    async def crash(ctx: WorkflowContext) -> None:
        await ctx.step("boom", lambda: 1 / 0)

    with pytest.raises(groundswell.WorkflowError):
        await crash.run()
    found = {s.name: s for s in spans(exporter)}
    for name in ("step boom", "invoke_workflow crash"):
        span = found[name]
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes[A.ERROR_TYPE] == "ZeroDivisionError"
    event = next(e for e in found["step boom"].events if e.name == "exception")
    assert event.attributes[A.EXCEPTION_TYPE] == "ZeroDivisionError"
    assert "division by zero" in event.attributes[A.EXCEPTION_MESSAGE]
    # Where it was raised, as Python prints it: this file's lambda is the last frame.
    stack = str(event.attributes[A.EXCEPTION_STACKTRACE])
    assert stack.startswith("Traceback (most recent call last):\n")
    assert f'File "{__file__}"' in stack and "in <lambda>" in stack
    assert stack.splitlines()[-2:] == [
        '    await ctx.step("boom", lambda: 1 / 0)',
        "ZeroDivisionError: division by zero",
    ]


async def test_spans_are_exported_while_the_run_is_still_going(
    exporter: InMemorySpanExporter,
) -> None:
    seen: list[str] = []

    @workflow(name="long")
    async def long(ctx: WorkflowContext) -> None:
        await ctx.step("first", lambda: 1)
        await asyncio.to_thread(groundswell.flush_sinks)
        seen.extend(s.name for s in exporter.get_finished_spans())

    await long.run()
    assert seen == ["step first"]


CONTENT_KEYS = (
    A.GEN_AI_INPUT_MESSAGES,
    A.GEN_AI_OUTPUT_MESSAGES,
    A.GEN_AI_SYSTEM_INSTRUCTIONS,
    A.GEN_AI_TOOL_CALL_ARGUMENTS,
    A.GEN_AI_TOOL_CALL_RESULT,
    A.INPUT_VALUE,
    A.OUTPUT_VALUE,
)


def everything(found: list[ReadableSpan]) -> str:
    """Every name, attribute, event and status text of every span, as one string."""
    parts: list[str] = []
    for s in found:
        parts += [s.name, s.status.description or "", json.dumps(dict(s.attributes), default=str)]
        for e in s.events:
            parts += [e.name, json.dumps(dict(e.attributes), default=str)]
    return "\n".join(parts)


async def ask_calculator(fake: FakeAnthropicAPI) -> None:
    agent = calculator(fake, system="You add numbers carefully.")

    @workflow(name="content")
    async def content(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", agent.prompt("What is 1 + 2, secretly?"))

    await content.run()


async def test_content_is_off_by_default(exporter: InMemorySpanExporter) -> None:
    await ask_calculator(FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("It is 3")]))
    found = spans(exporter)
    assert not any(k in s.attributes for s in found for k in CONTENT_KEYS)
    dump = everything(found)
    assert "secretly" not in dump and "It is 3" not in dump and "carefully" not in dump


@pytest.mark.parametrize("mode", ["SPAN_ONLY", "SPAN_AND_EVENT", "true"])
async def test_content_is_captured_when_opted_in(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv(groundswell_otel.CONTENT_ENV, mode)
    groundswell.get_plugin_manager().refresh_sinks("otel")  # the sink reads it when made
    await ask_calculator(FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("It is 3")]))
    named = {s.name: s for s in spans(exporter)}
    agent_span = named["invoke_agent calc"].attributes
    messages = json.loads(agent_span[A.GEN_AI_INPUT_MESSAGES])
    assert messages == [
        {"role": "user", "parts": [{"type": "text", "content": "What is 1 + 2, secretly?"}]}
    ]
    assert json.loads(agent_span[A.GEN_AI_SYSTEM_INSTRUCTIONS]) == [
        {"type": "text", "content": "You add numbers carefully."}
    ]
    output = json.loads(agent_span[A.GEN_AI_OUTPUT_MESSAGES])
    assert output[0]["role"] == "assistant" and output[0]["parts"][0]["content"] == "It is 3"
    tool = named["execute_tool add"].attributes
    assert json.loads(tool[A.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"a": 1, "b": 2}
    assert tool[A.GEN_AI_TOOL_CALL_RESULT] == "3"
    events = [e.name for e in named["invoke_agent calc"].events]
    assert (A.GEN_AI_CONTENT_EVENT in events) == (mode == "SPAN_AND_EVENT")


async def test_no_secret_reaches_any_span_even_with_content_on(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(groundswell_otel.CONTENT_ENV, "SPAN_AND_EVENT")
    groundswell.get_plugin_manager().refresh_sinks("otel")

    def connect(host: str, api_key: str, ctx: ToolContext) -> str:
        """Connect to a host."""
        raise RuntimeError(f"login to {host} failed with {ctx.env['DB_PASSWORD']}")

    def reveal(ctx: ToolContext) -> dict[str, str]:
        """Reveal configuration."""
        # Secret-looking keys inside a tool's result are found although the
        # model gets the result as JSON text.
        return {"note": f"password is {ctx.env['DB_PASSWORD']}", "api_key": "issued-key-0123456789"}

    fake = FakeAnthropicAPI(
        [
            tool_use("connect", {"host": "db", "api_key": "plain-key-123456"}),
            tool_use("reveal", {}),
            text(f"done; key {FAKE_API_KEY} and {ENV_SECRET}"),
        ]
    )
    agent = Agent(
        name="leaky",
        tools=[connect, reveal],
        env={"DB_PASSWORD": ENV_SECRET},
        system=f"Never say {ENV_SECRET}.",
        client=fake.client(),
    )

    @workflow(name="leaky-flow")
    async def leaky(ctx: WorkflowContext) -> str:
        return await ctx.step("go", agent.prompt(f"use {FAKE_API_KEY}"))

    await leaky.run()
    found = spans(exporter)
    assert any(A.GEN_AI_TOOL_CALL_RESULT in s.attributes for s in found)  # content is on
    dump = everything(found)
    for secret in (FAKE_API_KEY, ENV_SECRET, "plain-key-123456", "issued-key-0123456789"):
        assert secret not in dump
    assert "**********" in dump


async def test_introspection_results_need_their_own_opt_in(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run_once(tools: Any = ("introspection",)) -> ReadableSpan:
        exporter.clear()
        fake = FakeAnthropicAPI([tool_use("inspect_current_node", {}), text("seen")])
        agent = Agent(name="curious", tools=list(tools), client=fake.client())

        @workflow(name="look")
        async def look(ctx: WorkflowContext) -> str:
            return await ctx.step("peek", agent.prompt("where am I?"))

        await look.run()
        return next(s for s in spans(exporter) if s.name == "execute_tool inspect_current_node")

    monkeypatch.setenv(groundswell_otel.CONTENT_ENV, "SPAN_ONLY")
    groundswell.get_plugin_manager().refresh_sinks("otel")
    tool = await run_once()
    assert tool.attributes[A.TOOLSET] == "introspection"
    assert A.GEN_AI_TOOL_CALL_ARGUMENTS in tool.attributes
    assert A.GEN_AI_TOOL_CALL_RESULT not in tool.attributes

    # Built with custom limits (tools=toolset(Limits(...))), the tools still count
    # as introspection tools.
    tool = await run_once(toolset(Limits(max_chars=500)))
    assert tool.attributes[A.TOOLSET] == "introspection"
    assert A.GEN_AI_TOOL_CALL_RESULT not in tool.attributes

    monkeypatch.setenv(groundswell_otel.INTROSPECTION_ENV, "true")
    groundswell.get_plugin_manager().refresh_sinks("otel")
    tool = await run_once()
    assert "peek" in tool.attributes[A.GEN_AI_TOOL_CALL_RESULT]


def test_redacting_exporter_cleans_keys_values_and_exception_messages() -> None:
    groundswell.register_secret(ENV_SECRET)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(memory)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(f"call {ENV_SECRET}") as span:
        span.set_attribute("http.request.header.authorization", "Bearer abcdefghijklmnop")
        span.set_attribute("db.api_key", "hidden-by-its-name")
        span.set_attribute("note", f"uses sk-ant-api03-{'x' * 20} and {ENV_SECRET}")
        span.set_attribute("gen_ai.usage.input_tokens", 12)  # a count, not a credential
        span.set_attribute("list", ["ok", ENV_SECRET])
        span.record_exception(RuntimeError(f"auth failed for {ENV_SECRET}"))
    (clean,) = memory.get_finished_spans()
    dump = everything([clean])
    assert ENV_SECRET not in dump and "sk-ant-api03" not in dump
    assert "hidden-by-its-name" not in dump and "abcdefghijklmnop" not in dump
    assert clean.attributes["gen_ai.usage.input_tokens"] == 12
    assert tuple(clean.attributes["list"]) == ("ok", "**********")
    assert clean.name == "call **********"


async def test_nothing_configured_means_no_sink_and_no_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    manager = groundswell.get_plugin_manager()
    manager.refresh_sinks("otel")
    await child.run(1)
    assert "otel" not in manager.sink_hub().names()
    with pytest.raises(ConfigurationError, match="no tracer provider"):
        groundswell_otel.instrument()


async def test_a_failing_exporter_never_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(InMemorySpanExporter):
        def export(self, spans: Any) -> Any:
            raise ConnectionError("collector is down")

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Broken()))
    groundswell_otel.instrument(provider)
    try:
        result = await child.run(4)
        assert groundswell.flush_sinks()
    finally:
        groundswell_otel.uninstrument()
    assert result.output == 8


async def test_long_content_stays_valid_json(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(groundswell_otel.CONTENT_ENV, "SPAN_ONLY")
    groundswell.get_plugin_manager().refresh_sinks("otel")
    long = "word " * 4000
    fake = FakeAnthropicAPI([text(long)])
    await Agent(name="verbose", system=long, client=fake.client()).run(long)
    (agent_span,) = [s for s in spans(exporter) if s.name == "invoke_agent verbose"]
    for key in (A.GEN_AI_INPUT_MESSAGES, A.GEN_AI_OUTPUT_MESSAGES, A.GEN_AI_SYSTEM_INSTRUCTIONS):
        parts = json.loads(agent_span.attributes[key])
        assert "truncated" in json.dumps(parts)


async def test_work_that_outlives_its_run_keeps_its_span_until_it_ends(
    exporter: InMemorySpanExporter,
) -> None:
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "late"

    @workflow(name="leaves-work")
    async def leaves_work(ctx: WorkflowContext) -> None:
        await asyncio.gather(ctx.step("slow", slow), ctx.step("fail", lambda: 1 / 0))

    with pytest.raises(groundswell.WorkflowError):
        await leaves_work.run()
    for i in range(12):  # more finished runs than the sink keeps
        await child.run(i)
    release.set()
    await asyncio.sleep(0.05)
    (slow_span,) = [s for s in spans(exporter) if s.name == "step slow"]
    assert slow_span.attributes[A.NODE_STATUS] == "completed"
    assert A.INCOMPLETE not in slow_span.attributes


def _started(run_id: str, node_id: str, parent_id: str | None, when: float) -> groundswell.Event:
    record = {"id": node_id, "type": "step", "name": node_id, "timestamp": when}
    return groundswell.Event("node_start", None, {**record, "parent_id": parent_id}, run_id)  # type: ignore[arg-type]


def _ended(run_id: str, node_id: str, when: float) -> groundswell.Event:
    record = {"id": node_id, "status": "completed", "ended_at": when, "metrics": {}}
    return groundswell.Event("node_end", None, {**record, "payload": {}, "error": None}, run_id)  # type: ignore[arg-type]


def test_runs_finishing_among_many_open_ones_keep_every_span_in_its_trace() -> None:
    """Many runs at once (events interleaved), finishing in any order: each span is in
    its run's trace under its parent; the newest finished runs are kept for late
    children, older ones forgotten, and runs still open are never forgotten."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sink = groundswell_otel.OTelSink(provider)
    runs = [f"run{i}" for i in range(40)]
    for i, run in enumerate(runs):
        sink.handle(_started(run, run, None, 1.0 + i))
    for i, run in enumerate(runs):
        sink.handle(_started(run, f"{run}-child", run, 2.0 + i))
    finishing, still_open = runs[:30], runs[30:]
    for run in reversed(finishing):  # the last started finishes first
        sink.handle(_ended(run, f"{run}-child", 3.0))
        sink.handle(_ended(run, run, 4.0))
    # A late child of a long-forgotten run has no parent left; one of the newest
    # finished runs, and one of a run still open, join their run's trace.
    for run in (finishing[-1], finishing[0], still_open[0]):
        sink.handle(_started(run, f"{run}-late", f"{run}-child", 5.0))
        sink.handle(_ended(run, f"{run}-late", 6.0))
    for run in still_open:
        sink.handle(_ended(run, f"{run}-child", 7.0))
        sink.handle(_ended(run, run, 8.0))
    sink.close()
    found = by_node(spans(memory))
    assert len(found) == 2 * len(runs) + 3
    for run in runs:
        root, kid = found[run], found[f"{run}-child"]
        assert root.parent is None and root.attributes[A.RUN_ID] == run
        assert kid.parent is not None and kid.parent.span_id == root.context.span_id
        assert kid.context.trace_id == root.context.trace_id
        assert A.INCOMPLETE not in kid.attributes and A.INCOMPLETE not in root.attributes
    forgotten = found[f"{finishing[-1]}-late"]
    assert forgotten.parent is None
    assert forgotten.context.trace_id != found[finishing[-1]].context.trace_id
    for run in (finishing[0], still_open[0]):
        late = found[f"{run}-late"]
        assert late.parent is not None
        assert late.parent.span_id == found[f"{run}-child"].context.span_id
        assert late.context.trace_id == found[run].context.trace_id


# -- each chat span's input: the conversation the model was sent on that turn -----------


def sent(messages: list[dict[str, Any]]) -> list[Any]:
    """A request's messages in the shape a chat span must show: tool results one
    ``tool`` message each, every other block a part (text, tool call with arguments)."""
    out: list[Any] = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append((message["role"], [("text", content)]))
            continue
        parts: list[Any] = []
        for block in content:
            if block["type"] == "tool_result":
                out.append(
                    ("tool", [("tool_call_response", block["tool_use_id"], block["content"])])
                )
            elif block["type"] == "tool_use":
                parts.append(("tool_call", block["id"], block["name"], block["input"]))
            else:
                parts.append(("text", block["text"]))
        if parts:
            out.append((message["role"], parts))
    return out


def shown(attribute: Any) -> list[Any]:
    """A span's gen_ai.input.messages in the same shape as `sent`."""
    out: list[Any] = []
    for message in json.loads(attribute):
        parts: list[Any] = []
        for part in message["parts"]:
            if part["type"] == "tool_call_response":
                parts.append((part["type"], part["id"], part["response"]))
            elif part["type"] == "tool_call":
                parts.append((part["type"], part["id"], part["name"], part["arguments"]))
            else:
                parts.append((part["type"], part["content"]))
        out.append((message["role"], parts))
    return out


def chat_spans(found: list[ReadableSpan]) -> list[ReadableSpan]:
    return sorted(
        (s for s in found if s.name.startswith("chat ") and s.kind is SpanKind.CLIENT),
        key=lambda s: s.start_time or 0,
    )


def capture_content(monkeypatch: pytest.MonkeyPatch, mode: str = "SPAN_ONLY") -> None:
    monkeypatch.setenv(groundswell_otel.CONTENT_ENV, mode)
    groundswell.get_plugin_manager().refresh_sinks("otel")


def read_page(n: int) -> str:
    """Read one page."""
    if n < 0:
        raise ValueError(f"there is no page {n}")
    return f"Page {n}: " + "lorem ipsum dolor sit amet " * 40


async def _pages_in_parallel() -> FakeAnthropicAPI:
    from groundswell.testing import tool_calls

    fake = FakeAnthropicAPI(
        [
            tool_calls(("read_page", {"n": 1}), ("read_page", {"n": -2}), text="Two at once."),
            tool_use("read_page", {"n": 3}),
            text("Pages read."),
        ]
    )
    agent = Agent(name="reader", tools=[read_page], client=fake.client())
    await agent.run(Prompt(user="Read the pages", data={"pages": [1, 2, 3]}))
    return fake


async def _a_budget_slides_the_window() -> FakeAnthropicAPI:
    from groundswell import TokenBudget

    fake = FakeAnthropicAPI([tool_use("read_page", {"n": n}) for n in range(1, 6)] + ["Done."])
    budget = TokenBudget(max_total=1_400, reserve_for_output=500)
    agent = Agent(name="reader", tools=[read_page], client=fake.client(), token_budget=budget)
    result = await agent.run("Read pages 1 to 5.")
    assert any(b.payload.get("removed") for b in result.tree.find(type="budget"))
    return fake


async def _a_budget_summarizes() -> FakeAnthropicAPI:
    from groundswell import TokenBudget
    from groundswell.budget.token_budget import SUMMARIZER_SYSTEM

    pages = iter(range(1, 7))

    def model(request: Any) -> Any:
        if SUMMARIZER_SYSTEM in str(request.system or "") or SUMMARIZER_SYSTEM in (
            request.last_user_text() or ""
        ):
            return text("Summary: pages were read.")
        n = next(pages, None)
        return tool_use("read_page", {"n": n}) if n is not None else text("Done.")

    fake = FakeAnthropicAPI(model)
    budget = TokenBudget(
        max_total=1_900, reserve_for_output=500, strategy="summarize", keep_last_turns=2
    )
    agent = Agent(name="reader", tools=[read_page], client=fake.client(), token_budget=budget)
    result = await agent.run("Read pages 1 to 6.")
    assert result.tree.find(type="summary"), "the budget never summarized"
    return fake


async def _a_reflection_retry_feeds_back() -> FakeAnthropicAPI:
    fake = FakeAnthropicAPI([text("not json"), json_reply({"score": 4})])
    agent = Agent(
        name="judge", client=fake.client(), reflection=ReflectionConfig(strategy="feedback")
    )
    await agent.run(Prompt(user="rate", data={"diff": "+1"}, response_format=Verdict))
    return fake


async def _an_llm_revision_changes_the_data() -> FakeAnthropicAPI:
    analysis = {
        "analysis": "Wrong data.",
        "should_retry": True,
        "guidance": "Use the smaller diff.",
        "revised_system": None,
        "revised_data_json": json.dumps({"diff": "+2"}),
    }
    fake = FakeAnthropicAPI([text("not json"), json_reply(analysis), json_reply({"score": 4})])
    agent = Agent(name="judge", client=fake.client(), enable_reflection=True)
    await agent.run(Prompt(user="rate", data={"diff": "+1"}, response_format=Verdict))
    return fake


async def _turns_run_out_and_the_note_follows_the_user_text() -> FakeAnthropicAPI:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 1}), "2"])
    agent = calculator(fake, max_turns=1, reflection=ReflectionConfig(strategy="feedback"))
    await agent.run("1 + 1?")
    return fake


async def _a_stop_hook_sends_the_agent_on() -> FakeAnthropicAPI:
    def not_yet(input_data: dict[str, Any], tool_use_id: str | None, ctx: Any) -> dict[str, Any]:
        if input_data["stop_hook_active"]:
            return {}
        return {"decision": "block", "reason": "Also cite a source."}

    fake = FakeAnthropicAPI([text("Paris"), text("Paris (source: atlas)")])
    agent = Agent(name="geo", client=fake.client(), hooks={"Stop": [{"hooks": [not_yet]}]})
    await agent.run("Capital?")
    return fake


@pytest.mark.parametrize(
    "scenario",
    [
        _pages_in_parallel,
        _a_budget_slides_the_window,
        _a_budget_summarizes,
        _a_reflection_retry_feeds_back,
        _an_llm_revision_changes_the_data,
        _turns_run_out_and_the_note_follows_the_user_text,
        _a_stop_hook_sends_the_agent_on,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
async def test_every_chat_span_shows_the_messages_its_request_sent(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, scenario: Any
) -> None:
    capture_content(monkeypatch)
    fake = await scenario()
    chats = chat_spans(spans(exporter))
    assert len(chats) == len(fake.requests) > 1
    for chat, request in zip(chats, fake.requests, strict=True):
        assert shown(chat.attributes[A.GEN_AI_INPUT_MESSAGES]) == sent(request.messages)
        assert A.INPUT_MESSAGES_OMITTED not in chat.attributes


async def test_chat_spans_carry_tool_results_and_tool_calls_with_their_arguments(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture_content(monkeypatch, "SPAN_AND_EVENT")
    fake = await _pages_in_parallel()
    first, second, _third = chat_spans(spans(exporter))
    calls = [b for b in fake.requests[1].messages[1]["content"] if b["type"] == "tool_use"]
    output = json.loads(first.attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert output == [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Two at once."},
                *(
                    {
                        "type": "tool_call",
                        "id": c["id"],
                        "name": "read_page",
                        "arguments": c["input"],
                    }
                    for c in calls
                ),
            ],
            "finish_reason": "tool_use",
        }
    ]
    messages = json.loads(second.attributes[A.GEN_AI_INPUT_MESSAGES])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[0]["parts"] == [
        {
            "type": "text",
            "content": 'Read the pages\n\n<data>\n{\n  "pages": [\n    1,\n    2,\n    3\n  ]\n}\n</data>',
        }
    ]
    page, failure = (m["parts"][0] for m in messages[2:])
    assert page["type"] == "tool_call_response" and page["id"] == calls[0]["id"]
    assert page["response"].startswith("Page 1: lorem")
    assert failure["id"] == calls[1]["id"] and "there is no page -2" in failure["response"]
    # SPAN_AND_EVENT: the input is repeated on the content event of the span's start.
    started, ended = [e for e in second.events if e.name == A.GEN_AI_CONTENT_EVENT]
    assert started.attributes[A.GEN_AI_INPUT_MESSAGES] == second.attributes[A.GEN_AI_INPUT_MESSAGES]
    assert A.GEN_AI_OUTPUT_MESSAGES in ended.attributes


async def test_chat_span_inputs_hold_no_secrets_and_no_introspection_results(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture_content(monkeypatch)

    def reveal(key: str, ctx: ToolContext) -> dict[str, str]:
        """Reveal configuration."""
        return {"note": f"password is {ctx.env['DB_PASSWORD']}", "api_key": "issued-key-0123456789"}

    fake = FakeAnthropicAPI(
        [
            tool_use("reveal", {"key": "x", "api_key": "plain-key-123456"}),
            tool_use("inspect_current_node", {}),
            text(f"done; key {FAKE_API_KEY}"),
            text("after"),
        ]
    )
    agent = Agent(
        name="leaky",
        tools=[reveal, "introspection"],
        env={"DB_PASSWORD": ENV_SECRET},
        client=fake.client(),
    )
    await agent.run(f"use {FAKE_API_KEY}")
    chats = chat_spans(spans(exporter))
    last = chats[-1].attributes[A.GEN_AI_INPUT_MESSAGES]
    assert "tool_call_response" in last and "issued-key" not in everything(chats)
    for secret in (FAKE_API_KEY, ENV_SECRET, "plain-key-123456", "issued-key-0123456789"):
        assert secret not in everything(chats)
    responses = [
        p["response"]
        for m in json.loads(last)
        for p in m["parts"]
        if p["type"] == "tool_call_response"
    ]
    assert responses[-1] == "[introspection result not captured]"


async def test_content_off_means_no_messages_on_chat_spans(exporter: InMemorySpanExporter) -> None:
    await _pages_in_parallel()
    for chat in chat_spans(spans(exporter)):
        assert not any(k in chat.attributes for k in CONTENT_KEYS)


async def test_a_continued_conversation_shows_its_own_turns_and_counts_the_earlier_ones(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture_content(monkeypatch)
    fake = FakeAnthropicAPI([text("Hi"), tool_use("add", {"a": 1, "b": 2}), text("3")])
    agent = calculator(fake)
    first = await agent.run("Hello")
    spans(exporter)  # the first run's spans, flushed
    exporter.clear()
    await agent.run("1 + 2?", message_history=first.messages)
    chats = chat_spans(spans(exporter))
    assert len(chats) == 2
    # The tree holds the earlier conversation's length, not its text: the span says so.
    for chat, request in zip(chats, fake.requests[1:], strict=True):
        assert chat.attributes[A.INPUT_MESSAGES_OMITTED] == 2
        assert shown(chat.attributes[A.GEN_AI_INPUT_MESSAGES]) == sent(request.messages[2:])


def diary_server() -> MCPServer:
    """An in-process MCP server whose progress and log messages quote a person's diary."""
    diary = MCPServer("diary")

    @diary.tool()
    async def read_diary(ctx: Context) -> str:
        """Read today's entry."""
        await ctx.report_progress(1, 2, "reading Ada's entry about the engine")
        await ctx.info("Ada wrote: the engine weaves algebraic patterns")
        return "An entry about the engine."

    return diary


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
@pytest.mark.parametrize("mode", [None, "SPAN_ONLY"])
async def test_event_text_from_servers_and_hooks_is_content(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, mode: str | None
) -> None:
    if mode is not None:
        capture_content(monkeypatch, mode)

    def cite(input_data: dict[str, Any], tool_use_id: str | None, ctx: Any) -> dict[str, Any]:
        if input_data["stop_hook_active"]:
            return {}
        return {"decision": "block", "reason": "Cite the diary of Ada."}

    fake = FakeAnthropicAPI(
        [tool_use("mcp__diary__read_diary", {}), text("About the engine."), text("(diary)")]
    )
    agent = Agent(
        name="reader",
        mcps=[diary_server()],
        hooks={"Stop": [{"hooks": [cite]}]},
        client=fake.client(),
    )
    await agent.run("What did Ada write?")
    found = spans(exporter)
    events = {e.name: dict(e.attributes or {}) for s in found for e in s.events}
    # What is not content is always there: the level, the progress, that a hook blocked.
    assert events["mcp_log"]["groundswell.level"] == "info"
    assert events["mcp_progress"]["groundswell.progress"] == 1
    assert "stop_blocked" in events
    texts = ("Cite the diary of Ada.", "reading Ada's entry", "Ada wrote: the engine")
    dump = everything(found)
    if mode is None:
        assert not any(t in dump for t in texts)
    else:
        assert events["stop_blocked"]["groundswell.reason"] == "Cite the diary of Ada."
        assert "reading Ada's entry" in events["mcp_progress"]["groundswell.message"]
        assert "Ada wrote: the engine" in events["mcp_log"]["groundswell.data"]
