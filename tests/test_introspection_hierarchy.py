"""``inspect_hierarchy`` from any node of the run, and ids from another run refused, via the fake."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from groundswell import Agent, PromptTemplate, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, FunctionModel, MessagesRequest, text, tool_calls

from .test_introspection import results


def answers(req: MessagesRequest) -> list[Any]:
    """Every tool result the model has had so far, oldest first: parsed JSON, else the text."""
    out: list[Any] = []
    for block in req.tool_results():
        content = block["content"]
        if block.get("is_error"):
            out.append({"error": content})
        elif content.startswith(("{", "[")):
            out.append(json.loads(content))
        else:
            out.append(content)
    return out


async def test_hierarchy_from_any_node_groups_current_parent_ancestors_and_siblings() -> None:
    release = asyncio.Event()

    def model(req: MessagesRequest) -> Any:
        seen = answers(req)
        if not seen:
            return tool_calls(("inspect_hierarchy", {"depth_mode": "full_tree"}))
        if len(seen) == 1:
            ids = {s["name"]: s["id"] for s in seen[0]["siblings"]}
            root = seen[0]["parent"]["id"]
            return tool_calls(
                (
                    "inspect_hierarchy",
                    {"node_id": ids["load"], "depth_mode": "full_tree", "include_metadata": False},
                ),
                ("inspect_hierarchy", {"node_id": root, "depth_mode": "parent_only"}),
            )
        return text("mapped")

    fake = FakeAnthropicAPI(FunctionModel(model))
    agent = Agent(name="mapper", tools=["introspection"], client=fake.client())

    async def slow() -> str:
        await release.wait()
        return "late"

    async def look() -> str:
        try:
            return await agent.prompt("Where am I?")
        finally:
            release.set()

    @workflow(name="pipeline")
    async def pipeline(ctx: WorkflowContext) -> Any:
        await ctx.step("load", lambda: "rows")
        await ctx.step("validate", lambda: "ok")
        return await asyncio.gather(ctx.step("slow", slow), ctx.step("analyse", look))

    run = await pipeline.run()
    assert run.output == ["late", "mapped"]
    first = json.loads(fake.requests[1].tool_results()[0]["content"])
    (analyse,) = run.tree.find(type="step", name="analyse")
    current = first["current"]
    assert current["id"] == analyse.id and current["path"] == "pipeline/analyse"
    assert current["status"] == "running" and current["depth"] == 1
    assert 0 <= current["completion_percentage"] < 100
    assert first["parent"]["name"] == "pipeline" and first["parent"]["depth_in_tree"] == 1
    assert [(a["name"], a["depth_in_tree"]) for a in first["ancestors"]] == [("pipeline", 1)]
    assert [(s["name"], s["status"], s["completion_percentage"]) for s in first["siblings"]] == [
        ("load", "completed", 100),
        ("validate", "completed", 100),
        ("slow", "running", 0),
    ]
    metrics = first["metrics"]
    assert metrics["siblings_count"] == 3
    # load, validate, slow, the first model call and this tool call have no children yet.
    assert metrics["leaf_nodes"] == 5 and metrics["total_nodes"] == 8

    from_load, from_root = answers(fake.requests[-1])[1:]
    assert from_load["current"]["name"] == "load" and from_load["current"]["depth"] == 1
    # Without metadata a grouped node is only what it is.
    assert from_load["parent"] == {
        "id": first["parent"]["id"],
        "name": "pipeline",
        "type": "workflow",
        "depth_in_tree": 1,
    }
    assert [s["name"] for s in from_load["siblings"]] == ["validate", "slow", "analyse"]
    assert all(set(s) == {"id", "name", "type"} for s in from_load["siblings"])

    assert from_root["current"]["name"] == "pipeline" and from_root["parent"] is None
    assert "ancestors" not in from_root and "siblings" not in from_root
    assert 0 < from_root["current"]["completion_percentage"] < 100
    assert from_root["current"]["descendants"] >= 8


async def test_ids_from_another_run_are_refused_by_every_tool_that_takes_one() -> None:
    @workflow(name="earlier")
    async def earlier(ctx: WorkflowContext) -> str:
        ctx.state["secret_plan"] = "not for other runs"
        return await ctx.step("work", lambda: "done")

    other = await earlier.run()
    foreign = other.tree.root.id  # type: ignore[union-attr]
    calls = [
        ("inspect_hierarchy", {"node_id": foreign}),
        ("read_event_history", {"workflow_id": foreign}),
        ("inspect_state_snapshot", {"workflow_id": foreign}),
        ("inspect_cache_status", {"node_id": foreign}),
        ("generate_dynamic_prompt", {"template": "plan", "target_workflow_id": foreign}),
    ]
    fake = FakeAnthropicAPI([tool_calls(*calls), text("nothing to see")])
    agent = Agent(
        name="prober",
        tools=["introspection"],
        prompt_templates={"plan": PromptTemplate(user="Follow {secret_plan}.")},
        client=fake.client(),
    )

    @workflow(name="mine")
    async def mine(ctx: WorkflowContext) -> str:
        return await ctx.step("probe", lambda: agent.prompt("Look at the other run"))

    assert (await mine.run()).output == "nothing to see"
    got = results(fake)
    assert set(got) == {name for name, _ in calls}
    for name, answer in got.items():
        assert answer == {"error": f"ToolError: {name}: no node with id {foreign!r} in this run"}
    assert "not for other runs" not in json.dumps(fake.requests[-1].messages)
