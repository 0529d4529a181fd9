"""Example 2: a workflow calling agents with different prompts.

A summarizer returns text; a judge returns a validated pydantic object. Runs
offline against the fake API, or against the real API when ANTHROPIC_API_KEY
is set: only the client differs.
"""

from __future__ import annotations

import asyncio
import sys

from pydantic import BaseModel

from groundswell import Agent, Prompt, WorkflowContext, WorkflowError, workflow
from groundswell.testing import SchemaModel, auto_client

DIFF = """--- a/pay.py
+++ b/pay.py
-    total = price * qty
+    total = round(price * qty, 2)
"""


class Verdict(BaseModel):
    approve: bool
    reason: str


# Offline, a schema-aware fake answers: valid JSON for the judge, this text otherwise.
client = auto_client(SchemaModel(final_text="Rounds the order total to cents."))
summarizer = Agent(name="summarizer", system="Summarize code changes in one line.", client=client)
judge = Agent(
    name="judge", system="You review diffs for correctness.", temperature=0.0, client=client
)


@workflow(name="review")
async def review(ctx: WorkflowContext, diff: str) -> Verdict:
    summary = await ctx.step(
        "summarize", lambda: summarizer.prompt(Prompt(user="Summarize:", data={"diff": diff}))
    )
    ctx.state["summary"] = summary
    ask = Prompt(
        user="Approve this change?",
        data={"diff": diff, "summary": summary},
        response_format=Verdict,
    )
    return await ctx.step("judge", lambda: judge.prompt(ask))


async def main() -> int:
    try:
        result = await review.run(DIFF)
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.tree.render())
    print(f"\nsummary: {result.state['summary']}")
    print(f"verdict: {result.output}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
