"""When the history sink commits: on a size bound, on a time bound, at close, and what a
crash can lose. Real agents on the fake API, a real store (SQLite and PostgreSQL), read
back through a connection of its own."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from groundswell_history import HistorySink, HistoryStore

import groundswell
from groundswell import Agent, ConfigurationError, Event
from groundswell.testing import FakeAnthropicAPI

# A session of one model turn is three operations: its start, the turn, its end.
OPERATIONS_PER_SESSION = 3


class NeverCaughtUp:
    """Hands every event to a history sink but never calls its ``flush()``: the hub's
    "you have caught up" signal never comes, as when prompts arrive faster than the
    sink writes them. Only the sink's own bounds (and its close) commit."""

    def __init__(self, sink: HistorySink) -> None:
        self.sink = sink

    def handle(self, event: Event) -> None:
        self.sink.handle(event)

    def close(self) -> None:
        self.sink.close()


@pytest.fixture
def attach(add_sink: Callable[..., str]) -> Callable[[HistorySink], str]:
    """Attach a history sink behind `NeverCaughtUp`; returns its plugin's name."""

    def attach(sink: HistorySink) -> str:
        return f"plugin-{add_sink(NeverCaughtUp(sink), name=f'history-{uuid.uuid4().hex[:8]}')}"

    return attach


def agent_name() -> str:
    # Unique per test, so runs sharing one PostgreSQL database never count each other.
    return f"sink-{uuid.uuid4().hex[:10]}"


def completed(store: HistoryStore, agent: str) -> int:
    return sum(s.status == "completed" for s in store.sessions(agent))


async def test_sessions_are_committed_every_commit_every_operations(
    history_store: HistoryStore, attach: Callable[[HistorySink], str]
) -> None:
    sink = HistorySink(history_store.url, record_all=True, commit_every=30, commit_s=3600)
    attach(sink)
    name = agent_name()
    agent = Agent(name=name, client=FakeAnthropicAPI().client())
    for _ in range(21):
        await agent.prompt("hi")
    assert groundswell.flush_sinks()  # every event handled; the sink was never told so
    # 63 operations: two commits of 30, and the last session's 3 still wait.
    assert sink.committed == 60 and sink.pending == OPERATIONS_PER_SESSION
    assert completed(history_store, name) == 20


async def test_sessions_become_visible_within_commit_s_while_prompts_keep_coming(
    history_store: HistoryStore, attach: Callable[[HistorySink], str]
) -> None:
    sink = HistorySink(history_store.url, record_all=True, commit_every=1_000_000, commit_s=0.2)
    attach(sink)
    name = agent_name()
    agent = Agent(name=name, client=FakeAnthropicAPI().client())
    stop = asyncio.Event()

    async def stream() -> int:
        sent = 0
        while not stop.is_set():
            await agent.prompt("hi")
            sent += 1
            await asyncio.sleep(0.002)
        return sent

    prompts = asyncio.create_task(stream())
    seen: list[int] = []
    deadline = time.monotonic() + 60  # generous: only a sink that never commits reaches it
    try:
        # Two commits seen by another connection, with prompts still coming.
        while len(set(seen) - {0}) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            seen.append(await asyncio.to_thread(completed, history_store, name))
        assert not prompts.done()
    finally:
        stop.set()
        sent = await prompts
    assert len(set(seen) - {0}) >= 2, f"no commits within 60 s; seen {seen[-5:]}"
    assert seen[-1] <= sent


async def test_close_commits_what_is_left(
    history_store: HistoryStore, attach: Callable[[HistorySink], str]
) -> None:
    sink = HistorySink(history_store.url, record_all=True, commit_every=1_000, commit_s=3600)
    plugin = attach(sink)
    name = agent_name()
    agent = Agent(name=name, client=FakeAnthropicAPI().client())
    for _ in range(5):
        await agent.prompt("hi")
    assert groundswell.flush_sinks()
    assert sink.pending == 5 * OPERATIONS_PER_SESSION and completed(history_store, name) == 0
    groundswell.get_plugin_manager().unregister(plugin)  # the hub closes its sinks
    assert sink.pending == 0
    assert completed(history_store, name) == 5


CRASHING = """
import asyncio, sys
import groundswell
from groundswell import Agent, EventSink, hookimpl
from groundswell.testing import FakeAnthropicAPI
from groundswell_history import HistorySink

url, name = sys.argv[1], sys.argv[2]
sink = HistorySink(url, record_all=True)  # bounds from GROUNDSWELL_HISTORY_COMMIT_*


class NeverCaughtUp:
    def handle(self, event):
        sink.handle(event)

    def close(self):
        sink.close()


class Plugin:
    @hookimpl
    def register_event_sinks(self):
        return EventSink(name="crash-history", factory=NeverCaughtUp)


groundswell.get_plugin_manager().register(Plugin(), name="crash-history")


async def main():
    agent = Agent(name=name, client=FakeAnthropicAPI().client())
    for sent in range(1, 1_000_000):
        await agent.prompt(f"prompt {sent}")
        # committed first: a commit between the two reads can only make this smaller.
        queued = sink.committed + sink.pending
        print(sent, queued, flush=True)
        # A moment with the GIL free: else this busy loop lets the sink's thread run
        # only now and then, and the child needs tens of thousands of prompts (and up to
        # a minute) to hand it the operations the test waits for.
        await asyncio.sleep(0.001)


asyncio.run(main())
"""


@pytest.mark.slow  # kills real processes mid-write, on both stores
def test_a_killed_process_loses_at_most_the_last_bound(
    history_store: HistoryStore, tmp_path: Any
) -> None:
    every = 60
    name = agent_name()
    env = {
        **os.environ,
        "GROUNDSWELL_HOME": str(tmp_path),  # the bundled sink records nothing here
        "GROUNDSWELL_HISTORY_COMMIT_EVERY": str(every),
        "GROUNDSWELL_HISTORY_COMMIT_S": "3600",
    }
    env.pop("GROUNDSWELL_HISTORY_URL", None)
    command = [sys.executable, "-c", textwrap.dedent(CRASHING), history_store.url, name]
    lines: list[str] = []
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        try:
            for line in child.stdout:  # ends early only if the child dies on its own
                lines.append(line)
                if int(line.split()[1]) >= 10 * every:  # several commits in, mid-stream
                    child.send_signal(signal.SIGKILL)
                    break
        finally:
            if child.poll() is None:
                child.kill()
            lines += child.stdout.read().splitlines()
    assert child.returncode == -signal.SIGKILL, "the child stopped before it was killed"
    sent, queued = map(int, next(x for x in reversed(lines) if len(x.split()) == 2).split())

    sessions = history_store.sessions(name, include_iterations=True)
    ended = [s for s in sessions if s.status == "completed"]
    committed = len(sessions) + sum(len(s.iterations or []) for s in sessions) + len(ended)
    # What the sink had queued when it was killed, less what it had committed, is at
    # most one commit's worth of operations (waiting, or in the commit it died in)...
    assert queued - committed <= every, (sent, queued, committed)
    assert committed > 0
    # ...and what was committed is every session up to some point, none missing.
    numbers = sorted(int(s.metadata["user"].split()[1]) for s in ended)
    assert numbers == list(range(1, len(ended) + 1))
    assert len(ended) <= sent


def test_commit_bounds_must_be_above_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="commit_every=0 must be a whole number"):
        HistorySink("sqlite:///unused.db", commit_every=0)
    monkeypatch.setenv("GROUNDSWELL_HISTORY_COMMIT_S", "soon")
    with pytest.raises(ConfigurationError, match="GROUNDSWELL_HISTORY_COMMIT_S='soon'"):
        HistorySink("sqlite:///unused.db")
    monkeypatch.setenv("GROUNDSWELL_HISTORY_COMMIT_S", "0.5")
    monkeypatch.setenv("GROUNDSWELL_HISTORY_COMMIT_EVERY", "20")
    sink = HistorySink("sqlite:///unused.db")
    assert (sink.commit_every, sink.commit_s) == (20, 0.5)


class Hijacker:
    """Takes each prompt's session id for "mallory" (as a client of the sessions API
    could) just before the history sink sees the prompt start."""

    def __init__(self, sink: HistorySink, store: HistoryStore) -> None:
        self.sink, self.store = sink, store
        self.taken: list[str] = []

    def handle(self, event: Event) -> None:
        if event.kind == "node_start" and event.data.get("type") == "prompt":
            self.taken.append(str(event.data["id"]))
            self.store.create_session("mallory", session_id=self.taken[-1])
        self.sink.handle(event)

    def flush(self) -> None:
        self.sink.flush()

    def close(self) -> None:
        self.sink.close()


async def test_a_session_taken_by_another_agent_does_not_collect_the_runs_turns(
    history_store: HistoryStore, add_sink: Callable[..., str]
) -> None:
    sink = HistorySink(history_store.url, record_all=True)
    hijacker = Hijacker(sink, history_store)
    add_sink(hijacker, name=f"history-{uuid.uuid4().hex[:8]}")
    name = agent_name()
    agent = Agent(name=name, client=FakeAnthropicAPI().client())
    assert await agent.prompt("hi") is not None
    assert groundswell.flush_sinks()
    (sid,) = hijacker.taken
    taken = history_store.session(sid)
    assert taken is not None and taken.agent_id == "mallory"
    # Neither the run's model turn nor its end reached mallory's session.
    assert taken.iterations == [] and taken.status == "running"
    assert sink.dropped == 1  # the run's own start, refused: the id was taken
    assert sink.committed == 2 and sink.pending == 0  # its turn and end were written, to no one
