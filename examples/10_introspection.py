"""Example 10: an agent looking at its own place in the run.

A release pipeline runs a checks workflow inside a step; its last step asks an
auditor agent (with the introspection toolset) to report where it runs, what
ran before it, and how big the run is. The auditor's tool calls are tool nodes
in the tree like any others, so the audit itself is audited.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from groundswell import Agent, WorkflowContext, WorkflowError, workflow
from groundswell.testing import FunctionModel, MessagesRequest, auto_client, text, tool_calls

LOOK = (
    ("inspect_current_node", {}),
    ("read_ancestor_chain", {"max_depth": 5}),
    ("inspect_prior_outputs", {"count": 3}),
    ("inspect_hierarchy", {"depth_mode": "full_tree", "max_nodes": 50}),
    ("inspect_state_snapshot", {"properties": ["build_*"]}),
)


def offline_model(request: MessagesRequest) -> Any:
    """Offline stand-in: call the tools, then write the report from their results."""
    if not request.tool_results():
        return tool_calls(*LOOK)
    got = [json.loads(r["content"]) for r in request.tool_results()]
    current, chain, prior, hierarchy, state = got
    before = ", ".join(f"{n['name']}={n['output']}" for n in prior["nodes"])
    return text(
        f"I run in step {current['node']['name']!r} at depth {current['depth']} "
        f"({' < '.join(a['name'] for a in chain['ancestors'])}). "
        f"Before me: {before}. "
        f"The run has {hierarchy['metrics']['total_nodes']} nodes; "
        f"state: {state['state']}."
    )


auditor = Agent(
    name="auditor",
    system="You audit release pipelines. Use your tools to see where you are, then report.",
    tools=["introspection"],
    client=auto_client(FunctionModel(offline_model)),
)


@workflow(name="checks")
async def checks(ctx: WorkflowContext, version: str) -> str:
    ctx.state["build_version"] = version
    await ctx.step("lint", lambda: "clean")
    await ctx.step("tests", lambda: "412 passed")
    return await ctx.step("audit", lambda: auditor.prompt("Report on this pipeline run."))


@workflow(name="release")
async def release(ctx: WorkflowContext, version: str) -> str:
    await ctx.step("build", lambda: f"wheel {version}")
    return await ctx.step("verify", lambda: ctx.spawn_workflow(checks, version))


async def main() -> int:
    try:
        result = await release.run("1.4.0")
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.tree.render())
    print(f"\naudit: {result.output}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
