"""``agent.run_sync()`` and ``wf.run_sync()``: the same runs from code that is not async."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest

from groundswell import (
    Agent,
    ConfigurationError,
    NodeStatus,
    PromptResult,
    ToolContext,
    WorkflowContext,
    WorkflowError,
    WorkflowResult,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, tool_use, use_fake


@dataclass
class Shop:
    apples: int


def count_apples(ctx: ToolContext[Shop]) -> int:
    """How many apples there are."""
    return ctx.deps.apples


def test_agent_run_sync_returns_the_result_and_reuses_its_loop() -> None:
    fake = FakeAnthropicAPI(["Hello!", "Hello again!", "Bye."])
    agent = Agent(name="greeter", client=fake.client())
    first = agent.run_sync("Hi")
    assert isinstance(first, PromptResult)
    assert first.output == "Hello!" and first.node.status is NodeStatus.COMPLETED
    # The same client on a later call: its connections live on the thread's one loop.
    second = agent.run_sync("Hi again", message_history=first.messages)
    assert second.output == "Hello again!"
    assert [m["role"] for m in fake.requests[1].messages] == ["user", "assistant", "user"]
    assert agent.run_sync("Bye").output == "Bye."


def test_run_sync_takes_deps_and_sees_overrides_set_around_it() -> None:
    agent = Agent(name="grocer", tools=[count_apples], deps_type=Shop)
    with use_fake([tool_use("count_apples", {}), "Five."]) as fake:
        result = agent.run_sync("Apples?", deps=Shop(5))
    assert result.output == "Five."
    assert fake.requests[1].latest_tool_results()[0]["content"] == "5"
    with pytest.raises(ConfigurationError, match="deps must be a Shop"):
        agent.run_sync("Apples?", deps=5)  # type: ignore[arg-type]


def test_run_sync_raises_what_the_run_raises() -> None:
    fake = FakeAnthropicAPI([])  # no reply: the fake answers with an API error
    agent = Agent(name="mute", client=fake.client(max_retries=0))
    with pytest.raises(Exception, match="no reply left"):
        agent.run_sync("Hi")


def test_workflow_run_sync_returns_the_workflow_result() -> None:
    fake = FakeAnthropicAPI(["Approve."])
    judge = Agent(name="judge", client=fake.client())

    @workflow(name="review")
    async def review(ctx: WorkflowContext, diff: str) -> str:
        return await ctx.step("judge", lambda: judge.prompt(f"Review {diff}"))

    result = review.run_sync("+x")
    assert isinstance(result, WorkflowResult)
    assert result.output == "Approve." and result.status is NodeStatus.COMPLETED
    assert "step judge" in result.tree.render()

    @workflow(name="broken")
    async def broken(ctx: WorkflowContext) -> None:
        raise ValueError("nope")

    with pytest.raises(WorkflowError, match="nope"):
        broken.run_sync()


def test_run_sync_works_in_other_threads_each_with_its_own_loop() -> None:
    fake = FakeAnthropicAPI(lambda request: request.last_user_text().upper())
    agent = Agent(name="shouter", client=fake.client())
    answers: dict[int, str] = {}

    def work(i: int) -> None:
        answers[i] = agent.run_sync(f"t{i}").output
        answers[i] += agent.run_sync(f"u{i}").output

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {0: "T0U0", 1: "T1U1", 2: "T2U2"}


async def test_inside_a_running_loop_run_sync_names_the_async_call() -> None:
    fake = FakeAnthropicAPI(["never"])
    agent = Agent(name="asyncy", client=fake.client())

    @workflow(name="wf")
    async def wf(ctx: WorkflowContext) -> None:
        return None

    with pytest.raises(
        ConfigurationError,
        match=r"agent 'asyncy': run_sync\(\) cannot run inside a running event loop .*"
        r"use `await agent\.run\(\.\.\.\)` there instead",
    ):
        agent.run_sync("Hi")
    with pytest.raises(ConfigurationError, match=r"use `await wf\.run\(\.\.\.\)` there instead"):
        wf.run_sync()
    assert fake.requests == []  # nothing started (and no coroutine left un-awaited)
    await asyncio.sleep(0)


def test_run_sync_from_a_sync_tool_in_a_worker_thread() -> None:
    """A sync tool runs in a worker thread, where no loop runs: it may use run_sync."""
    inner_fake = FakeAnthropicAPI(["inner answer"])
    inner = Agent(name="inner", client=inner_fake.client())

    def ask_inner() -> str:
        """Ask the inner agent."""
        return inner.run_sync("Inner question").output

    outer_fake = FakeAnthropicAPI([tool_use("ask_inner", {}), "outer answer"])
    outer = Agent(name="outer", tools=[ask_inner], client=outer_fake.client())
    result: Any = outer.run_sync("Outer question")
    assert result.output == "outer answer"
    assert outer_fake.requests[1].latest_tool_results()[0]["content"] == "inner answer"


def test_an_agent_that_makes_its_client_works_on_every_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A client's connection pool belongs to the loop it first ran in; an agent
    # that made its own client must not carry it into the next asyncio.run.
    fake = FakeAnthropicAPI(["one", "two", "three"])

    async def ask(agent: Agent, text: str) -> str:
        try:
            return await agent.prompt(text)
        finally:
            await agent.client.close()  # this loop's client: its connections end with it

    with fake.serve() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-loops")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        # No retries, so a dead pool would fail the call instead of costing a retry.
        made = anthropic.AsyncAnthropic
        monkeypatch.setattr(anthropic, "AsyncAnthropic", lambda: made(max_retries=0))
        agent = Agent(name="looper")
        assert asyncio.run(ask(agent, "a")) == "one"
        assert asyncio.run(ask(agent, "b")) == "two"
        with asyncio.Runner() as runner:
            assert runner.run(ask(agent, "c")) == "three"
    assert [r.last_user_text() for r in fake.requests] == ["a", "b", "c"]
