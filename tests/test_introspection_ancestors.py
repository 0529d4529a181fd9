"""``read_ancestor_outputs``: how far up it reads, and a failed ancestor's error on request."""

from __future__ import annotations

import asyncio

import pytest

from groundswell import Agent, NodeStatus, WorkflowContext, WorkflowError, workflow
from groundswell.testing import FakeAnthropicAPI, text, tool_calls, tool_use

from .test_introspection_hierarchy import answers


async def test_max_ancestry_depth_bounds_how_many_ancestors_are_read() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_calls(
                ("read_ancestor_outputs", {"max_ancestry_depth": 1}),
                ("read_ancestor_outputs", {"max_ancestry_depth": 3}),
            ),
            text("read"),
        ]
    )
    agent = Agent(name="reader", tools=["introspection"], client=fake.client())

    @workflow(name="inner")
    async def inner(ctx: WorkflowContext) -> str:
        return await ctx.step("read", lambda: agent.prompt("Read what is above you"))

    @workflow(name="outer")
    async def outer(ctx: WorkflowContext, rows: int) -> str:
        return await ctx.step("middle", lambda: ctx.spawn_workflow(inner))

    await outer.run(3)
    one, three = answers(fake.requests[-1])
    assert [a["name"] for a in one["ancestors"]] == ["inner"]
    assert [a["name"] for a in three["ancestors"]] == ["inner", "middle", "outer"]
    assert three["ancestors"][2]["input"] == {"args": [3], "kwargs": {}}


async def test_a_failed_ancestors_error_is_shown_only_when_asked_for() -> None:
    gate = asyncio.Event()
    look = FakeAnthropicAPI(
        [
            tool_calls(
                ("read_ancestor_outputs", {"ancestor_name": "doomed"}),
                (
                    "read_ancestor_outputs",
                    {"ancestor_name": "doomed", "include_error_details": False},
                ),
            ),
            text("the run above me failed"),
        ]
    )
    survivor = Agent(name="survivor", tools=["introspection"], client=look.client())

    @workflow(name="late")
    async def late(ctx: WorkflowContext) -> str:
        await gate.wait()  # runs on after the workflow that started it has failed
        return await ctx.step("look", lambda: survivor.prompt("What happened above?"))

    starter = Agent(
        name="starter",
        tools=["introspection"],
        spawnable={"late": late},
        client=FakeAnthropicAPI(
            [tool_use("request_spawn_workflow", {"template": "late", "wait": False}), text("ok")]
        ).client(),
    )

    @workflow(name="doomed")
    async def doomed(ctx: WorkflowContext) -> None:
        await ctx.step("start", lambda: starter.prompt("Start the late one"))
        raise RuntimeError("disk full")

    with pytest.raises(WorkflowError) as caught:
        await doomed.run()
    tree = caught.value.result.tree  # type: ignore[union-attr]
    gate.set()
    (child,) = tree.find(type="workflow", name="late")
    for _ in range(300):
        if child.status is not NodeStatus.RUNNING:
            break
        await asyncio.sleep(0.01)
    assert child.status is NodeStatus.COMPLETED
    with_error, without = answers(look.requests[-1])
    (failed,) = with_error["ancestors"]
    assert failed["status"] == "failed"
    assert failed["error"]["type"] == "RuntimeError" and failed["error"]["message"] == "disk full"
    (quiet,) = without["ancestors"]
    assert quiet["status"] == "failed" and "error" not in quiet
