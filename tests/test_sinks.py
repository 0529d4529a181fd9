"""Event sinks: every event reaches every sink; a raising or slow sink never hurts a run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest

import groundswell
from groundswell import Event, EventTree, WorkflowContext, workflow
from groundswell.tree.events import QUEUE_SIZE, SinkHub

from .conftest import RecordingSink


@workflow(name="observed")
async def observed(ctx: WorkflowContext) -> int:
    await ctx.step("a", lambda: 1)
    ctx.snapshot_state()
    with contextlib.suppress(ZeroDivisionError):
        await ctx.step("b", lambda: 1 / 0)
    return 2


async def test_every_node_start_end_and_event_reaches_the_sink(
    recording_sink: RecordingSink,
) -> None:
    result = await observed.run()
    assert groundswell.get_plugin_manager().sink_hub().flush()
    kinds = recording_sink.kinds()
    assert kinds.count("node_start") == 3 and kinds.count("node_end") == 3
    assert kinds.count("node_event") == 1
    # Snapshots, not live nodes: the first event still says "running".
    first = recording_sink.events[0]
    assert first.kind == "node_start" and first.data["status"] == "running"
    assert first.node is result.node
    # The events alone rebuild the same tree.
    rebuilt = EventTree.replay(e.to_record() for e in recording_sink.events)
    assert rebuilt == result.tree


async def test_two_sinks_both_receive_everything(add_sink: Callable[..., str]) -> None:
    one, two = RecordingSink(), RecordingSink()
    add_sink(one, "one")
    add_sink(two, "two")
    await observed.run()
    assert groundswell.get_plugin_manager().sink_hub().flush()
    assert len(one.events) == len(two.events) == 7


class RaisingSink:
    def __init__(self) -> None:
        self.calls = 0

    def handle(self, event: Event) -> None:
        self.calls += 1
        raise RuntimeError("sink is broken")

    def close(self) -> None:
        pass


async def test_raising_sink_never_breaks_the_run_and_is_reported_once(
    add_sink: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    bad, good = RaisingSink(), RecordingSink()
    add_sink(bad, "bad")
    add_sink(good, "good")
    with caplog.at_level(logging.WARNING, "groundswell.sinks"):
        result = await observed.run()
        hub = groundswell.get_plugin_manager().sink_hub()
        assert hub.flush()
    assert result.output == 2
    assert bad.calls == 7 and len(good.events) == 7
    assert hub.stats()["bad"] == {"delivered": 0, "errors": 7, "dropped": 0}
    assert caplog.text.count("sink is broken") == 1


class BlockingSink:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.handled = 0

    def handle(self, event: Event) -> None:
        self.release.wait(10)
        self.handled += 1

    def close(self) -> None:
        self.release.set()


async def test_blocked_sink_never_stalls_the_run(add_sink: Callable[..., str]) -> None:
    slow = BlockingSink()
    add_sink(slow, "slow")

    @workflow
    async def many(ctx: WorkflowContext) -> int:
        for i in range(200):
            await ctx.step(f"s{i}", asyncio.sleep(0))
        return 1

    started = time.perf_counter()
    result = await many.run()
    elapsed = time.perf_counter() - started
    assert result.output == 1
    assert elapsed < 5, "the run waited for a blocked sink"
    assert slow.handled == 0
    slow.release.set()
    assert groundswell.get_plugin_manager().sink_hub().flush(timeout=10)
    assert slow.handled == 402


def test_full_queue_drops_and_counts_instead_of_blocking(caplog: pytest.LogCaptureFixture) -> None:
    slow = BlockingSink()
    hub = SinkHub({"slow": slow})
    tree = EventTree()
    node = tree.start_node("workflow", "w")
    event = Event("node_event", node, {"id": node.id, "event": {}})
    with caplog.at_level(logging.WARNING, "groundswell.sinks"):
        for _ in range(QUEUE_SIZE + 50):
            hub.dispatch(event)
    dropped = hub.stats()["slow"]["dropped"]
    assert 49 <= dropped <= 50  # the worker may already hold one event
    assert caplog.text.count("not keeping up") == 1
    slow.release.set()
    hub.close()


def test_sink_factory_failure_is_reported(
    monkeypatch: pytest.MonkeyPatch, add_sink: Callable[..., str]
) -> None:
    monkeypatch.setenv("GROUNDSWELL_STRICT_PLUGINS", "0")
    manager = groundswell.get_plugin_manager()

    class BadFactory:
        @groundswell.hookimpl
        def register_event_sinks(self) -> groundswell.EventSink:
            def factory() -> object:
                raise OSError("trace dir is read-only")

            return groundswell.EventSink(name="unstartable", factory=factory)

    manager.register(BadFactory(), name="bad-factory")
    try:
        hub = manager.sink_hub()
        assert "unstartable" not in hub.stats()
        assert "trace dir is read-only" in manager.errors["bad-factory"][0]
    finally:
        manager.unregister("bad-factory")


def test_close_closes_every_sink() -> None:
    sink = RecordingSink()
    hub = SinkHub({"rec": sink})
    hub.close()
    assert sink.closed and not hub


async def test_registering_other_plugins_never_restarts_a_sink(
    add_sink: Callable[..., str],
) -> None:
    built: list[RecordingSink] = []

    def factory() -> RecordingSink:
        built.append(RecordingSink())
        return built[-1]

    manager = groundswell.get_plugin_manager()

    class SinkPlugin:
        @groundswell.hookimpl
        def register_event_sinks(self) -> groundswell.EventSink:
            return groundswell.EventSink(name="once", factory=factory)

    class Unrelated:
        @groundswell.hookimpl
        def register_cache_backends(self) -> groundswell.CacheBackend:
            return groundswell.CacheBackend(name="unrelated", factory=dict)

    manager.register(SinkPlugin(), name="sink-once")
    try:
        await observed.run()
        manager.register(Unrelated(), name="unrelated")
        manager.unregister("unrelated")
        await observed.run()
        assert groundswell.flush_sinks()
        assert len(built) == 1 and not built[0].closed
        assert len(built[0].events) == 14
    finally:
        manager.unregister("sink-once")
    assert built[0].closed


async def test_events_carry_the_run_id_and_concurrent_runs_replay_apart(
    recording_sink: RecordingSink,
) -> None:
    results = await asyncio.gather(observed.run(), observed.run())
    assert groundswell.flush_sinks()
    run_ids = {e.run_id for e in recording_sink.events}
    assert run_ids == {r.node.id for r in results}
    trees = EventTree.replay_all(e.to_record() for e in recording_sink.events)
    assert sorted(t.root.id for t in trees) == sorted(r.node.id for r in results)  # type: ignore[union-attr]
    for tree in trees:
        original = next(r.tree for r in results if r.node.id == tree.root.id)  # type: ignore[union-attr]
        assert tree == original


class ExitingSink(RaisingSink):
    def handle(self, event: Event) -> None:
        self.calls += 1
        raise SystemExit(3)


async def test_sink_raising_system_exit_is_isolated_too(add_sink: Callable[..., str]) -> None:
    bad = ExitingSink()
    add_sink(bad, "exiting")
    await observed.run()
    await observed.run()
    assert groundswell.flush_sinks(timeout=5)
    assert bad.calls == 14


def test_stuck_sink_is_not_closed_under_its_own_feet(caplog: pytest.LogCaptureFixture) -> None:
    stuck = BlockingSink()
    closed: list[bool] = []
    stuck.close = lambda: closed.append(True)  # type: ignore[method-assign]
    hub = SinkHub({"stuck": stuck})
    tree = EventTree()
    node = tree.start_node("workflow", "w")
    hub.dispatch(Event("node_event", node, {"id": node.id, "event": {}}))
    time.sleep(0.05)
    with caplog.at_level(logging.WARNING, "groundswell.sinks"):
        hub.close(timeout=0.1)
    assert closed == [] and "stuck in handle()" in caplog.text
    stuck.release.set()
    worker = next(t for t in threading.enumerate() if t.name == "groundswell-sink-stuck")
    worker.join(10)
    assert closed == []  # not later either, once handle() got through


def test_runs_started_from_many_threads_at_once_all_reach_the_sinks(
    add_sink: Callable[..., str],
) -> None:
    class SlowToStart(RecordingSink):
        def __init__(self) -> None:
            time.sleep(0.2)  # a factory importing something heavy
            super().__init__()

    sinks: list[RecordingSink] = []

    def factory() -> RecordingSink:
        sinks.append(SlowToStart())
        return sinks[-1]

    manager = groundswell.get_plugin_manager()

    class Plugin:
        @groundswell.hookimpl
        def register_event_sinks(self) -> groundswell.EventSink:
            return groundswell.EventSink(name="slow-start", factory=factory)

    manager.register(Plugin(), name="plugin-slow-start")
    try:
        results = []

        def run() -> None:
            results.append(asyncio.run(observed.run()))

        threads = [threading.Thread(target=run) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert manager.sink_hub().flush()
        (sink,) = sinks
        runs = {e.run_id for e in sink.events}
        assert runs == {r.node.id for r in results} and len(runs) == 8
    finally:
        manager.unregister("plugin-slow-start")


def test_one_slow_sink_does_not_use_up_the_time_another_needs_to_close() -> None:
    class Slow(RecordingSink):
        def handle(self, event: Event) -> None:
            time.sleep(0.5)

    slow, quick = Slow(), RecordingSink()
    hub = SinkHub({"slow": slow, "quick": quick})
    node = groundswell.EventNode("step", "x")
    for _ in range(5):
        hub.dispatch(Event("node_start", node, {}, "run"))
    hub.close(timeout=0.3)
    assert quick.closed and len(quick.events) == 5


def test_a_sink_with_flush_is_flushed_whenever_it_has_caught_up() -> None:
    class Buffered(RecordingSink):
        def __init__(self) -> None:
            super().__init__()
            self.flushed_at: list[int] = []

        def flush(self) -> None:
            self.flushed_at.append(len(self.events))

    sink = Buffered()
    hub = SinkHub({"buffered": sink})
    node = groundswell.EventNode("step", "x")
    for _ in range(3):
        hub.dispatch(Event("node_start", node, {}, "run"))
    assert hub.flush()
    # flush() ran after the three events, before hub.flush() returned.
    assert sink.flushed_at and sink.flushed_at[-1] == 3
    hub.close()


CLOSE_BLOCKS = textwrap.dedent(
    """
    import asyncio, threading
    import groundswell
    from groundswell import EventSink, hookimpl, workflow

    class NeverCloses:
        def __init__(self):
            self.events = 0

        def handle(self, event):
            self.events += 1

        def close(self):
            print(f"closing after {self.events} events", flush=True)
            threading.Event().wait()  # e.g. an exporter waiting on a dead collector

    class Plugin:
        @hookimpl
        def register_event_sinks(self):
            return EventSink(name="never-closes", factory=NeverCloses)

    groundswell.get_plugin_manager().register(Plugin(), name="never-closes-plugin")

    @workflow(name="short")
    async def short(ctx):
        return await ctx.step("one", lambda: 1)

    print("output", asyncio.run(short.run()).output, flush=True)
    """
)


def test_a_sink_whose_close_blocks_does_not_hold_interpreter_exit() -> None:
    env = {**os.environ, "GROUNDSWELL_SINK_TIMEOUT_S": "1"}
    # A generous limit: without the deadline the process would never exit.
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_BLOCKS], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # Every event was handled before close() was called, at exit.
    assert done.stdout.splitlines() == ["output 1", "closing after 4 events"]
    assert "event sink 'never-closes' did not finish close() within 1 s" in done.stderr


def test_closing_waits_for_close_up_to_the_deadline_and_names_the_sink(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    class SlowToClose(RecordingSink):
        def close(self) -> None:
            release.wait(10)
            super().close()

    slow, quick = SlowToClose(), RecordingSink()
    hub = SinkHub({"slow-close": slow, "quick": quick})
    with caplog.at_level(logging.WARNING, "groundswell.sinks"):
        hub.close(timeout=0.2)
    assert quick.closed and not slow.closed
    assert "event sink 'slow-close' did not finish close() within 0.2 s" in caplog.text
    release.set()


class AskedSink(RecordingSink):
    """A sink that takes only the runs that ask for it."""

    every_run = False


@workflow(name="asks")
async def asks(ctx: WorkflowContext) -> int:
    await ctx.step("before", lambda: 1)

    async def join() -> int:
        groundswell.record_event("note", n=1)
        assert groundswell.observe_run("asked")
        return 2

    await ctx.step("join", join)
    return await ctx.step("after", lambda: 3)


async def test_a_sink_that_takes_only_runs_that_ask_gets_those_from_where_they_asked(
    add_sink: Callable[..., str],
) -> None:
    asked = AskedSink()
    add_sink(asked, "asked")
    await observed.run()  # never asks
    result = await asks.run()
    assert groundswell.flush_sinks()
    assert {e.run_id for e in asked.events} == {result.node.id}
    step = result.tree.find(name="join")[0]
    # First the path from the root to where the run asked, as it was then...
    (root_start, step_start), rest = asked.events[:2], asked.events[2:]
    assert (root_start.kind, root_start.node) == ("node_start", result.node)
    assert (step_start.kind, step_start.node) == ("node_start", step)
    assert step_start.data["status"] == "running"
    assert [e["type"] for e in step_start.data["events"]] == ["note"]
    # ...then every later event of the run; nothing of "before", which ended earlier.
    assert [(e.kind, e.node.name) for e in rest] == [
        ("node_end", "join"),
        ("node_start", "after"),
        ("node_end", "after"),
        ("node_end", "asks"),
    ]
    assert groundswell.observe_run("asked") is False  # outside any run


async def test_asking_again_sends_the_path_again_and_unknown_names_are_refused(
    add_sink: Callable[..., str],
) -> None:
    asked = AskedSink()
    add_sink(asked, "asked")

    @workflow(name="twice")
    async def twice(ctx: WorkflowContext) -> None:
        assert groundswell.observe_run("no-such-sink") is False
        assert groundswell.observe_run(AskedSink)  # a class: every sink of that class
        await ctx.step("s", lambda: groundswell.observe_run("asked"))

    result = await twice.run()
    assert groundswell.flush_sinks()
    assert [(e.kind, e.node.name) for e in asked.events] == [
        ("node_start", "twice"),
        ("node_start", "s"),
        ("node_start", "twice"),  # the path again, root first
        ("node_start", "s"),
        ("node_end", "s"),
        ("node_end", "twice"),
    ]
    assert result.output is None


def test_a_run_that_no_sink_takes_is_not_observed_until_it_asks() -> None:
    asked, every = AskedSink(), RecordingSink()
    hub = SinkHub({"asked": asked})
    try:
        assert hub.run_delivery() is None  # a new run's tree would not be observed
        tree = EventTree()
        root = tree.start_node("workflow", "quiet")
        assert not tree.observed
        assert hub.join("asked", tree, lambda: [Event("node_start", root, {}, root.id)])
        tree.end_node(root, "completed")
        hub.add("every", every)
        assert hub.run_delivery() == hub.deliver
        assert hub.flush()
        assert asked.kinds() == ["node_start", "node_end"]
        assert every.events == []  # a sink taking every run gets new runs, not this one
    finally:
        hub.close()


def test_every_run_must_be_a_bool() -> None:
    class Unsure(RecordingSink):
        every_run = "sometimes"

    with pytest.raises(TypeError, match="every_run must be True"):
        SinkHub({"unsure": Unsure()})


def test_a_flush_that_returns_false_is_called_again_later() -> None:
    class Retrying(RecordingSink):
        def __init__(self) -> None:
            super().__init__()
            self.flushes = 0

        def flush(self) -> bool | None:
            self.flushes += 1
            return False if self.flushes < 4 else None  # could not finish, three times

    sink = Retrying()
    hub = SinkHub({"retrying": sink})
    try:
        tree = EventTree()
        tree.dispatch_to(hub.dispatch)
        tree.start_node("workflow", "once")
        deadline = time.monotonic() + 5
        while sink.flushes < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert sink.flushes == 4  # no new events: called again only while it said False
        assert hub.stats()["retrying"]["errors"] == 0
    finally:
        hub.close()
