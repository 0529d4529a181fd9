"""Type-checked by ``tests/test_deps.py`` (mypy --strict): tools see their deps typed.

Not a test module itself; it also runs, so the checked code is the code that works.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from groundswell import Agent, ToolContext
from groundswell.testing import FakeAnthropicAPI, tool_use


@dataclass
class Shop:
    name: str
    stock: dict[str, int] = field(default_factory=dict)


def in_stock(item: str, ctx: ToolContext[Shop]) -> int:
    """How many of an item the shop has.

    Args:
        item: The item's name.
    """
    shop: Shop = ctx.deps  # typed: a Shop, not Any
    count: int = shop.stock.get(item, 0)
    return count


def shop_name(ctx: ToolContext[Shop]) -> str:
    """The shop's name."""
    return ctx.deps.name.upper()


def untyped(ctx: ToolContext) -> str:
    """A bare ToolContext still works; its deps are Any."""
    return str(ctx.deps)


clerk: Agent[Shop] = Agent(name="clerk", tools=[in_stock, shop_name, untyped], deps_type=Shop)


async def ask(fake: FakeAnthropicAPI) -> str:
    shop = Shop("corner", {"apples": 3})
    with clerk.override(client=fake.client()):
        answer: str = await clerk.prompt("Any apples?", deps=shop)
        result = await clerk.run("Any apples?", deps=shop)
        text: str = result.output
    return answer + text


REPLIES = [tool_use("in_stock", {"item": "apples"}), "3", "3"]
