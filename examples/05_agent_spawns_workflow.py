"""Example 5: an agent spawning a new workflow at run time.

The planner agent has the introspection toolset and may start one approved
workflow template, ``report``. It looks up where a new workflow would mount,
starts the template with input it chooses, and answers from the result. The
spawned workflow mounts under the tool call that started it, inside the
planner's prompt, inside the step: no plumbing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from groundswell import Agent, WorkflowContext, WorkflowError, workflow
from groundswell.testing import FunctionModel, MessagesRequest, auto_client, text, tool_use


@workflow(name="report")
async def report(ctx: WorkflowContext, region: str, quarters: int = 2) -> dict[str, Any]:
    """Collect sales for a region over the last quarters and total them."""
    sales = await ctx.step("collect", lambda: [100 * (q + 1) for q in range(quarters)])
    return await ctx.step("total", lambda: {"region": region, "total": sum(sales)})


def offline_model(request: MessagesRequest) -> Any:
    """Offline stand-in for the model: look, spawn, then answer from the result."""
    called = request.tools_called()
    if not called:
        return tool_use("list_mount_points", {})
    if called == ["list_mount_points"]:
        return tool_use(
            "request_spawn_workflow", {"template": "report", "input": {"region": "EMEA"}}
        )
    spawned = json.loads(request.tool_results()[-1]["content"])
    return text(f"EMEA sold {spawned['output']['total']} over two quarters.")


planner = Agent(
    name="planner",
    system="Answer questions about sales. Start the report workflow when you need numbers.",
    tools=["introspection"],
    spawnable={"report": report},
    client=auto_client(FunctionModel(offline_model)),
)


@workflow(name="sales-question")
async def sales_question(ctx: WorkflowContext, question: str) -> str:
    return await ctx.step("answer", lambda: planner.prompt(question))


async def main() -> int:
    try:
        result = await sales_question.run("How much did EMEA sell recently?")
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.tree.render())
    print(f"\nanswer: {result.output}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
