"""A small shop app, as a user would write it: a module-level agent in a workflow."""

from __future__ import annotations

from pydantic import BaseModel

from groundswell import Agent, Prompt, WorkflowContext, workflow

PRICES = {"apple": 0.5, "pear": 0.75}


def price(item: str) -> float:
    """The unit price of an item, in euros."""
    return PRICES[item]


class Quote(BaseModel):
    item: str
    quantity: int
    total: float


clerk = Agent(
    name="clerk",
    system="You quote prices. Look every price up with the price tool.",
    tools=[price],
)


@workflow
async def quote(ctx: WorkflowContext, item: str, quantity: int) -> Quote:
    """Quote ``quantity`` of ``item``."""
    ask = Prompt(user=f"Quote {quantity} x {item}.", response_format=Quote)
    return await ctx.step("quote", lambda: clerk.prompt(ask))
