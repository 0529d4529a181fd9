"""Example 11: people in the loop, a question and refunds that wait for approval.

A refund desk asks a person what to tell the customer (``ctx.ask``), then a
support agent refunds the orders; a refund over 100 EUR waits for a person's
approval. Here a small task plays the person: it lists the open waits with
``groundswell.waits.pending()`` and decides them with ``answer``, ``approve``
(once with a smaller amount) and ``reject``, printing what it sees. Every wait
is a node in the tree, with who decided and when.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import groundswell
from groundswell import Agent, ToolCall, WorkflowContext, WorkflowError, WorkflowResult, workflow
from groundswell.testing import FunctionModel, MessagesRequest, auto_client, text, tool_calls

LIMIT = 100  # euros: a larger refund needs a person's approval
ORDERS = {"A-1": 30, "B-2": 900, "C-3": 250}


def refund(order: str, amount: int) -> str:
    """Refund an order.

    Args:
        order: The order number.
        amount: Euros to refund.
    """
    return f"refunded {amount} EUR on {order}"


def over_limit(call: ToolCall) -> bool:
    """Refunds over the limit wait for a person."""
    return bool(call.input.get("amount", 0) > LIMIT)


def offline_model(request: MessagesRequest) -> Any:
    """Offline stand-in: refund every order in full, then sum up what happened."""
    results = request.tool_results()
    if not results:
        return tool_calls(*(("refund", {"order": o, "amount": a}) for o, a in ORDERS.items()))
    asked = [b for b in request.messages[-2]["content"] if b.get("type") == "tool_use"]
    said = []
    for call, result in zip(asked, results, strict=True):
        reason = str(result["content"]).partition("Their reason: ")[2]
        if result.get("is_error"):
            said.append(f"{call['input']['order']} not refunded ({reason or 'not approved'})")
        else:
            said.append(str(result["content"]))
    return text("; ".join(said) + ".")


support = Agent(
    name="support",
    system="You process refunds. Refund each order for its full amount with the refund tool, "
    "then say in one line what was refunded.",
    tools=[refund],
    approval=over_limit,
    client=auto_client(FunctionModel(offline_model)),
)


@workflow(name="refund-desk")
async def refund_desk(ctx: WorkflowContext, orders: dict[str, int]) -> str:
    note = await ctx.ask("What should we tell the customer?", timeout=600, default="")
    listed = ", ".join(f"{order} ({amount} EUR)" for order, amount in orders.items())
    done = await ctx.step("refunds", lambda: support.prompt(f"Refund these orders: {listed}."))
    return f"{done}\nTo the customer: {note}"


async def play_the_person() -> None:
    """What a console or a chat bot would do: watch for waits and decide each."""
    seen: set[str] = set()
    while True:
        for wait in groundswell.waits.pending():
            if wait.id in seen:
                continue
            seen.add(wait.id)
            if wait.kind == "question":
                print(f"person sees the question {wait.request['question']!r}")
                groundswell.waits.answer(wait.id, "Sorry for the wait!", by="ada")
                continue
            order, amount = wait.request["input"].get("order"), wait.request["input"].get("amount")
            print(f"person sees: {wait.request['agent']} wants to refund {amount} EUR on {order}")
            if isinstance(amount, int) and amount > 500:
                groundswell.waits.reject(wait.id, "over 500 EUR goes to finance", by="ada")
            else:
                edited = {**wait.request["input"], "amount": 200}
                groundswell.waits.approve(wait.id, input=edited, by="ada")
        await asyncio.sleep(0.01)


async def run_desk() -> WorkflowResult[str]:
    """Run the refund desk with the person's task answering its waits."""
    person = asyncio.create_task(play_the_person())
    try:
        return await refund_desk.run(ORDERS)
    finally:
        person.cancel()


async def main() -> int:
    try:
        result = await run_desk()
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.tree.render())
    print(f"\n{result.output}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
