"""Claude Agent SDK hooks: what each output field does, and how a failing hook is treated.

The rows of the "Hooks" tables in docs/tools.md name these tests (see
tests/test_hooks_sdk.py for the events, the inputs and the check of the tables).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from claude_agent_sdk import HookContext, HookMatcher
from mcp.server.mcpserver import MCPServer

from groundswell import Agent, ConfigurationError, HookStopped, PromptBlocked
from groundswell.testing import FakeAnthropicAPI, text, tool_calls, tool_use

from .test_hooks_sdk import add, agent_for, expert_tool, record, spec

Hook = dict[str, list[Any]]


def counting(ran: list[int]) -> Any:
    def add_up(a: int, b: int) -> int:
        """Add two integers."""
        ran.append(a + b)
        return a + b

    return add_up


def events_of(node: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in node.events if e["type"] == kind]


# -- the fields every output may hold -------------------------------------------------


async def test_output_continue_false_stops_the_run_before_the_next_tool() -> None:
    ran: list[int] = []
    stop = {"continue_": False, "stopReason": "budget spent"}
    fake = FakeAnthropicAPI(
        [tool_use("add_up", {"a": 1, "b": 2}), tool_use("add_up", {"a": 3, "b": 4}), text("x")]
    )
    agent = agent_for(fake, tools=[counting(ran)], hooks={"PostToolUse": [record([], stop)]})
    with pytest.raises(
        HookStopped, match="a PostToolUse hook stopped the run: budget spent"
    ) as info:
        await agent.run("go")
    assert (info.value.event, info.value.reason) == ("PostToolUse", "budget spent")
    assert ran == [3] and len(fake.requests) == 1  # the second tool never ran


async def test_output_continue_false_in_pre_tool_use_runs_no_tool_of_the_turn() -> None:
    ran: list[int] = []

    async def halt(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        return (
            {"continue": False, "stopReason": "halt"} if input_data["tool_input"]["a"] == 1 else {}
        )

    fake = FakeAnthropicAPI(
        [tool_calls(("add_up", {"a": 1, "b": 2}), ("add_up", {"a": 3, "b": 4})), text("x")]
    )
    agent = agent_for(fake, tools=[counting(ran)], hooks={"PreToolUse": [halt]})
    events: list[Any] = []

    async def consume() -> None:
        async for event in agent.stream("go"):
            events.append(event)

    with pytest.raises(HookStopped, match="halt"):
        await consume()
    assert ran == [] and len(fake.requests) == 1
    first, second = [e.tool_result for e in events if e.type == "tool_result"]
    assert first["is_error"] and first["content"] == "halt"
    assert second["content"] == "Not run: a PreToolUse hook stopped the run: halt"


async def test_output_continue_false_on_stop_keeps_the_answer() -> None:
    answer = {"continue_": False, "decision": "block", "reason": "more", "stopReason": "enough"}
    fake = FakeAnthropicAPI([text("Paris"), text("never")])
    result = await agent_for(fake, hooks={"Stop": [record([], answer)]}).run("Capital?")
    assert result.output == "Paris" and len(fake.requests) == 1
    (stopped,) = events_of(result.node, "hook_stopped")
    assert (stopped["hook"], stopped["reason"]) == ("Stop", "enough")


async def test_output_suppress_output_keeps_the_output_off_the_tree() -> None:
    loud = spec("PostToolUse", additionalContext="loud")
    quiet = {"suppressOutput": True, **spec("PostToolUse", additionalContext="quiet")}
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    hooks: Hook = {"PostToolUse": [record([], loud), record([], quiet)]}
    result = await agent_for(fake, tools=[add], hooks=hooks).run("x")
    tool = result.node.children[1]
    assert [e["output"] for e in events_of(tool, "hook_output")] == [loud]
    assert fake.requests[1].tool_results()[0]["content"] == "3\n\nloud\n\nquiet"


async def test_output_system_message_is_recorded_and_streamed() -> None:
    warn = {"systemMessage": "add is slow today"}
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")] * 2)
    agent = agent_for(fake, tools=[add], hooks={"PreToolUse": [record([], warn)]})
    events = [e async for e in agent.stream("x")]
    assert [e.text for e in events if e.type == "system_message"] == ["add is slow today"]
    result = await agent.run("x")
    (message,) = events_of(result.node.children[1], "hook_system_message")
    assert (message["hook"], message["message"]) == ("PreToolUse", "add is slow today")


async def test_output_async_is_no_decision() -> None:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    deferred = {"async_": True, "asyncTimeout": 5_000}
    result = await agent_for(fake, tools=[add], hooks={"PreToolUse": [record([], deferred)]}).run(
        "x"
    )
    assert fake.requests[1].tool_results()[0]["content"] == "3"
    (ignored,) = events_of(result.node.children[1], "hook_ignored")
    assert ignored["fields"] == ["asyncTimeout"]


async def test_output_hook_specific_output_for_another_event_is_a_failure() -> None:
    wrong = spec("PostToolUse", permissionDecision="deny")
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    result = await agent_for(fake, tools=[add], hooks={"PreToolUse": [record([], wrong)]}).run("x")
    assert fake.requests[1].tool_results()[0]["content"] == "3"  # no decision: it ran
    (failed,) = events_of(result.node.children[1], "hook_error")
    assert failed["error"] == "hookSpecificOutput is for 'PostToolUse', in a PreToolUse hook"


# -- event-specific fields -----------------------------------------------------------


async def test_output_pre_tool_use_permission_decisions() -> None:
    allow = spec("PreToolUse", permissionDecision="allow")
    deny = spec("PreToolUse", permissionDecision="deny", permissionDecisionReason="read-only")
    fake = FakeAnthropicAPI(
        [tool_calls(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})), text("ok")]
    )

    async def deny_big(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        return deny if input_data["tool_input"]["a"] == 3 else {}

    hooks: Hook = {"PreToolUse": [record([], allow), deny_big]}  # deny beats allow
    await agent_for(fake, tools=[add], hooks=hooks).prompt("x")
    allowed, denied = fake.requests[1].tool_results()
    assert allowed["content"] == "3"
    assert denied["content"] == "Tool call blocked by a PreToolUse hook: read-only"


async def test_output_pre_tool_use_updated_input() -> None:
    rewrite = spec("PreToolUse", updatedInput={"a": 100, "b": 1})
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("ok")])
    result = await agent_for(fake, tools=[add], hooks={"PreToolUse": [record([], rewrite)]}).run(
        "x"
    )
    assert fake.requests[1].tool_results()[0]["content"] == "101"
    (event,) = events_of(result.node.children[1], "input_rewritten")
    assert event["input"] == {"a": 100, "b": 1}


async def test_output_pre_tool_use_additional_context() -> None:
    note = spec("PreToolUse", additionalContext="numbers are in base 10")
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("ok")])
    await agent_for(fake, tools=[add], hooks={"PreToolUse": [record([], note)]}).prompt("x")
    assert fake.requests[1].tool_results()[0]["content"] == "3\n\nnumbers are in base 10"


async def test_output_post_tool_use_rewrites_the_result() -> None:
    redact = spec("PostToolUse", updatedToolOutput="[redacted]", additionalContext="secret")
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("ok")])
    await agent_for(fake, tools=[add], hooks={"PostToolUse": [record([], redact)]}).prompt("x")
    assert fake.requests[1].tool_results()[0]["content"] == "[redacted]\n\nsecret"


async def test_output_updated_mcp_tool_output_is_for_mcp_tools_only() -> None:
    server = MCPServer("calc")

    @server.tool()
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    swap = spec("PostToolUse", updatedMCPToolOutput="[hidden]")
    fake = FakeAnthropicAPI(
        [tool_calls(("mcp__calc__multiply", {"a": 6, "b": 7}), ("add", {"a": 1, "b": 2})),
         text("ok")]
    )  # fmt: skip
    agent = agent_for(fake, tools=[add], mcps=[server], hooks={"PostToolUse": [record([], swap)]})
    result = await agent.run("x")
    mcp, local = fake.requests[1].tool_results()
    assert (mcp["content"], local["content"]) == ("[hidden]", "3")
    (local_node,) = result.tree.find(name="add")
    assert events_of(local_node, "hook_ignored")[-1]["fields"] == ["updatedMCPToolOutput"]


async def test_output_post_tool_use_block_sends_the_reason_to_the_model() -> None:
    block = {"decision": "block", "reason": "3 is unlucky; pick another"}
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("ok")])
    result = await agent_for(fake, tools=[add], hooks={"PostToolUse": [record([], block)]}).run("x")
    (seen,) = fake.requests[1].tool_results()
    assert seen["content"] == "3\n\n3 is unlucky; pick another" and "is_error" not in seen
    assert events_of(result.node.children[1], "tool_result_blocked")


async def test_output_post_tool_use_failure_context() -> None:
    def broken() -> str:
        """Fail."""
        raise RuntimeError("disk full")

    hint = spec("PostToolUseFailure", additionalContext="try again after cleanup")
    fake = FakeAnthropicAPI([tool_use("broken", {}), text("ok")])
    hooks: Hook = {"PostToolUseFailure": [record([], hint)]}
    await agent_for(fake, tools=[broken], hooks=hooks).prompt("x")
    (seen,) = fake.requests[1].tool_results()
    assert (
        seen["is_error"] and seen["content"] == "RuntimeError: disk full\n\ntry again after cleanup"
    )


async def test_output_session_title_is_recorded() -> None:
    titled = spec("UserPromptSubmit", sessionTitle="Maths")
    fake = FakeAnthropicAPI([text("ok")])
    result = await agent_for(fake, hooks={"UserPromptSubmit": [record([], titled)]}).run("1+1")
    assert [e["title"] for e in events_of(result.node, "session_title")] == ["Maths"]


async def test_output_suppress_original_prompt_keeps_the_prompt_out_of_the_error() -> None:
    block = {"decision": "block", "reason": "off topic",
             **spec("UserPromptSubmit", suppressOriginalPrompt=True)}  # fmt: skip
    agent = agent_for(FakeAnthropicAPI(), hooks={"UserPromptSubmit": [record([], block)]})
    with pytest.raises(PromptBlocked) as info:
        await agent.prompt("my private question")
    assert str(info.value) == "a UserPromptSubmit hook blocked the prompt: off topic"


async def test_output_stop_additional_context_sends_the_model_back() -> None:
    async def once(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        if input_data["stop_hook_active"]:
            return {}
        return spec("Stop", additionalContext="Also give the population.")

    fake = FakeAnthropicAPI([text("Paris"), text("Paris, 2.1 million")])
    assert await agent_for(fake, hooks={"Stop": [once]}).prompt("Capital?") == "Paris, 2.1 million"
    assert fake.requests[1].messages[-1]["content"] == "Also give the population."


async def test_output_subagent_stop_additional_context_sends_the_sub_agent_back() -> None:
    async def once(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        return (
            {} if input_data["stop_hook_active"] else spec("SubagentStop", additionalContext="Why?")
        )

    fake = FakeAnthropicAPI(
        [tool_use("ask_expert", {"q": "x"}), text("yes"), text("yes, because"), text("done")]
    )
    lead = agent_for(fake, name="lead", tools=[expert_tool(fake)], hooks={"SubagentStop": [once]})
    assert await lead.prompt("go") == "done"
    assert fake.requests[3].tool_results()[0]["content"] == "yes, because"


async def test_output_permission_request_interrupt_stops_the_run() -> None:
    ask = spec("PreToolUse", permissionDecision="ask")
    no = spec(
        "PermissionRequest", decision={"behavior": "deny", "message": "no", "interrupt": True}
    )
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("never")])
    hooks: Hook = {"PreToolUse": [record([], ask)], "PermissionRequest": [record([], no)]}
    with pytest.raises(HookStopped, match="PermissionRequest hook stopped the run: no"):
        await agent_for(fake, tools=[add], hooks=hooks).prompt("x")
    assert len(fake.requests) == 1


async def test_output_ignored_fields_are_recorded() -> None:
    start = spec("SessionStart", initialUserMessage="hi", watchPaths=["/x"], reloadSkills=True)
    ask = spec("PreToolUse", permissionDecision="defer")
    allow = spec(
        "PermissionRequest",
        decision={"behavior": "allow", "updatedPermissions": [{"type": "addRules"}]},
    )
    note = spec("Notification", additionalContext="ignored")
    fake = FakeAnthropicAPI([tool_calls(("add", {"a": 1, "b": 2})), text("ok")])
    hooks: Hook = {
        "SessionStart": [record([], start)],
        "PreToolUse": [record([], ask)],
        "PermissionRequest": [record([], allow)],
        "Notification": [record([], note)],
    }
    result = await agent_for(fake, tools=[add], hooks=hooks).run("x")
    assert fake.requests[0].messages[0]["content"] == "x"  # initialUserMessage: not used
    assert [e["fields"] for e in events_of(result.node, "hook_ignored")] == [
        ["initialUserMessage", "reloadSkills", "watchPaths"]
    ]
    tool = result.node.children[1]
    assert [e["fields"] for e in events_of(tool, "hook_ignored")] == [
        ["decision.updatedPermissions"]
    ]
    assert fake.requests[1].tool_results()[0]["content"] == "3"  # defer: PermissionRequest allowed


# -- failures ---------------------------------------------------------------------------


async def test_failure_a_raising_hook_lets_the_tool_run() -> None:
    async def broken(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        raise RuntimeError("policy service down")

    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    result = await agent_for(fake, tools=[add], hooks={"PreToolUse": [broken]}).run("x")
    assert fake.requests[1].tool_results()[0]["content"] == "3"
    (failed,) = events_of(result.node.children[1], "hook_error")
    assert failed["error"] == "RuntimeError: policy service down"
    assert failed["on_failure"] == "continue"


async def test_failure_on_failure_block_fails_closed() -> None:
    async def broken(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        raise RuntimeError("policy service down")

    async def silent(input_data: Any, tool_use_id: str | None, context: HookContext) -> None:
        return None  # a path with no return: a failure under "block"

    fake = FakeAnthropicAPI(
        [tool_calls(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})), text("ok")]
    )

    def pick(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        return (broken if input_data["tool_input"]["a"] == 1 else silent)(
            input_data, tool_use_id, context
        )

    hooks: Hook = {"PreToolUse": [HookMatcher(hooks=[pick], on_failure="block")]}
    await agent_for(fake, tools=[add], hooks=hooks).prompt("x")
    first, second = fake.requests[1].tool_results()
    assert first["is_error"] and "policy service down" in first["content"]
    assert second["is_error"] and "returned None" in second["content"]
    prompt_blocked = {"UserPromptSubmit": [HookMatcher(hooks=[broken], on_failure="block")]}
    with pytest.raises(PromptBlocked, match="policy service down"):
        await agent_for(FakeAnthropicAPI(), hooks=prompt_blocked).prompt("x")


async def test_failure_timeout_ends_a_slow_hook() -> None:
    async def slow(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        await asyncio.sleep(5)
        return spec("PreToolUse", permissionDecision="deny")

    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    hooks: Hook = {"PreToolUse": [HookMatcher(hooks=[slow], timeout=1)]}
    started = time.monotonic()
    result = await agent_for(fake, tools=[add], hooks=hooks).run("x")
    assert 0.9 <= time.monotonic() - started < 4
    assert fake.requests[1].tool_results()[0]["content"] == "3"  # a timeout is no decision
    (failed,) = events_of(result.node.children[1], "hook_error")
    assert failed["error"] == "timed out after 1s"
    closed = {"PreToolUse": [HookMatcher(hooks=[slow], timeout=0.2, on_failure="block")]}
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    await agent_for(fake, tools=[add], hooks=closed).prompt("x")
    assert "timed out after 0.2s" in fake.requests[1].tool_results()[0]["content"]


async def test_failure_a_plain_function_runs_off_the_loop_within_the_timeout() -> None:
    release = threading.Event()

    def blocking(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        release.wait(10)  # a policy service that never answers
        return spec("PreToolUse", permissionDecision="deny")

    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    ticker = asyncio.create_task(tick())
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    hooks: Hook = {"PreToolUse": [HookMatcher(hooks=[blocking], timeout=0.5)]}
    started = time.monotonic()
    try:
        result = await agent_for(fake, tools=[add], hooks=hooks).run("x")
        took = time.monotonic() - started
    finally:
        release.set()
        ticker.cancel()
    assert 0.4 <= took < 3
    assert len([t for t in ticks if t >= started]) >= 5  # the loop ran while the hook blocked
    assert fake.requests[1].tool_results()[0]["content"] == "3"  # a timeout is no decision
    (failed,) = events_of(result.node.children[1], "hook_error")
    assert failed["error"] == "timed out after 0.5s"


async def test_failure_on_failure_block_scrubs_the_error_the_model_sees() -> None:
    key = "sk-ant-api03-" + "Q7x" * 14

    async def leaky(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        raise RuntimeError(f"policy service refused key {key}")

    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("ok")])
    hooks: Hook = {"PreToolUse": [HookMatcher(hooks=[leaky], on_failure="block")]}
    await agent_for(fake, tools=[add], hooks=hooks).prompt("x")
    (blocked,) = fake.requests[1].tool_results()
    assert blocked["is_error"] and "policy service refused key" in blocked["content"]
    assert key not in str(fake.requests[1].body)


async def test_failure_an_answer_the_sdk_rejects_is_no_decision() -> None:
    wrong = spec("PreToolUse", permissionDecision="Deny")  # the SDK wants "deny"
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    result = await agent_for(fake, tools=[add], hooks={"PreToolUse": [record([], wrong)]}).run("x")
    assert fake.requests[1].tool_results()[0]["content"] == "3"
    (failed,) = events_of(result.node.children[1], "hook_error")
    assert "permissionDecision must be one of allow, ask, defer, deny" in failed["error"]


async def test_failure_on_failure_is_ignored_on_stop() -> None:
    async def broken(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        raise RuntimeError("oops")

    fake = FakeAnthropicAPI([text("Paris")])
    hooks: Hook = {"Stop": [HookMatcher(hooks=[broken], on_failure="block")]}
    assert await agent_for(fake, hooks=hooks).prompt("Capital?") == "Paris"
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("matcher", "message"),
    [
        (HookMatcher(hooks=[lambda d, t, c: {}], timeout=0), "timeout must be a number of seconds"),
        ({"hooks": [lambda d, t, c: {}], "on_failure": "fail"}, "on_failure must be 'continue'"),
        ({"hooks": [lambda d, t, c: {}], "timeuot": 5}, "unknown matcher key"),
    ],
)
def test_matcher_settings_are_checked(matcher: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Agent(name="x", hooks={"PreToolUse": [matcher]})
