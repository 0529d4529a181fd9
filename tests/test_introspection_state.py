"""``inspect_state_snapshot``: a snapshot picked by time, changes from/to, a state summary."""

from __future__ import annotations

import asyncio
from typing import Any

from groundswell import Agent, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, FunctionModel, MessagesRequest, text, tool_calls

from .test_introspection_hierarchy import answers


async def test_state_at_a_snapshot_its_changes_and_a_summary() -> None:
    def model(req: MessagesRequest) -> Any:
        seen = answers(req)
        if not seen:
            return tool_calls(("inspect_state_snapshot", {"include_history": True}))
        if len(seen) == 1:
            first, second, third = (h["timestamp"] for h in seen[0]["history"])
            return tool_calls(
                ("inspect_state_snapshot", {"snapshot_timestamp": second}),
                ("inspect_state_snapshot", {"snapshot_timestamp": second * 1000}),
                ("inspect_state_snapshot", {"snapshot_timestamp": first - 60}),
                (
                    "inspect_state_snapshot",
                    {
                        "snapshot_timestamp": third,
                        "properties": ["rows"],
                        "include_history": True,
                        "history_limit": 2,
                    },
                ),
            )
        return text("rows went 0, 40, 55")

    fake = FakeAnthropicAPI(FunctionModel(model))
    agent = Agent(name="historian", tools=["introspection"], client=fake.client())

    @workflow(name="survey")
    async def survey(ctx: WorkflowContext) -> str:
        ctx.state.update(stage="draft", rows=0, scratch="tmp")
        await ctx.step("start", lambda: None)
        await asyncio.sleep(0.005)  # snapshots a few milliseconds apart
        ctx.state["rows"] = 40
        await ctx.step("count", lambda: None)
        await asyncio.sleep(0.005)
        ctx.state.update(stage="final", rows=55)
        del ctx.state["scratch"]
        await ctx.step("finish", lambda: None)
        return await ctx.step("ask", lambda: agent.prompt("How did the survey go?"))

    run = await survey.run()
    assert run.output == "rows went 0, 40, 55"
    whole, at_second, in_ms, too_early, rows_only = answers(fake.requests[-1])

    assert whole["state"] == {"stage": "final", "rows": 55}
    history = whole["history"]
    assert [(h["sequence_number"], h["node_name"]) for h in history] == [
        (1, "start"),
        (2, "count"),
        (3, "finish"),
    ]
    assert history[0]["changes_from_previous"]["rows"] == {"from": None, "to": 0, "added": True}
    assert history[1]["changes_from_previous"] == {"rows": {"from": 0, "to": 40}}
    assert history[2]["changes_from_previous"] == {
        "rows": {"from": 40, "to": 55},
        "scratch": {"from": "tmp", "to": None, "removed": True},
        "stage": {"from": "draft", "to": "final"},
    }
    summary = whole["state_summary"]
    assert summary["property_count"] == 2 and summary["snapshot_count"] == 3
    span = (history[2]["timestamp"] - history[0]["timestamp"]) * 1000
    assert summary["time_span_ms"] == round(span, 3) and summary["time_span_ms"] >= 10
    # Four changes over two later snapshots of a two-key state: everything moves.
    assert summary["state_volatility"] == "high"
    assert summary["most_changed"][0] == {"property": "rows", "changes": 2}

    assert at_second["state"] == {"stage": "draft", "rows": 40, "scratch": "tmp"}
    assert at_second["snapshot"]["sequence_number"] == 2
    assert at_second["snapshot"]["node_name"] == "count"
    assert at_second["snapshot"]["timestamp"] == history[1]["timestamp"]
    assert at_second["state_summary"]["snapshot_count"] == 2
    assert in_ms["state"] == at_second["state"] and in_ms["snapshot"] == at_second["snapshot"]

    first = history[0]["timestamp"]
    assert too_early == {
        "error": f"ToolError: inspect_state_snapshot: no snapshot of 'survey' at or before "
        f"{first - 60}; the first was taken at {first}"
    }

    assert rows_only["state"] == {"rows": 55}
    assert [h["sequence_number"] for h in rows_only["history"]] == [2, 3]
    assert [h["changes_from_previous"] for h in rows_only["history"]] == [
        {"rows": {"from": 0, "to": 40}},
        {"rows": {"from": 40, "to": 55}},
    ]
    assert rows_only["state_summary"]["property_count"] == 1


async def test_a_workflow_without_snapshots_says_so_when_asked_for_one() -> None:
    fake = FakeAnthropicAPI(
        [tool_calls(("inspect_state_snapshot", {"snapshot_timestamp": 1.0})), text("none")]
    )
    agent = Agent(name="reader", tools=["introspection"], client=fake.client())

    @workflow(name="blank")
    async def blank(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: agent.prompt("Any state?"))

    await blank.run()
    (answer,) = answers(fake.requests[-1])
    assert answer == {
        "error": "ToolError: inspect_state_snapshot: workflow 'blank' has recorded no state "
        "snapshots yet; leave snapshot_timestamp out to read its state now"
    }
