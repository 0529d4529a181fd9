"""The introspection toolset, dynamic creation and context revision, through the fake API."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from groundswell_introspection import TOOL_NAMES, Limits, approve_workflow, revoke_workflow, toolset
from pydantic import BaseModel, SecretStr

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    NodeStatus,
    NodeType,
    Prompt,
    PromptTemplate,
    ToolContext,
    WorkflowContext,
    workflow,
)
from groundswell.testing import (
    FakeAnthropicAPI,
    FunctionModel,
    MessagesRequest,
    json_reply,
    text,
    tool_calls,
    tool_use,
)

SECRET = "sk-ant-introspection-secret-42"
ENV_SECRET = "env-value-that-is-secret-77"


def results(fake: FakeAnthropicAPI, request: int = -1) -> dict[str, Any]:
    """The tool results the model got back, by tool name (parsed JSON, or the error text)."""
    req = fake.requests[request]
    calls = {}
    for message in req.messages:
        if message["role"] == "assistant" and isinstance(message["content"], list):
            calls.update(
                {b["id"]: b["name"] for b in message["content"] if b["type"] == "tool_use"}
            )
    out: dict[str, Any] = {}
    for block in req.tool_results():
        content = block["content"]
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content)
        name = calls[block["tool_use_id"]]
        out[name] = {"error": content} if block.get("is_error") else json.loads(content)
    return out


class Summary(BaseModel):
    text: str


@workflow(name="sub-report")
async def sub_report(ctx: WorkflowContext, topic: str, pages: int = 1) -> dict[str, Any]:
    """Write a small report about a topic."""
    return await ctx.step("write", lambda: {"topic": topic, "pages": pages})


def nested_run(agent: Agent) -> Any:
    """outer → prepare, middle → mid (child workflow) → sibling-a, analyse (the agent)."""

    @workflow(name="mid")
    async def mid(ctx: WorkflowContext) -> Any:
        ctx.state["draft_title"] = "Q3"
        ctx.state["token"] = "not-for-models"
        ctx.state["password_field"] = SecretStr("hunter22-secret")
        await ctx.step("sibling-a", lambda: "a-output")
        return await ctx.step("analyse", lambda: agent.prompt("Look around"))

    @workflow(name="outer")
    async def outer(ctx: WorkflowContext) -> Any:
        await ctx.step("prepare", lambda: {"rows": 3})
        return await ctx.step("middle", lambda: ctx.spawn_workflow(mid))

    return outer


ALL_CALLS = [
    ("inspect_current_node", {}),
    ("read_ancestor_chain", {"max_depth": 2}),
    ("list_siblings_children", {"relation": "siblings", "include_output": True}),
    ("inspect_prior_outputs", {"count": 5}),
    ("read_ancestor_outputs", {"ancestor_name": "middle", "include_metadata": True}),
    ("inspect_hierarchy", {"depth_mode": "full_tree"}),
    ("read_event_history", {"event_types": ["node_end"], "limit": 3, "order": "asc"}),
    (
        "inspect_state_snapshot",
        {"properties": ["draft_*", "token", "password*"], "include_history": True},
    ),
    ("inspect_cache_status", {}),
    ("list_mount_points", {}),
    ("request_spawn_workflow", {"template": "report", "input": {"topic": "cats"}}),
    ("generate_dynamic_prompt", {"template": "summarize", "variables": {"topic": "cats"}}),
]


async def test_every_tool_reports_the_run_from_inside_a_nested_workflow() -> None:
    assert [name for name, _ in ALL_CALLS] == list(TOOL_NAMES)
    fake = FakeAnthropicAPI([tool_calls(*ALL_CALLS), text("seen it")])
    agent = Agent(
        name="scout",
        tools=["introspection"],
        env={"TOKEN": ENV_SECRET},
        spawnable={"report": sub_report},
        prompt_templates={
            "summarize": PromptTemplate(user="Summarize {topic}.", response_format=Summary)
        },
        client=fake.client(api_key=SECRET),
    )
    run = await nested_run(agent).run()
    assert run.output == "seen it"
    tree = run.tree
    got = results(fake)
    assert set(got) == set(TOOL_NAMES)
    (analyse,) = tree.find(type=NodeType.STEP, name="analyse")
    (mid,) = tree.find(type=NodeType.WORKFLOW, name="mid")
    (middle,) = tree.find(type=NodeType.STEP, name="middle")

    current = got["inspect_current_node"]
    assert current["node"]["id"] == analyse.id and current["node"]["status"] == "running"
    assert current["node"]["path"] == "outer/middle/mid/analyse"
    assert current["workflow"] == {"id": mid.id, "name": "mid"} and current["agent"] == "scout"
    assert current["depth"] == 3

    chain = got["read_ancestor_chain"]
    assert [a["name"] for a in chain["ancestors"]] == ["mid", "middle"]
    assert chain["total"] == 3 and chain["truncated"] is True

    siblings = got["list_siblings_children"]
    assert [(n["name"], n["status"], n["output"]) for n in siblings["nodes"]] == [
        ("sibling-a", "completed", "a-output")
    ]
    prior = got["inspect_prior_outputs"]
    assert [n["output"] for n in prior["nodes"]] == ["a-output"]

    (middle_info,) = got["read_ancestor_outputs"]["ancestors"]
    assert middle_info["id"] == middle.id and middle_info["status"] == "running"
    assert "duration" not in middle_info["metrics"]  # still running

    hierarchy = got["inspect_hierarchy"]
    names = [(n["name"], n["depth"]) for n in hierarchy["nodes"]][:6]
    assert names == [
        ("outer", 0),
        ("prepare", 1),
        ("middle", 1),
        ("mid", 2),
        ("sibling-a", 3),
        ("analyse", 3),
    ]
    metrics = hierarchy["metrics"]
    assert metrics["by_type"]["step"] == 4 and metrics["by_type"]["workflow"] == 2
    assert metrics["tokens"]["input_tokens"] > 0

    events = got["read_event_history"]["events"]
    assert [(e["node_type"], e["node_name"]) for e in events] == [
        ("step", "prepare"),
        ("step", "sibling-a"),
        ("model_call", "claude-sonnet-4-6"),
    ]
    assert all(e["type"] == "node_end" for e in events)

    state = got["inspect_state_snapshot"]
    assert state["workflow_id"] == mid.id
    assert state["state"] == {
        "draft_title": "Q3",
        "token": "**********",
        "password_field": "**********",
    }
    assert state["history"][0]["node_name"] == "sibling-a"
    assert "draft_title" in state["history"][0]["changed"]

    assert got["inspect_cache_status"]["run"] == {"hits": 0, "misses": 0, "entries": []}
    mounts = got["list_mount_points"]
    assert (
        mounts["mount_points"][0]["type"] == "tool_call"
        and mounts["mount_points"][0]["used_by_spawn"]
    )
    assert [t["name"] for t in mounts["templates"]] == ["report"]
    assert mounts["templates"][0]["input_schema"]["required"] == ["topic"]

    spawned = got["request_spawn_workflow"]
    assert spawned["status"] == "completed" and spawned["output"] == {"topic": "cats", "pages": 1}
    child = tree.get_node(spawned["workflow_id"])
    parent = tree.get_node(child.parent_id)  # type: ignore[arg-type]
    assert child.name == "sub-report" and parent.name == "request_spawn_workflow"
    assert parent.type is NodeType.TOOL_CALL and tree.get_node(parent.parent_id).name == "scout"  # type: ignore[arg-type]

    prompt = got["generate_dynamic_prompt"]
    assert {k: prompt[k] for k in ("template", "valid", "dry_run", "prompt", "status")} == {
        "template": "summarize",
        "valid": True,
        "dry_run": True,
        "prompt": {"user": "Summarize cats.", "system": None, "response_format": "Summary"},
        "status": "validated",
    }
    # Nothing a tool returned holds a key or an env value.
    everything = json.dumps(fake.requests[-1].messages)
    assert (
        SECRET not in everything and ENV_SECRET not in everything and "hunter22" not in everything
    )
    # Every call is audited as a tool node.
    calls = [n.name for n in tree.find(type=NodeType.TOOL_CALL)]
    assert sorted(calls) == sorted(TOOL_NAMES)


async def test_unapproved_template_is_refused_and_bad_input_explained() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_calls(
                ("request_spawn_workflow", {"template": "rm-rf", "input": {}}),
                ("request_spawn_workflow", {"template": "report", "input": {"pages": "many"}}),
            ),
            text("ok"),
        ]
    )
    agent = Agent(
        name="a", tools=["introspection"], spawnable={"report": sub_report}, client=fake.client()
    )
    result = await agent.run("spawn")
    got = fake.requests[-1].tool_results()
    assert all(b.get("is_error") for b in got)
    texts = [b["content"] for b in got]
    assert "template 'rm-rf' is not approved; approved templates: ['report']" in texts[0]
    assert "topic: Field required" in texts[1] and "pages" in texts[1]
    assert result.tree.find(type=NodeType.WORKFLOW) == []


async def test_registry_templates_run_in_the_background_and_can_be_checked_later() -> None:
    approve_workflow("report", sub_report)
    try:

        def model(req: MessagesRequest) -> Any:
            done = req.tool_results()
            if not done:
                spawn = {"template": "report", "input": {"topic": "x"}, "wait": False}
                return tool_use("request_spawn_workflow", spawn)
            if len(done) == 1:
                handle = json.loads(done[-1]["content"])["workflow_id"]
                return tool_use("inspect_prior_outputs", {"node_id": handle})
            return text("done")

        fake = FakeAnthropicAPI(FunctionModel(model))
        agent = Agent(name="bg", tools=["introspection"], client=fake.client())
        result = await agent.run("go")
    finally:
        revoke_workflow("report")
    started = json.loads(fake.requests[1].tool_results()[-1]["content"])
    assert started["status"] == "running" and started["workflow_id"]
    checked = json.loads(fake.requests[2].tool_results()[-1]["content"])
    (node,) = checked["nodes"]
    assert node["id"] == started["workflow_id"] and node["name"] == "sub-report"
    assert node["status"] in ("running", "completed")
    assert result.tree.get_node(node["parent_id"]).name == "request_spawn_workflow"
    child = result.tree.get_node(node["id"])
    for _ in range(200):  # the background child finishes on its own
        if child.status is not NodeStatus.RUNNING:
            break
        await asyncio.sleep(0.01)
    assert child.status is NodeStatus.COMPLETED
    assert child.payload["output"] == {"topic": "x", "pages": 1}


async def test_spawn_limits_are_enforced() -> None:
    tools = toolset(Limits(max_spawns_per_run=1))
    fake = FakeAnthropicAPI(
        [
            tool_use("request_spawn_workflow", {"template": "report", "input": {"topic": "a"}}),
            tool_use("request_spawn_workflow", {"template": "report", "input": {"topic": "b"}}),
            text("ok"),
        ]
    )
    agent = Agent(name="a", tools=tools, spawnable={"report": sub_report}, client=fake.client())
    result = await agent.run("spawn twice")
    second = fake.requests[-1].tool_results()[-1]
    assert second.get("is_error") and "spawn limit reached" in second["content"]
    assert len(result.tree.find(type=NodeType.WORKFLOW)) == 1


async def test_outputs_are_truncated_and_lists_limited() -> None:
    @workflow(name="big")
    async def big(ctx: WorkflowContext) -> Any:
        for i in range(30):
            await ctx.step(f"s{i}", lambda: "x" * 5_000)
        return await ctx.step("look", lambda: agent.prompt("look"))

    fake = FakeAnthropicAPI(
        [
            tool_calls(
                (
                    "list_siblings_children",
                    {"relation": "siblings", "limit": 5, "include_output": True},
                ),
                ("read_event_history", {"limit": 7}),
            ),
            text("ok"),
        ]
    )
    agent = Agent(name="looker", tools=toolset(Limits(max_chars=100)), client=fake.client())
    await big.run()
    got = results(fake)
    siblings = got["list_siblings_children"]
    assert siblings["total"] == 30 and siblings["truncated"] and len(siblings["nodes"]) == 5
    output = siblings["nodes"][0]["output"]
    assert (
        output["truncated"] is True and output["chars"] == 5_000 and len(output["preview"]) == 100
    )
    history = got["read_event_history"]
    assert len(history["events"]) == 7 and history["truncated"]


async def test_tools_outside_a_workflow_and_outside_any_run() -> None:
    fake = FakeAnthropicAPI(
        [tool_calls(("inspect_state_snapshot", {}), ("inspect_current_node", {})), text("ok")]
    )
    agent = Agent(name="solo", tools=["introspection"], client=fake.client())
    assert await agent.prompt("where am I?") == "ok"
    got = fake.requests[-1].tool_results()
    assert got[0].get("is_error") and "not running in a workflow" in got[0]["content"]
    current = json.loads(got[1]["content"])
    assert current["node"]["type"] == "prompt" and current["workflow"] is None

    (tool,) = [t for t in toolset() if t.name == "inspect_current_node"]
    with pytest.raises(
        groundswell.ToolError, match="only be used by an agent during a Groundswell run"
    ):
        await tool.run({}, ToolContext(agent="x", tool_use_id="t"))


async def test_dynamic_prompt_runs_when_not_a_dry_run() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use(
                "generate_dynamic_prompt",
                {"template": "summarize", "variables": {"topic": "owls"}, "dry_run": False},
            ),
            json_reply({"text": "Owls hoot."}),
            text("ok"),
        ]
    )
    agent = Agent(
        name="writer",
        tools=["introspection"],
        prompt_templates={
            "summarize": PromptTemplate(user="Summarize {topic}.", response_format=Summary)
        },
        client=fake.client(),
    )
    result = await agent.run("write")
    ran = json.loads(fake.requests[-1].tool_results()[-1]["content"])
    assert ran["output"] == {"text": "Owls hoot."}
    assert fake.requests[1].last_user_text() == "Summarize owls."
    inner = result.tree.get_node(ran["node_id"])
    assert result.tree.get_node(inner.parent_id).name == "generate_dynamic_prompt"  # type: ignore[arg-type]


async def test_a_template_may_answer_with_any_output_type() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use(
                "generate_dynamic_prompt",
                {"template": "tags", "variables": {"topic": "owls"}, "dry_run": False},
            ),
            json_reply({"result": ["night", "birds"]}),
            text("ok"),
        ]
    )
    agent = Agent(
        name="tagger",
        tools=["introspection"],
        prompt_templates={
            "tags": PromptTemplate(user="Tags for {topic}.", response_format=list[str])
        },
        client=fake.client(),
    )
    await agent.run("tag")
    ran = json.loads(fake.requests[-1].tool_results()[-1]["content"])
    assert ran["prompt"]["response_format"] == "list[str]"
    assert ran["output"] == ["night", "birds"]
    with pytest.raises(
        ConfigurationError, match=r"PromptTemplate\.response_format dict is an open"
    ):
        PromptTemplate(user="x", response_format=dict)


def test_prompt_template_validation() -> None:
    template = PromptTemplate(
        user="Tell {who} about {what}", variables={"who": "a name", "what": "a topic"}
    )
    assert template.render({"who": "Ann", "what": 3}).user == "Tell Ann about 3"
    with pytest.raises(ConfigurationError, match=r"missing \['what'\], unknown \['why'\]"):
        template.render({"who": "Ann", "why": "x"})
    with pytest.raises(ConfigurationError, match="must be a plain name"):
        PromptTemplate(user="{x.__class__}")
    with pytest.raises(ConfigurationError, match="do not match the placeholders"):
        PromptTemplate(user="{a}", variables={"b": "?"})
    with pytest.raises(ConfigurationError, match="strings, numbers or booleans"):
        template.render({"who": ["list"], "what": "x"})


async def test_a_tool_that_builds_an_agent_mounts_it_under_the_tool_node() -> None:
    inner_fake = FakeAnthropicAPI([text("inner answer")])

    async def consult(question: str) -> str:
        """Ask a freshly made expert."""
        expert = groundswell.create_agent(name="expert", client=inner_fake.client())
        return await expert.prompt(question)

    fake = FakeAnthropicAPI([tool_use("consult", {"question": "why?"}), text("done")])
    boss = Agent(name="boss", tools=[consult], client=fake.client())

    @workflow(name="w")
    async def w(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: boss.prompt("go"))

    result = await w.run()
    (expert,) = result.tree.find(type=NodeType.PROMPT, name="expert")
    tool = result.tree.get_node(expert.parent_id)  # type: ignore[arg-type]
    assert tool.type is NodeType.TOOL_CALL and tool.name == "consult"
    assert [c.type for c in expert.children] == [NodeType.MODEL_CALL]
    assert fake.requests[-1].tool_results()[0]["content"] == "inner answer"


async def test_revision_chains_keep_one_live_prompt_per_position() -> None:
    fake = FakeAnthropicAPI([text("draft 1"), text("draft 2"), text("draft 3")])
    writer = Agent(name="writer", client=fake.client())

    @workflow(name="w")
    async def w(ctx: WorkflowContext) -> str:
        async def write() -> str:
            draft = await writer.prompt("Write")
            while len(draft) and draft != "draft 3":
                draft = await ctx.replace_last_prompt_result(
                    Prompt(user=f"Improve: {draft}"), writer
                )
            return draft

        return await ctx.step("write", write)

    result = await w.run()
    assert result.output == "draft 3"
    (step,) = result.tree.find(type=NodeType.STEP)
    assert [(c.type, c.status) for c in step.children] == [
        (NodeType.PROMPT, NodeStatus.REVISED),
        (NodeType.PROMPT, NodeStatus.REVISED),
        (NodeType.PROMPT, NodeStatus.COMPLETED),
    ]
    first, second, third = step.children
    assert first.payload["output"] == "draft 1" and second.payload["output"] == "draft 2"
    assert second.payload["revises"] == first.id and third.payload["revises"] == second.id
    assert [e["by"] for e in first.events if e["type"] == "revised"] == [second.id]


async def test_replace_without_an_earlier_prompt_is_a_clear_error() -> None:
    writer = Agent(name="writer", client=FakeAnthropicAPI([]).client())

    @workflow(name="w")
    async def w(ctx: WorkflowContext) -> Any:
        return await ctx.replace_last_prompt_result(Prompt(user="x"), writer)

    with pytest.raises(groundswell.WorkflowError) as caught:
        await w.run()
    assert isinstance(caught.value.__cause__, ConfigurationError)
    assert "no prompt has run under 'w' yet" in str(caught.value.__cause__)


async def test_state_is_snapshotted_on_step_end_as_a_copy() -> None:
    @workflow(name="w")
    async def w(ctx: WorkflowContext) -> None:
        ctx.state["items"] = [1]
        await ctx.step("one", lambda: None)
        ctx.state["items"].append(2)  # an in-place change is still a change
        await ctx.step("two", lambda: None)
        await ctx.step("three", lambda: None)  # nothing changed: no snapshot
        ctx.state["key"] = SecretStr("do-not-show")
        ctx.snapshot_state()

    result = await w.run()
    snaps = sorted(
        (
            (n.name, e)
            for n in result.tree.walk()
            for e in n.events
            if e["type"] == "state_snapshot"
        ),
        key=lambda pair: pair[1]["timestamp"],
    )
    assert [(name, e["state"], e["reason"]) for name, e in snaps] == [
        ("one", {"items": [1]}, "step_end"),
        ("two", {"items": [1, 2]}, "step_end"),
        ("w", {"items": [1, 2], "key": "**********"}, "requested"),
    ]
    assert snaps[1][1]["changed"] == ["items"]


def test_workflow_input_schema_and_validation() -> None:
    schema = sub_report.input_schema()
    assert schema["required"] == ["topic"] and set(schema["properties"]) == {"topic", "pages"}
    assert sub_report.validate_input({"topic": "t"}) == {"topic": "t", "pages": 1}
    with pytest.raises(ConfigurationError, match="invalid input"):
        sub_report.validate_input({"topic": "t", "extra": 1})


async def test_a_spawned_workflow_that_runs_too_long_is_cancelled() -> None:
    @workflow(name="slow")
    async def slow(ctx: WorkflowContext) -> str:
        await asyncio.sleep(5)
        return "late"

    fake = FakeAnthropicAPI(
        [tool_use("request_spawn_workflow", {"template": "slow", "timeout_s": 0.05}), text("ok")]
    )
    agent = Agent(name="a", tools=["introspection"], spawnable={"slow": slow}, client=fake.client())
    result = await agent.run("go")
    answer = json.loads(fake.requests[-1].tool_results()[-1]["content"])
    assert answer["status"] == "cancelled" and "timed out after 0.05s" in answer["error"]
    assert result.tree.get_node(answer["workflow_id"]).status is NodeStatus.CANCELLED


async def test_list_mount_points_reports_how_deep_in_spawned_workflows_the_caller_is() -> None:
    inner_fake = FakeAnthropicAPI([tool_use("list_mount_points", {}), text("inner done")])
    inner = Agent(name="inner", tools=["introspection"], client=inner_fake.client())

    @workflow(name="deeper")
    async def deeper(ctx: WorkflowContext) -> str:
        """Look around from inside a spawned workflow."""
        return await ctx.step("look", lambda: inner.prompt("Where am I?"))

    outer_fake = FakeAnthropicAPI(
        [
            tool_use("list_mount_points", {}),
            tool_use("request_spawn_workflow", {"template": "deeper", "input": {}}),
            text("outer done"),
        ]
    )
    outer = Agent(
        name="outer",
        tools=["introspection"],
        spawnable={"deeper": deeper},
        client=outer_fake.client(),
    )

    @workflow(name="top")
    async def top(ctx: WorkflowContext) -> str:
        return await ctx.step("plan", lambda: outer.prompt("Plan"))

    assert (await top.run()).output == "outer done"
    at_top = results(outer_fake, 1)["list_mount_points"]["limits"]
    in_spawned = results(inner_fake, 1)["list_mount_points"]["limits"]
    assert at_top["spawn_depth_here"] == 0 and in_spawned["spawn_depth_here"] == 1
    assert at_top["max_spawn_depth"] == 3
