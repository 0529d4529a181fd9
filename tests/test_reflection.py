"""Reflection at workflow, agent and prompt level, through the real SDK and the fake API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    EventNode,
    ModelAPIError,
    NodeStatus,
    NodeType,
    Prompt,
    PromptOverrides,
    ReflectionConfig,
    ReflectionContext,
    ReflectionResult,
    ReflectionStrategy,
    ResponseValidationError,
    WorkflowContext,
    WorkflowError,
    hookimpl,
    is_recoverable,
    workflow,
)
from groundswell.plugins.manager import reset_plugin_manager
from groundswell.testing import FakeAnthropicAPI, error, json_reply, text, tool_use

FEEDBACK = ReflectionConfig(strategy="feedback")


class Verdict(BaseModel):
    approve: bool
    score: int


GOOD = {"approve": True, "score": 7}
BAD = {"approve": True, "score": "high"}  # score is not an int


def analysis(**fields: Any) -> dict[str, Any]:
    base = {
        "analysis": "The score was a word.",
        "should_retry": True,
        "guidance": "Give the score as a whole number.",
        "revised_system": None,
        "revised_data_json": None,
    }
    return {**base, **fields}


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "judge")
    return Agent(client=fake.client(max_retries=kw.pop("max_retries", 2)), **kw)


def shape(node: EventNode) -> list[str]:
    return [f"{c.type.value}:{c.name}:{c.status.value}" for c in node.children]


JUDGE = Prompt(user="Judge this", data={"diff": "+1 line"}, response_format=Verdict)


# -- workflow level -----------------------------------------------------------------


async def test_failed_step_is_reflected_on_then_retried() -> None:
    calls: list[int] = []

    @workflow(name="review", enable_reflection=True)
    async def review(ctx: WorkflowContext) -> str:
        async def flaky() -> str:
            calls.append(ctx.reflection.attempt)
            if len(calls) == 1:
                raise ValueError("the service was busy")
            last = ctx.reflection.last
            assert last is not None
            return f"ok after: {last.reason}"

        return await ctx.step("fetch", flaky)

    result = await review.run()
    assert result.output == "ok after: ValueError: the service was busy"
    assert calls == [1, 2]
    assert shape(result.node) == [
        "step:fetch:failed",
        "reflection:fetch:completed",
        "step:fetch:completed",
    ]
    failed, reflection, retried = result.node.children
    assert failed.metrics["attempt"] == 1 and retried.metrics["attempt"] == 2
    assert failed.error is not None and failed.error["message"] == "the service was busy"
    assert reflection.payload["failure"]["message"] == "the service was busy"
    # No reflection_agent: the default llm strategy falls back to feedback.
    assert reflection.payload["strategy"] == "feedback"
    assert reflection.payload["failed_node_id"] == failed.id
    assert reflection.payload["output"]["should_retry"] is True
    (entry,) = result.tree.find(type=NodeType.REFLECTION)
    assert entry is reflection


async def test_revision_from_the_llm_strategy_reaches_the_retried_step() -> None:
    fake = FakeAnthropicAPI(
        [json_reply(analysis(revised_data_json=json.dumps({"limit": 10}), analysis="Too many."))]
    )
    reviewer = agent_for(fake, name="reviewer")
    seen: list[Any] = []

    @workflow(name="batch", enable_reflection=True, reflection_agent=reviewer)
    async def batch(ctx: WorkflowContext, size: int) -> int:
        async def process() -> int:
            last = ctx.reflection.last
            limit = last.revised_data["limit"] if last is not None else size
            seen.append(limit)
            if limit > 50:
                raise RuntimeError(f"batch of {limit} is over the limit of 50")
            return limit

        return await ctx.step("process", process)

    result = await batch.run(500)
    assert result.output == 10 and seen == [500, 10]
    _failed, reflection, _retried = result.node.children
    assert reflection.payload["strategy"] == "llm"
    # The analysis is the reflection's own model call, inside the reflection node.
    (ask,) = reflection.children
    assert ask.type is NodeType.PROMPT and ask.name == "reviewer"
    assert [c.type for c in ask.children] == [NodeType.MODEL_CALL]
    request = fake.requests[0]
    assert "batch of 500 is over the limit of 50" in request.last_user_text()
    assert '"workflow_input"' in request.last_user_text()
    (entry,) = result.tree.find(type=NodeType.REFLECTION)
    assert result.node.children[2].status is NodeStatus.COMPLETED
    assert entry.payload["output"]["revised_data"] == {"limit": 10}


async def test_workflow_max_attempts_is_exact_and_the_last_error_is_raised() -> None:
    calls = 0

    @workflow(reflection=ReflectionConfig(max_attempts=3, strategy="feedback"))
    async def stubborn(ctx: WorkflowContext) -> None:
        def fail() -> None:
            nonlocal calls
            calls += 1
            raise KeyError(f"try {calls}")

        await ctx.step("fail", fail)

    with pytest.raises(WorkflowError) as caught:
        await stubborn.run()
    assert calls == 3
    tree_shape = shape(caught.value.result.node)  # type: ignore[union-attr]
    assert tree_shape == [
        "step:fail:failed",
        "reflection:fail:completed",
        "step:fail:failed",
        "reflection:fail:completed",
        "step:fail:failed",
    ]
    assert isinstance(caught.value.__cause__, KeyError)
    assert "try 3" in str(caught.value.__cause__)
    assert len(caught.value.result.node.children) == 5  # type: ignore[union-attr]


async def test_reflection_disabled_means_exactly_one_attempt() -> None:
    calls = 0

    @workflow
    async def plain(ctx: WorkflowContext) -> None:
        def fail() -> None:
            nonlocal calls
            calls += 1
            raise ValueError("no")

        await ctx.step("fail", fail)

    with pytest.raises(WorkflowError):
        await plain.run()
    assert calls == 1

    fake = FakeAnthropicAPI([json_reply(BAD)])
    with pytest.raises(ResponseValidationError):
        await agent_for(fake).prompt(JUDGE)
    assert len(fake.requests) == 1


async def test_step_level_reflection_setting_wins_over_the_workflow() -> None:
    calls: dict[str, int] = {"on": 0, "off": 0}

    @workflow(enable_reflection=True)
    async def mixed(ctx: WorkflowContext) -> None:
        def flaky(which: str) -> Any:
            def run() -> str:
                calls[which] += 1
                if calls[which] == 1:
                    raise ValueError(which)
                return which

            return run

        await ctx.step("on", flaky("on"), reflection=ReflectionConfig(max_attempts=2))
        await ctx.step("off", flaky("off"), reflection=False)

    with pytest.raises(WorkflowError, match="failed at mixed/off"):
        await mixed.run()
    assert calls == {"on": 2, "off": 1}


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (error(401), 401),
        (error(403), 403),
        (error(402, type="billing_error"), 402),
        (error(400, "max_tokens: too large"), 400),
    ],
)
async def test_non_recoverable_api_errors_are_never_reflected_on(reply: Any, status: int) -> None:
    fake = FakeAnthropicAPI([reply])
    agent = agent_for(fake, enable_reflection=True)

    @workflow(enable_reflection=True)
    async def wf(ctx: WorkflowContext) -> Any:
        return await ctx.step("judge", lambda: agent.prompt(JUDGE))

    with pytest.raises(WorkflowError) as caught:
        await wf.run()
    assert isinstance(caught.value.__cause__, ModelAPIError)
    assert caught.value.__cause__.status_code == status
    assert len(fake.requests) == 1
    tree = caught.value.result.tree  # type: ignore[union-attr]
    assert tree.find(type=NodeType.REFLECTION) == []
    assert len(tree.find(type=NodeType.STEP)) == 1


async def test_rate_limit_left_after_the_sdk_retries_is_not_reflected_on() -> None:
    fake = FakeAnthropicAPI([error(429, retry_after=0) for _ in range(3)])
    agent = agent_for(fake, enable_reflection=True, max_retries=2)

    @workflow(enable_reflection=True)
    async def wf(ctx: WorkflowContext) -> Any:
        return await ctx.step("judge", lambda: agent.prompt(JUDGE))

    with pytest.raises(WorkflowError) as caught:
        await wf.run()
    cause = caught.value.__cause__
    assert isinstance(cause, ModelAPIError) and cause.status_code == 429
    assert cause.error_type == "rate_limit_error"
    assert len(fake.requests) == 3  # the SDK's own two retries, and no more
    assert caught.value.result.tree.find(type=NodeType.REFLECTION) == []  # type: ignore[union-attr]


async def test_server_errors_after_the_sdk_retries_are_reflected_on_at_workflow_level() -> None:
    fake = FakeAnthropicAPI([error(529), json_reply(GOOD)])
    agent = agent_for(fake, max_retries=0)

    @workflow(reflection=FEEDBACK)
    async def wf(ctx: WorkflowContext) -> Any:
        return await ctx.step("judge", lambda: agent.prompt(JUDGE))

    result = await wf.run()
    assert result.output == Verdict(**GOOD)
    assert [n.status for n in result.tree.find(type=NodeType.STEP)] == [
        NodeStatus.FAILED,
        NodeStatus.COMPLETED,
    ]


def test_is_recoverable_classifies_errors() -> None:
    assert is_recoverable(ValueError("x"))
    assert is_recoverable(ModelAPIError("busy", status_code=529, error_type="overloaded_error"))
    assert is_recoverable(ModelAPIError("no connection", status_code=None))
    assert not is_recoverable(ModelAPIError("key", status_code=401))
    assert not is_recoverable(ModelAPIError("limit", status_code=429))
    assert not is_recoverable(ModelAPIError("odd", status_code=500, error_type="billing_error"))
    assert not is_recoverable(ConfigurationError("bad"))
    assert not is_recoverable(asyncio.CancelledError())
    assert not is_recoverable(KeyboardInterrupt())
    wrapped = WorkflowError("child failed")
    wrapped.__cause__ = ModelAPIError("key", status_code=401)
    assert not is_recoverable(wrapped)
    assert not is_recoverable(ExceptionGroup("g", [ConfigurationError("bad")]))
    stand_in = RuntimeError("ModelAPIError: key")  # stands for a fatal error it replaced
    stand_in.recoverable = False  # type: ignore[attr-defined]
    assert not is_recoverable(stand_in)


async def test_cancellation_during_reflection_is_never_swallowed() -> None:
    calls = 0
    reflected = asyncio.Event()

    @workflow(reflection=ReflectionConfig(strategy="feedback", retry_delay=30))
    async def slow(ctx: WorkflowContext) -> None:
        def fail() -> None:
            nonlocal calls
            calls += 1
            raise ValueError("fail")

        await ctx.step("fail", fail)

    class Watch:
        def handle(self, event: groundswell.Event) -> None:
            if event.kind == "node_end" and event.node.type is NodeType.REFLECTION:
                loop.call_soon_threadsafe(reflected.set)

        def close(self) -> None:
            pass

    loop = asyncio.get_running_loop()

    class Plugin:
        @hookimpl
        def register_event_sinks(self) -> groundswell.EventSink:
            return groundswell.EventSink("watch", Watch)

    manager = groundswell.get_plugin_manager()
    manager.register(Plugin(), name="watch-reflection")
    try:
        task = asyncio.create_task(slow.run())
        await asyncio.wait_for(reflected.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        manager.unregister("watch-reflection")
    assert calls == 1


async def test_an_awaitable_step_runs_once_and_says_why() -> None:
    async def fail() -> None:
        raise ValueError("once")

    @workflow(enable_reflection=True)
    async def wf(ctx: WorkflowContext) -> None:
        await ctx.step("once", fail())

    with pytest.raises(WorkflowError) as caught:
        await wf.run()
    (step,) = caught.value.result.tree.find(type=NodeType.STEP)  # type: ignore[union-attr]
    (event,) = [e for e in step.events if e["type"] == "reflection_skipped"]
    assert "pass a callable" in event["reason"]


async def test_nested_steps_of_one_workflow_do_not_multiply_attempts() -> None:
    calls = 0

    @workflow(reflection=ReflectionConfig(strategy="feedback", max_attempts=2))
    async def wf(ctx: WorkflowContext) -> None:
        def fail() -> None:
            nonlocal calls
            calls += 1
            raise ValueError("inner")

        async def outer() -> None:
            await ctx.step("inner", fail)

        await ctx.step("outer", outer)

    with pytest.raises(WorkflowError):
        await wf.run()
    assert calls == 2


# -- agent and prompt level -----------------------------------------------------------


async def test_schema_invalid_reply_is_fed_back_and_corrected() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(GOOD)])
    agent = agent_for(fake, reflection=FEEDBACK)

    @workflow
    async def wf(ctx: WorkflowContext) -> Verdict:
        return await ctx.step("judge", lambda: agent.prompt(JUDGE))

    result = await wf.run()
    assert result.output == Verdict(**GOOD)
    assert len(fake.requests) == 2
    second = fake.requests[1].messages
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert json.loads(second[1]["content"]) == BAD
    feedback = second[2]["content"]
    assert "score: Input should be a valid integer" in feedback
    assert "fits the Verdict schema" in feedback
    (step,) = result.tree.find(type=NodeType.STEP)
    assert shape(step) == [
        "prompt:judge:failed",
        "reflection:judge:completed",
        "prompt:judge:completed",
    ]
    first, reflection, second_attempt = step.children
    assert first.metrics["attempt"] == 1 and second_attempt.metrics["attempt"] == 2
    assert reflection.payload["level"] == "agent"
    assert [e.attempt for e in agent.reflection_history] == [1]
    assert agent.reflection_history[0].error["type"] == "ResponseValidationError"


async def test_llm_strategy_analyses_and_its_revision_is_applied() -> None:
    fake = FakeAnthropicAPI(
        [
            json_reply(BAD),
            json_reply(analysis(revised_system="Scores are integers from 0 to 10.")),
            json_reply(GOOD),
        ]
    )
    agent = agent_for(fake, system="Judge diffs.", enable_reflection=True)
    result = await agent.run(JUDGE)
    assert result.output == Verdict(**GOOD)
    ask, retry = fake.requests[1], fake.requests[2]
    assert "You review a failed attempt" in ask.system
    assert ask.output_schema is not None and "should_retry" in json.dumps(ask.output_schema)
    assert "score: Input should be a valid integer" in ask.last_user_text()
    assert retry.system == "Scores are integers from 0 to 10."
    assert "Reflection: The score was a word. Next attempt: Give the score" in (
        retry.last_user_text()
    )
    # Outside a workflow the attempts share one tree under a prompt node.
    root = result.tree.root
    assert root.type is NodeType.PROMPT and root.metrics["attempts"] == 2
    assert shape(root) == [
        "prompt:judge:failed",
        "reflection:judge:completed",
        "prompt:judge:completed",
    ]
    reflection = root.children[1]
    assert [f"{c.type.value}:{c.name}" for c in reflection.children] == ["prompt:judge.reflection"]
    assert result.node is root.children[2]


async def test_llm_strategy_deciding_not_to_retry_stops() -> None:
    fake = FakeAnthropicAPI(
        [json_reply(BAD), json_reply(analysis(should_retry=False, analysis="Hopeless."))]
    )
    agent = agent_for(fake, enable_reflection=True)
    with pytest.raises(ResponseValidationError):
        await agent.prompt(JUDGE)
    assert len(fake.requests) == 2
    (entry,) = agent.reflection_history
    assert entry.should_retry is False and entry.reason.startswith("Hopeless.")


CRITIC_SYSTEM = "You review a failed attempt"


class CriticFails:
    """The judge answers BAD then GOOD; the critic (the llm strategy's call) answers ``critic``."""

    def __init__(self, critic: Any) -> None:
        self.critic = critic
        self.judge = iter([json_reply(BAD), json_reply(GOOD)])

    def __call__(self, request: Any) -> Any:
        if CRITIC_SYSTEM in str(request.system or ""):
            return self.critic
        return next(self.judge)


@pytest.mark.parametrize(
    ("critic", "error_type", "critic_status"),
    [
        (error(500, "the critic's server is down"), "ModelAPIError", "failed"),
        (text("I think the score was wrong, sorry."), "ResponseValidationError", "failed"),
        # It answered, asking for a retry with nothing to apply.
        (json_reply(analysis(analysis=" ", guidance="")), "ValueError", "completed"),
    ],
    ids=["api-error", "garbage-json", "nothing-usable"],
)
async def test_a_failing_llm_critic_falls_back_to_feedback_and_the_prompt_succeeds(
    critic: Any, error_type: str, critic_status: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeAnthropicAPI(CriticFails(critic))
    agent = agent_for(fake, enable_reflection=True, max_retries=0)
    result = await agent.run(JUDGE)

    assert result.output == Verdict(**GOOD)
    ask, retry = fake.requests[1], fake.requests[2]
    assert CRITIC_SYSTEM in str(ask.system)
    # The retry is the feedback strategy's: the error fed back, no analysis.
    assert [m["role"] for m in retry.messages] == ["user", "assistant", "user"]
    feedback = retry.last_user_text()
    assert "score: Input should be a valid integer" in feedback and "Reflection:" not in feedback
    root = result.tree.root
    assert shape(root) == [
        "prompt:judge:failed",
        "reflection:judge:completed",
        "prompt:judge:completed",
    ]
    reflection = root.children[1]
    assert shape(reflection) == [f"prompt:judge.reflection:{critic_status}"]
    (event,) = [e for e in reflection.events if e["type"] == "strategy_fallback"]
    assert event["wanted"] == "llm" and event["used"] == "feedback"
    assert event["error"]["type"] == error_type
    assert reflection.payload["output"]["should_retry"] is True
    (entry,) = agent.reflection_history
    assert entry.strategy == "feedback" and entry.node_id == reflection.id
    assert "retrying with feedback instead" in caplog.text


async def test_a_failing_workflow_critic_falls_back_to_feedback_and_the_step_runs_again() -> None:
    fake = FakeAnthropicAPI([error(500, "the critic's server is down")])
    critic = agent_for(fake, name="critic", max_retries=0)
    seen: list[str] = []

    @workflow(enable_reflection=True, reflection_agent=critic)
    async def wf(ctx: WorkflowContext) -> str:
        def load() -> str:
            last = ctx.reflection.last
            seen.append(last.strategy if last is not None else "-")
            if last is None:
                raise ValueError("the service was busy")
            return last.reason

        return await ctx.step("load", load)

    result = await wf.run()
    assert result.output == "ValueError: the service was busy" and seen == ["-", "feedback"]
    assert shape(result.node) == [
        "step:load:failed",
        "reflection:load:completed",
        "step:load:completed",
    ]
    reflection = result.node.children[1]
    assert [e["used"] for e in reflection.events if e["type"] == "strategy_fallback"] == [
        "feedback"
    ]


async def test_prompt_level_enable_on_a_non_reflecting_agent() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(GOOD), json_reply(BAD), json_reply(GOOD)])
    agent = agent_for(fake, reflection=ReflectionConfig(enabled=False, strategy="feedback"))
    assert agent.reflection is None
    verdict = await agent.prompt(JUDGE.with_(enable_reflection=True))
    assert verdict == Verdict(**GOOD) and len(fake.requests) == 2
    verdict = await agent.prompt(JUDGE, PromptOverrides(enable_reflection=True))
    assert verdict == Verdict(**GOOD) and len(fake.requests) == 4
    assert [e.level for e in agent.reflection_history] == ["prompt", "prompt"]


async def test_override_beats_prompt_beats_agent() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(BAD), json_reply(BAD)])
    agent = agent_for(fake, reflection=FEEDBACK)
    with pytest.raises(ResponseValidationError):
        await agent.prompt(JUDGE.with_(enable_reflection=False))
    assert len(fake.requests) == 1
    with pytest.raises(ResponseValidationError):
        await agent.prompt(
            JUDGE.with_(enable_reflection=True), PromptOverrides(enable_reflection=False)
        )
    assert len(fake.requests) == 2
    with pytest.raises(ResponseValidationError):
        await agent.prompt(JUDGE, PromptOverrides(reflection=ReflectionConfig(max_attempts=1)))
    assert len(fake.requests) == 3


async def test_agent_max_attempts_is_exact() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD) for _ in range(4)])
    agent = agent_for(fake, reflection=ReflectionConfig(max_attempts=4, strategy="feedback"))
    with pytest.raises(ResponseValidationError):
        await agent.run(JUDGE)
    assert len(fake.requests) == 4
    assert len(agent.reflection_history) == 3
    # Each retry carries only the latest failure, not a growing pile of them.
    assert [m["role"] for m in fake.requests[3].messages] == ["user", "assistant", "user"]


async def test_tool_loop_exhaustion_is_fed_back_in_the_user_turn() -> None:
    def lookup(key: str) -> str:
        """Look a key up."""
        return "nothing"

    fake = FakeAnthropicAPI(
        [tool_use("lookup", {"key": "a"}), tool_use("lookup", {"key": "b"}), text("done")]
    )
    agent = agent_for(fake, tools=[lookup], max_turns=2, reflection=FEEDBACK)
    assert await agent.prompt("Find it") == "done"
    retry = fake.requests[2]
    assert len(retry.messages) == 1
    assert "MaxTurnsExceeded" in retry.last_user_text()
    assert retry.last_user_text().startswith("Find it")


async def test_api_errors_are_not_reflected_at_agent_level() -> None:
    fake = FakeAnthropicAPI([error(401)])
    agent = agent_for(fake, reflection=FEEDBACK)
    with pytest.raises(ModelAPIError):
        await agent.prompt(JUDGE)
    assert len(fake.requests) == 1 and agent.reflection_history == []

    fake = FakeAnthropicAPI([error(429, retry_after=0) for _ in range(3)])
    agent = agent_for(fake, reflection=FEEDBACK)
    with pytest.raises(ModelAPIError, match="429"):
        await agent.prompt(JUDGE)
    assert len(fake.requests) == 3 and agent.reflection_history == []


async def test_stream_announces_the_retry() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(GOOD)])
    agent = agent_for(fake, reflection=FEEDBACK)
    events = [e async for e in agent.stream(JUDGE)]
    kinds = [e.type for e in events]
    assert "retry" in kinds and kinds[-1] == "result"
    assert kinds.index("retry") < len(kinds) - 1
    retry = next(e for e in events if e.type == "retry")
    assert retry.text is not None and "attempt 1 failed" in retry.text
    assert events[-1].result == Verdict(**GOOD)


async def test_explicit_reflect_critiques_and_revises() -> None:
    fake = FakeAnthropicAPI([json_reply(GOOD), json_reply({"approve": False, "score": 3})])
    agent = agent_for(fake)
    revised = await agent.reflect(JUDGE)
    assert revised == Verdict(approve=False, score=3)
    assert "A previous answer to this request was" in fake.requests[1].last_user_text()


# -- strategies as plugins ------------------------------------------------------------


class Plan(BaseModel):
    steps: list[str]


async def test_a_strategy_from_a_plugin_is_used_and_its_revision_applied() -> None:
    seen: list[ReflectionContext] = []

    class Shorten:
        async def reflect(self, context: ReflectionContext) -> ReflectionResult:
            seen.append(context)
            return ReflectionResult(should_retry=True, reason="fewer", revised_data={"n": 2})

    class Plugin:
        @hookimpl
        def register_reflection_strategies(self) -> ReflectionStrategy:
            return ReflectionStrategy("shorten", Shorten)

    fake = FakeAnthropicAPI([json_reply({"steps": 1}), json_reply({"steps": ["a", "b"]})])
    agent = agent_for(fake, reflection=ReflectionConfig(strategy="shorten"))
    manager = groundswell.get_plugin_manager()
    manager.register(Plugin(), name="shorten-plugin")
    try:
        plan = await agent.prompt(Prompt(user="Plan", data={"n": 5}, response_format=Plan))
    finally:
        manager.unregister("shorten-plugin")
    assert plan.steps == ["a", "b"]
    (context,) = seen
    assert context.level == "agent" and context.attempt == 1 and context.max_attempts == 3
    assert context.output == '{"steps": 1}' and context.failed_node.status is NodeStatus.FAILED
    assert '"n": 2' in fake.requests[1].messages[0]["content"]


async def test_a_failing_strategy_keeps_the_original_error_and_the_tree() -> None:
    class Broken:
        async def reflect(self, context: ReflectionContext) -> ReflectionResult:
            raise RuntimeError("strategy bug")

    class Plugin:
        @hookimpl
        def register_reflection_strategies(self) -> ReflectionStrategy:
            return ReflectionStrategy("broken", Broken)

    fake = FakeAnthropicAPI([json_reply(BAD)])
    agent = agent_for(fake, reflection=ReflectionConfig(strategy="broken"))
    manager = groundswell.get_plugin_manager()
    manager.register(Plugin(), name="broken-plugin")

    @workflow
    async def wf(ctx: WorkflowContext) -> Verdict:
        return await ctx.step("judge", lambda: agent.prompt(JUDGE))

    try:
        with pytest.raises(WorkflowError) as caught:
            await wf.run()
    finally:
        manager.unregister("broken-plugin")
    cause = caught.value.__cause__
    assert isinstance(cause, ResponseValidationError)
    assert any("strategy bug" in note for note in cause.__notes__)
    (step,) = caught.value.result.tree.find(type=NodeType.STEP)  # type: ignore[union-attr]
    assert shape(step) == ["prompt:judge:failed", "reflection:judge:failed"]
    failed_reflection = step.children[1]
    assert failed_reflection.error is not None
    assert failed_reflection.error["message"] == "strategy bug"
    assert len(fake.requests) == 1


async def test_unknown_strategy_is_a_configuration_error_naming_the_choices() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD)])
    agent = agent_for(fake, reflection=ReflectionConfig(strategy="nope"))
    with pytest.raises(ConfigurationError, match=r"no reflection strategy named 'nope'.*feedback"):
        await agent.prompt(JUDGE)


@pytest.fixture
def without_llm_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GROUNDSWELL_DISABLE_PLUGINS", "reflection")
    reset_plugin_manager()
    yield
    monkeypatch.delenv("GROUNDSWELL_DISABLE_PLUGINS")
    reset_plugin_manager()


async def test_default_strategy_falls_back_to_feedback_when_its_plugin_is_off(
    without_llm_plugin: None,
) -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(GOOD)])
    agent = agent_for(fake, enable_reflection=True)
    result = await agent.run(JUDGE)
    assert result.output == Verdict(**GOOD) and len(fake.requests) == 2
    (reflection,) = result.tree.find(type=NodeType.REFLECTION)
    assert reflection.payload["strategy"] == "feedback"
    (event,) = [e for e in reflection.events if e["type"] == "strategy_fallback"]
    assert event["wanted"] == "llm"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be an int from 1 to 10"),
        ({"max_attempts": 11}, "max_attempts must be an int from 1 to 10"),
        ({"max_attempts": True}, "max_attempts"),
        ({"retry_delay": -1}, "retry_delay must be seconds >= 0"),
        ({"strategy": ""}, "strategy must name a strategy"),
        ({"enabled": "yes"}, "enabled must be True or False"),
    ],
)
def test_bad_reflection_config_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ReflectionConfig(**kwargs)


def test_bad_reflection_arguments_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="Agent reflection must be a ReflectionConfig"):
        Agent(reflection=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="reflection must be a ReflectionConfig"):
        workflow(reflection={"max_attempts": 2})(_noop)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"reflection_agent must be a groundswell\.Agent"):
        workflow(reflection_agent="claude")(_noop)
    with pytest.raises(ConfigurationError, match="enable_reflection must be True, False or None"):
        Prompt(user="x", enable_reflection="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"PromptOverrides\.reflection"):
        PromptOverrides(reflection=True)  # type: ignore[arg-type]


async def _noop(ctx: WorkflowContext) -> None:
    return None


# -- edge cases -------------------------------------------------------------------------


async def test_override_config_beats_a_prompt_that_says_no() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(GOOD)])
    agent = agent_for(fake)
    verdict = await agent.prompt(
        JUDGE.with_(enable_reflection=False), PromptOverrides(reflection=FEEDBACK)
    )
    assert verdict == Verdict(**GOOD) and len(fake.requests) == 2


async def test_prompt_level_enable_on_a_plain_agent_uses_the_llm_strategy() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(analysis()), json_reply(GOOD)])
    agent = agent_for(fake)
    assert await agent.prompt(JUDGE.with_(enable_reflection=True)) == Verdict(**GOOD)
    assert len(fake.requests) == 3
    assert agent.reflection_history[0].strategy == "llm"


async def test_last_belongs_to_the_retried_step_only() -> None:
    seen: dict[str, Any] = {}
    tries = {"a": 0}

    @workflow(name="child")
    async def child(ctx: WorkflowContext) -> None:
        seen["child"] = (ctx.reflection.last, ctx.reflection.attempt, ctx.reflection.history)

    @workflow(name="parent", reflection=FEEDBACK)
    async def parent(ctx: WorkflowContext) -> None:
        async def a() -> None:
            tries["a"] += 1
            if tries["a"] == 1:
                raise ValueError("a failed")
            seen["a"] = ctx.reflection.last
            await child.run()

        async def b() -> None:
            seen["b"] = (ctx.reflection.last, ctx.reflection.attempt)

        await asyncio.gather(ctx.step("a", a), ctx.step("b", b))
        await ctx.step("after", b)
        seen["history"] = ctx.reflection.history

    await parent.run()
    assert seen["a"] is not None and seen["a"].name == "a"
    assert seen["b"] == (None, 1)
    assert seen["child"] == (None, 1, [])
    assert [e.name for e in seen["history"]] == ["a"]


async def test_workflow_history_includes_agent_level_reflections() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(GOOD)])
    agent = agent_for(fake, reflection=FEEDBACK)
    history: list[Any] = []

    @workflow
    async def wf(ctx: WorkflowContext) -> None:
        await ctx.step("judge", lambda: agent.prompt(JUDGE))
        history.extend(ctx.reflection.history)

    await wf.run()
    assert [(e.level, e.name) for e in history] == [("agent", "judge")]


async def test_llm_strategy_sees_and_revises_the_system_that_was_sent() -> None:
    fake = FakeAnthropicAPI(
        [json_reply(BAD), json_reply(analysis(revised_system="Integers only.")), json_reply(GOOD)]
    )
    agent = agent_for(fake, system="AGENT SYSTEM", enable_reflection=True)
    await agent.prompt(JUDGE, PromptOverrides(system="OVERRIDE SYSTEM"))
    asked = fake.requests[1].last_user_text()
    assert "OVERRIDE SYSTEM" in asked and "AGENT SYSTEM" not in asked
    assert fake.requests[2].system == "Integers only."


async def test_workflow_level_llm_should_retry_false_stops() -> None:
    fake = FakeAnthropicAPI([json_reply(analysis(should_retry=False, analysis="Cannot fix."))])
    critic = agent_for(fake, name="critic")
    calls = 0

    @workflow(enable_reflection=True, reflection_agent=critic)
    async def wf(ctx: WorkflowContext) -> None:
        def fail() -> None:
            nonlocal calls
            calls += 1
            raise ValueError("input file is missing")

        await ctx.step("load", fail)

    with pytest.raises(WorkflowError) as caught:
        await wf.run()
    assert calls == 1 and len(fake.requests) == 1
    assert shape(caught.value.result.node) == [  # type: ignore[union-attr]
        "step:load:failed",
        "reflection:load:completed",
    ]


@pytest.mark.parametrize(
    "make_result",
    [
        lambda: ReflectionResult(should_retry="no"),  # type: ignore[arg-type]
        lambda: ReflectionResult(should_retry=True, revised_system=""),
        lambda: ReflectionResult(should_retry=True, revised_data=object()),
        lambda: "retry please",
    ],
)
async def test_a_bad_strategy_result_keeps_the_original_error(make_result: Any) -> None:
    class Odd:
        async def reflect(self, context: ReflectionContext) -> Any:
            return make_result()

    class Plugin:
        @hookimpl
        def register_reflection_strategies(self) -> ReflectionStrategy:
            return ReflectionStrategy("odd", Odd)

    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(GOOD)])
    agent = agent_for(fake, reflection=ReflectionConfig(strategy="odd"))
    manager = groundswell.get_plugin_manager()
    manager.register(Plugin(), name="odd-plugin")
    try:
        with pytest.raises(ResponseValidationError) as caught:
            await agent.prompt(JUDGE)
    finally:
        manager.unregister("odd-plugin")
    assert len(fake.requests) == 1
    assert any("reflection (odd) could not help" in n for n in caught.value.__notes__)


async def test_a_failing_strategy_never_leaks_secrets_into_notes_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "sk-ant-test-very-secret-0001"

    class Leaky:
        async def reflect(self, context: ReflectionContext) -> ReflectionResult:
            raise RuntimeError(f"could not call with key {secret}")

    class Plugin:
        @hookimpl
        def register_reflection_strategies(self) -> ReflectionStrategy:
            return ReflectionStrategy("leaky", Leaky)

    fake = FakeAnthropicAPI([json_reply(BAD)])
    agent = Agent(
        name="judge",
        client=fake.client(api_key=secret),
        reflection=ReflectionConfig(strategy="leaky"),
    )
    manager = groundswell.get_plugin_manager()
    manager.register(Plugin(), name="leaky-plugin")
    try:
        with pytest.raises(ResponseValidationError) as caught:
            await agent.prompt(JUDGE)
    finally:
        manager.unregister("leaky-plugin")
    assert secret not in "".join(caught.value.__notes__)
    assert secret not in caplog.text and "could not help" in caplog.text


async def test_max_attempts_is_a_hard_cap_across_nested_levels() -> None:
    calls = 0
    cap = ReflectionConfig(strategy="feedback", max_attempts=3)

    @workflow(name="inner", reflection=cap)
    async def inner(ctx: WorkflowContext) -> None:
        def fail() -> None:
            nonlocal calls
            calls += 1
            raise ValueError("still broken")

        await ctx.step("work", fail)

    @workflow(name="outer", reflection=cap)
    async def outer(ctx: WorkflowContext) -> None:
        await ctx.step("run-inner", lambda: inner.run())

    with pytest.raises(WorkflowError):
        await outer.run()
    assert calls == 3

    fake = FakeAnthropicAPI([json_reply(BAD) for _ in range(3)])
    agent = agent_for(fake, reflection=cap)

    @workflow(reflection=cap)
    async def wf(ctx: WorkflowContext) -> None:
        await ctx.step("judge", lambda: agent.prompt(JUDGE))

    with pytest.raises(WorkflowError):
        await wf.run()
    assert len(fake.requests) == 3


async def test_a_corrected_answer_is_cached_for_the_original_request() -> None:
    fake = FakeAnthropicAPI([json_reply(BAD), json_reply(GOOD)])
    agent = agent_for(
        fake, reflection=FEEDBACK, cache=groundswell.get_cache("lru"), name="cached-judge"
    )
    first = await agent.prompt(JUDGE)
    second = await agent.run(JUDGE)
    assert first == second.output == Verdict(**GOOD)
    assert len(fake.requests) == 2  # the second call is a cache hit: no failing first attempt
    assert second.node.metrics["cache"] == "hit"


async def test_explicit_reflect_tree_shape() -> None:
    fake = FakeAnthropicAPI([json_reply(GOOD), json_reply(GOOD)])
    agent = agent_for(fake)

    @workflow
    async def wf(ctx: WorkflowContext) -> Verdict:
        return await ctx.step("review", lambda: agent.reflect(JUDGE))

    result = await wf.run()
    (step,) = result.tree.find(type=NodeType.STEP)
    (reflection,) = step.children
    assert reflection.type is NodeType.REFLECTION
    assert shape(reflection) == ["prompt:judge:completed", "prompt:judge:completed"]
