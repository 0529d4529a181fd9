"""Example 3: one agent used across many workflows.

A single ``classifier`` agent serves three workflows that run at the same
time: ``triage`` routes one ticket, ``digest`` counts a batch by category and
``escalate`` pages someone for urgent tickets. The agent is defined once; each
call mounts under the step of the workflow that made it, never under another
run's, even under ``asyncio.gather``. The agent's response cache is shared, so
a ticket classified by one workflow is a cache hit for the next.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections import Counter
from typing import Literal

from pydantic import BaseModel

from groundswell import Agent, Prompt, WorkflowContext, WorkflowError, WorkflowResult, workflow
from groundswell.testing import FunctionModel, MessagesRequest, auto_client, json_reply


class Label(BaseModel):
    category: Literal["billing", "outage", "account", "other"]
    urgent: bool


KEYWORDS = {"billing": ("invoice", "charged"), "outage": ("down", "500"), "account": ("password",)}


def offline_model(request: MessagesRequest) -> object:
    """Offline stand-in: label the ticket by keyword."""
    ticket = re.search(r'"ticket": "(.*)"', request.last_user_text())
    words = ticket.group(1).lower() if ticket else ""
    category = next((c for c, keys in KEYWORDS.items() if any(k in words for k in keys)), "other")
    return json_reply({"category": category, "urgent": category == "outage"})


classifier = Agent(
    name="classifier",
    system="You label support tickets. Urgent means customers cannot work.",
    enable_cache=True,  # one LRU cache per process, shared by every workflow
    client=auto_client(FunctionModel(offline_model)),
)


def classify(ticket: str) -> Prompt[Label]:
    return Prompt(user="Label this ticket.", data={"ticket": ticket}, response_format=Label)


@workflow(name="triage")
async def triage(ctx: WorkflowContext, ticket: str) -> str:
    label = await ctx.step("classify", lambda: classifier.prompt(classify(ticket)))
    return await ctx.step("route", lambda: f"{label.category}-team")


@workflow(name="digest")
async def digest(ctx: WorkflowContext, tickets: list[str]) -> dict[str, int]:
    labels = await asyncio.gather(
        *(
            ctx.step(f"classify-{i}", lambda t=t: classifier.prompt(classify(t)))
            for i, t in enumerate(tickets)
        )
    )
    return dict(Counter(label.category for label in labels))


@workflow(name="escalate")
async def escalate(ctx: WorkflowContext, tickets: list[str]) -> list[str]:
    paged = []
    for i, ticket in enumerate(tickets):
        label = await ctx.step(f"classify-{i}", lambda t=ticket: classifier.prompt(classify(t)))
        if label.urgent:
            paged.append(await ctx.step(f"page-{i}", lambda t=ticket: f"paged on-call: {t}"))
    return paged


TICKETS = [
    "I was charged twice on my invoice",
    "The dashboard is down with a 500 error",
    "How do I reset my password?",
]


async def run_all() -> list[WorkflowResult[object]]:
    # The first ticket is classified by triage first; digest and escalate then
    # ask the same question and hit the cache (or join the in-flight call).
    first = await triage.run(TICKETS[0])
    rest = await asyncio.gather(digest.run(TICKETS), escalate.run(TICKETS))
    return [first, *rest]


async def main() -> int:
    try:
        results = await run_all()
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for result in results:
        print(result.tree.render())
        print(f"  -> {result.output}\n")
    prompts = [n for r in results for n in r.tree.find(type="prompt", name="classifier")]
    hits = sum(n.metrics.get("cache") == "hit" for n in prompts)
    print(f"classifier: {len(prompts)} prompts in 3 workflows, {hits} answered from the cache")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
