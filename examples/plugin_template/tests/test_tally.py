"""Tests for the example sink, driven through a real workflow run."""

from __future__ import annotations

from groundswell_example_sink import TallySink, register_event_sinks

import groundswell
from groundswell import workflow


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


def test_hook_returns_a_lazy_record() -> None:
    record = register_event_sinks()
    assert record.name == "tally"
    assert isinstance(record.factory(), TallySink)


def test_groundswell_finds_the_installed_entry_point() -> None:
    # What `groundswell plugins` does: load every plugin in the `groundswell` group
    # (strict=False: another installed plugin's problem is not this test's).
    manager = groundswell.PluginManager(strict=False)
    manager.load_entrypoints()
    info = next(i for i in manager.list_plugins() if i.name == "example-sink")
    assert info.ok and info.distribution == "groundswell-example-sink"
    assert info.hooks == ["register_event_sinks"]
    assert manager.provides()["example-sink"] == {"register_event_sinks": ["tally"]}
