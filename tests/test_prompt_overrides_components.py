"""Per-call tools, env, hooks and skills: ``PromptOverrides`` > ``Prompt`` > ``Agent``.

Each test makes three or more calls to one agent through the real ``anthropic``
client against the fake API: the override's value wins for its call, the
agent's own applies again on the next call, and the requests the fake received
show it (the tool definitions sent, the system text, the tool results).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import HookContext

from groundswell import Agent, Prompt, PromptOverrides, Skill, ToolContext
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_use

from .published_mcp import pypi_server


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "worker")
    return Agent(client=fake.client(max_retries=0), **kw)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def subtract(a: int, b: int) -> int:
    """Subtract b from a."""
    return a - b


def names(request: MessagesRequest) -> list[str]:
    return [t["name"] for t in request.tools]


def first_tool_then_answer(request: MessagesRequest) -> Reply:
    """A model that calls the first tool it was offered on 6 and 7, then says what it got."""
    done = request.latest_tool_results()
    if done:
        return text(f"{request.tools_called()[-1]} gave {done[0]['content']}")
    return tool_use(request.tools[0]["name"], {"a": 6, "b": 7})


async def test_override_tools_replace_the_agents_for_one_call() -> None:
    fake = FakeAnthropicAPI(first_tool_then_answer)
    agent = agent_for(fake, tools=[add])
    assert await agent.prompt("go") == "add gave 13"
    assert await agent.prompt(Prompt(user="go", tools=[multiply])) == "multiply gave 42"
    overridden = PromptOverrides(tools=[subtract])
    assert await agent.prompt(Prompt(user="go", tools=[multiply]), overridden) == "subtract gave -1"
    assert await agent.prompt("go", overridden) == "subtract gave -1"
    assert await agent.prompt("go") == "add gave 13"  # the agent's own tools again
    sent = [names(r) for r in fake.requests if not r.latest_tool_results()]
    assert sent == [["add"], ["multiply"], ["subtract"], ["subtract"], ["add"]]


async def test_a_call_to_a_tool_the_override_replaced_is_an_error_for_the_model() -> None:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("no add then")])
    agent = agent_for(fake, tools=[add])
    assert await agent.prompt("go", PromptOverrides(tools=[multiply])) == "no add then"
    (result,) = fake.requests[1].tool_results()
    assert result["is_error"] and "'add'" in result["content"]
    assert "multiply" in result["content"]  # what the call does have


def deploy_target(ctx: ToolContext) -> str:
    """Say where a deploy would go."""
    return f"target={ctx.env.get('DEPLOY_TARGET', '<unset>')} os={os.environ.get('DEPLOY_TARGET')}"


async def test_override_env_reaches_the_tools_for_one_call() -> None:
    def model(request: MessagesRequest) -> Reply:
        done = request.latest_tool_results()
        return text(done[0]["content"]) if done else tool_use("deploy_target", {})

    # Values no other test uses: env values are secrets, redacted wherever they are recorded.
    staging, production = "stage-eu-7f3a", "prod-us-9c1e"
    fake = FakeAnthropicAPI(model)
    agent = agent_for(fake, tools=[deploy_target], env={"DEPLOY_TARGET": staging})
    assert await agent.prompt("where?") == f"target={staging} os=None"
    overridden = await agent.run("where?", PromptOverrides(env={"DEPLOY_TARGET": production}))
    assert overridden.output == f"target={production} os=None"
    assert await agent.prompt("where?") == f"target={staging} os=None"
    seen = [r.tool_results()[0]["content"] for r in fake.requests if r.latest_tool_results()]
    assert seen == [f"target={t} os=None" for t in (staging, production, staging)]
    assert "DEPLOY_TARGET" not in os.environ
    # The override's env is as secret as the agent's: the tree shows neither.
    recorded = json.dumps(overridden.tree.to_json())
    assert production not in recorded and "target=**********" in recorded


def local_zone(request: MessagesRequest) -> Reply:
    """Answer with the local timezone mcp-server-time says it has, from its tool definitions."""
    described = json.dumps(request.tools)
    zones = [z for z in ("Pacific/Auckland", "America/Lima") if z in described]
    return text(",".join(zones))


@pytest.mark.slow
async def test_override_env_reaches_stdio_mcp_servers_for_one_call() -> None:
    fake = FakeAnthropicAPI(local_zone)
    time_server = pypi_server("mcp_server_time")
    agent = agent_for(fake, mcps=[time_server], env={"TZ": "Pacific/Auckland"})
    lima = PromptOverrides(env={"TZ": "America/Lima"})
    before = os.environ.get("TZ")
    assert await agent.prompt("zone?") == "Pacific/Auckland"
    assert await agent.prompt("zone?", lima) == "America/Lima"
    assert await agent.prompt("zone?") == "Pacific/Auckland"
    # Inside `async with agent:` servers are kept: the override's env gets a server of its
    # own, and the agent's (started by the first call) serves the third call again.
    async with agent:
        runs = [await agent.run("zone?", overrides) for overrides in (None, lima, None)]
    assert [r.output for r in runs] == ["Pacific/Auckland", "America/Lima", "Pacific/Auckland"]
    started = [[c.name for c in r.node.children if c.type == "mcp_connect"] for r in runs]
    assert started == [["time"], ["time"], []]
    assert os.environ.get("TZ") == before


def pre_tool_use(decision: str, calls: list[str]) -> dict[str, list[Any]]:
    """A hooks dict whose PreToolUse hook answers ``decision`` and notes it was asked."""

    async def hook(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        calls.append(decision)
        output = {"hookEventName": "PreToolUse", "permissionDecision": decision}
        if decision == "deny":
            output["permissionDecisionReason"] = "not now"
        return {"hookSpecificOutput": output}

    return {"PreToolUse": [hook]}


def call_add_then_echo(request: MessagesRequest) -> Reply:
    done = request.latest_tool_results()
    return text(done[0]["content"]) if done else tool_use("add", {"a": 2, "b": 3})


BLOCKED = "Tool call blocked by a PreToolUse hook: not now"


async def test_override_hooks_deny_a_tool_the_agents_hooks_allow_for_one_call() -> None:
    fake = FakeAnthropicAPI(call_add_then_echo)
    calls: list[str] = []
    agent = agent_for(fake, tools=[add], hooks=pre_tool_use("allow", calls))
    deny = pre_tool_use("deny", calls)
    assert await agent.prompt("sum") == "5"
    assert await agent.prompt("sum", PromptOverrides(hooks=deny)) == BLOCKED
    assert await agent.prompt(Prompt(user="sum", hooks=deny)) == BLOCKED
    assert await agent.prompt("sum") == "5"
    assert calls == ["allow", "deny", "deny", "allow"]  # one hook per call: replaced, not added
    results = [r.tool_results()[0] for r in fake.requests if r.latest_tool_results()]
    assert [bool(r.get("is_error")) for r in results] == [False, True, True, False]


async def test_override_hooks_allow_a_tool_the_agents_hooks_deny_for_one_call() -> None:
    fake = FakeAnthropicAPI(call_add_then_echo)
    calls: list[str] = []
    agent = agent_for(fake, tools=[add], hooks=pre_tool_use("deny", calls))
    allow = pre_tool_use("allow", calls)
    assert await agent.prompt("sum") == BLOCKED
    assert await agent.prompt("sum", PromptOverrides(hooks=allow)) == "5"
    # The override wins over the prompt's hooks as well as the agent's.
    denying = Prompt(user="sum", hooks=pre_tool_use("deny", calls))
    assert await agent.prompt(denying, PromptOverrides(hooks=allow)) == "5"
    assert await agent.prompt("sum") == BLOCKED
    assert calls == ["deny", "allow", "allow", "deny"]


def make_skill(root: Path, name: str, description: str, body: str) -> Skill:
    folder = root / name
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"
    )
    return Skill(folder)


async def test_override_skills_replace_the_agents_for_one_call(tmp_path: Path) -> None:
    own = make_skill(tmp_path, "release-notes", "Write release notes.", "List each change.")
    other = make_skill(tmp_path, "code-review", "Review a diff.", "Read every hunk twice.")
    third = make_skill(tmp_path, "triage", "Sort bug reports.", "Label by area.")

    def model(request: MessagesRequest) -> Reply:
        done = request.latest_tool_results()
        if done:
            return text(done[0]["content"])
        named = [s for s in ("release-notes", "code-review", "triage") if s in request.system]
        return tool_use("read_skill", {"name": named[0]})

    fake = FakeAnthropicAPI(model)
    agent = agent_for(fake, skills=[own])
    assert "List each change." in await agent.prompt("help")
    assert "Read every hunk twice." in await agent.prompt("help", PromptOverrides(skills=[other]))
    assert "Label by area." in await agent.prompt(Prompt(user="help", skills=[third]))
    both = await agent.prompt(Prompt(user="help", skills=[third]), PromptOverrides(skills=[other]))
    assert "Read every hunk twice." in both
    assert "List each change." in await agent.prompt("help")
    systems = [r.system for r in fake.requests if not r.latest_tool_results()]
    expected = [
        "- release-notes: Write release notes.",
        "- code-review: Review a diff.",
        "- triage: Sort bug reports.",
        "- code-review: Review a diff.",
        "- release-notes: Write release notes.",
    ]
    for system, line in zip(systems, expected, strict=True):
        listed = [x for x in system.splitlines() if x.startswith("- ")]
        assert listed == [line]
