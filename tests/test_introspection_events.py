"""``read_event_history``: failures, warnings, a summary, a workflow filter, full context."""

from __future__ import annotations

import contextlib
from typing import Any

import groundswell
from groundswell import Agent, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, FunctionModel, MessagesRequest, text, tool_calls

from .test_introspection_hierarchy import answers


def lookup(city: str) -> str:
    """Look up the weather."""
    return f"sunny in {city}"


@workflow(name="child-a")
async def child_a(ctx: WorkflowContext) -> str:
    return await ctx.step("a1", lambda: "a")


@workflow(name="child-b")
async def child_b(ctx: WorkflowContext) -> str:
    return await ctx.step("b1", lambda: "b")


async def test_history_marks_failures_and_warnings_summarizes_and_filters_by_workflow() -> None:
    def model(req: MessagesRequest) -> Any:
        seen = answers(req)
        if not seen:
            return tool_calls(
                ("inspect_current_node", {}),
                ("lookup", {"city": "Oslo"}),
                ("inspect_hierarchy", {"depth_mode": "full_tree"}),
            )
        if len(seen) == 3:
            ids = {n["name"]: n["id"] for n in seen[2]["nodes"]}
            return tool_calls(
                (
                    "read_event_history",
                    {"event_types": ["error", "warning"], "include_full_context": True},
                ),
                ("read_event_history", {"workflow_id": ids["child-a"], "order": "asc"}),
                ("read_event_history", {"order": "asc", "limit": 1000}),
                ("read_event_history", {"workflow_id": ids["fetch"]}),
                ("read_event_history", {"workflow_id": ids["child-a"], "scope": "current"}),
            )
        return text("parse failed on row 7")

    fake = FakeAnthropicAPI(FunctionModel(model))
    agent = Agent(name="medic", tools=["introspection", lookup], client=fake.client())

    def parse() -> None:
        raise ValueError("bad row 7")

    def check_disk() -> str:
        groundswell.record_event("disk_warning", free_mb=12)
        return "low"

    @workflow(name="job")
    async def job(ctx: WorkflowContext) -> str:
        await ctx.step("fetch", lambda: "data")
        with contextlib.suppress(ValueError):  # the run goes on; the failure stays in the tree
            await ctx.step("parse", parse)
        await ctx.step("disk", check_disk)
        await ctx.spawn_workflow(child_a)
        await ctx.spawn_workflow(child_b)
        return await ctx.step("review", lambda: agent.prompt("What went wrong?"))

    run = await job.run()
    assert run.output == "parse failed on row 7"
    problems, only_a, everything, not_a_workflow, both = answers(fake.requests[-1])[3:]
    (job_node,) = run.tree.find(type="workflow", name="job")
    (a_node,) = run.tree.find(type="workflow", name="child-a")

    failed, warned = sorted(problems["events"], key=lambda e: e["timestamp"])
    assert failed["type"] == "node_end" and failed["node_name"] == "parse"
    assert failed["level"] == "error" and failed["data"] == {"status": "failed"}
    assert failed["error_type"] == "ValueError" and failed["message"] == "bad row 7"
    assert failed["workflow_id"] == job_node.id and failed["workflow_name"] == "job"
    # Full context: where it was raised.
    assert failed["error"]["traceback"][-1]["function"] == "parse"
    assert warned["type"] == "disk_warning" and warned["level"] == "warning"
    assert warned["data"] == {"free_mb": 12} and warned["node_name"] == "disk"
    summary = problems["summary"]
    assert summary["errors_count"] == 1 and summary["warnings_count"] == 1
    assert summary["event_types_found"] == ["disk_warning", "node_end"]
    assert summary["time_span_ms"] == round((warned["timestamp"] - failed["timestamp"]) * 1000, 3)

    assert {e["workflow_id"] for e in only_a["events"]} == {a_node.id}
    assert [(e["type"], e["node_name"]) for e in only_a["events"]] == [
        ("node_start", "child-a"),
        ("node_start", "a1"),
        ("node_end", "a1"),
        ("node_end", "child-a"),
    ]
    assert only_a["summary"]["errors_count"] == 0

    # The agent's own look-only calls are internal: hidden, but counted.
    names = {e["node_name"] for e in everything["events"]}
    assert "lookup" in names and "child-b" in names
    assert not names & {"inspect_current_node", "inspect_hierarchy", "read_event_history"}
    assert everything["summary"]["internal_events_hidden"] >= 4
    assert everything["summary"]["successful_tools"] == 1  # lookup
    assert everything["summary"]["failed_tools"] == 0

    assert not_a_workflow == {
        "error": f"ToolError: read_event_history: {run.tree.find(name='fetch')[0].id!r} is a "
        "step node ('fetch'), not a workflow"
    }
    assert both == {
        "error": "ToolError: read_event_history: give workflow_id or scope='current', not both"
    }
