"""Sessions recorded by the history sink from real runs against the fake API."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from groundswell_history import HistorySink, HistoryStore, default_url, set_task, task_signature
from groundswell_history import sink as history_sink

import groundswell
from groundswell import Agent, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, error, text, tool_use


def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"Sunny in {city}"


@pytest.fixture
def store(recording_store: HistoryStore) -> HistoryStore:
    return recording_store


async def test_a_session_with_its_turns_and_task_is_recorded(store: HistoryStore) -> None:
    fake = FakeAnthropicAPI([tool_use("lookup", {"city": "Oslo"}), text("Oslo is sunny.")])
    agent = Agent(name="weather", tools=[lookup], history=True, client=fake.client())

    @workflow
    async def forecast(ctx: WorkflowContext) -> str:
        async def ask() -> str:
            set_task(
                "Weather report", category="reports", file_patterns=["data/*.csv"], task_id="T-1"
            )
            return await agent.prompt("How is the weather in Oslo?")

        return await ctx.step("ask", ask)

    result = await forecast.run()
    assert groundswell.flush_sinks()
    (session,) = store.sessions("weather", include_iterations=True)
    assert session.status == "completed"
    assert session.id == result.tree.find(type=groundswell.NodeType.PROMPT)[0].id
    assert session.task_id == "T-1"
    assert session.task_signature == task_signature("Weather report", "reports", ["data/*.csv"])
    assert session.category == "reports" and session.file_patterns == ["data/*.csv"]
    assert session.output_summary == "Oslo is sunny."
    assert session.metadata["user"] == "How is the weather in Oslo?"
    assert session.run_id == result.tree.root.id  # type: ignore[union-attr]
    assert session.iterations is not None
    kinds = [(i["kind"], i["name"]) for i in session.iterations]
    assert kinds[1] == ("tool_call", "lookup")
    assert [k for k, _ in kinds] == ["model_turn", "tool_call", "model_turn"]
    assert session.iterations[1]["input_summary"] == '{"city": "Oslo"}'
    assert session.iterations[1]["output_summary"] == "Sunny in Oslo"
    assert session.iterations[0]["usage"]["input_tokens"] > 0


async def test_failed_sessions_and_agents_without_history(store: HistoryStore) -> None:
    fake = FakeAnthropicAPI([error(400, "bad request")])
    recorded = Agent(name="flaky", history=True, client=fake.client(max_retries=0))
    with pytest.raises(groundswell.ModelAPIError):
        await recorded.prompt("hi")
    quiet = Agent(name="quiet", client=FakeAnthropicAPI([text("ok")]).client())
    await quiet.prompt("hi")
    assert groundswell.flush_sinks()
    (session,) = store.sessions("flaky", include_iterations=True)
    # GROUNDSWELL_HISTORY_URL records every agent; otherwise only history=True ones.
    everyone = "GROUNDSWELL_HISTORY_URL" in os.environ
    assert len(store.sessions("quiet")) == (1 if everyone else 0)
    assert session.status == "failed"
    assert session.error is not None and "ModelAPIError" in session.error
    assert session.iterations and session.iterations[0]["status"] == "failed"


async def test_a_sub_agent_inside_a_tool_is_part_of_the_session(store: HistoryStore) -> None:
    fake = FakeAnthropicAPI(
        [tool_use("consult", {"question": "q"}), text("inner answer"), text("outer answer")]
    )
    inner = Agent(name="inner", history=True, client=fake.client())

    async def consult(question: str) -> str:
        """Ask the inner agent."""
        return await inner.prompt(question)

    outer = Agent(name="outer", tools=[consult], history=True, client=fake.client())
    assert await outer.prompt("go") == "outer answer"
    assert groundswell.flush_sinks()
    assert len(store.sessions("outer")) == 1
    assert store.sessions("inner") == []  # nested: not a session of its own


async def test_the_url_variable_records_every_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'all.db'}"
    monkeypatch.setenv("GROUNDSWELL_HISTORY_URL", url)
    manager = groundswell.get_plugin_manager()
    manager.refresh_sinks("history")
    try:
        agent = Agent(name="anyone", client=FakeAnthropicAPI([text("ok")]).client())
        await agent.prompt("hi")
        assert groundswell.flush_sinks()
    finally:
        monkeypatch.delenv("GROUNDSWELL_HISTORY_URL")
        manager.refresh_sinks("history")
    with HistoryStore(url) as store:
        assert [s.status for s in store.sessions("anyone")] == ["completed"]


class FlakyStore:
    """A store that is down until told otherwise (writes go to a real store then)."""

    def __init__(self, real: HistoryStore) -> None:
        self.real, self.down, self.calls = real, True, 0

    def write_batch(self, operations: list[tuple[str, dict[str, object]]]) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("database is unreachable")
        self.real.write_batch(operations)

    def close(self) -> None:
        self.real.close()


async def test_an_outage_never_fails_a_run_and_nothing_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    real = HistoryStore(f"sqlite:///{tmp_path / 'h.db'}")
    flaky = FlakyStore(real)
    sink = HistorySink(url="sqlite:///unused.db", store=flaky)

    class Plugin:
        @groundswell.hookimpl
        def register_event_sinks(self) -> groundswell.EventSink:
            return groundswell.EventSink(name="flaky-history", factory=lambda: sink)

    manager = groundswell.get_plugin_manager()
    name = manager.register(Plugin(), name="flaky-history-plugin")
    try:
        agent = Agent(name="steady", history=True, client=FakeAnthropicAPI().client())
        with caplog.at_level(logging.WARNING, logger="groundswell.history"):
            for _ in range(3):
                assert await agent.prompt("hi")
            assert groundswell.flush_sinks()
        assert sink.pending > 0 and flaky.calls >= 1
        assert sink.last_error == "ConnectionError: database is unreachable"
        warnings = [r for r in caplog.records if "cannot write" in r.getMessage()]
        assert len(warnings) == 1  # once per outage, not once per batch
        flaky.down = False
        sink.flush()
        assert sink.pending == 0
    finally:
        manager.unregister(name)
    assert [s.status for s in real.sessions("steady")] == ["completed"] * 3


async def test_a_long_outage_keeps_the_newest_operations_and_counts_the_rest(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    add_sink: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(history_sink, "MAX_PENDING", 12)  # four sessions of three operations
    real = HistoryStore(f"sqlite:///{tmp_path / 'h.db'}")
    flaky = FlakyStore(real)
    sink = HistorySink(url="sqlite:///unused.db", record_all=True, store=flaky)
    add_sink(sink, name="flaky-history")
    agent = Agent(name="patient", client=FakeAnthropicAPI().client())
    with caplog.at_level(logging.WARNING, logger="groundswell.history"):
        for n in range(1, 11):
            assert await agent.prompt(f"prompt {n}")
        assert groundswell.flush_sinks()
    assert (sink.pending, sink.dropped) == (12, 18)
    warnings = [r.getMessage() for r in caplog.records if "dropping the oldest" in r.getMessage()]
    assert warnings == [
        "session history: over 12 operations wait for sqlite:///unused.db; dropping the "
        "oldest (counted in HistorySink.dropped)"
    ]
    flaky.down = False
    sink.flush()
    assert sink.pending == 0
    kept = sorted(s.metadata["user"] for s in real.sessions("patient"))
    assert kept == ["prompt 10", "prompt 7", "prompt 8", "prompt 9"]
    real.close()


async def test_an_agent_queries_only_its_own_past_sessions(store: HistoryStore) -> None:
    fake = FakeAnthropicAPI([text("first answer"), text("other agent's answer")])
    me = Agent(name="me", history=True, client=fake.client())
    other = Agent(name="other", history=True, client=fake.client())

    @workflow
    async def earlier(ctx: WorkflowContext) -> None:
        async def work() -> None:
            set_task("Summarize logs", category="ops")
            await me.prompt("Summarize the logs")
            await other.prompt("Summarize the logs")

        await ctx.step("work", work)

    await earlier.run()
    assert groundswell.flush_sinks()

    fake.add(
        tool_use(
            "query_past_sessions",
            {"title": "Summarize logs", "category": "ops", "include_iterations": True},
        ),
        text("I did this before."),
    )
    asker = Agent(name="me", tools=["history"], client=fake.client())
    result = await asker.run("What did I do last time?")
    (call,) = result.tree.find(type=groundswell.NodeType.TOOL_CALL)
    assert call.payload["toolset"] == "history"
    found = json.loads(call.payload["output"])
    assert found["agent_id"] == "me" and found["count"] == 1
    (session,) = found["sessions"]
    assert session["summary"] == "first answer"
    assert session["relevance_score"] >= 0.9  # same task, just now, completed
    assert session["iterations"][0]["kind"] == "model_turn"
    assert "other agent's answer" not in str(found)
    # There is no parameter to name another agent: the schema offers none.
    schema = fake.requests[-1].tools[0]["input_schema"]
    assert "agent_id" not in schema["properties"]
    assert schema["properties"]["limit"]["maximum"] == 20


async def test_one_refused_write_never_holds_back_the_sessions_after_it(
    history_store: HistoryStore, add_sink: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sink = HistorySink(url=history_store.url, record_all=True, store=history_store)
    add_sink(sink, name="every-agent-history")
    # PostgreSQL refuses NUL characters in text; SQLite stores them.
    names = ["before", "odd\x00name", "after"]
    with caplog.at_level(logging.WARNING, logger="groundswell.history"):
        for name in names:
            agent = Agent(name=name, client=FakeAnthropicAPI([text("ok")]).client())
            assert await agent.prompt("hi") == "ok"
        assert groundswell.flush_sinks()
    assert sink.pending == 0
    assert len(history_store.sessions("before")) == 1
    assert len(history_store.sessions("after")) == 1
    if history_store.engine.dialect.name == "postgresql":
        assert sink.dropped >= 1
        assert any("refused start_session" in r.getMessage() for r in caplog.records)


@pytest.fixture
def default_sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HistoryStore]:
    """The bundled history sink as installed, recording only ``Agent(history=True)``
    agents, into the default store (a file under a fresh ``GROUNDSWELL_HOME``)."""
    monkeypatch.delenv("GROUNDSWELL_HISTORY_URL", raising=False)
    outer_home = os.environ["GROUNDSWELL_HOME"]
    monkeypatch.setenv("GROUNDSWELL_HOME", str(tmp_path))
    manager = groundswell.get_plugin_manager()
    manager.refresh_sinks("history")
    assert "history" in manager.sink_hub().names()
    with HistoryStore(default_url()) as store:
        yield store
    monkeypatch.setenv("GROUNDSWELL_HOME", outer_home)
    manager.refresh_sinks("history")


def delivered_to_history() -> int:
    assert groundswell.flush_sinks()
    return groundswell.get_plugin_manager().sink_hub().stats()["history"]["delivered"]


async def test_runs_without_history_send_the_history_sink_nothing(
    default_sink: HistoryStore,
) -> None:
    quiet = Agent(name="quiet", client=FakeAnthropicAPI([text("ok")] * 2).client())

    @workflow
    async def plain(ctx: WorkflowContext) -> bool:
        for n in range(20):
            await ctx.step(f"s{n}", lambda: None)
        await ctx.step("ask", quiet.prompt("hi"))
        return ctx.event_tree.observed

    before = delivered_to_history()
    result = await plain.run()
    assert await quiet.prompt("hi outside a workflow") == "ok"
    assert result.output is False  # no sink takes the run: its changes go nowhere
    assert delivered_to_history() == before
    assert default_sink.sessions("quiet") == []

    loud = Agent(name="loud", history=True, client=FakeAnthropicAPI([text("ok")]).client())
    assert await loud.prompt("hi") == "ok"
    assert delivered_to_history() > before
    assert [s.status for s in default_sink.sessions("loud")] == ["completed"]


async def test_a_history_agent_late_in_a_workflow_is_recorded_with_its_task(
    default_sink: HistoryStore,
) -> None:
    fake = FakeAnthropicAPI([tool_use("lookup", {"city": "Oslo"}), text("a"), text("b")])
    agent = Agent(name="late", tools=[lookup], history=True, client=fake.client())

    async def branch(task: str) -> str:
        set_task(f"Task {task}", category="c", task_id=task)
        await asyncio.sleep(0)  # both branches start, with their tasks, before either asks
        return await agent.prompt(f"do {task}")

    @workflow
    async def long(ctx: WorkflowContext) -> list[str]:
        for n in range(30):  # none of this reaches the history sink
            await ctx.step(f"s{n}", lambda: None)
        return list(await asyncio.gather(ctx.step("x", branch("X")), ctx.step("y", branch("Y"))))

    result = await long.run()
    assert groundswell.flush_sinks()
    sessions = {str(s.task_id): s for s in default_sink.sessions("late", include_iterations=True)}
    assert sorted(sessions) == ["X", "Y"]
    prompts = {p.id: p for p in result.tree.find(type=groundswell.NodeType.PROMPT)}
    for task, session in sessions.items():
        prompt = prompts[session.id]
        assert result.tree.get_node(prompt.parent_id or "").name == task.lower()
        assert session.task_signature == str(task_signature(f"Task {task}", "c"))
        assert session.run_id == result.node.id and session.status == "completed"
    turns = sorted(len(s.iterations or []) for s in sessions.values())
    assert turns == [1, 3]  # one branch used the tool: model turn, tool call, model turn


async def test_nested_history_agents_are_recorded_as_before(default_sink: HistoryStore) -> None:
    fake = FakeAnthropicAPI(
        [text("child answer"), tool_use("consult", {"question": "q"}), text("in"), text("out")]
    )
    recorded = Agent(name="recorded", history=True, client=fake.client())

    async def consult(question: str) -> str:
        """Ask the recorded agent."""
        return await recorded.prompt(question)

    plain = Agent(name="plain", tools=[consult], client=fake.client())

    @workflow(name="child")
    async def child(ctx: WorkflowContext) -> str:
        return str(await ctx.step("ask", recorded.prompt("from the child")))

    @workflow
    async def parent(ctx: WorkflowContext) -> str:
        async def delegate() -> str:
            set_task("Delegated", task_id="D-1")
            return str((await child.run()).output)

        first = await ctx.step("delegate", delegate)
        # Inside another agent's tool call: part of that prompt, not a session of its own.
        second = await ctx.step("plain", plain.prompt("go"))
        return f"{first} {second}"

    assert (await parent.run()).output == "child answer out"
    assert groundswell.flush_sinks()
    (session,) = default_sink.sessions("recorded")
    assert session.task_id == "D-1" and session.output_summary == "child answer"
    assert default_sink.sessions("plain") == []
