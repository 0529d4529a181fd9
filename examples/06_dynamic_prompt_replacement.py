"""Example 6: replacing a prompt's result when its output misses a condition.

The writer drafts a tagline; while the draft is longer than the limit, the
step asks for a shorter one with ``ctx.replace_last_prompt_result``. Each
replaced prompt stays in the tree with the status ``revised`` (its output kept
for inspection) and the replacement runs as its sibling, so the step holds one
row of attempts with only the last one live.
"""

from __future__ import annotations

import asyncio
import sys

from groundswell import Agent, Prompt, WorkflowContext, WorkflowError, workflow
from groundswell.testing import FunctionModel, MessagesRequest, auto_client

LIMIT = 40

DRAFTS = [
    "Groundswell: orchestrate every agent, observe every call, test it all offline",
    "Orchestrate, observe and test your agents offline",
    "Agents you can see and test",
]


def offline_model(request: MessagesRequest) -> str:
    """Offline stand-in: each request to shorten a draft gets the next, shorter one."""
    asked = request.last_user_text()
    shown = [i for i, draft in enumerate(DRAFTS) if draft in asked]
    return DRAFTS[min(shown[0] + 1, len(DRAFTS) - 1)] if shown else DRAFTS[0]


writer = Agent(
    name="writer",
    system="You write product taglines. Reply with the tagline only.",
    client=auto_client(FunctionModel(offline_model)),
)


@workflow(name="tagline")
async def tagline(ctx: WorkflowContext, product: str) -> str:
    async def write() -> str:
        draft = await writer.prompt(Prompt(user="Write a tagline.", data={"product": product}))
        for _ in range(3):
            if len(draft) <= LIMIT:
                break
            shorter = Prompt(
                user=f"Shorten this tagline to at most {LIMIT} characters.",
                data={"tagline": draft, "product": product},
            )
            draft = await ctx.replace_last_prompt_result(shorter, writer)
        return draft

    return await ctx.step("write", write)


async def main() -> int:
    try:
        result = await tagline.run("Groundswell")
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.tree.render())
    print(f"\ntagline: {result.output}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
