"""One test per hook family, and a meta-test keeping tests and docs complete."""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import groundswell
from groundswell import (
    Agent,
    Cache,
    CacheBackend,
    CliCommand,
    ContextProvider,
    ContextRequest,
    EventSink,
    ExecutionBackend,
    PluginManager,
    ReflectionStrategy,
    TokenCounter,
    ToolProvider,
    WorkflowCall,
    WorkflowContext,
    WorkflowResult,
    cli,
    get_plugin_manager,
    hookimpl,
    hookspecs,
    workflow,
)
from groundswell.budget.tokens import CountRequest
from groundswell.testing import FakeAnthropicAPI, text
from groundswell.workflow import execution

from .conftest import RecordingSink

DOCS = Path(__file__).resolve().parent.parent / "docs" / "plugin-hooks.md"


def hook_names() -> list[str]:
    return sorted(
        name
        for name, fn in vars(hookspecs).items()
        if callable(fn) and hasattr(fn, "groundswell_spec")
    )


class DictCache:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    async def get(self, key: str) -> Any | None:
        return self.data.get(key)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        self.data[key] = value

    async def bust(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    async def bust_prefix(self, prefix: str) -> int:
        keys = [k for k in self.data if k.startswith(prefix)]
        for k in keys:
            del self.data[k]
        return len(keys)

    def metrics(self) -> dict[str, Any]:
        return {"size": len(self.data)}


async def test_hook_register_cache_backends() -> None:
    class Plugin:
        @hookimpl
        def register_cache_backends(self) -> CacheBackend:
            return CacheBackend(name="dict", factory=DictCache)

    manager = PluginManager()
    manager.register(Plugin(), name="dict-plugin")
    cache = manager.cache_backends()["dict"].factory()
    assert isinstance(cache, Cache)
    await cache.set("ns:1", "v")
    assert await cache.get("ns:1") == "v"
    assert await cache.bust_prefix("ns:") == 1


def test_hook_register_reflection_strategies() -> None:
    built: list[str] = []

    def factory(**options: Any) -> str:
        built.append("strategy")
        return "strategy"

    class Plugin:
        @hookimpl
        def register_reflection_strategies(self) -> list[ReflectionStrategy]:
            return [ReflectionStrategy(name="retry-once", factory=factory, description="d")]

    manager = PluginManager()
    manager.register(Plugin(), name="reflect-plugin")
    records = manager.reflection_strategies()
    assert built == []  # collecting records never builds the strategy
    assert records["retry-once"].description == "d"
    assert records["retry-once"].factory() == "strategy" and built == ["strategy"]


async def test_hook_register_event_sinks() -> None:
    sink = RecordingSink()

    class Plugin:
        @hookimpl
        def register_event_sinks(self) -> EventSink:
            return EventSink(name="rec-hook", factory=lambda: sink)

    manager = groundswell.get_plugin_manager()
    manager.register(Plugin(), name="rec-hook-plugin")
    try:

        @workflow
        async def flow(ctx: WorkflowContext) -> None:
            await ctx.step("only", lambda: None)

        await flow.run()
        assert manager.sink_hub().flush()
    finally:
        manager.unregister("rec-hook-plugin")
    assert sink.kinds() == ["node_start", "node_start", "node_end", "node_end"]
    assert sink.closed  # unregistering the plugin closes its sink


def test_hook_register_evaluators() -> None:
    from groundswell import NamedEvaluator, evals

    def at_most(words: int = 50) -> Any:
        return lambda ctx: len(ctx.output_text.split()) <= words

    class Plugin:
        @hookimpl
        def register_evaluators(self) -> NamedEvaluator:
            return NamedEvaluator("at_most", at_most, "at most N words")

    manager = PluginManager()
    manager.register(Plugin(), name="words")
    record = manager.evaluators()["at_most"]
    assert (record.name, record.description) == ("at_most", "at most N words")
    assert manager.lookup("register_evaluators", "at_most") == record
    # Not called until a dataset names it; then with the dataset's argument.
    check = record.factory(3)
    context = evals.EvaluatorContext(
        name="c",
        inputs={},
        metadata={},
        expected_output=None,
        output="one two",
        duration=0.0,
        tree=groundswell.EventTree(),
    )
    assert check(context) is True


def test_hook_register_tool_providers() -> None:
    class Plugin:
        @hookimpl
        def register_tool_providers(self) -> tuple[ToolProvider, ...]:
            return (
                ToolProvider(name="math", factory=lambda: ["add", "mul"]),
                ToolProvider(name="text", factory=lambda: ["upper"]),
            )

    manager = PluginManager()
    manager.register(Plugin(), name="tools-plugin")
    providers = manager.tool_providers()
    assert sorted(providers) == ["math", "text"]
    assert providers["math"].factory() == ["add", "mul"]


async def test_hook_register_token_counters() -> None:
    class Words:
        async def count(self, request: CountRequest) -> int:
            return sum(len(str(m["content"]).split()) for m in request.messages)

    class Plugin:
        @hookimpl
        def register_token_counters(self) -> TokenCounter:
            return TokenCounter(name="words", factory=Words, description="one token a word")

    manager = PluginManager()
    manager.register(Plugin(), name="counter-plugin")
    counters = manager.token_counters()
    assert {"estimate", "anthropic", "words"} <= set(counters)
    assert counters["words"].description == "one token a word"
    request = CountRequest(model="m", messages=[{"role": "user", "content": "three small words"}])
    assert await counters["words"].factory().count(request) == 3
    assert await counters["estimate"].factory().count(request) > 3  # framing tokens too


class CountingEngine:
    """An execution engine that runs everything here and records what went through it."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def run_workflow(self, call: WorkflowCall) -> WorkflowResult[Any]:
        self.seen.append(f"workflow {call.workflow.name} {call.args}")
        return await call.run_here(run_id=f"run-{len(self.seen)}")

    async def run_step(self, ctx: WorkflowContext, node: Any, call: Any) -> Any:
        self.seen.append(f"step {node.name}")
        return await call()

    async def spawn(self, ctx: WorkflowContext, node: Any, call: WorkflowCall, queue: str) -> Any:
        self.seen.append(f"spawn {call.workflow.name} on {queue}")
        # Stands in for a run elsewhere: run it in a tree of its own, then mount that.
        with_tree = await asyncio.create_task(call.run_here(), context=contextvars.Context())
        ctx.event_tree.mount(with_tree.tree.to_json(), node)
        return with_tree.output


@workflow(name="leaf")
async def _leaf(ctx: WorkflowContext, x: int) -> int:
    return await ctx.step("square", lambda: x * x)


async def test_hook_register_execution_backends() -> None:
    engine = CountingEngine()

    class Plugin:
        @hookimpl
        def register_execution_backends(self) -> ExecutionBackend:
            return ExecutionBackend(name="counting", factory=lambda: engine)

    @workflow(name="durable-here", durable="counting")
    async def durable_here(ctx: WorkflowContext, x: int) -> int:
        squared = await ctx.step("first", lambda: _leaf.run(x))
        return await ctx.spawn_workflow(_leaf, squared.output, queue="q")

    manager = get_plugin_manager()
    name = manager.register(Plugin(), name="counting-plugin")
    try:
        assert {"local", "counting"} <= set(manager.execution_backends())
        result = await durable_here.run(3)
    finally:
        manager.unregister(name)
        execution._reset_engines()
    assert result.output == 81 and result.workflow_id == "run-1"
    # The step, the plain workflow inside it and its step all went through the engine;
    # the spawned run ran "elsewhere" (a context of its own), so its step did not.
    assert engine.seen == [
        "workflow durable-here (3,)",
        "step first",
        "step square",
        "spawn leaf on q",
    ]
    tree = result.tree
    spawn = tree.root.children[1]
    assert (spawn.type.value, spawn.payload["queue"]) == ("spawn", "q")
    (mounted,) = spawn.children
    assert mounted.name == "leaf" and [c.name for c in mounted.children] == ["square"]


async def test_hook_register_context_providers() -> None:
    class Plugin:
        @hookimpl
        def register_context_providers(self) -> ContextProvider:
            async def house_rules(request: ContextRequest) -> str:
                return f"House rules for {request.agent}: answer in English."

            return ContextProvider(name="rules", factory=lambda: house_rules)

    manager = get_plugin_manager()
    name = manager.register(Plugin(), name="context-plugin")
    try:
        assert "rules" in manager.context_providers()
        fake = FakeAnthropicAPI([text("ok")])
        agent = Agent(name="clerk", system="Be brief.", context=["rules"], client=fake.client())
        assert await agent.prompt("hi") == "ok"
    finally:
        manager.unregister(name)
    assert fake.requests[0].system == "Be brief.\n\nHouse rules for clerk: answer in English."


def test_hook_register_cli_commands(capsys: pytest.CaptureFixture[str]) -> None:
    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--times", type=int, default=1)
        parser.set_defaults(func=lambda args: print(f"hello {args.name} " * args.times) or 0)

    def broken(parser: argparse.ArgumentParser) -> None:
        raise RuntimeError("cannot build my parser")

    class Plugin:
        @hookimpl
        def register_cli_commands(self) -> list[CliCommand]:
            return [
                CliCommand(name="greet", factory=configure, description="say hello"),
                CliCommand(name="oops", factory=broken),
                CliCommand(name="run", factory=configure),  # clashes with a built-in
            ]

    manager = get_plugin_manager()
    name = manager.register(Plugin(), name="cli-plugin")
    try:
        assert cli.main(["greet", "ada", "--times", "2"]) == 0
        out, err = capsys.readouterr()
        assert out == "hello ada hello ada \n"
        assert "'run' clashes with a built-in" in err
        assert cli.main(["oops"]) == 2  # a broken command is one clear line, not a traceback
        _, err = capsys.readouterr()
        assert "the 'oops' command could not be set up: RuntimeError: cannot build my parser" in err
        with pytest.raises(SystemExit):
            cli.main(["--help"])
        assert "say hello" in capsys.readouterr().out
    finally:
        manager.unregister(name)


def test_every_hook_has_a_test_and_a_documented_signature() -> None:
    names = hook_names()
    assert names == [
        "register_agent_middleware",
        "register_agent_options",
        "register_cache_backends",
        "register_cli_commands",
        "register_context_providers",
        "register_evaluators",
        "register_event_sinks",
        "register_execution_backends",
        "register_reflection_strategies",
        "register_token_counters",
        "register_tool_providers",
    ]
    # The agent middleware and option hooks are tested with the plugin manager.
    from . import test_plugins

    modules = [sys.modules[__name__], test_plugins]
    docs = DOCS.read_text()
    headings = re.findall(r"^## `(\w+)\((.*?)\) -> (.+?)`$", docs, flags=re.M)
    documented = {name: (args, ret) for name, args, ret in headings}
    for name in names:
        assert any(inspect.isfunction(getattr(m, f"test_hook_{name}", None)) for m in modules), name
        assert name in documented, f"docs/plugin-hooks.md has no heading for {name}"
        spec = inspect.signature(getattr(hookspecs, name))
        assert documented[name][0] == ", ".join(spec.parameters), name
    assert set(documented) == set(names), "docs list a hook that does not exist"
