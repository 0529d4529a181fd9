"""Bad input is refused at the door: one table across the public API, the CLI and the trace loader.

Every case gets a typed error at the earliest moment it can be known (when the
object is built, when a file is read), naming what was wrong, or the
documented behaviour. Nothing is silently accepted, crashes deep inside or
hangs (the suite's timeout applies to every case).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import pytest

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    EventTree,
    Extract,
    PluginError,
    PluginManager,
    Prompt,
    PromptOverrides,
    ReflectionConfig,
    TokenBudget,
    Tool,
    ToolCachePolicy,
    ToolError,
    ToolProvider,
    Workflow,
    WorkflowContext,
    hookimpl,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, text, tool_use


@dataclass
class Env:
    """What a case may use: a scratch folder and monkeypatch (env vars are undone after)."""

    tmp: Path
    mp: pytest.MonkeyPatch


@dataclass(frozen=True)
class Refused:
    """``call`` raises ``error`` with a one-line message matching ``match`` (it names the field)."""

    call: Callable[[Env], object]
    error: type[BaseException]
    match: str

    def verify(self, env: Env) -> None:
        with pytest.raises(self.error) as info:
            self.call(env)
        message = str(info.value)
        assert re.search(self.match, message), message
        assert "\n" not in message, message


@dataclass(frozen=True)
class Accepted:
    """The documented behaviour: ``call`` succeeds and ``check`` holds for its result."""

    call: Callable[[Env], object]
    check: Callable[[Any], bool]

    def verify(self, env: Env) -> None:
        result = self.call(env)
        assert self.check(result), result


@dataclass(frozen=True)
class Cli:
    """``groundswell ARGS`` run for real: exit ``code``; on an error one stderr line matching
    ``match`` and no traceback; on success ``match`` found in stdout."""

    args: tuple[str, ...]
    code: int
    match: str
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    #: argparse's own refusals print the usage first; the error is then the last line.
    usage: bool = False

    def verify(self, env: Env) -> None:
        for name, content in self.files.items():
            path = env.tmp / name
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        out = subprocess.run(
            [sys.executable, "-m", "groundswell.cli", *self.args],
            capture_output=True,
            text=True,
            cwd=env.tmp,
            env={**os.environ, "PYTHONPATH": str(env.tmp), **self.env},
            timeout=60,
        )
        assert out.returncode == self.code, (out.stdout, out.stderr)
        assert "Traceback" not in out.stderr, out.stderr
        if self.code:
            lines = out.stderr.strip().splitlines()
            assert self.usage or len(lines) == 1, out.stderr
            assert re.search(self.match, lines[-1]), out.stderr
        else:
            assert re.search(self.match, out.stdout), out.stdout
            assert "\x1b" not in out.stdout


Case = Refused | Accepted | Cli


# -- building blocks of the cases --------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def count(n: int) -> Iterator[int]:
    """A generator, which cannot be a tool."""
    yield n


def positional(a: int, /) -> int:
    """A positional-only parameter, which a tool call cannot fill."""
    return a


async def hook(
    data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]
) -> dict[str, Any]:
    return {}


async def flow(ctx: WorkflowContext, n: int = 1) -> int:
    return n


def sync_flow(ctx: WorkflowContext) -> None:
    return None


def with_env(variables: Mapping[str, str], call: Callable[[], object]) -> Callable[[Env], object]:
    """A case body that runs ``call`` with these environment variables set."""

    def run(env: Env) -> object:
        for name, value in variables.items():
            env.mp.setenv(name, value)
        return call()

    return run


def fresh_manager() -> PluginManager:
    manager = PluginManager()
    manager.load_entrypoints()
    return manager


def run_step(name: Any, **options: Any) -> Callable[[Env], object]:
    """A workflow whose one step has this name and these options, run."""

    @workflow(name="steps")
    async def steps(ctx: WorkflowContext) -> object:
        return await ctx.step(name, lambda: 1, **options)

    return lambda _: asyncio.run(steps.run()).output


def toolset_factory_raises(env: Env) -> object:
    """A tool provider whose factory raises: the prompt's error names the plugin."""

    def broken() -> list[Any]:
        raise RuntimeError("no tools today")

    class Provider:
        @hookimpl
        def register_tool_providers(self) -> ToolProvider:
            return ToolProvider(name="fragile", factory=broken)

    manager = groundswell.get_plugin_manager()
    manager.register(Provider(), name="fragile-tools")
    try:
        agent = Agent(tools=["fragile"], client=FakeAnthropicAPI([text("x")]).client())
        return asyncio.run(agent.prompt("hi"))
    finally:
        manager.unregister("fragile-tools")


def two_tools_named_alike_from_a_toolset(env: Env) -> object:
    """A clash with a toolset's tools is found when the toolset makes them (factories are lazy)."""

    class Provider:
        @hookimpl
        def register_tool_providers(self) -> ToolProvider:
            return ToolProvider(name="adders", factory=lambda: [add])

    manager = groundswell.get_plugin_manager()
    manager.register(Provider(), name="adders-tools")
    try:
        fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
        agent = Agent(tools=["adders", add], client=fake.client())
        return asyncio.run(agent.prompt("1+2"))
    finally:
        manager.unregister("adders-tools")


def max_tokens_zero_is_sent(env: Env) -> object:
    fake = FakeAnthropicAPI([text("")])
    asyncio.run(Agent(max_tokens=0, client=fake.client()).prompt("warm the cache"))
    return fake.requests[0].body["max_tokens"]


def write(env: Env, name: str, content: str) -> Path:
    path = env.tmp / name
    path.write_text(content, encoding="utf-8")
    return path


def start(
    id: str, parent: str | None = None, timestamp: float = 1.0, **extra: Any
) -> dict[str, Any]:
    data = {
        "id": id,
        "type": "workflow" if parent is None else "step",
        "name": id,
        "parent_id": parent,
        "timestamp": timestamp,
        "status": "running",
        **extra,
    }
    return {"kind": "node_start", "data": data}


def end(id: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "node_end", "data": {"id": id, "status": "completed", **extra}}


def jsonl(*records: Any) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def load(content: str) -> Callable[[Env], object]:
    return lambda env: EventTree.load(write(env, "trace.jsonl", content))


def from_json(data: Any) -> Callable[[Env], object]:
    return lambda _: EventTree.from_json(data)


def tree_named(name: str, error: str | None = None) -> EventTree:
    tree = EventTree()
    root = tree.start_node("workflow", name)
    if error is None:
        tree.end_node(root, "completed")
    else:
        tree.end_node(root, "failed", error=RuntimeError(error))
    return tree


DEEP = "[" * 100_000 + "]" * 100_000
FLOWS = """
import groundswell

@groundswell.workflow(name="greet")
async def greet(ctx, who):
    return await ctx.step("hello", lambda: f"hello {who}")

not_a_workflow = 3
"""
BROKEN = "def oops(:\n"
GOOD_TRACE = jsonl(start("a"), start("b", "a"), end("b"), end("a"))
HOSTILE_TRACE = jsonl(
    start("a", name="run\x1b[2J\x1b]0;pwned\x07"),
    start("b", "a", name="step\n└── ✓ step forged"),
    end("b", status="failed", error={"type": "Boom", "message": "bad\r\nline\x1b[31m"}),
    end("a"),
)


# -- the table -----------------------------------------------------------------------------

# One case a line, so the table reads as a table.
# fmt: off
CASES: list[Any] = [
    # Agent: every argument checked when the agent is built.
    pytest.param(Refused(lambda _: Agent(name=123), ConfigurationError, "name"), id="agent-name-int"),
    pytest.param(Refused(lambda _: Agent(name=" "), ConfigurationError, "name"), id="agent-name-blank"),
    pytest.param(Refused(lambda _: Agent(model=123), ConfigurationError, "model=123"), id="agent-model-int"),
    pytest.param(Refused(lambda _: Agent(model=""), ConfigurationError, "model must be a model name"), id="agent-model-empty"),
    pytest.param(Refused(lambda _: Agent(system=123), ConfigurationError, "system=123"), id="agent-system-int"),
    pytest.param(Refused(lambda _: Agent(system=[{"type": "text"}]), ConfigurationError, r"system=.*text: Field required"), id="agent-system-block-without-text"),
    pytest.param(Refused(lambda _: Agent(system=[{"type": "image", "text": "x"}]), ConfigurationError, "system="), id="agent-system-block-wrong-type"),
    pytest.param(Refused(lambda _: Agent(system=["plain"]), ConfigurationError, "system="), id="agent-system-list-of-str"),
    pytest.param(Refused(lambda _: Agent(tools="introspection"), ConfigurationError, r"tools must be a list.*did you mean tools=\['introspection'\]"), id="agent-tools-str"),
    pytest.param(Refused(lambda _: Agent(tools=[123]), ConfigurationError, r"tools\[0\] must be"), id="agent-tools-item-int"),
    pytest.param(Refused(lambda _: Agent(tools=[{"name": "x"}]), ConfigurationError, r"tools\[0\]=.*input_schema: Field required"), id="agent-tools-dict-without-schema"),
    pytest.param(Refused(lambda _: Agent(tools=[{"name": 5, "input_schema": {}}]), ConfigurationError, r"tools\[0\]="), id="agent-tools-dict-name-int"),
    pytest.param(Refused(lambda _: Agent(tools=["nosuch"]), ConfigurationError, r"tools\[0\]: no toolset named 'nosuch'; available"), id="agent-tools-unknown-toolset"),
    pytest.param(Refused(lambda _: Agent(tools=[add, add]), ConfigurationError, r"two tools are named 'add' \(tools\[0\] and tools\[1\]\)"), id="agent-tools-same-function-twice"),
    pytest.param(Refused(lambda _: Agent(tools=[add, Tool(add)]), ConfigurationError, "two tools are named 'add'"), id="agent-tools-function-and-tool-clash"),
    pytest.param(Refused(lambda _: Agent(tools=[{"name": "add", "input_schema": {"type": "object"}}, add]), ConfigurationError, "two tools are named 'add'"), id="agent-tools-dict-and-function-clash"),
    pytest.param(Refused(lambda _: Agent(tools=[count]), ToolError, "generator"), id="agent-tools-generator"),
    pytest.param(Refused(two_tools_named_alike_from_a_toolset, ConfigurationError, "two tools are named 'add'"), id="agent-tools-clash-with-toolset-at-first-prompt"),
    pytest.param(Refused(toolset_factory_raises, PluginError, "toolset 'fragile' of plugin 'fragile-tools' failed.*RuntimeError: no tools today"), id="agent-toolset-factory-raises-names-plugin"),
    pytest.param(Refused(lambda _: Agent(mcps="server"), ConfigurationError, "mcps must be a list"), id="agent-mcps-str"),
    pytest.param(Refused(lambda _: Agent(mcps=[123]), ConfigurationError, "mcps: mcps items must be"), id="agent-mcps-item-int"),
    pytest.param(Refused(lambda _: Agent(mcps=[{"type": "stdio", "command": "x"}]), ConfigurationError, "needs a 'name'"), id="agent-mcps-no-name"),
    pytest.param(Refused(lambda _: Agent(mcps=[{"type": "stdio", "name": "s"}]), ConfigurationError, "needs a 'command'"), id="agent-mcps-no-command"),
    pytest.param(Refused(lambda _: Agent(mcps=[{"type": "stdio", "name": "s", "command": "x", "args": "-v"}]), ConfigurationError, "'args' must be a list of strings"), id="agent-mcps-args-str"),
    pytest.param(Refused(lambda _: Agent(mcps=[{"type": "stdio", "name": "s", "command": "x", "env": {"K": 1}}]), ConfigurationError, "'env' must map strings to strings"), id="agent-mcps-env-int"),
    pytest.param(Refused(lambda _: Agent(mcps=[{"type": "stdio", "name": "s", "command": "x", "timeout": "soon"}]), ConfigurationError, "'timeout' must be seconds"), id="agent-mcps-timeout-str"),
    pytest.param(Refused(lambda _: Agent(mcps=[{"type": "url", "name": "r"}]), ConfigurationError, "needs a 'url'"), id="agent-mcps-url-missing"),
    pytest.param(Refused(lambda _: Agent(mcps=[{"type": "url", "name": "r", "url": 5, "authorization_token": "tok-secret-123"}]), ConfigurationError, r"MCP server 'r' \(keys .*\): config is refused by the SDK's request type"), id="agent-mcps-url-int-no-secret-shown"),
    pytest.param(Refused(lambda _: Agent(mcps=[{"type": "ftp", "name": "r"}]), ConfigurationError, "unknown type 'ftp'"), id="agent-mcps-unknown-type"),
    pytest.param(Refused(lambda _: Agent(skills="pptx"), ConfigurationError, "skills must be a list"), id="agent-skills-str"),
    pytest.param(Refused(lambda _: Agent(skills=[123]), ConfigurationError, r"skills\[0\] must be"), id="agent-skills-item-int"),
    pytest.param(Refused(lambda _: Agent(skills=[{"type": "bogus", "skill_id": "x"}]), ConfigurationError, r"skills\[0\]=.*'anthropic' or 'custom'"), id="agent-skills-dict-bad-type"),
    pytest.param(Refused(lambda _: Agent(hooks=["PreToolUse"]), ConfigurationError, "hooks must be a dict"), id="agent-hooks-list"),
    pytest.param(Refused(lambda _: Agent(hooks={"PreToolCall": []}), ConfigurationError, "unknown hook event 'PreToolCall'"), id="agent-hooks-unknown-event"),
    pytest.param(Refused(lambda _: Agent(hooks={"PreToolUse": [123]}), ConfigurationError, r"hooks\['PreToolUse'\] items must be"), id="agent-hooks-item-int"),
    pytest.param(Refused(lambda _: Agent(hooks={"PreToolUse": [{"matcher": "(", "hooks": [hook]}]}), ConfigurationError, "bad matcher"), id="agent-hooks-bad-regex"),
    pytest.param(Refused(lambda _: Agent(hooks={"Stop": [{"hooks": ["not callable"]}]}), ConfigurationError, "'hooks' must be a list of callbacks"), id="agent-hooks-callback-str"),
    pytest.param(Refused(lambda _: Agent(env="A=1"), ConfigurationError, "env must be a dict"), id="agent-env-str"),
    pytest.param(Refused(lambda _: Agent(env={"TOKEN": 123}), ConfigurationError, "env must be .*'TOKEN'"), id="agent-env-value-int"),
    pytest.param(Refused(lambda _: Agent(temperature="hot"), ConfigurationError, "temperature must be a number from 0.0 to 1.0"), id="agent-temperature-str"),
    pytest.param(Refused(lambda _: Agent(temperature=1.5), ConfigurationError, "temperature"), id="agent-temperature-high"),
    pytest.param(Refused(lambda _: Agent(temperature=-0.1), ConfigurationError, "temperature"), id="agent-temperature-negative"),
    pytest.param(Refused(lambda _: Agent(temperature=math.nan), ConfigurationError, "temperature"), id="agent-temperature-nan"),
    pytest.param(Refused(lambda _: Agent(temperature=True), ConfigurationError, "temperature"), id="agent-temperature-bool"),
    pytest.param(Refused(lambda _: Agent(top_p=2), ConfigurationError, "top_p"), id="agent-top-p-high"),
    pytest.param(Refused(lambda _: Agent(top_k=-1), ConfigurationError, "top_k must be an int"), id="agent-top-k-negative"),
    pytest.param(Refused(lambda _: Agent(top_k=1.5), ConfigurationError, "top_k"), id="agent-top-k-float"),
    pytest.param(Refused(lambda _: Agent(max_tokens=-5), ConfigurationError, "max_tokens must be at least 0"), id="agent-max-tokens-negative"),
    pytest.param(Refused(lambda _: Agent(max_tokens="3"), ConfigurationError, "max_tokens='3'"), id="agent-max-tokens-str"),
    pytest.param(Refused(lambda _: Agent(max_tokens=3.0), ConfigurationError, "max_tokens=3.0"), id="agent-max-tokens-float"),
    pytest.param(Refused(lambda _: Agent(max_tokens=True), ConfigurationError, "max_tokens=True"), id="agent-max-tokens-bool"),
    pytest.param(Refused(lambda _: Agent(max_tokens=None), ConfigurationError, "max_tokens"), id="agent-max-tokens-none"),
    pytest.param(Accepted(max_tokens_zero_is_sent, lambda sent: sent == 0), id="agent-max-tokens-zero-warms-the-cache"),
    pytest.param(Refused(lambda _: Agent(tool_choice="auto"), ConfigurationError, "tool_choice='auto'"), id="agent-tool-choice-str"),
    pytest.param(Refused(lambda _: Agent(tool_choice={"type": "sometimes"}), ConfigurationError, "tool_choice="), id="agent-tool-choice-unknown-type"),
    pytest.param(Refused(lambda _: Agent(tool_choice={"type": "tool"}), ConfigurationError, "name: Field required"), id="agent-tool-choice-tool-without-name"),
    pytest.param(Refused(lambda _: Agent(stop_sequences="abc"), ConfigurationError, "stop_sequences='abc'.*'str' instances are not allowed"), id="agent-stop-sequences-str"),
    pytest.param(Refused(lambda _: Agent(stop_sequences=[1]), ConfigurationError, "stop_sequences"), id="agent-stop-sequences-int-item"),
    pytest.param(Accepted(lambda _: Agent(stop_sequences=("END",)).config["stop_sequences"], lambda v: v == ("END",)), id="agent-stop-sequences-tuple-ok"),
    pytest.param(Refused(lambda _: Agent(metadata="str"), ConfigurationError, "metadata='str'"), id="agent-metadata-str"),
    pytest.param(Refused(lambda _: Agent(metadata={"user_id": 5}), ConfigurationError, "metadata=.*user_id"), id="agent-metadata-user-id-int"),
    pytest.param(Refused(lambda _: Agent(thinking={"type": "enabled"}), ConfigurationError, "thinking=.*budget_tokens"), id="agent-thinking-no-budget"),
    pytest.param(Refused(lambda _: Agent(thinking={"type": "enabled", "budget_tokens": 10}), ConfigurationError, r"thinking\['budget_tokens'\] must be at least 1024"), id="agent-thinking-budget-small"),
    pytest.param(Refused(lambda _: Agent(thinking="on"), ConfigurationError, "thinking='on'"), id="agent-thinking-str"),
    pytest.param(Refused(lambda _: Agent(betas="abc"), ConfigurationError, "betas='abc'"), id="agent-betas-str"),
    pytest.param(Refused(lambda _: Agent(betas=[1]), ConfigurationError, "betas="), id="agent-betas-int-item"),
    pytest.param(Refused(lambda _: Agent(container=5), ConfigurationError, "container=5"), id="agent-container-int"),
    pytest.param(Refused(lambda _: Agent(service_tier="fast"), ConfigurationError, "service_tier='fast'.*'auto' or 'standard_only'"), id="agent-service-tier-unknown"),
    pytest.param(Refused(lambda _: Agent(extra_headers={"X-Id": 1}), ConfigurationError, "extra_headers"), id="agent-extra-headers-int"),
    pytest.param(Refused(lambda _: Agent(extra_headers="X: 1"), ConfigurationError, "extra_headers"), id="agent-extra-headers-str"),
    pytest.param(Refused(lambda _: Agent(extra_body="{}"), ConfigurationError, "extra_body"), id="agent-extra-body-str"),
    pytest.param(Refused(lambda _: Agent(max_turns=0), ConfigurationError, "max_turns must be a positive int"), id="agent-max-turns-zero"),
    pytest.param(Refused(lambda _: Agent(max_turns="3"), ConfigurationError, "max_turns"), id="agent-max-turns-str"),
    pytest.param(Refused(lambda _: Agent(max_turns=True), ConfigurationError, "max_turns"), id="agent-max-turns-bool"),
    pytest.param(Refused(lambda _: Agent(tool_timeout=0), ConfigurationError, "timeout must be"), id="agent-tool-timeout-zero"),
    pytest.param(Refused(lambda _: Agent(tool_timeout="5"), ConfigurationError, "timeout must be"), id="agent-tool-timeout-str"),
    pytest.param(Refused(lambda _: Agent(token_budget=1000), ConfigurationError, "token_budget must be"), id="agent-token-budget-int"),
    pytest.param(Refused(lambda _: Agent(token_budget=TokenBudget(max_total=100)), ConfigurationError, "leaves no room for input"), id="agent-token-budget-no-room"),
    pytest.param(Refused(lambda _: Agent(cache=42), ConfigurationError, "cache must be a backend name"), id="agent-cache-int"),
    pytest.param(Refused(lambda _: Agent(cache="nosuch"), ConfigurationError, "cache: no cache backend named 'nosuch'"), id="agent-cache-unknown-name"),
    pytest.param(Refused(with_env({"GROUNDSWELL_CACHE": "nosuch"}, lambda: Agent(enable_cache=True)), ConfigurationError, r"\(GROUNDSWELL_CACHE\): cache: no cache backend named 'nosuch'"), id="agent-groundswell-cache-unknown"),
    pytest.param(Refused(lambda _: Agent(enable_cache="yes"), ConfigurationError, "enable_cache must be True or False"), id="agent-enable-cache-str"),
    pytest.param(Refused(lambda _: Agent(tool_cache=["add"]), ConfigurationError, "tool_cache must map"), id="agent-tool-cache-list"),
    pytest.param(Refused(lambda _: Agent(tool_cache={"add": {"ttl": 5}}), ConfigurationError, r"tool_cache\['add'\] must be a ToolCachePolicy"), id="agent-tool-cache-dict-policy"),
    pytest.param(Refused(lambda _: Agent(tool_cache={"add": ToolCachePolicy(ttl=-1)}), ConfigurationError, r"tool_cache\['add'\]: ToolCachePolicy.ttl"), id="agent-tool-cache-negative-ttl"),
    pytest.param(Refused(lambda _: Agent(enable_reflection="yes"), ConfigurationError, "enable_reflection must be True or False"), id="agent-enable-reflection-str"),
    pytest.param(Refused(lambda _: Agent(reflection=True), ConfigurationError, "reflection must be a ReflectionConfig"), id="agent-reflection-bool"),
    pytest.param(Refused(lambda _: Agent(context="history"), ConfigurationError, "context must be a list"), id="agent-context-str"),
    pytest.param(Refused(lambda _: Agent(context=[123]), ConfigurationError, "context items must be"), id="agent-context-item-int"),
    pytest.param(Refused(lambda _: Agent(context=["nosuch"]), ConfigurationError, "no context provider named 'nosuch'"), id="agent-context-unknown"),
    pytest.param(Refused(lambda _: Agent(middleware="cache"), ConfigurationError, "middleware must be a list"), id="agent-middleware-str"),
    pytest.param(Refused(lambda _: Agent(middleware=["nosuch"]), ConfigurationError, "no agent middleware named 'nosuch'"), id="agent-middleware-unknown"),
    pytest.param(Refused(lambda _: Agent(client="x"), ConfigurationError, "client must be an anthropic.AsyncAnthropic"), id="agent-client-str"),
    pytest.param(Refused(lambda _: Agent(client=anthropic.Anthropic(api_key="sk-test")), ConfigurationError, "client must be an anthropic.AsyncAnthropic.*got Anthropic"), id="agent-client-sync"),
    pytest.param(Refused(lambda _: Agent(nosuch_option=1), ConfigurationError, "unknown option 'nosuch_option'"), id="agent-unknown-option"),
    pytest.param(Refused(with_env({"GROUNDSWELL_MODEL": ""}, lambda: Agent()), ConfigurationError, "GROUNDSWELL_MODEL is set but empty"), id="agent-groundswell-model-empty"),
    pytest.param(Accepted(with_env({"GROUNDSWELL_MODEL": "claude-opus-4-6"}, lambda: Agent().config["model"]), lambda m: m == "claude-opus-4-6"), id="agent-groundswell-model-read-when-built"),
    pytest.param(Refused(lambda _: asyncio.run(Agent(client=FakeAnthropicAPI().client()).prompt(5)), ConfigurationError, "expected a Prompt or a string"), id="agent-prompt-int"),
    # PromptOverrides: checked like the agent, when built (not at the first request).
    pytest.param(Refused(lambda _: PromptOverrides(max_turns=0), ConfigurationError, "PromptOverrides: max_turns must be a positive int"), id="overrides-max-turns-zero"),
    pytest.param(Refused(lambda _: PromptOverrides(max_turns="3"), ConfigurationError, "PromptOverrides: max_turns"), id="overrides-max-turns-str"),
    pytest.param(Refused(lambda _: PromptOverrides(max_tokens=-5), ConfigurationError, "PromptOverrides: max_tokens must be at least 0"), id="overrides-max-tokens-negative"),
    pytest.param(Refused(lambda _: PromptOverrides(max_tokens=2.5), ConfigurationError, "PromptOverrides: max_tokens=2.5"), id="overrides-max-tokens-float"),
    pytest.param(Refused(lambda _: PromptOverrides(temperature="hot"), ConfigurationError, "PromptOverrides: temperature"), id="overrides-temperature-str"),
    pytest.param(Refused(lambda _: PromptOverrides(top_p=-1), ConfigurationError, "PromptOverrides: top_p"), id="overrides-top-p-negative"),
    pytest.param(Refused(lambda _: PromptOverrides(model=123), ConfigurationError, "PromptOverrides: model=123"), id="overrides-model-int"),
    pytest.param(Refused(lambda _: PromptOverrides(model=""), ConfigurationError, "PromptOverrides: model must be a model name"), id="overrides-model-empty"),
    pytest.param(Refused(lambda _: PromptOverrides(system=123), ConfigurationError, "PromptOverrides: system=123"), id="overrides-system-int"),
    pytest.param(Refused(lambda _: PromptOverrides(stop_sequences="abc"), ConfigurationError, "PromptOverrides: stop_sequences"), id="overrides-stop-sequences-str"),
    pytest.param(Refused(lambda _: PromptOverrides(metadata="str"), ConfigurationError, "PromptOverrides: metadata"), id="overrides-metadata-str"),
    pytest.param(Refused(lambda _: PromptOverrides(thinking={"type": "enabled", "budget_tokens": 1}), ConfigurationError, "PromptOverrides: thinking"), id="overrides-thinking-small-budget"),
    pytest.param(Refused(lambda _: PromptOverrides(tool_choice="any"), ConfigurationError, "PromptOverrides: tool_choice"), id="overrides-tool-choice-str"),
    pytest.param(Refused(lambda _: PromptOverrides(service_tier="priority"), ConfigurationError, "PromptOverrides: service_tier"), id="overrides-service-tier-unknown"),
    pytest.param(Refused(lambda _: PromptOverrides(betas="x"), ConfigurationError, "PromptOverrides: betas"), id="overrides-betas-str"),
    pytest.param(Refused(lambda _: PromptOverrides(extra_headers={"X": 1}), ConfigurationError, "PromptOverrides: extra_headers"), id="overrides-extra-headers-int"),
    pytest.param(Refused(lambda _: PromptOverrides(tools="add"), ConfigurationError, "PromptOverrides: tools must be a list"), id="overrides-tools-str"),
    pytest.param(Refused(lambda _: PromptOverrides(tools=["nosuch"]), ConfigurationError, "PromptOverrides: tools.*no toolset named 'nosuch'"), id="overrides-tools-unknown-toolset"),
    pytest.param(Refused(lambda _: PromptOverrides(tools=[add, add]), ConfigurationError, "PromptOverrides: two tools are named 'add'"), id="overrides-tools-clash"),
    pytest.param(Refused(lambda _: PromptOverrides(hooks={"Nope": []}), ConfigurationError, "PromptOverrides: hooks: unknown hook event 'Nope'"), id="overrides-hooks-unknown-event"),
    pytest.param(Refused(lambda _: PromptOverrides(mcps=[123]), ConfigurationError, "PromptOverrides: mcps"), id="overrides-mcps-item-int"),
    pytest.param(Refused(lambda _: PromptOverrides(skills=[123]), ConfigurationError, "PromptOverrides: skills"), id="overrides-skills-item-int"),
    pytest.param(Refused(lambda _: PromptOverrides(env={"A": 1}), ConfigurationError, "PromptOverrides: env"), id="overrides-env-int"),
    pytest.param(Refused(lambda _: PromptOverrides(disable_cache="yes"), ConfigurationError, "PromptOverrides: disable_cache must be True or False"), id="overrides-disable-cache-str"),
    pytest.param(Refused(lambda _: PromptOverrides(enable_reflection="yes"), ConfigurationError, "enable_reflection must be True, False or None"), id="overrides-enable-reflection-str"),
    pytest.param(Refused(lambda _: PromptOverrides(reflection=1), ConfigurationError, "reflection must be a ReflectionConfig"), id="overrides-reflection-int"),
    pytest.param(Refused(lambda _: PromptOverrides(cache=42), ConfigurationError, "PromptOverrides: cache must be a backend name"), id="overrides-cache-int"),
    pytest.param(Refused(lambda _: PromptOverrides(cache="nosuch"), ConfigurationError, "PromptOverrides: cache: no cache backend named 'nosuch'"), id="overrides-cache-unknown"),
    pytest.param(Refused(lambda _: PromptOverrides(middleware="cache"), ConfigurationError, "middleware must be a list"), id="overrides-middleware-str"),
    pytest.param(Refused(lambda _: PromptOverrides(token_budget=5), ConfigurationError, "token_budget must be"), id="overrides-token-budget-int"),
    # Prompt: the fields that win over the agent's, and its own.
    pytest.param(Refused(lambda _: Prompt(user=""), ConfigurationError, "Prompt.user"), id="prompt-user-empty"),
    pytest.param(Refused(lambda _: Prompt(user=123), ConfigurationError, "Prompt.user"), id="prompt-user-int"),
    pytest.param(Refused(lambda _: Prompt(user="x", response_format=dict), ConfigurationError, "Prompt.response_format"), id="prompt-response-format-dict"),
    pytest.param(Refused(lambda _: Prompt(user="x", data={"o": object()}), ConfigurationError, r"Prompt\.data cannot be rendered"), id="prompt-data-unrenderable"),
    pytest.param(Refused(lambda _: Prompt(user="x", enable_reflection="yes"), ConfigurationError, "Prompt.enable_reflection"), id="prompt-enable-reflection-str"),
    pytest.param(Refused(lambda _: Prompt(user="x", system=123), ConfigurationError, "Prompt: system=123"), id="prompt-system-int"),
    pytest.param(Refused(lambda _: Prompt(user="x", tools="add"), ConfigurationError, "Prompt: tools must be a list"), id="prompt-tools-str"),
    pytest.param(Refused(lambda _: Prompt(user="x", tools=["nosuch"]), ConfigurationError, "Prompt: tools.*no toolset named 'nosuch'"), id="prompt-tools-unknown-toolset"),
    pytest.param(Refused(lambda _: Prompt(user="x", hooks={"Nope": []}), ConfigurationError, "Prompt: hooks: unknown hook event"), id="prompt-hooks-unknown-event"),
    pytest.param(Refused(lambda _: Prompt(user="x", mcps=[{"type": "url", "name": "r"}]), ConfigurationError, "Prompt: mcps.*needs a 'url'"), id="prompt-mcps-url-missing"),
    pytest.param(Refused(lambda _: Prompt(user="x", skills=[5]), ConfigurationError, r"Prompt: skills\[0\]"), id="prompt-skills-item-int"),
    pytest.param(Refused(lambda _: Prompt(user="x", extract="json"), ConfigurationError, "Prompt.extract must be"), id="prompt-extract-str"),
    pytest.param(Refused(lambda _: Prompt(user="x", extract=[Extract(pattern="a", store_as="v"), Extract(pattern="b", store_as="v")]), ConfigurationError, "two Extract rules store as 'v'"), id="prompt-extract-same-name"),
    pytest.param(Refused(lambda _: Prompt(user="x").with_(nosuch=1), ConfigurationError, "Prompt has no field"), id="prompt-with-unknown-field"),
    # Workflow and @workflow.
    pytest.param(Refused(lambda _: Workflow(sync_flow), ConfigurationError, "needs an `async def`"), id="workflow-sync-function"),
    pytest.param(Refused(lambda _: Workflow(flow, name=123), ConfigurationError, "Workflow name must be a non-empty string"), id="workflow-name-int"),
    pytest.param(Refused(lambda _: Workflow(flow, name=" "), ConfigurationError, "Workflow name"), id="workflow-name-blank"),
    pytest.param(Refused(lambda _: Workflow(flow, cache=123), ConfigurationError, "workflow 'flow': cache must be a backend name"), id="workflow-cache-int"),
    pytest.param(Refused(lambda _: Workflow(flow, cache="nosuch"), ConfigurationError, "workflow 'flow': cache: no cache backend named 'nosuch'"), id="workflow-cache-unknown"),
    pytest.param(Refused(lambda _: Workflow(flow, enable_reflection="yes"), ConfigurationError, "enable_reflection must be True or False"), id="workflow-enable-reflection-str"),
    pytest.param(Refused(lambda _: Workflow(flow, reflection=3), ConfigurationError, "reflection must be a ReflectionConfig"), id="workflow-reflection-int"),
    pytest.param(Refused(lambda _: Workflow(flow, reflection_agent=3), ConfigurationError, "reflection_agent must be"), id="workflow-reflection-agent-int"),
    pytest.param(Refused(lambda _: Workflow(flow, token_budget=3), ConfigurationError, "token_budget must be"), id="workflow-token-budget-int"),
    pytest.param(Refused(lambda _: Workflow(flow, durable=""), ConfigurationError, "durable must be"), id="workflow-durable-empty"),
    pytest.param(Refused(lambda _: Workflow(flow, durable=3), ConfigurationError, "durable must be"), id="workflow-durable-int"),
    pytest.param(Refused(lambda _: workflow(name=123)(flow), ConfigurationError, "Workflow name"), id="decorator-name-int"),
    pytest.param(Refused(lambda _: workflow(nosuch=1), TypeError, "unexpected keyword argument 'nosuch'"), id="decorator-unknown-option"),
    pytest.param(Refused(lambda _: groundswell.create_workflow(flow, retries=2), TypeError, "unexpected keyword argument 'retries'"), id="create-workflow-unknown-option"),
    pytest.param(Refused(lambda _: Workflow(flow).validate_input("x"), ConfigurationError, "input must be an object"), id="workflow-input-str"),
    pytest.param(Refused(lambda _: Workflow(flow).validate_input({"n": "many"}), ConfigurationError, "invalid input.*n: "), id="workflow-input-wrong-type"),
    pytest.param(Refused(run_step(""), groundswell.WorkflowError, "step name must be a non-empty string"), id="step-name-empty"),
    pytest.param(Refused(run_step("s", timeout=-1), groundswell.WorkflowError, "timeout must be seconds > 0"), id="step-timeout-negative"),
    pytest.param(Refused(run_step("s", token_budget=5), groundswell.WorkflowError, "token_budget must be"), id="step-token-budget-int"),
    # Tool.
    pytest.param(Refused(lambda _: Tool(123), ToolError, "needs a callable"), id="tool-not-callable"),
    pytest.param(Refused(lambda _: Tool(add, name=123), ConfigurationError, "Tool 'add': name must be a string"), id="tool-name-int"),
    pytest.param(Refused(lambda _: Tool(add, name="two words"), ToolError, "tool name 'two words' is invalid"), id="tool-name-space"),
    pytest.param(Refused(lambda _: Tool(add, name="x" * 65), ToolError, "is invalid"), id="tool-name-too-long"),
    pytest.param(Refused(lambda _: Tool(add, description=5), ConfigurationError, "description must be a string"), id="tool-description-int"),
    pytest.param(Refused(lambda _: Tool(add, input_schema="object"), ConfigurationError, "input_schema must be a JSON schema dict"), id="tool-input-schema-str"),
    pytest.param(Refused(lambda _: Tool(add, cache={"ttl": 5}), ConfigurationError, "Tool 'add': cache must be a ToolCachePolicy"), id="tool-cache-dict"),
    pytest.param(Refused(lambda _: Tool(add, timeout=0), ConfigurationError, "timeout must be"), id="tool-timeout-zero"),
    pytest.param(Refused(lambda _: Tool(add, timeout=math.inf), ConfigurationError, "timeout must be"), id="tool-timeout-inf"),
    pytest.param(Refused(lambda _: Tool(add, toolset=5), ConfigurationError, "toolset must be a string"), id="tool-toolset-int"),
    pytest.param(Refused(lambda _: Tool(count), ToolError, "is a generator"), id="tool-generator"),
    pytest.param(Refused(lambda _: Tool(positional), ToolError, "positional-only"), id="tool-positional-only"),
    # ToolCachePolicy, wherever it is given.
    pytest.param(Refused(lambda _: Tool(add, cache=ToolCachePolicy(ttl=0)), ConfigurationError, "ToolCachePolicy.ttl must be seconds > 0"), id="policy-ttl-zero"),
    pytest.param(Refused(lambda _: Tool(add, cache=ToolCachePolicy(ttl="5")), ConfigurationError, "ToolCachePolicy.ttl"), id="policy-ttl-str"),
    pytest.param(Refused(lambda _: Tool(add, cache=ToolCachePolicy(ttl=math.nan)), ConfigurationError, "ToolCachePolicy.ttl"), id="policy-ttl-nan"),
    pytest.param(Refused(lambda _: Tool(add, cache=ToolCachePolicy(key="a")), ConfigurationError, "ToolCachePolicy.key must be"), id="policy-key-str"),
    pytest.param(Refused(lambda _: Tool(add, cache=ToolCachePolicy(key=[1])), ConfigurationError, "ToolCachePolicy.key must be"), id="policy-key-int-item"),
    pytest.param(Refused(lambda _: Tool(add, cache=ToolCachePolicy(invalidate_on="deploy")), ConfigurationError, "ToolCachePolicy.invalidate_on"), id="policy-invalidate-on-str"),
    pytest.param(Refused(lambda _: Tool(add, cache=ToolCachePolicy(hit_message=5)), ConfigurationError, "ToolCachePolicy.hit_message"), id="policy-hit-message-int"),
    pytest.param(Refused(lambda _: Tool(add, cache=ToolCachePolicy(enabled="yes")), ConfigurationError, "ToolCachePolicy.enabled"), id="policy-enabled-str"),
    # TokenBudget.
    pytest.param(Refused(lambda _: TokenBudget(max_total=0), ConfigurationError, "max_total must be at least 1"), id="budget-max-total-zero"),
    pytest.param(Refused(lambda _: TokenBudget(max_total="100"), ConfigurationError, "max_total must be an int"), id="budget-max-total-str"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=True), ConfigurationError, "max_total must be an int"), id="budget-max-total-bool"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, reserve_for_output=-1), ConfigurationError, "reserve_for_output"), id="budget-reserve-negative"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, reserve_for_output=100), ConfigurationError, "reserve_for_output .* must be less than max_total"), id="budget-reserve-too-big"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, strategy="nope"), ConfigurationError, "strategy must be one of"), id="budget-strategy-unknown"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, warning_threshold=0), ConfigurationError, "warning_threshold"), id="budget-threshold-zero"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, warning_threshold=2), ConfigurationError, "warning_threshold"), id="budget-threshold-two"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, per_step={"s": 5}), ConfigurationError, r"per_step\['s'\]"), id="budget-per-step-int"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, keep_last_turns=0), ConfigurationError, "keep_last_turns"), id="budget-keep-last-zero"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, summarizer=5), ConfigurationError, "summarizer must be"), id="budget-summarizer-int"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, counter="nosuch"), ConfigurationError, "no token counter named 'nosuch'"), id="budget-counter-unknown"),
    pytest.param(Refused(lambda _: TokenBudget(max_total=100, counter=5), ConfigurationError, "counter must be"), id="budget-counter-int"),
    # Extract.
    pytest.param(Refused(lambda _: Extract(pattern="", store_as="v"), ConfigurationError, "pattern must be a non-empty regex"), id="extract-pattern-empty"),
    pytest.param(Refused(lambda _: Extract(pattern="(", store_as="v"), ConfigurationError, "is not a valid regular expression"), id="extract-pattern-invalid"),
    pytest.param(Refused(lambda _: Extract(pattern=5, store_as="v"), ConfigurationError, "pattern must be"), id="extract-pattern-int"),
    pytest.param(Refused(lambda _: Extract(pattern=re.compile(b"x"), store_as="v"), ConfigurationError, "not bytes"), id="extract-pattern-bytes"),
    pytest.param(Refused(lambda _: Extract(pattern="x", store_as=""), ConfigurationError, "store_as must be"), id="extract-store-as-empty"),
    pytest.param(Refused(lambda _: Extract(pattern="x", store_as="v", format="xml"), ConfigurationError, "format must be one of"), id="extract-format-unknown"),
    pytest.param(Refused(lambda _: Extract(pattern="x", store_as="v", required="yes"), ConfigurationError, "required must be True or False"), id="extract-required-str"),
    pytest.param(Refused(lambda _: Extract(pattern="x", store_as="v", multiple=1), ConfigurationError, "multiple must be True or False"), id="extract-multiple-int"),
    # ReflectionConfig.
    pytest.param(Refused(lambda _: ReflectionConfig(enabled="yes"), ConfigurationError, "ReflectionConfig.enabled"), id="reflection-enabled-str"),
    pytest.param(Refused(lambda _: ReflectionConfig(max_attempts=0), ConfigurationError, "ReflectionConfig.max_attempts"), id="reflection-attempts-zero"),
    pytest.param(Refused(lambda _: ReflectionConfig(max_attempts=100), ConfigurationError, "ReflectionConfig.max_attempts"), id="reflection-attempts-over-cap"),
    pytest.param(Refused(lambda _: ReflectionConfig(strategy=""), ConfigurationError, "ReflectionConfig.strategy"), id="reflection-strategy-empty"),
    pytest.param(Refused(lambda _: ReflectionConfig(model=""), ConfigurationError, "ReflectionConfig.model"), id="reflection-model-empty"),
    pytest.param(Refused(lambda _: ReflectionConfig(retry_delay=-1), ConfigurationError, "ReflectionConfig.retry_delay"), id="reflection-delay-negative"),
    pytest.param(Refused(lambda _: ReflectionConfig(retry_delay=math.nan), ConfigurationError, "ReflectionConfig.retry_delay"), id="reflection-delay-nan"),
    # Environment variables.
    pytest.param(Refused(with_env({"GROUNDSWELL_STRICT_PLUGINS": "maybe"}, PluginManager), ConfigurationError, "GROUNDSWELL_STRICT_PLUGINS='maybe' means neither on nor off"), id="env-strict-maybe"),
    pytest.param(Refused(with_env({"GROUNDSWELL_STRICT_PLUGINS": "2"}, groundswell.plugins.loading.strict_plugins), ConfigurationError, "GROUNDSWELL_STRICT_PLUGINS='2'"), id="env-strict-two"),
    pytest.param(Accepted(with_env({"GROUNDSWELL_STRICT_PLUGINS": " TRUE "}, groundswell.plugins.loading.strict_plugins), lambda on: on is True), id="env-strict-true-any-case"),
    pytest.param(Accepted(with_env({"GROUNDSWELL_STRICT_PLUGINS": "Off"}, groundswell.plugins.loading.strict_plugins), lambda on: on is False), id="env-strict-off"),
    pytest.param(Accepted(with_env({"GROUNDSWELL_STRICT_PLUGINS": ""}, groundswell.plugins.loading.strict_plugins), lambda on: on is False), id="env-strict-empty-is-off"),
    pytest.param(Refused(with_env({"GROUNDSWELL_LOAD_PLUGINS": "nosuch", "GROUNDSWELL_STRICT_PLUGINS": "1"}, fresh_manager), PluginError, "GROUNDSWELL_LOAD_PLUGINS names 'nosuch', but no installed plugin"), id="env-load-unknown-strict"),
    pytest.param(Refused(with_env({"GROUNDSWELL_LOAD_PLUGINS": "nosuch", "GROUNDSWELL_STRICT_PLUGINS": "0"}, lambda: fresh_manager().lookup(groundswell.CacheBackend, "lru")), ConfigurationError, "no cache backend named 'lru'.*not named in GROUNDSWELL_LOAD_PLUGINS.*names 'nosuch'"), id="env-load-unknown-default-cache-says-why"),
    pytest.param(Accepted(with_env({"GROUNDSWELL_LOAD_PLUGINS": "lru"}, lambda: sorted(fresh_manager().cache_backends())), lambda names: names == ["lru"]), id="env-load-lru-only"),
    pytest.param(Refused(with_env({"GROUNDSWELL_TOKEN_COUNTER": "nosuch"}, lambda: TokenBudget(max_total=100)), ConfigurationError, "no token counter named 'nosuch'"), id="env-token-counter-unknown"),
    # The trace loader: EventTree.load / from_json; each refusal is one ValueError line.
    pytest.param(Accepted(load(GOOD_TRACE), lambda t: [n.name for n in t.walk()] == ["a", "b"]), id="load-good-trace"),
    pytest.param(Refused(load(""), ValueError, "holds no run"), id="load-empty-file"),
    pytest.param(Refused(load("\n  \n"), ValueError, "holds no run"), id="load-blank-lines"),
    pytest.param(Refused(load('{"kind": "node_st'), ValueError, "holds no run"), id="load-only-a-cut-line"),
    pytest.param(Refused(load(jsonl(start("a"), start("b", "a"), start("b", "a"))), ValueError, "node 'b' starts a second time"), id="load-duplicate-id"),
    pytest.param(Refused(load(jsonl(start("a"), start("a"))), ValueError, "node 'a' starts a second time"), id="load-phantom-second-root"),
    pytest.param(Refused(load(jsonl(start("a"), start("b", "b"))), ValueError, "names parent 'b', which is not in the log"), id="load-node-its-own-parent"),
    pytest.param(Refused(load(jsonl(start("a"), start("c", "ghost"))), ValueError, "names parent 'ghost'"), id="load-phantom-parent"),
    pytest.param(Refused(load(jsonl(start("a", timestamp=math.nan))), ValueError, "'timestamp' should be a finite number, got nan"), id="load-nan-timestamp"),
    pytest.param(Refused(load(jsonl(start("a", timestamp=math.inf))), ValueError, "'timestamp' should be a finite number"), id="load-inf-timestamp"),
    pytest.param(Refused(load(jsonl(start("a"), end("a", ended_at=-math.inf))), ValueError, "'ended_at' should be a finite number"), id="load-inf-ended-at"),
    pytest.param(Refused(load(jsonl(start("a", timestamp="yesterday"))), ValueError, "'timestamp' should be a number"), id="load-timestamp-str"),
    pytest.param(Refused(load(jsonl(start("a"), end("zzz"))), ValueError, "node_end for unknown node 'zzz'"), id="load-end-of-unknown-node"),
    pytest.param(Refused(load(jsonl({"kind": "node_birth", "data": {}})), ValueError, "unknown kind 'node_birth'"), id="load-unknown-kind"),
    pytest.param(Refused(load(jsonl({"kind": "node_start"})), ValueError, "'data' object"), id="load-no-data"),
    pytest.param(Refused(load(jsonl(start("a", status="sleeping"))), ValueError, "unknown status 'sleeping'"), id="load-unknown-status"),
    pytest.param(Refused(load(jsonl(start("a", type="dance"))), ValueError, "dance"), id="load-unknown-type"),
    pytest.param(Refused(load(jsonl(start("a")) + "not json\n" + jsonl(end("a"))), ValueError, "line 2: not JSON"), id="load-garbage-line"),
    pytest.param(Refused(load(DEEP + "\n"), ValueError, "line 1: JSON nested too deeply"), id="load-deep-json"),
    pytest.param(Refused(load(jsonl(start("a"), start("b"))), ValueError, "holds 2 runs"), id="load-two-runs"),
    pytest.param(Refused(from_json({"version": 1, "root_id": "a", "nodes": [start("a")["data"], start("a")["data"]]}), ValueError, "node id 'a' appears twice"), id="from-json-duplicate-id"),
    pytest.param(Refused(from_json({"nodes": []}), ValueError, "not a Groundswell tree"), id="from-json-no-version"),
    pytest.param(Refused(from_json({"version": 1, "nodes": "a"}), ValueError, "needs a 'nodes' list"), id="from-json-nodes-str"),
    pytest.param(Refused(from_json({"version": 1, "root_id": "a", "nodes": [start("a", timestamp=math.nan)["data"]]}), ValueError, "finite number"), id="from-json-nan-timestamp"),
    pytest.param(Refused(from_json({"version": 1, "root_id": "a", "nodes": [start("a")["data"], start("c", "b")["data"], start("b", "a")["data"]]}), ValueError, "appears before its parent"), id="from-json-child-before-parent"),
    pytest.param(Refused(lambda _: EventTree.replay(["node_start"]), ValueError, "expected an object"), id="replay-record-str"),
    # Rendering: names and messages with control characters are escaped; JSON keeps them.
    pytest.param(Accepted(lambda _: tree_named("a\x1b[2Jb").render(), lambda out: "\x1b" not in out and "a\\x1b[2Jb" in out), id="render-escapes-ansi"),
    pytest.param(Accepted(lambda _: tree_named("x\n└── ✓ step forged").render(), lambda out: len(out.splitlines()) == 1 and "x\\n└──" in out), id="render-escapes-newline"),
    pytest.param(Accepted(lambda _: tree_named("t\x1b]0;pwned\x07").render(), lambda out: "\x07" not in out and "\\x07" in out), id="render-escapes-osc"),
    pytest.param(Accepted(lambda _: tree_named("w", error="bad\r\nthing\u202e").render(), lambda out: len(out.splitlines()) == 1 and "bad\\r\\nthing\\u202e" in out), id="render-escapes-error-message"),
    pytest.param(Accepted(lambda _: tree_named("naïve — 名前 ✓").render(), lambda out: "naïve — 名前 ✓" in out), id="render-keeps-printable-unicode"),
    pytest.param(Accepted(lambda _: tree_named("a\x1b[2Jb").to_json()["nodes"][0]["name"], lambda name: name == "a\x1b[2Jb"), id="to-json-keeps-the-name"),
    # The CLI, run for real.
    pytest.param(Cli(("run", "flows"), 2, "expected module:workflow", {"flows.py": FLOWS}), id="cli-run-no-colon"),
    pytest.param(Cli(("run", "nowhere:thing"), 2, "cannot import 'nowhere'"), id="cli-run-no-module"),
    pytest.param(Cli(("run", "flows:missing"), 2, "has no attribute 'missing'", {"flows.py": FLOWS}), id="cli-run-missing-attribute"),
    pytest.param(Cli(("run", "flows:not_a_workflow"), 2, "is an int, not a Workflow", {"flows.py": FLOWS}), id="cli-run-not-a-workflow"),
    pytest.param(Cli(("run", "broken:wf"), 2, "cannot import 'broken': SyntaxError", {"broken.py": BROKEN}), id="cli-run-syntax-error"),
    pytest.param(Cli(("run", "flows:greet", "--json", "--jsonl"), 2, "not allowed with argument", {"flows.py": FLOWS}, usage=True), id="cli-run-json-and-jsonl"),
    pytest.param(Cli(("run", "flows:greet", "x"), 2, "GROUNDSWELL_STRICT_PLUGINS='maybe'", {"flows.py": FLOWS}, {"GROUNDSWELL_STRICT_PLUGINS": "maybe"}), id="cli-run-strict-maybe"),
    pytest.param(Cli(("run", "flows:greet", "x"), 3, "GROUNDSWELL_LOAD_PLUGINS names 'nosuch'", {"flows.py": FLOWS}, {"GROUNDSWELL_LOAD_PLUGINS": "nosuch", "GROUNDSWELL_STRICT_PLUGINS": "1"}), id="cli-run-load-unknown-strict"),
    pytest.param(Cli(("plugins", "--bogus"), 2, "unrecognized arguments: --bogus", usage=True), id="cli-plugins-bad-flag"),
    pytest.param(Cli((), 2, "the following arguments are required: COMMAND", usage=True), id="cli-no-command"),
    pytest.param(Cli(("tree", "missing.jsonl"), 2, "no such file"), id="cli-tree-missing-file"),
    pytest.param(Cli(("tree", "."), 2, "is a directory"), id="cli-tree-directory"),
    pytest.param(Cli(("tree", "empty.jsonl"), 2, "holds no runs", {"empty.jsonl": ""}), id="cli-tree-empty-log"),
    pytest.param(Cli(("tree", "junk.jsonl"), 2, "not a Groundswell trace: .*not JSON", {"junk.jsonl": "one\ntwo\n"}), id="cli-tree-not-json"),
    pytest.param(Cli(("tree", "bin.jsonl"), 2, "not a Groundswell trace", {"bin.jsonl": b"\xff\xfe\x00garbage\n"}), id="cli-tree-binary"),
    pytest.param(Cli(("tree", "deep.json"), 2, "deep.json is not a Groundswell trace: its JSON is nested too deeply", {"deep.json": DEEP}), id="cli-tree-deep-json"),
    pytest.param(Cli(("tree", "deep.jsonl"), 2, "line 1: JSON nested too deeply", {"deep.jsonl": DEEP + "\n"}), id="cli-tree-deep-jsonl"),
    pytest.param(Cli(("tree", "nan.jsonl"), 2, "'timestamp' should be a finite number", {"nan.jsonl": jsonl(start("a", timestamp=math.nan))}), id="cli-tree-nan-timestamp"),
    pytest.param(Cli(("tree", "dup.jsonl"), 2, "starts a second time", {"dup.jsonl": jsonl(start("a"), start("b", "a"), start("b", "a"))}), id="cli-tree-duplicate-id"),
    pytest.param(Cli(("tree", "list.json"), 2, "item 1 of the list", {"list.json": json.dumps([tree_named("ok").to_json(), 5])}), id="cli-tree-json-list-with-junk"),
    pytest.param(Cli(("tree", "hostile.jsonl"), 0, r"run\\x1b\[2J\\x1b\]0;pwned\\x07[\s\S]*step\\n└── ✓ step forged[\s\S]*bad\\r\\nline\\x1b\[31m", {"hostile.jsonl": HOSTILE_TRACE}), id="cli-tree-escapes-names-and-errors"),
    pytest.param(Cli(("tree", "hostile.jsonl", "--json"), 0, r'"name": "run\\u001b\[2J', {"hostile.jsonl": HOSTILE_TRACE}), id="cli-tree-json-keeps-names"),
]
# fmt: on


def test_the_table_covers_enough_cases() -> None:
    assert len(CASES) >= 150
    ids = [p.id for p in CASES]
    assert len(ids) == len(set(ids))


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    # Process defaults a case may set itself; none leaks in from the outside.
    for name in ("GROUNDSWELL_MODEL", "GROUNDSWELL_CACHE", "GROUNDSWELL_TOKEN_COUNTER"):
        monkeypatch.delenv(name, raising=False)
    return Env(tmp_path, monkeypatch)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_at_the_door(case: Case, env: Env) -> None:
    case.verify(env)
