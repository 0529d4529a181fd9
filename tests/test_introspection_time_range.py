"""``read_event_history``'s time range: ``since`` and ``until`` (Unix seconds, both inclusive).

The bounds come from the timestamps a first, unbounded call returned, so the
test never guesses at the wall clock.
"""

from __future__ import annotations

import asyncio
from typing import Any

from groundswell import Agent, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_calls, tool_use

from .test_introspection_hierarchy import answers


def at(events: list[dict[str, Any]], kind: str, name: str) -> float:
    """The timestamp of the ``kind`` event of the node called ``name``."""
    (found,) = [e["timestamp"] for e in events if e["type"] == kind and e["node_name"] == name]
    return float(found)


def seen(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["node_name"]) for e in events]


async def test_since_and_until_return_only_the_events_inside_the_range() -> None:
    def model(request: MessagesRequest) -> Reply:
        got = answers(request)
        if not got:
            return tool_use("read_event_history", {"order": "asc", "limit": 1000})
        if len(got) == 1:
            events = got[0]["events"]
            two_start, two_end = at(events, "node_start", "two"), at(events, "node_end", "two")
            return tool_calls(
                ("read_event_history", {"since": two_start, "until": two_end, "order": "asc"}),
                ("read_event_history", {"until": at(events, "node_end", "one"), "order": "asc"}),
                ("read_event_history", {"since": at(events, "node_start", "three")}),
                ("read_event_history", {"since": two_end, "until": two_start}),
            )
        return text("read")

    fake = FakeAnthropicAPI(model)
    agent = Agent(name="historian", tools=["introspection"], client=fake.client())

    @workflow(name="job")
    async def job(ctx: WorkflowContext) -> str:
        for name in ("one", "two", "three"):
            await ctx.step(name, lambda done=name: done)
            await asyncio.sleep(0.02)  # the steps' events a clear time apart
        return await ctx.step("review", lambda: agent.prompt("What happened?"))

    run = await job.run()
    assert run.output == "read"
    everything, between, up_to_one, from_three, backwards = answers(fake.requests[-1])
    events = everything["events"]
    two_start, two_end = at(events, "node_start", "two"), at(events, "node_end", "two")

    # Both bounds are inclusive: the events at exactly `since` and `until` are there.
    assert seen(between["events"]) == [("node_start", "two"), ("node_end", "two")]
    assert [e["timestamp"] for e in between["events"]] == [two_start, two_end]
    assert between["summary"]["first_at"] == two_start
    assert between["summary"]["last_at"] == two_end
    assert between["total"] == 2 and not between["truncated"]

    # `until` alone: the run's start up to the end of step one.
    assert seen(up_to_one["events"]) == [
        ("node_start", "job"),
        ("node_start", "one"),
        ("node_end", "one"),
    ]

    # `since` alone: step three onward, newer events too (the default order is newest first).
    later = from_three["events"]
    assert seen(later)[-1] == ("node_start", "three")
    assert all(e["timestamp"] >= at(events, "node_start", "three") for e in later)
    assert not {e["node_name"] for e in later} & {"one", "two"}
    assert {"three", "review", "historian"} <= {e["node_name"] for e in later}
    stamps = [e["timestamp"] for e in later]
    assert stamps == sorted(stamps, reverse=True)

    # A range that ends before it starts holds nothing.
    assert backwards["total"] == 0 and backwards["events"] == []
    assert backwards["summary"]["time_span_ms"] == 0.0
