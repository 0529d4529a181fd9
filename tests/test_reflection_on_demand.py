"""Reflection on demand: ``ctx.reflection.reflect()`` and ``trigger_reflection(reason)``.

Through the real SDK against the fake API; the reflection requests are counted there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    NodeType,
    PluginError,
    Prompt,
    ReflectionConfig,
    ReflectionContext,
    ReflectionResult,
    ReflectionStrategy,
    ResponseValidationError,
    WorkflowContext,
    WorkflowError,
    hookimpl,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, json_reply, text

REVIEWER = "You review a failed attempt"  # the llm strategy's own system prompt


class Verdict(BaseModel):
    approve: bool
    score: int


BAD = {"approve": True, "score": "high"}
JUDGE = Prompt(user="Judge this", data={"diff": "+1 line"}, response_format=Verdict)
ADVICE = {
    "analysis": "The score was a word.",
    "should_retry": True,
    "guidance": "Ask for a number from 0 to 10.",
    "revised_system": None,
    "revised_data_json": json.dumps({"scale": "0-10"}),
}


class Routed:
    """The judge's replies in order; every reflection request gets ``critic``."""

    def __init__(self, judge: list[Any], critic: Any = None) -> None:
        self.judge = iter(judge)
        self.critic = critic if critic is not None else json_reply(ADVICE)

    def __call__(self, request: MessagesRequest) -> Any:
        if REVIEWER in str(request.system or ""):
            return self.critic
        return next(self.judge)


def reflections_asked(fake: FakeAnthropicAPI) -> list[MessagesRequest]:
    return [r for r in fake.requests if REVIEWER in str(r.system or "")]


async def test_reflect_inside_except_analyses_the_failure_being_handled() -> None:
    fake = FakeAnthropicAPI(Routed([json_reply(BAD)]))
    judge = Agent(name="judge", model="claude-haiku-4-5", client=fake.client(max_retries=0))
    seen: dict[str, Any] = {}

    @workflow(name="review")  # reflection on failures is off: asking still works
    async def review(ctx: WorkflowContext) -> str:
        try:
            await ctx.step("judge", lambda: judge.prompt(JUDGE))
        except ResponseValidationError:
            advice = await ctx.reflection.reflect()
            seen["history"] = ctx.reflection.history
            return f"{advice.should_retry}: {advice.reason} {advice.revised_data}"
        return "judged"

    result = await review.run()

    assert result.output == (
        "True: The score was a word. Next attempt: Ask for a number from 0 to 10. {'scale': '0-10'}"
    )
    (asked,) = reflections_asked(fake)
    assert asked.model == "claude-haiku-4-5"  # the agent behind the failure
    assert "score: Input should be a valid integer" in asked.last_user_text()
    (failed_step,) = result.tree.find(type=NodeType.STEP)
    (reflection,) = result.tree.find(type=NodeType.REFLECTION)
    assert reflection.parent_id == result.node.id  # called from the workflow body
    assert reflection.payload["on_demand"] is True
    assert reflection.payload["failed_node_id"] == failed_step.id
    assert reflection.payload["strategy"] == "llm"
    (entry,) = seen["history"]
    assert (entry.resolution, entry.success, entry.node_id) == ("skip", None, reflection.id)
    assert [e["resolution"] for e in reflection.events if e["type"] == "resolved"] == ["skip"]


async def test_reflect_on_an_exception_inside_a_step_mounts_under_that_step() -> None:
    fake = FakeAnthropicAPI(Routed([json_reply(BAD)]))
    judge = Agent(name="judge", client=fake.client(max_retries=0))

    @workflow
    async def review(ctx: WorkflowContext) -> ReflectionResult:
        async def judge_or_advise() -> ReflectionResult:
            failure: Exception | None = None
            try:
                await judge.prompt(JUDGE)
            except ResponseValidationError as exc:
                failure = exc
            assert failure is not None
            return await ctx.reflection.reflect(failure)

        return await ctx.step("judge", judge_or_advise)

    result = await review.run()
    assert isinstance(result.output, ReflectionResult) and result.output.should_retry
    (step,) = result.tree.find(type=NodeType.STEP)
    assert [f"{c.type.value}:{c.status.value}" for c in step.children] == [
        "prompt:failed",
        "reflection:completed",
    ]
    failed_prompt, reflection = step.children
    assert reflection.payload["failed_node_id"] == failed_prompt.id
    assert len(reflections_asked(fake)) == 1


async def test_trigger_reflection_asks_about_a_concern_of_the_code() -> None:
    fake = FakeAnthropicAPI(Routed([text("A very long summary " * 40)]))
    writer = Agent(name="writer", client=fake.client(max_retries=0))

    @workflow(name="summarise")
    async def summarise(ctx: WorkflowContext) -> str:
        async def write() -> str:
            summary = await writer.prompt("Summarise the report")
            if len(summary) > 200:
                advice = await ctx.reflection.trigger_reflection(
                    f"the summary has {len(summary)} characters; the limit is 200"
                )
                return advice.reason
            return summary

        return await ctx.step("write", write)

    result = await summarise.run()
    assert result.output.startswith("The score was a word.")
    (asked,) = reflections_asked(fake)
    assert "the limit is 200" in asked.last_user_text()
    assert "ReflectionRequested" in asked.last_user_text()
    (step,) = result.tree.find(type=NodeType.STEP)
    (reflection,) = result.tree.find(type=NodeType.REFLECTION)
    assert reflection.parent_id == step.id and reflection.payload["failed_node_id"] == step.id
    assert reflection.payload["failure"]["type"] == "ReflectionRequested"


async def test_the_workflow_reflection_agent_answers_on_demand() -> None:
    critic_fake = FakeAnthropicAPI([json_reply(ADVICE)])
    critic = Agent(name="critic", client=critic_fake.client())

    @workflow(reflection_agent=critic)
    async def flow(ctx: WorkflowContext) -> str:
        advice = await ctx.reflection.trigger_reflection("the numbers do not add up")
        return advice.reason

    result = await flow.run()
    assert result.output.startswith("The score was a word.")
    assert len(critic_fake.requests) == 1
    assert "the numbers do not add up" in critic_fake.requests[0].last_user_text()


async def test_with_no_agent_to_ask_the_answer_is_the_feedback_and_the_tree_says_why() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> ReflectionResult:
        try:
            await ctx.step("parse", lambda: int("twelve"))
        except ValueError:
            return await ctx.reflection.reflect()
        raise AssertionError("unreachable")

    result = await flow.run()
    assert result.output == ReflectionResult(
        should_retry=True,
        reason="ValueError: invalid literal for int() with base 10: 'twelve'",
    )
    (reflection,) = result.tree.find(type=NodeType.REFLECTION)
    (fallback,) = [e for e in reflection.events if e["type"] == "strategy_fallback"]
    assert "no agent to ask" in fallback["reason"]


async def test_on_demand_reflection_runs_even_with_the_switch_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_WORKFLOW_REFLECTION", "0")
    critic_fake = FakeAnthropicAPI([json_reply(ADVICE)])
    critic = Agent(name="critic", client=critic_fake.client())

    @workflow(enable_reflection=True, reflection_agent=critic)
    async def flow(ctx: WorkflowContext) -> bool:
        return (await ctx.reflection.trigger_reflection("check this")).should_retry

    assert (await flow.run()).output is True
    assert len(critic_fake.requests) == 1


async def test_reflect_with_nothing_to_reflect_on_says_what_to_do() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        await ctx.reflection.reflect()

    with pytest.raises(WorkflowError) as caught:
        await flow.run()
    cause = caught.value.__cause__
    assert isinstance(cause, ConfigurationError)
    assert "inside an `except` block" in str(cause) and "trigger_reflection" in str(cause)


@pytest.mark.parametrize("reason", ["", "   ", None, 3])
async def test_trigger_reflection_needs_a_reason(reason: Any) -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        await ctx.reflection.trigger_reflection(reason)

    with pytest.raises(WorkflowError) as caught:
        await flow.run()
    assert isinstance(caught.value.__cause__, ConfigurationError)
    assert "needs the reason as a non-empty string" in str(caught.value.__cause__)


async def test_reflecting_after_the_run_ended_is_refused() -> None:
    kept: list[WorkflowContext] = []

    @workflow(name="done")
    async def flow(ctx: WorkflowContext) -> None:
        kept.append(ctx)

    await flow.run()
    with pytest.raises(ConfigurationError, match="workflow 'done' has already ended"):
        await kept[0].reflection.trigger_reflection("too late")


async def test_a_failing_strategy_of_your_own_is_a_plugin_error() -> None:
    class Broken:
        async def reflect(self, context: ReflectionContext) -> ReflectionResult:
            raise RuntimeError("strategy bug")

    class Plugin:
        @hookimpl
        def register_reflection_strategies(self) -> ReflectionStrategy:
            return ReflectionStrategy("broken-on-demand", Broken)

    @workflow(reflection=ReflectionConfig(strategy="broken-on-demand"))
    async def flow(ctx: WorkflowContext) -> None:
        await ctx.reflection.trigger_reflection("look at this")

    manager = groundswell.get_plugin_manager()
    manager.register(Plugin(), name="broken-on-demand")
    try:
        with pytest.raises(WorkflowError) as caught:
            await flow.run()
    finally:
        manager.unregister("broken-on-demand")
    cause = caught.value.__cause__
    assert isinstance(cause, PluginError) and "'broken-on-demand' failed" in str(cause)
    (reflection,) = caught.value.result.tree.find(type=NodeType.REFLECTION)  # type: ignore[union-attr]
    assert reflection.error is not None and reflection.error["message"] == "strategy bug"
