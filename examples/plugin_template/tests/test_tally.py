"""Tests for the example plugin, driven through a real workflow run and a real agent."""

from __future__ import annotations

import pytest
from groundswell_example_sink import (
    TallySink,
    Timing,
    register_agent_middleware,
    register_event_sinks,
)

import groundswell
from groundswell import Agent, workflow
from groundswell.testing import FakeAnthropicAPI, check_middleware, check_sink, text, tool_use


async def test_tally_counts_finished_nodes() -> None:
    sink = TallySink(path="")
    manager = groundswell.get_plugin_manager()

    class Plugin:
        @groundswell.hookimpl
        def register_event_sinks(self) -> groundswell.EventSink:
            return groundswell.EventSink(name="tally-test", factory=lambda: sink)

    manager.register(Plugin(), name="tally-test")
    try:

        @workflow
        async def flow(ctx: groundswell.WorkflowContext) -> int:
            await ctx.step("a", lambda: 1)
            return await ctx.step("b", lambda: 2)

        await flow.run()
        assert manager.sink_hub().flush()
    finally:
        manager.unregister("tally-test")
    assert sink.counts == {"workflow:completed": 1, "step:completed": 2}


async def test_hooks_return_lazy_records_whose_objects_keep_their_contracts() -> None:
    sink_record, middleware_record = register_event_sinks(), register_agent_middleware()
    assert (sink_record.name, middleware_record.name) == ("tally", "timing")
    # Groundswell's protocol checkers make each object from its record, as the kernel
    # does, and drive it through real runs; a broken rule raises ProtocolViolation (an
    # AssertionError) listing every problem with its fix.
    await check_sink(sink_record)
    await check_middleware(middleware_record)


def test_groundswell_finds_the_installed_entry_point() -> None:
    # What `groundswell plugins` does: load every plugin in the `groundswell` group
    # (strict=False: another installed plugin's problem is not this test's).
    manager = groundswell.PluginManager(strict=False)
    manager.load_entrypoints()
    info = next(i for i in manager.list_plugins() if i.name == "example-sink")
    assert info.ok and info.distribution == "groundswell-example-sink"
    assert info.hooks == ["register_agent_middleware", "register_event_sinks"]
    assert manager.provides()["example-sink"] == {
        "register_agent_middleware": ["timing"],
        "register_event_sinks": ["tally"],
    }
    record = manager.agent_middleware()["timing"]
    assert (record.order, record.default) == (500, False)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize("middleware", ["timing", Timing()], ids=["by-name", "instance"])
async def test_timing_records_where_a_prompt_spent_its_time(middleware: object) -> None:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    # By name, the installed entry point's record; or an instance, passed directly.
    agent = Agent(name="calc", tools=[add], middleware=[middleware], client=fake.client())
    result = await agent.run("1 + 2?")
    (event,) = [e for e in result.node.events if e["type"] == "timing"]
    assert event["total_ms"] >= event["model_ms"] > 0
    assert event["tools_ms"] > 0


async def test_agents_without_it_are_not_timed() -> None:
    fake = FakeAnthropicAPI([text("hi")])
    result = await Agent(name="plain", client=fake.client()).run("hello")
    assert not [e for e in result.node.events if e["type"] == "timing"]
