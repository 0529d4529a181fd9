"""Agents through the real anthropic SDK against the offline fake API."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    MaxTurnsExceeded,
    ModelAPIError,
    NodeType,
    Prompt,
    PromptBlocked,
    PromptOverrides,
    ResponseValidationError,
    Skill,
    Tool,
    ToolContext,
    WorkflowContext,
    workflow,
)
from groundswell.testing import (
    FakeAnthropicAPI,
    MessagesRequest,
    Reply,
    error,
    json_reply,
    text,
    tool_calls,
    tool_use,
)


class Verdict(BaseModel):
    approve: bool
    reason: str


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


async def slow_upper(word: str) -> str:
    """Upper-case a word, slowly."""
    await asyncio.sleep(0.05)
    return word.upper()


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "tester")
    return Agent(client=fake.client(max_retries=kw.pop("max_retries", 2)), **kw)


def shape(node: groundswell.EventNode) -> list[str]:
    return [f"{c.type.value}:{c.name}" for c in node.children]


async def test_plain_text_prompt_records_a_root_outside_any_workflow() -> None:
    fake = FakeAnthropicAPI([text("Paris")])
    agent = agent_for(fake, system="Answer briefly.")
    result = await agent.run("Capital of France?")
    assert result.output == "Paris" and result.turns == 1
    assert result.tree.root is result.node and result.node.type is NodeType.PROMPT
    assert shape(result.node) == ["model_call:claude-sonnet-4-6"]
    assert result.node.metrics["usage"]["input_tokens"] > 0
    (request,) = fake.requests
    assert request.body["system"] == "Answer briefly."
    assert request.messages == [{"role": "user", "content": "Capital of France?"}]


async def test_data_renders_deterministically_into_the_user_turn() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b")])
    agent = agent_for(fake)
    await agent.prompt(Prompt(user="Judge", data={"b": 2, "a": [1, {"z": 0, "y": 1}]}))
    await agent.prompt(Prompt(user="Judge", data={"a": [1, {"y": 1, "z": 0}], "b": 2}))
    first, second = (r.messages[0]["content"] for r in fake.requests)
    assert first == second
    assert (
        first
        == 'Judge\n\n<data>\n{\n  "a": [\n    1,\n    {\n      "y": 1,\n      "z": 0\n    }\n  ],\n  "b": 2\n}\n</data>'
    )


async def test_structured_output_sends_the_schema_and_validates_the_reply() -> None:
    fake = FakeAnthropicAPI([json_reply({"approve": True, "reason": "clean diff"})])
    verdict = await agent_for(fake).prompt(Prompt(user="Judge", response_format=Verdict))
    assert verdict == Verdict(approve=True, reason="clean diff")
    fmt = fake.requests[0].body["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    assert set(fmt["schema"]["properties"]) == {"approve", "reason"}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("not json at all", "Invalid JSON"),
        ('{"approve": "maybe"}', "approve: Input should be a valid boolean"),
    ],
)
async def test_invalid_structured_output_is_a_validation_error(reply: str, message: str) -> None:
    fake = FakeAnthropicAPI([text(reply)])
    with pytest.raises(ResponseValidationError) as info:
        await agent_for(fake, name="judge").prompt(Prompt(user="Judge", response_format=Verdict))
    assert message in str(info.value) and info.value.raw == reply and info.value.errors
    assert "Verdict" in str(info.value)


async def test_multi_turn_tools_with_schema_from_signature_and_docstring() -> None:
    fake = FakeAnthropicAPI(
        [tool_use("add", {"a": 2, "b": 3}), tool_use("add", {"a": 5, "b": 5}), text("10")]
    )
    result = await agent_for(fake, tools=[add]).run("2+3, then double")
    assert result.output == "10" and result.turns == 3
    (definition,) = fake.requests[0].tools
    assert definition["description"] == "Add two integers."
    assert definition["input_schema"]["properties"]["a"] == {
        "description": "The first number.",
        "type": "integer",
    }
    assert definition["input_schema"]["required"] == ["a", "b"]
    assert fake.requests[1].tool_results()[0]["content"] == "5"
    assert fake.requests[2].tool_results()[1]["content"] == "10"
    assert shape(result.node) == [
        "model_call:claude-sonnet-4-6", "tool_call:add",
        "model_call:claude-sonnet-4-6", "tool_call:add",
        "model_call:claude-sonnet-4-6",
    ]  # fmt: skip
    call = result.node.children[1]
    assert call.payload["input"] == {"a": 2, "b": 3} and call.payload["output"] == "5"


async def test_parallel_tool_calls_run_concurrently() -> None:
    calls = tool_calls(*(("gated_upper", {"word": w}) for w in ["a", "b", "c", "d"]))
    fake = FakeAnthropicAPI([calls, text("done")])
    running: set[str] = set()
    all_in = asyncio.Event()

    async def gated_upper(word: str) -> str:
        """Upper-case a word once all four calls are running at the same time."""
        running.add(word)
        if len(running) == 4:
            all_in.set()
        # Calls run one after another would wait here forever (bounded by the timeout).
        await asyncio.wait_for(all_in.wait(), timeout=10)
        return word.upper()

    await agent_for(fake, tools=[gated_upper]).prompt("shout")
    assert running == {"a", "b", "c", "d"}
    assert [r["content"] for r in fake.requests[1].tool_results()] == ["A", "B", "C", "D"]


async def test_tool_exception_becomes_an_error_result_the_model_sees() -> None:
    def explode(x: int) -> int:
        """Always fails."""
        raise ValueError(f"bad x={x}")

    fake = FakeAnthropicAPI(
        [tool_use("explode", {"x": 1}), tool_use("explode", {"x": "nan"}), text("sorry")]
    )
    result = await agent_for(fake, tools=[explode]).run("try")
    assert result.output == "sorry"
    first, second = fake.requests[1].tool_results()[0], fake.requests[2].tool_results()[1]
    assert first["is_error"] is True and first["content"] == "ValueError: bad x=1"
    assert second["is_error"] is True and "invalid input for tool 'explode'" in second["content"]
    assert result.node.children[1].status == "failed"


async def test_tool_context_carries_env_but_os_environ_is_untouched() -> None:
    seen: dict[str, Any] = {}

    def whoami(ctx: ToolContext) -> str:
        """Report the environment."""
        seen.update(env=dict(ctx.env), agent=ctx.agent, node=ctx.node_id)
        return "ok"

    fake = FakeAnthropicAPI([tool_use("whoami", {}), text("done")])
    result = await agent_for(fake, tools=[whoami], env={"DEPLOY_TOKEN": "tok-123456789"}).run("go")
    assert seen["env"] == {"DEPLOY_TOKEN": "tok-123456789"} and seen["agent"] == "tester"
    assert seen["node"] == result.node.children[1].id
    assert "DEPLOY_TOKEN" not in os.environ
    assert fake.requests[0].tools[0]["input_schema"]["properties"] == {}


async def test_pre_tool_use_hook_can_deny_and_rewrite_input() -> None:
    async def guard(
        input_data: dict[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        if input_data["tool_input"].get("a") == 666:
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                           "permissionDecisionReason": "no devil numbers"}}  # fmt: skip
        if input_data["tool_input"].get("a") == 1:
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "updatedInput": {"a": 100, "b": 1},
                }
            }
        return {}

    fake = FakeAnthropicAPI(
        [tool_calls(("add", {"a": 666, "b": 0}), ("add", {"a": 1, "b": 1})), text("ok")]
    )
    hooks = {"PreToolUse": [{"matcher": "add|sub", "hooks": [guard]}]}
    result = await agent_for(fake, tools=[add], hooks=hooks).run("go")
    denied, rewritten = fake.requests[1].tool_results()
    assert denied["is_error"] and "no devil numbers" in denied["content"]
    assert rewritten["content"] == "101"
    assert [e["type"] for e in result.node.children[2].events] == ["hook_output", "input_rewritten"]


async def test_hook_matchers_filter_by_tool_name_regex() -> None:
    seen: list[str] = []

    def record(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> None:
        seen.append(input_data["tool_name"])

    fake = FakeAnthropicAPI(
        [tool_calls(("add", {"a": 1, "b": 1}), ("slow_upper", {"word": "x"})), text("ok")]
    )
    hooks = {"PostToolUse": [{"matcher": "slow_.*", "hooks": [record]}]}
    await agent_for(fake, tools=[add, slow_upper], hooks=hooks).prompt("go")
    assert seen == ["slow_upper"]


async def test_post_tool_use_hook_rewrites_output_and_adds_context() -> None:
    async def redact(
        input_data: dict[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        assert input_data["tool_response"] == "5"
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": "[redacted]",
                                       "additionalContext": "numbers are secret"}}  # fmt: skip

    fake = FakeAnthropicAPI([tool_use("add", {"a": 2, "b": 3}), text("ok")])
    await agent_for(fake, tools=[add], hooks={"PostToolUse": [{"hooks": [redact]}]}).prompt("go")
    assert fake.requests[1].tool_results()[0]["content"] == "[redacted]\n\nnumbers are secret"


async def test_claude_agent_sdk_hook_matchers_are_accepted() -> None:
    from claude_agent_sdk import HookMatcher

    async def deny(
        input_data: dict[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        return {"decision": "block", "reason": "read-only mode"}

    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 1}), text("ok")])
    await agent_for(fake, tools=[add], hooks={"PreToolUse": [HookMatcher("add", [deny])]}).prompt(
        "go"
    )
    assert "read-only mode" in fake.requests[1].tool_results()[0]["content"]


async def test_stop_hook_block_makes_the_agent_continue() -> None:
    calls: list[bool] = []

    def not_yet(
        input_data: dict[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        calls.append(input_data["stop_hook_active"])
        return (
            {}
            if input_data["stop_hook_active"]
            else {"decision": "block", "reason": "Also cite a source."}
        )

    fake = FakeAnthropicAPI([text("Paris"), text("Paris (source: atlas)")])
    result = await agent_for(fake, hooks={"Stop": [{"hooks": [not_yet]}]}).run("Capital?")
    assert result.output == "Paris (source: atlas)" and calls == [False, True]
    assert fake.requests[1].messages[-1] == {"role": "user", "content": "Also cite a source."}


async def test_user_prompt_submit_hook_adds_context_or_blocks() -> None:
    def context(input_data: dict[str, Any], tool_use_id: str | None, ctx: Any) -> dict[str, Any]:
        if "forbidden" in input_data["prompt"]:
            return {"decision": "block", "reason": "topic not allowed"}
        return {
            "hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": "Today is Monday.",
            }
        }

    fake = FakeAnthropicAPI([text("ok")])
    agent = agent_for(fake, hooks={"UserPromptSubmit": [context]})
    await agent.prompt("What day?")
    assert fake.requests[0].messages[0]["content"] == "What day?\n\nToday is Monday."
    with pytest.raises(PromptBlocked, match="topic not allowed"):
        await agent.prompt("forbidden topic")


async def test_unknown_hook_event_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown hook event 'PreToolCall'"):
        await agent_for(FakeAnthropicAPI(), hooks={"PreToolCall": []}).prompt("x")


async def test_subagent_hooks_fire_when_a_tool_runs_another_agent() -> None:
    events: list[str] = []

    def log(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> None:
        events.append(f"{input_data['hook_event_name']}:{input_data.get('agent_type', '')}")

    fake = FakeAnthropicAPI([tool_use("ask_expert", {"q": "why"}), text("because"), text("done")])
    expert = agent_for(fake, name="expert")

    async def ask_expert(q: str) -> str:
        """Ask the expert agent."""
        return await expert.prompt(q)

    hooks = {"SubagentStart": [log], "SubagentStop": [log]}
    result = await agent_for(fake, name="lead", tools=[ask_expert], hooks=hooks).run("go")
    assert events == ["SubagentStart:expert", "SubagentStop:expert"]
    tool_node = result.node.children[1]
    assert shape(tool_node) == ["prompt:expert"]  # the sub-agent mounts under the tool call


async def test_streaming_yields_text_tool_input_and_the_result() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use("add", {"a": 12345, "b": 67890}),
            json_reply({"approve": True, "reason": "streamed answer"}),
        ]
    )
    agent = agent_for(fake, tools=[add])
    events = [e async for e in agent.stream(Prompt(user="go", response_format=Verdict))]
    kinds = [e.type for e in events]
    assert kinds[-1] == "result" and events[-1].result == Verdict(
        approve=True, reason="streamed answer"
    )
    assert "tool_input" in kinds and "tool_call" in kinds and "tool_result" in kinds
    assert (
        "".join(e.text or "" for e in events if e.type == "text")
        == '{"approve": true, "reason": "streamed answer"}'
    )
    assert json.loads("".join(e.tool_input or "" for e in events if e.type == "tool_input")) == {
        "a": 12345,
        "b": 67890,
    }
    assert all(r.stream for r in fake.requests)


async def test_stream_aggregates_deltas_on_the_model_call_node() -> None:
    fake = FakeAnthropicAPI([text("x" * 100)])

    @workflow
    async def flow(ctx: WorkflowContext) -> list[Any]:
        return [e async for e in agent_for(fake).stream("go")]

    result = await flow.run()
    (call,) = result.tree.find(type="model_call")
    assert call.payload["stream"]["text_deltas"] > 1
    # One node per model turn, however many deltas it streamed.
    assert [n.type.value for n in result.tree.walk()] == ["workflow", "prompt", "model_call"]


@pytest.mark.parametrize(
    ("status", "attempts"), [(429, 3), (500, 3), (529, 3), (401, 1), (403, 1), (400, 1)]
)
async def test_api_errors_are_typed_and_retried_only_when_retryable(
    status: int, attempts: int
) -> None:
    fake = FakeAnthropicAPI([error(status, "boom", retry_after=0.01) for _ in range(3)])
    with pytest.raises(ModelAPIError) as info:
        await agent_for(fake, max_retries=2).prompt("x")
    assert info.value.status_code == status and len(fake.requests) == attempts
    assert type(info.value.__cause__).__module__.startswith("anthropic")
    assert f"{status}" in str(info.value)


async def test_retried_error_then_success_completes() -> None:
    fake = FakeAnthropicAPI([error(529, retry_after=0.01), text("recovered")])
    assert await agent_for(fake).prompt("x") == "recovered"


async def test_mid_stream_error_retries_the_turn_then_gives_up() -> None:
    broken = Reply([{"type": "text", "text": "half"}], stream_error=error(529))
    fake = FakeAnthropicAPI([broken, text("whole")])
    agent = agent_for(fake)
    events = [e async for e in agent.stream("go")]
    assert events[-1].result == "whole"
    fake.add(broken, broken, broken)
    with pytest.raises(ModelAPIError, match="overloaded_error") as info:
        [e async for e in agent.stream("go")]
    assert info.value.status_code == 529


async def test_pause_turn_continues_the_loop() -> None:
    paused = Reply([{"type": "text", "text": "working..."}], stop_reason="pause_turn")
    fake = FakeAnthropicAPI([paused, text("finished")])
    result = await agent_for(fake).run("long task")
    assert result.output == "finished" and result.turns == 2
    assert fake.requests[1].messages[-1]["role"] == "assistant"


async def test_max_turns_is_enforced() -> None:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 1}) for _ in range(5)])
    with pytest.raises(MaxTurnsExceeded, match="max_turns=3"):
        await agent_for(fake, tools=[add], max_turns=3).prompt("loop")
    assert len(fake.requests) == 3


async def test_in_process_mcp_server_tools_are_bridged() -> None:
    server = MCPServer("calc")

    @server.tool()
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    fake = FakeAnthropicAPI([tool_use("mcp__calc__multiply", {"a": 6, "b": 7}), text("42")])
    result = await agent_for(fake, mcps=[server]).run("6*7")
    assert result.output == "42"
    assert fake.requests[0].tools[0]["name"] == "mcp__calc__multiply"
    assert fake.requests[1].tool_results()[0]["content"] == "42"
    assert shape(result.node)[:3] == [
        "mcp_connect:calc",  # the server's start, for this prompt
        "model_call:claude-sonnet-4-6",
        "mcp_call:mcp__calc__multiply",
    ]


@pytest.mark.slow
async def test_stdio_mcp_server_from_pypi_gets_the_agent_env_not_os_environ() -> None:
    server = {
        "type": "stdio",
        "name": "time",
        "command": sys.executable,
        "args": ["-m", "mcp_server_time"],
    }

    def respond(request: MessagesRequest) -> Reply:
        if not request.tool_results():
            return tool_use("mcp__time__get_current_time", {"timezone": "Europe/Paris"})
        return text(request.tool_results()[0]["content"])

    fake = FakeAnthropicAPI(respond)
    result = await agent_for(fake, mcps=[server], env={"TZ": "Pacific/Auckland"}).run("time?")
    assert "TZ" not in os.environ
    description = json.dumps(fake.requests[0].tools)
    assert "Pacific/Auckland" in description  # the server saw TZ from the agent's env
    assert json.loads(result.output)["timezone"] == "Europe/Paris"
    assert shape(result.node)[:3] == [
        "mcp_connect:time",
        "model_call:claude-sonnet-4-6",
        "mcp_call:mcp__time__get_current_time",
    ]


async def test_remote_mcp_servers_betas_and_api_skills_pass_through() -> None:
    fake = FakeAnthropicAPI([text("ok")])
    agent = agent_for(
        fake,
        mcps=[
            {
                "type": "url",
                "name": "docs",
                "url": "https://mcp.example.com/sse",
                "authorization_token": "t0ken-value",
            }
        ],
        skills=[{"type": "anthropic", "skill_id": "pptx", "version": "latest"}],
        betas=["mcp-client-2025-04-04", "skills-2025-10-02"],
        container={"id": "cntr_1"},
    )
    result = await agent.run("make slides")
    body = fake.requests[0].body
    assert body["mcp_servers"] == [
        {
            "type": "url",
            "name": "docs",
            "url": "https://mcp.example.com/sse",
            "authorization_token": "t0ken-value",
        }
    ]
    assert body["container"] == {
        "id": "cntr_1",
        "skills": [{"type": "anthropic", "skill_id": "pptx", "version": "latest"}],
    }
    assert fake.requests[0].headers["anthropic-beta"] == "mcp-client-2025-04-04,skills-2025-10-02"
    assert result.output == "ok"
    assert "t0ken-value" not in json.dumps(result.tree.to_json())


async def test_local_skill_goes_in_the_system_prompt_with_a_read_tool(tmp_path: Path) -> None:
    folder = tmp_path / "haiku"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: haiku\ndescription: Write haiku.\n---\nUse 5-7-5 syllables."
    )
    fake = FakeAnthropicAPI([tool_use("read_skill", {"name": "haiku"}), text("done")])
    await agent_for(fake, system="Be poetic.", skills=[Skill(folder)]).prompt("a poem")
    assert fake.requests[0].system.startswith("Be poetic.\n\nYou have these skills")
    assert "- haiku: Write haiku." in fake.requests[0].system
    assert fake.requests[1].tool_results()[0]["content"] == "Use 5-7-5 syllables."


async def test_every_api_field_passes_through_and_overrides_win() -> None:
    fake = FakeAnthropicAPI([text("1"), text("2"), text("3")])
    agent = agent_for(
        fake, model="agent-model", system="agent system", temperature=0.9, top_p=0.5, top_k=10,
        max_tokens=100, stop_sequences=["END"], metadata={"user_id": "u1"},
        thinking={"type": "enabled", "budget_tokens": 2000}, tool_choice={"type": "auto"},
        service_tier="auto", extra_headers={"x-trace": "abc"}, extra_body={"custom": 1},
    )  # fmt: skip
    prompt = Prompt(user="q", system=[{"type": "text", "text": "prompt system"}])
    await agent.prompt(prompt)
    await agent.prompt(
        prompt, PromptOverrides(temperature=0.0, model="override-model", max_tokens=7)
    )
    await agent.prompt("q")
    first, second, third = (r.body for r in fake.requests)
    assert first["model"] == "agent-model" and first["system"] == [
        {"type": "text", "text": "prompt system"}
    ]
    assert (first["temperature"], first["top_p"], first["top_k"], first["custom"]) == (
        0.9,
        0.5,
        10,
        1,
    )
    assert first["stop_sequences"] == ["END"] and first["metadata"] == {"user_id": "u1"}
    assert first["thinking"]["budget_tokens"] == 2000 and first["tool_choice"] == {"type": "auto"}
    assert first["service_tier"] == "auto" and fake.requests[0].headers["x-trace"] == "abc"
    assert (second["temperature"], second["model"], second["max_tokens"]) == (
        0.0,
        "override-model",
        7,
    )
    assert third["system"] == "agent system"


async def test_anthropic_tool_dicts_pass_through_unchanged() -> None:
    web_search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
    fake = FakeAnthropicAPI([text("ok")])
    await agent_for(fake, tools=[web_search, Tool(add, name="plus")]).prompt("x")
    assert fake.requests[0].tools[0] == web_search
    assert fake.requests[0].tools[1]["name"] == "plus"


async def test_toolsets_by_name_come_from_tool_providers(add_sink: Any) -> None:
    manager = groundswell.get_plugin_manager()

    class Math:
        @groundswell.hookimpl
        def register_tool_providers(self) -> groundswell.ToolProvider:
            return groundswell.ToolProvider(name="math", factory=lambda: [add])

    manager.register(Math(), name="math-provider")
    try:
        fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
        assert await agent_for(fake, tools=["math"]).prompt("1+2") == "3"
        with pytest.raises(ConfigurationError, match=r"no toolset named 'nope'; available: .*math"):
            await agent_for(fake, tools=["nope"]).prompt("x")
    finally:
        manager.unregister("math-provider")


async def test_one_agent_in_fifty_concurrent_workflows_mounts_each_call_in_place() -> None:
    fake = FakeAnthropicAPI(lambda req: f"echo {req.last_user_text()}")
    agent = agent_for(fake, name="shared")

    @workflow(name="job")
    async def job(ctx: WorkflowContext, i: int) -> str:
        await asyncio.sleep(0.001 * (i % 5))
        return await ctx.step(f"ask-{i}", lambda: agent.prompt(f"item {i}"))

    results = await asyncio.gather(*(job.run(i) for i in range(50)))
    for i, result in enumerate(results):
        assert result.output == f"echo item {i}"
        (step,) = result.tree.root.children  # type: ignore[union-attr]
        assert step.name == f"ask-{i}"
        (prompt_node,) = step.children
        assert prompt_node.type is NodeType.PROMPT and prompt_node.payload["user"] == f"item {i}"


async def test_secrets_in_env_and_api_key_never_reach_the_tree() -> None:
    key = "sk-ant-api03-super-secret-key-value"
    fake = FakeAnthropicAPI([tool_use("leak", {}), text("done")], api_key=key)

    def leak(ctx: ToolContext) -> str:
        """Return everything it can see."""
        return f"env={dict(ctx.env)} key={key}"

    agent = Agent(
        name="leaky", client=fake.client(), tools=[leak], env={"DB_PASSWORD": "hunter2-database"}
    )
    result = await agent.run("go")
    dumped = json.dumps(result.tree.to_json())
    assert "hunter2-database" not in dumped and key not in dumped
    assert "**********" in dumped


async def test_reflect_answers_then_revises() -> None:
    fake = FakeAnthropicAPI(
        [
            json_reply({"approve": True, "reason": "v1"}),
            json_reply({"approve": False, "reason": "v2"}),
        ]
    )
    agent = agent_for(fake, name="critic")
    revised = await agent.reflect(Prompt(user="Judge", response_format=Verdict))
    assert revised.reason == "v2"
    assert (
        '"reason":"v1"' in fake.requests[1].last_user_text()
        and "Critique" in fake.requests[1].last_user_text()
    )


async def test_reflect_shows_a_non_model_answer_as_json() -> None:
    fake = FakeAnthropicAPI([json_reply({"result": ["a", "b"]}), json_reply({"result": ["a"]})])
    revised = await agent_for(fake).reflect(Prompt(user="Tags", response_format=list[str]))
    assert revised == ["a"]
    # The critique reads the first answer as JSON, not Python's repr.
    assert '<answer>\n["a","b"]\n</answer>' in fake.requests[1].last_user_text()


async def test_bad_configuration_is_reported_clearly() -> None:
    with pytest.raises(ConfigurationError, match="max_turns must be a positive int"):
        Agent(max_turns=0)
    with pytest.raises(ConfigurationError, match="response_format dict is an open mapping"):
        Prompt(user="x", response_format=dict)
    with pytest.raises(ConfigurationError, match=r"Prompt\.data cannot be rendered"):
        Prompt(user="x", data={"o": object()})
    with pytest.raises(ConfigurationError, match="two tools are named 'add'"):
        await agent_for(FakeAnthropicAPI(), tools=[add, add]).prompt("x")
    with pytest.raises(ConfigurationError, match="needs a 'command'"):
        await agent_for(FakeAnthropicAPI(), mcps=[{"type": "stdio", "name": "x"}]).prompt("x")


async def test_missing_api_key_explains_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    agent = Agent(name="offline")
    with pytest.raises((ConfigurationError, ModelAPIError)) as info:
        await agent.prompt("x")
    assert "ANTHROPIC_API_KEY" in str(info.value) or "api_key" in str(info.value)


async def test_prompt_is_frozen_and_with_derives() -> None:
    p = Prompt(user="a", data={"k": 1})
    q = p.with_(user="b")
    assert (p.user, q.user, q.data) == ("a", "b", {"k": 1})
    with pytest.raises(AttributeError):
        p.user = "c"  # type: ignore[misc]
    with pytest.raises(ConfigurationError, match="no field"):
        p.with_(colour="red")


async def test_factories_build_things_that_mount_where_they_run() -> None:
    fake = FakeAnthropicAPI([tool_use("spawn", {}), text("inner"), text("outer")])

    async def spawn() -> str:
        """Create an agent and a workflow at run time."""
        helper = groundswell.create_agent(name="helper", client=fake.client())

        async def body(ctx: WorkflowContext) -> str:
            return await ctx.step("ask", lambda: helper.prompt(groundswell.create_prompt("hi")))

        return (await groundswell.create_workflow(body, name="dynamic").run()).output or ""

    result = await agent_for(fake, name="boss", tools=[spawn]).run("go")
    tool_node = result.node.children[1]
    assert [n.type.value + ":" + n.name for n in result.tree.walk(tool_node.id)] == [
        "tool_call:spawn", "workflow:dynamic", "step:ask", "prompt:helper", "model_call:claude-sonnet-4-6",
    ]  # fmt: skip


async def test_post_tool_use_failure_hook_sees_the_error() -> None:
    failures: list[dict[str, Any]] = []

    def on_failure(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> None:
        failures.append(
            {"tool": input_data["tool_name"], "error": input_data["error"], "id": tool_use_id}
        )

    def flaky() -> str:
        """Fails."""
        raise RuntimeError("disk full")

    fake = FakeAnthropicAPI([tool_use("flaky", {}, id="toolu_1"), text("gave up")])
    await agent_for(fake, tools=[flaky], hooks={"PostToolUseFailure": [on_failure]}).prompt("go")
    assert failures == [{"tool": "flaky", "error": "RuntimeError: disk full", "id": "toolu_1"}]


async def test_large_max_tokens_is_streamed_instead_of_refused() -> None:
    fake = FakeAnthropicAPI([text("long answer")])
    assert await agent_for(fake, max_tokens=64_000).prompt("write a book") == "long answer"
    assert fake.requests[0].stream


async def test_a_raising_fake_model_is_a_clear_unretried_error() -> None:
    def broken(request: MessagesRequest) -> Reply:
        raise KeyError("oops")

    fake = FakeAnthropicAPI(broken)
    with pytest.raises(ModelAPIError, match="the fake model raised KeyError") as info:
        await agent_for(fake, max_retries=2).prompt("x")
    assert info.value.status_code == 500 and len(fake.requests) == 1


async def test_mid_stream_retry_tells_the_consumer_to_discard() -> None:
    broken = Reply([{"type": "text", "text": "Hello partial"}], stream_error=error(529))
    fake = FakeAnthropicAPI([broken, text("Hello world")])
    events = [e async for e in agent_for(fake).stream("go")]
    kinds = [e.type for e in events]
    retry_at = kinds.index("retry")
    after = "".join(e.text or "" for e in events[retry_at + 1 :] if e.type == "text")
    assert after == "Hello world" and events[-1].result == "Hello world"


async def test_cut_off_structured_reply_says_it_was_truncated() -> None:
    fake = FakeAnthropicAPI([text('{"approve": tr', stop_reason="max_tokens")])
    with pytest.raises(ResponseValidationError, match="cut off at max_tokens=4096"):
        await agent_for(fake).prompt(Prompt(user="x", response_format=Verdict))


async def test_post_tool_use_hook_that_raises_keeps_the_result() -> None:
    def broken(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> None:
        raise RuntimeError("hook bug")

    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("ok")])
    result = await agent_for(fake, tools=[add], hooks={"PostToolUse": [broken]}).run("go")
    (tool_result,) = fake.requests[1].tool_results()
    assert tool_result["content"] == "3" and "is_error" not in tool_result
    assert result.node.children[1].events[0]["type"] == "hook_error"


async def test_reflect_is_not_a_sub_agent_of_itself() -> None:
    events: list[str] = []
    hooks = {"SubagentStart": [lambda d, t, c: events.append("start")]}
    fake = FakeAnthropicAPI([text("v1"), text("v2")])
    assert await agent_for(fake, hooks=hooks).reflect("q") == "v2"
    assert events == []


async def test_secrets_in_mcp_configs_never_reach_errors_or_the_tree() -> None:
    bad = {"type": "url", "url": "https://x", "authorization_token": "tok-abcdef-123"}
    with pytest.raises(ConfigurationError) as info:
        await agent_for(FakeAnthropicAPI(), mcps=[bad]).prompt("x")
    assert "tok-abcdef-123" not in str(info.value) and "needs a 'name'" in str(info.value)

    # Building an agent with the config is enough for its secrets to be scrubbed.
    server = {"type": "stdio", "name": "s", "command": "true", "env": {"TOKEN": "tok-env-secret-9"}}
    with_server = agent_for(FakeAnthropicAPI(), mcps=[server])

    def echo(**kwargs: Any) -> str:
        """Echo."""
        return json.dumps(kwargs)

    fake = FakeAnthropicAPI(
        [tool_use("echo", {"tok-env-secret-9": "as a key"}), text("tok-env-secret-9")]
    )
    result = await agent_for(fake, tools=[Tool(echo, input_schema={"type": "object"})]).run("x")
    assert "tok-env-secret-9" not in json.dumps(result.tree.to_json())
    with pytest.raises(groundswell.ToolError, match="MCP server 's' failed to start"):
        await with_server.prompt("x")


async def test_mcp_tool_names_are_made_valid_for_the_api() -> None:
    server = MCPServer("my server.v2")

    @server.tool(name="files.read")
    def read() -> str:
        """Read."""
        return "data"

    fake = FakeAnthropicAPI([text("ok")])
    await agent_for(fake, mcps=[server]).prompt("x")
    (name,) = [t["name"] for t in fake.requests[0].tools]
    assert name == "mcp__my_server_v2__files_read"


def test_tool_signatures_that_cannot_work_are_refused_and_odd_names_work() -> None:
    async def stream_it() -> Any:
        yield 1

    def positional(a: int, /) -> int:
        return a

    with pytest.raises(groundswell.ToolError, match="is a generator"):
        Tool(stream_it)
    with pytest.raises(groundswell.ToolError, match="positional-only"):
        Tool(positional)

    def odd(json: str, schema: int = 1, ctx: ToolContext | None = None) -> bytes:
        """Odd names."""
        return f"{json}{schema}{ctx is not None}".encode()

    tool = Tool(odd)
    assert sorted(tool.input_schema["properties"]) == ["json", "schema"]
    out = asyncio.run(tool.run({"json": "j"}, ToolContext(agent="a", tool_use_id="t")))
    assert groundswell.tools.tool.tool_result_content(out) == "j1True"


async def test_function_tools_are_built_once_and_reused_across_prompts() -> None:
    fake = FakeAnthropicAPI([text("a"), text("b")])
    agent = agent_for(fake, tools=[add])
    await agent.prompt("one")
    await agent.prompt("two")
    assert groundswell.tools.tool.tool_for(add) is groundswell.tools.tool.tool_for(add)
    assert fake.requests[0].tools == fake.requests[1].tools


async def test_history_or_a_dict_in_the_overrides_slot_is_refused_with_the_fix() -> None:
    fake = FakeAnthropicAPI([text("Paris.")])
    agent = agent_for(fake)
    first = await agent.run("Capital of France?")
    messages: Any = first.messages  # what a pydantic-ai habit passes second
    settings: Any = {"temperature": 0.1}
    model: Any = "claude-opus-4-7"
    history = r"overrides .*must be a PromptOverrides, got list; .*pass message_history="
    with pytest.raises(ConfigurationError, match=history):
        await agent.prompt("And of Spain?", messages)
    with pytest.raises(ConfigurationError, match=history):
        await agent.run("And of Spain?", messages)
    with pytest.raises(ConfigurationError, match=history):
        [e async for e in agent.stream("And of Spain?", first.messages)]  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"got dict; pass PromptOverrides\(\*\*settings\)"):
        await agent.reflect("x", settings)
    with pytest.raises(ConfigurationError, match=r"got str; pass PromptOverrides\(model="):
        await asyncio.to_thread(agent.run_sync, "x", model)
    assert len(fake.requests) == 1  # nothing was sent for the refused calls


PER_PROMPT = r"the output type is set per prompt: Prompt\(user=\.\.\., response_format=\.\.\.\)"


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ("output_type", PER_PROMPT),
        ("result_type", PER_PROMPT),
        ("response_format", PER_PROMPT),
        ("system_prompt", r"did you mean system=\.\.\.\?"),
        ("instructions", r"did you mean system=\.\.\.\?"),
        ("temprature", r"did you mean temperature\? options plugins declare"),
        ("max_token", r"did you mean max_tokens\?"),
    ],
)
def test_options_from_other_frameworks_and_typos_say_what_was_meant(option: str, hint: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"unknown option '{option}'; {hint}"):
        Agent(name="a", **dict[str, Any]({option: 1}))
