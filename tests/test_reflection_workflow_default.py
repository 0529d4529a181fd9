"""Workflow-level reflection by default: the failing agent's model reflects, a fallback says
why, entries say how they ended, and one environment variable switches it all off.

Through the real SDK against the fake API; the reflection requests are counted there.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from groundswell import (
    Agent,
    ConfigurationError,
    EventNode,
    NodeStatus,
    NodeType,
    Prompt,
    ReflectionConfig,
    ResponseValidationError,
    WorkflowContext,
    WorkflowError,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, error, json_reply

REVIEWER = "You review a failed attempt"  # the llm strategy's own system prompt


class Verdict(BaseModel):
    approve: bool
    score: int


GOOD = {"approve": True, "score": 7}
BAD = {"approve": True, "score": "high"}
JUDGE = Prompt(user="Judge this", data={"diff": "+1 line"}, response_format=Verdict)


def analysis(**fields: Any) -> dict[str, Any]:
    base = {
        "analysis": "The score was a word.",
        "should_retry": True,
        "guidance": "Give the score as a whole number.",
        "revised_system": None,
        "revised_data_json": None,
    }
    return {**base, **fields}


class Routed:
    """The judge's replies in order; every reflection request gets ``critic``."""

    def __init__(self, judge: list[Any], critic: Any = None) -> None:
        self.judge = iter(judge)
        self.critic = critic if critic is not None else json_reply(analysis())

    def __call__(self, request: MessagesRequest) -> Any:
        if REVIEWER in str(request.system or ""):
            return self.critic
        return next(self.judge)


def reflections_asked(fake: FakeAnthropicAPI) -> list[MessagesRequest]:
    return [r for r in fake.requests if REVIEWER in str(r.system or "")]


def shape(node: EventNode) -> list[str]:
    return [f"{c.type.value}:{c.name}:{c.status.value}" for c in node.children]


def events(node: EventNode, kind: str) -> list[dict[str, Any]]:
    return [e for e in node.events if e["type"] == kind]


async def test_a_failed_agent_step_is_reflected_on_by_that_agents_model_and_client() -> None:
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(GOOD)]))
    judge = Agent(name="judge", model="claude-haiku-4-5", client=fake.client(max_retries=0))
    told: list[str] = []

    @workflow(name="review", enable_reflection=True)  # no reflection_agent
    async def review(ctx: WorkflowContext) -> Verdict:
        async def ask() -> Verdict:
            last = ctx.reflection.last
            if last is not None:
                told.append(last.reason)
            return await judge.prompt(JUDGE)

        return await ctx.step("judge", ask)

    result = await review.run()

    assert result.output == Verdict(**GOOD)
    (asked,) = reflections_asked(fake)  # exactly one reflection request reached the API
    assert len(fake.requests) == 3
    assert asked.model == "claude-haiku-4-5"  # the failing agent's own model
    assert "score: Input should be a valid integer" in asked.last_user_text()
    assert told == ["The score was a word. Next attempt: Give the score as a whole number."]
    assert shape(result.node) == [
        "step:judge:failed",
        "reflection:judge:completed",
        "step:judge:completed",
    ]
    reflection = result.node.children[1]
    assert reflection.payload["strategy"] == "llm"
    assert events(reflection, "strategy_fallback") == []
    assert shape(reflection) == ["prompt:judge.reflection:completed"]


async def test_reflection_config_model_picks_the_reflecting_model() -> None:
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(GOOD)]))
    judge = Agent(name="judge", model="claude-sonnet-4-6", client=fake.client(max_retries=0))

    @workflow(reflection=ReflectionConfig(model="claude-haiku-4-5"))
    async def review(ctx: WorkflowContext) -> Verdict:
        return await ctx.step("judge", lambda: judge.prompt(JUDGE))

    await review.run()
    (asked,) = reflections_asked(fake)
    assert asked.model == "claude-haiku-4-5"
    assert [r.model for r in fake.requests if r is not asked] == ["claude-sonnet-4-6"] * 2


async def test_the_agent_of_a_child_workflow_inside_the_step_reflects() -> None:
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(GOOD)]))
    judge = Agent(name="judge", client=fake.client(max_retries=0))

    @workflow(name="inner")
    async def inner(ctx: WorkflowContext) -> Verdict:
        return await ctx.step("ask", lambda: judge.prompt(JUDGE))

    @workflow(name="outer", enable_reflection=True)
    async def outer(ctx: WorkflowContext) -> Verdict:
        async def run_inner() -> Verdict:
            return (await inner.run()).output

        return await ctx.step("inner", run_inner)

    result = await outer.run()
    assert result.output == Verdict(**GOOD)
    assert len(reflections_asked(fake)) == 1
    (reflection,) = result.tree.find(type=NodeType.REFLECTION)
    assert reflection.payload["strategy"] == "llm"


async def test_a_step_that_ran_no_agent_falls_back_to_feedback_and_says_why() -> None:
    calls = 0

    @workflow(name="load", enable_reflection=True)
    async def load(ctx: WorkflowContext) -> str:
        def read() -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise OSError("the disk was busy")
            return "rows"

        return await ctx.step("read", read)

    result = await load.run()
    assert result.output == "rows" and calls == 2
    (reflection,) = result.tree.find(type=NodeType.REFLECTION)
    assert reflection.payload["strategy"] == "feedback"
    (fallback,) = events(reflection, "strategy_fallback")
    assert fallback["wanted"] == "llm" and fallback["used"] == "feedback"
    assert "no agent to ask" in fallback["reason"] and "reflection_agent" in fallback["reason"]


async def test_the_analysis_call_failing_falls_back_to_a_plain_retry() -> None:
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(GOOD)], critic=error(500)))
    judge = Agent(name="judge", client=fake.client(max_retries=0))

    @workflow(enable_reflection=True)
    async def review(ctx: WorkflowContext) -> Verdict:
        return await ctx.step("judge", lambda: judge.prompt(JUDGE))

    result = await review.run()
    assert result.output == Verdict(**GOOD)
    assert len(reflections_asked(fake)) == 1
    (reflection,) = result.tree.find(type=NodeType.REFLECTION)
    (fallback,) = events(reflection, "strategy_fallback")
    assert fallback["error"]["type"] == "ModelAPIError"
    assert reflection.payload["strategy"] == "llm"
    assert result.tree.find(type=NodeType.STEP)[-1].status is NodeStatus.COMPLETED


# -- how each reflection ended --------------------------------------------------------


async def test_entries_say_the_retry_failed_then_succeeded() -> None:
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(BAD), json_reply(GOOD)]))
    judge = Agent(name="judge", client=fake.client(max_retries=0))
    history: list[Any] = []

    @workflow(enable_reflection=True)
    async def review(ctx: WorkflowContext) -> Verdict:
        verdict = await ctx.step("judge", lambda: judge.prompt(JUDGE))
        history.extend(ctx.reflection.history)
        return verdict

    result = await review.run()
    assert len(reflections_asked(fake)) == 2
    assert [(e.resolution, e.success) for e in history] == [("retry", False), ("retry", True)]
    nodes = result.tree.find(type=NodeType.REFLECTION)
    assert [events(n, "resolved")[-1]["success"] for n in nodes] == [False, True]
    # The second reflection was told how the first one went.
    assert "earlier_reflections" in reflections_asked(fake)[1].last_user_text()


async def test_a_reflection_that_gives_up_is_an_abort() -> None:
    critic = json_reply(analysis(should_retry=False, analysis="The input is missing."))
    fake = FakeAnthropicAPI(Routed([json_reply(BAD)], critic=critic))
    judge = Agent(name="judge", client=fake.client(max_retries=0))
    history: list[Any] = []

    @workflow(enable_reflection=True)
    async def review(ctx: WorkflowContext) -> Verdict:
        try:
            return await ctx.step("judge", lambda: judge.prompt(JUDGE))
        finally:
            history.extend(ctx.reflection.history)

    with pytest.raises(WorkflowError) as caught:
        await review.run()
    assert isinstance(caught.value.__cause__, ResponseValidationError)
    (entry,) = history
    assert (entry.resolution, entry.success) == ("abort", False)
    assert entry.reason.startswith("The input is missing.")
    (reflection,) = caught.value.result.tree.find(type=NodeType.REFLECTION)  # type: ignore[union-attr]
    (resolved,) = events(reflection, "resolved")
    assert (resolved["resolution"], resolved["success"]) == ("abort", False)


async def test_agent_level_entries_say_how_they_ended_too() -> None:
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(GOOD)]))
    judge = Agent(name="judge", enable_reflection=True, client=fake.client(max_retries=0))
    assert await judge.prompt(JUDGE) == Verdict(**GOOD)
    (entry,) = judge.reflection_history
    assert (entry.level, entry.resolution, entry.success) == ("agent", "retry", True)


# -- the process-wide switch ----------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
async def test_the_switch_turns_workflow_reflection_off_for_every_workflow(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUNDSWELL_WORKFLOW_REFLECTION", value)
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(GOOD)]))
    judge = Agent(name="judge", client=fake.client(max_retries=0))
    seen: dict[str, Any] = {}

    @workflow(name="review", enable_reflection=True)
    async def review(ctx: WorkflowContext) -> Verdict:
        seen["enabled"] = ctx.reflection.enabled
        await ctx.step("other", lambda: 1, reflection=ReflectionConfig(max_attempts=2))
        return await ctx.step("judge", lambda: judge.prompt(JUDGE))

    with pytest.raises(WorkflowError, match="failed at review/judge"):
        await review.run()
    assert seen["enabled"] is False
    assert len(fake.requests) == 1  # one attempt, no reflection request


async def test_the_switch_is_recorded_once_on_the_workflow_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_WORKFLOW_REFLECTION", "0")
    calls = 0

    @workflow(name="load", enable_reflection=True)
    async def load(ctx: WorkflowContext) -> None:
        def fail() -> None:
            nonlocal calls
            calls += 1
            raise OSError("the disk was busy")

        await ctx.step("first", lambda: None)
        await ctx.step("read", fail)

    with pytest.raises(WorkflowError) as caught:
        await load.run()
    assert calls == 1
    result = caught.value.result
    assert result is not None and result.tree.find(type=NodeType.REFLECTION) == []
    (off,) = events(result.node, "reflection_off")
    assert "GROUNDSWELL_WORKFLOW_REFLECTION" in off["reason"]


@pytest.mark.parametrize("value", ["1", "on", ""])
async def test_the_switch_on_or_empty_leaves_reflection_on(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUNDSWELL_WORKFLOW_REFLECTION", value)
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(GOOD)]))
    judge = Agent(name="judge", client=fake.client(max_retries=0))

    @workflow(enable_reflection=True)
    async def review(ctx: WorkflowContext) -> Verdict:
        return await ctx.step("judge", lambda: judge.prompt(JUDGE))

    assert (await review.run()).output == Verdict(**GOOD)
    assert len(reflections_asked(fake)) == 1


async def test_a_switch_value_that_means_nothing_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_WORKFLOW_REFLECTION", "sometimes")

    @workflow(enable_reflection=True)
    async def review(ctx: WorkflowContext) -> int:
        return await ctx.step("one", lambda: 1)

    with pytest.raises(WorkflowError) as caught:
        await review.run()
    cause = caught.value.__cause__
    assert isinstance(cause, ConfigurationError)
    assert "GROUNDSWELL_WORKFLOW_REFLECTION='sometimes'" in str(cause)
    assert "0, false, no or off" in str(cause)


async def test_the_switch_leaves_agent_level_reflection_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_WORKFLOW_REFLECTION", "0")
    fake = FakeAnthropicAPI(Routed([json_reply(BAD), json_reply(GOOD)]))
    judge = Agent(name="judge", enable_reflection=True, client=fake.client(max_retries=0))

    @workflow(enable_reflection=True)
    async def review(ctx: WorkflowContext) -> Verdict:
        return await ctx.step("judge", lambda: judge.prompt(JUDGE))

    result = await review.run()
    assert result.output == Verdict(**GOOD)
    assert len(reflections_asked(fake)) == 1
    (reflection,) = result.tree.find(type=NodeType.REFLECTION)
    assert reflection.payload["level"] == "agent"
