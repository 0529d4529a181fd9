"""``request_spawn_workflow``: a named child, where it mounts, how to follow it, resource limits."""

from __future__ import annotations

import asyncio
from typing import Any

from groundswell import Agent, NodeType, Workflow, WorkflowContext, workflow
from groundswell.testing import (
    FakeAnthropicAPI,
    FunctionModel,
    MessagesRequest,
    text,
    tool_calls,
    tool_use,
)

from .test_introspection_hierarchy import answers


@workflow(name="report")
async def report(ctx: WorkflowContext, topic: str) -> dict[str, Any]:
    """Write a report about a topic."""
    ctx.state["topic"] = topic
    return await ctx.step("write", lambda: {"topic": topic, "pages": 2})


async def test_a_named_child_says_where_it_runs_and_how_to_inspect_it() -> None:
    def model(req: MessagesRequest) -> Any:
        seen = answers(req)
        if not seen:
            return tool_use(
                "request_spawn_workflow",
                {"template": "report", "input": {"topic": "cats"}, "child_workflow_name": "cats"},
            )
        if len(seen) == 1:
            follow = [(c["tool"], c["input"]) for c in seen[0]["can_be_inspected_via"]]
            return tool_calls(*follow)
        if len(seen) == 5:
            spawn = {
                "template": "report",
                "input": {"topic": "dogs"},
                "child_workflow_name": "dogs in the background",
                "wait": False,
            }
            return tool_use("request_spawn_workflow", spawn)
        return text("two reports")

    fake = FakeAnthropicAPI(FunctionModel(model))
    agent = Agent(
        name="planner", tools=["introspection"], spawnable={"report": report}, client=fake.client()
    )

    @workflow(name="planning")
    async def planning(ctx: WorkflowContext) -> str:
        return await ctx.step("plan", lambda: agent.prompt("Write the reports"))

    run = await planning.run()
    assert run.output == "two reports"
    spawned, prior, hierarchy, events, state, background = answers(fake.requests[-1])
    (cats,) = run.tree.find(type=NodeType.WORKFLOW, name="cats")
    call = run.tree.get_node(cats.parent_id)  # type: ignore[arg-type]
    (planning_node,) = run.tree.find(type=NodeType.WORKFLOW, name="planning")

    assert call.type is NodeType.TOOL_CALL and call.name == "request_spawn_workflow"
    assert spawned["status"] == "completed" and spawned["workflow_id"] == cats.id
    assert spawned["child_workflow_name"] == "cats" and spawned["template"] == "report"
    assert spawned["parent_workflow_id"] == planning_node.id
    assert spawned["parent_node_id"] == call.id
    assert spawned["execution_mode"] == "sequential"
    assert spawned["resource_limits"] == {
        "timeout_seconds": 300.0,
        "token_budget": None,
        "max_usd": None,
    }
    assert spawned["output"] == {"topic": "cats", "pages": 2}
    assert spawned["can_be_inspected_via"] == [
        {"tool": "inspect_prior_outputs", "input": {"node_id": cats.id}},
        {"tool": "inspect_hierarchy", "input": {"node_id": cats.id}},
        {"tool": "read_event_history", "input": {"workflow_id": cats.id}},
        {"tool": "inspect_state_snapshot", "input": {"workflow_id": cats.id}},
    ]
    # Each suggested call really shows the child.
    assert prior["nodes"][0]["name"] == "cats" and prior["nodes"][0]["status"] == "completed"
    assert hierarchy["current"]["path"].endswith("request_spawn_workflow/cats")
    assert {e["workflow_name"] for e in events["events"]} == {"cats"}
    assert state["workflow"] == "cats" and state["state"] == {"topic": "cats"}

    assert background["status"] == "running" and background["execution_mode"] == "parallel"
    dogs = run.tree.get_node(background["workflow_id"])
    assert dogs.name == "dogs in the background"
    for _ in range(200):  # the background child finishes on its own
        if dogs.ended_at is not None:
            break
        await asyncio.sleep(0.01)
    assert dogs.payload["output"] == {"topic": "dogs", "pages": 2}


async def test_resource_allocation_is_enforced_or_refused_with_the_reason() -> None:
    child_fake = FakeAnthropicAPI([])
    writer = Agent(name="writer", max_tokens=100, client=child_fake.client())

    @workflow(name="essay")
    async def essay(ctx: WorkflowContext, words: int) -> str:
        """Write an essay from a long brief."""
        return await ctx.step("write", lambda: writer.prompt("word " * words))

    @workflow(name="slow")
    async def slow(ctx: WorkflowContext) -> str:
        await asyncio.sleep(5)
        return "late"

    essay_input = {"template": "essay", "input": {"words": 500}}
    fake = FakeAnthropicAPI(
        [
            tool_calls(
                (
                    "request_spawn_workflow",
                    {"template": "slow", "resource_allocation": {"timeout_seconds": 0.05}},
                ),
                (
                    "request_spawn_workflow",
                    {**essay_input, "resource_allocation": {"token_budget": 150}},
                ),
                (
                    "request_spawn_workflow",
                    {**essay_input, "resource_allocation": {"max_usd": 0.0000001}},
                ),
                (
                    "request_spawn_workflow",
                    {**essay_input, "resource_allocation": {"memory_mb": 512, "cpu_shares": 25}},
                ),
                (
                    "request_spawn_workflow",
                    {"template": "essay", "input": {"words": 1}, "timeout_s": 9999},
                ),
            ),
            text("done"),
        ]
    )
    agent = Agent(
        name="boss",
        tools=["introspection"],
        spawnable={"essay": essay, "slow": slow},
        client=fake.client(),
    )
    result = await agent.run("delegate")
    timed_out, over_tokens, over_usd, refused, capped = answers(fake.requests[-1])

    assert timed_out["status"] == "cancelled" and timed_out["error"] == "timed out after 0.05s"
    assert timed_out["resource_limits"]["timeout_seconds"] == 0.05
    assert result.tree.get_node(timed_out["workflow_id"]).status.value == "cancelled"

    assert over_tokens["status"] == "failed"
    assert over_tokens["resource_limits"]["token_budget"] == 150
    assert "TokenBudgetExceeded" in over_tokens["error"]
    assert "50-token input limit (max_total=150" in over_tokens["error"]

    assert over_usd["status"] == "failed" and "max_usd=1e-07" in over_usd["error"]
    # Neither budget let a request through: the only one is the one-word essay's, below.
    assert [r.last_user_text() for r in child_fake.requests] == ["word "]

    assert refused == {
        "error": "ToolError: request_spawn_workflow: resource_allocation ['cpu_shares', "
        "'memory_mb'] cannot be enforced: a spawned workflow runs in this process, as tasks "
        "on its event loop, so its CPU share, its memory cannot be capped apart from the "
        "caller's; resource_allocation takes ['timeout_seconds', 'token_budget', 'max_usd']"
    }
    # Past the configured limit a timeout is capped, and the answer says so.
    assert capped["resource_limits"]["timeout_seconds"] == 300.0
    assert capped["status"] == "failed"  # the one-word essay asked the empty fake
    spawned = result.tree.find(type=NodeType.WORKFLOW)
    assert sorted(w.name for w in spawned) == ["essay", "essay", "essay", "slow"]


async def test_a_durable_template_keeps_its_name() -> None:
    async def archive(ctx: WorkflowContext) -> str:
        return "archived"

    durable = Workflow(archive, name="archive", durable=True)
    fake = FakeAnthropicAPI(
        [
            tool_use(
                "request_spawn_workflow", {"template": "archive", "child_workflow_name": "nightly"}
            ),
            text("ok"),
        ]
    )
    agent = Agent(
        name="ops", tools=["introspection"], spawnable={"archive": durable}, client=fake.client()
    )
    result = await agent.run("archive it")
    (refused,) = answers(fake.requests[-1])
    assert refused == {
        "error": "ToolError: request_spawn_workflow: template runs durably as workflow "
        "'archive'; a durable run keeps its workflow's name so that a recovered run matches "
        "it. Leave child_workflow_name out"
    }
    assert result.tree.find(type=NodeType.WORKFLOW) == []


async def test_a_background_child_is_cancelled_when_its_parent_run_ends() -> None:
    woke: list[str] = []

    @workflow(name="nap")
    async def nap(ctx: WorkflowContext) -> str:
        """Sleep a long time."""

        async def sleep() -> str:
            await asyncio.sleep(30)
            woke.append("nap")  # never reached: the sleep is cancelled
            return "rested"

        return await ctx.step("sleep", sleep)

    fake = FakeAnthropicAPI(
        [tool_use("request_spawn_workflow", {"template": "nap", "wait": False}), text("started")]
    )
    agent = Agent(
        name="boss", tools=["introspection"], spawnable={"nap": nap}, client=fake.client()
    )

    @workflow(name="office")
    async def office(ctx: WorkflowContext) -> str:
        return await ctx.step("delegate", lambda: agent.prompt("Start a nap"))

    run = await office.run()
    assert run.output == "started"
    (child,) = run.tree.find(type=NodeType.WORKFLOW, name="nap")
    (step,) = run.tree.find(type=NodeType.STEP, name="sleep")
    for _ in range(100):  # the parent run ended: its background child goes within moments
        if child.ended_at is not None:
            break
        await asyncio.sleep(0.01)
    assert child.status == "cancelled" and step.status == "cancelled"
    await asyncio.sleep(0.05)
    assert woke == []
