"""A prompt its caller cancels, or whose stream it stops reading, ends ``cancelled``.

Through the public API, against the offline fake on the real anthropic client, with
the history plugin recording: the prompt node in the tree says ``cancelled``; the
session in the history store and what the introspection HTTP API answers say
``terminated``, the session-history harness's name for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from groundswell_history import HistoryStore, create_app, relevance

import groundswell
from groundswell import Agent, NodeStatus, NodeType, StreamEvent, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, Reply, text, tool_use

from .conftest import RecordingSink
from .test_history_api import SECRET, Server, auth

LONG = "word " * 200  # many text deltas: the fake sends them all before the first is read


def slow(value: str, delay: float) -> Reply:
    reply = text(value)
    reply.delay = delay
    return reply


def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"Sunny in {city}"


@pytest.fixture
def store(recording_store: HistoryStore) -> HistoryStore:
    return recording_store


@pytest.fixture
def api(store: HistoryStore) -> Iterator[httpx2.Client]:
    with (
        Server(create_app(store, secret=SECRET)) as server,
        httpx2.Client(base_url=server.url, timeout=10) as client,
    ):
        yield client


def prompt_statuses(sink: RecordingSink, agent: str) -> list[str]:
    """The statuses the prompt nodes of ``agent`` ended with, as the sinks saw them."""
    assert groundswell.flush_sinks()
    return [
        str(e.data["status"])
        for e in list(sink.events)
        if e.kind == "node_end" and e.node.type == NodeType.PROMPT and e.node.name == agent
    ]


async def ended(sink: RecordingSink, agent: str, count: int = 1) -> list[str]:
    """Wait (briefly) until ``count`` prompt nodes of ``agent`` ended; their statuses."""
    deadline = time.monotonic() + 10
    while len(prompt_statuses(sink, agent)) < count:
        assert time.monotonic() < deadline, f"no prompt of {agent!r} ended"
        await asyncio.sleep(0.01)
    return prompt_statuses(sink, agent)


async def model_called(fake: FakeAnthropicAPI) -> None:
    """Wait until the fake has received a request: the model call is under way."""
    for _ in range(1000):
        if fake.requests:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the model was never called")


def session_statuses(store: HistoryStore, agent: str) -> list[str]:
    assert groundswell.flush_sinks()
    return [s.status for s in store.sessions(agent)]


async def test_a_prompt_cancelled_mid_model_call_is_cancelled_in_tree_history_and_api(
    store: HistoryStore, recording_sink: RecordingSink, api: httpx2.Client
) -> None:
    fake = FakeAnthropicAPI([slow("never read", 30)])
    agent = Agent(name="impatient", history=True, client=fake.client())
    task = asyncio.create_task(agent.run("take your time"))
    await model_called(fake)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await ended(recording_sink, "impatient") == ["cancelled"]
    model_calls = [
        e.data["status"]
        for e in recording_sink.events
        if e.kind == "node_end" and e.node.type == NodeType.MODEL_CALL
    ]
    assert model_calls == ["cancelled"]
    assert session_statuses(store, "impatient") == ["terminated"]
    (session,) = store.sessions("impatient", include_iterations=True)
    assert session.error is None
    assert session.iterations and session.iterations[0]["status"] == "terminated"
    answer = api.get(
        "/api/introspection/impatient",
        params={"min_relevance": 0, "include_failures": "true"},
        headers=auth("impatient"),
    )
    assert answer.status_code == 200, answer.text
    assert [s["status"] for s in answer.json()["sessions"]] == ["terminated"]
    # A terminated session neither succeeded nor failed: scored like one that did not finish.
    assert relevance(session, now=session.started_at) == pytest.approx(0.3 + 0.1)


async def test_a_step_cancelled_with_its_prompt_records_a_terminated_session(
    store: HistoryStore,
) -> None:
    fake = FakeAnthropicAPI([slow("never read", 30)])
    agent = Agent(name="stepped", history=True, client=fake.client())

    @workflow
    async def slow_review(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: agent.prompt("review"))

    task = asyncio.create_task(slow_review.run())
    await model_called(fake)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert session_statuses(store, "stepped") == ["terminated"]


async def consume_one(stream: AsyncIterator[StreamEvent]) -> StreamEvent:
    """Read one event and leave the ``async for`` without closing the stream."""
    async for event in stream:
        return event
    raise AssertionError("the stream had no events")


async def test_leaving_a_stream_early_without_aclosing_cancels_the_prompt(
    store: HistoryStore, recording_sink: RecordingSink
) -> None:
    fake = FakeAnthropicAPI([text(LONG)])
    agent = Agent(name="skimmer", history=True, client=fake.client())
    first = await consume_one(agent.stream("write a lot"))
    assert first.type == "text"
    # The stream is not closed here: Python's finalizer for the dropped generator closes
    # it soon after, and only then does the prompt end, cancelled.
    assert await ended(recording_sink, "skimmer") == ["cancelled"]
    assert session_statuses(store, "skimmer") == ["terminated"]


async def test_a_stream_kept_in_a_reference_cycle_is_cancelled_when_collected(
    store: HistoryStore, recording_sink: RecordingSink
) -> None:
    agent = Agent(name="cyclic", history=True, client=FakeAnthropicAPI([text(LONG)]).client())

    class Holder:
        stream: AsyncIterator[StreamEvent]
        me: Any

    holder = Holder()
    holder.stream, holder.me = agent.stream("write a lot"), holder
    await consume_one(holder.stream)
    await asyncio.sleep(0.05)
    assert prompt_statuses(recording_sink, "cyclic") == []  # still waiting for its reader
    del holder
    gc.collect()
    assert await ended(recording_sink, "cyclic") == ["cancelled"]
    assert session_statuses(store, "cyclic") == ["terminated"]


def test_a_stream_left_open_is_cancelled_when_the_loop_shuts_down(
    store: HistoryStore, recording_sink: RecordingSink
) -> None:
    agent = Agent(name="abandoned", history=True, client=FakeAnthropicAPI([text(LONG)]).client())
    kept: list[AsyncIterator[StreamEvent]] = []

    async def main() -> None:
        kept.append(agent.stream("write a lot"))
        await consume_one(kept[0])

    asyncio.run(main())  # cancels the prompt's task, then shutdown_asyncgens closes the stream
    assert prompt_statuses(recording_sink, "abandoned") == ["cancelled"]
    assert session_statuses(store, "abandoned") == ["terminated"]


async def test_leaving_a_stream_early_with_aclosing_or_an_error_cancels_the_prompt(
    store: HistoryStore, recording_sink: RecordingSink
) -> None:
    fake = FakeAnthropicAPI([text(LONG), tool_use("lookup", {"city": "Oslo"}), text(LONG)])
    agent = Agent(name="closer", tools=[lookup], history=True, client=fake.client())
    async with contextlib.aclosing(agent.stream("write a lot")) as events:
        async for event in events:
            assert event.type == "text"
            break
    # Closed: the prompt has ended already, nothing left to wait for.
    assert prompt_statuses(recording_sink, "closer") == ["cancelled"]

    seen: list[str] = []

    async def give_up_after_the_tool() -> None:
        async with contextlib.aclosing(agent.stream("weather?")) as events:
            async for event in events:
                seen.append(event.type)
                if event.type == "tool_result":
                    raise LookupError("the reader gave up")

    with pytest.raises(LookupError):
        await give_up_after_the_tool()
    assert "tool_call" in seen
    assert prompt_statuses(recording_sink, "closer") == ["cancelled", "cancelled"]
    assert session_statuses(store, "closer") == ["terminated", "terminated"]


async def test_a_stream_whose_reader_is_cancelled_cancels_the_prompt(
    store: HistoryStore, recording_sink: RecordingSink
) -> None:
    fake = FakeAnthropicAPI([slow("never read", 30)])
    agent = Agent(name="reader-gone", history=True, client=fake.client())

    async def read() -> list[StreamEvent]:
        return [event async for event in agent.stream("take your time")]

    task = asyncio.create_task(read())
    await model_called(fake)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await ended(recording_sink, "reader-gone") == ["cancelled"]
    assert session_statuses(store, "reader-gone") == ["terminated"]


async def test_a_stream_read_to_its_result_completes_even_when_read_slowly(
    store: HistoryStore, recording_sink: RecordingSink
) -> None:
    fake = FakeAnthropicAPI([tool_use("lookup", {"city": "Oslo"}), text(LONG)])
    agent = Agent(name="reader", tools=[lookup], history=True, client=fake.client())
    kinds: list[str] = []
    async for event in agent.stream("weather?"):
        kinds.append(event.type)
        await asyncio.sleep(0)  # a reader slower than the fake
    assert kinds[-1] == "result" and "tool_result" in kinds
    assert prompt_statuses(recording_sink, "reader") == ["completed"]
    # The same with aclosing, in a workflow step.
    brief = Agent(name="reader", history=True, client=FakeAnthropicAPI([text("short")]).client())

    @workflow
    async def summarise(ctx: WorkflowContext) -> str:
        async def read() -> str:
            async with contextlib.aclosing(brief.stream("again")) as events:
                return "".join([e.text or "" async for e in events])

        return await ctx.step("read", read)

    result = await summarise.run()
    assert result.output == "short"
    (node,) = result.tree.find(type=NodeType.PROMPT)
    assert node.status is NodeStatus.COMPLETED
    assert session_statuses(store, "reader") == ["completed", "completed"]
