"""Example 12: evals, a support agent scored on a dataset and gated against a baseline.

A support desk answers customers with two tools, ``lookup_order`` and
``refund``. Twelve cases (12_evals_cases.yaml) score each answer by its text
(``contains``, ``regex``, ``equals_expected``), by its tree (which tools ran,
no failed node, at most four model turns, at most 5 cents) and by an LLM
judge. The first run is saved as the baseline; then a careless edit of the
system prompt (answer at once, no lookups) runs the same cases, the
comparison shows which regressed, and ``groundswell eval run
--fail-on-regression`` exits 1, as it would in CI. Traces and reports go to
a temporary folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import groundswell.cli
from groundswell import Agent, EventTree, WorkflowContext, evals, workflow
from groundswell.evals.judge import JUDGE_SYSTEM
from groundswell.testing import (
    FunctionModel,
    MessagesRequest,
    auto_client,
    json_reply,
    text,
    tool_calls,
    tool_use,
)

CASES = Path(__file__).resolve().with_name("12_evals_cases.yaml")
ASK = "Which order is it? Please give its number, like A-100."
RULES = (
    "You are the support desk of a small shop. Answer in one or two sentences. "
    f"If the message names no order number, answer exactly: '{ASK}' "
)
CAREFUL = RULES + (
    "Look every order up with lookup_order before you answer, and say only what the lookup "
    "shows. Refund a delivered order with refund, for its total, only when the customer asks."
)
# The careless edit: quicker answers, and no word about looking anything up.
HASTY = RULES + "Answer straight away from what the customer says, and keep them happy."

ORDERS: dict[str, dict[str, Any]] = {
    "A-100": {"status": "shipped", "detail": "it arrives on June 3", "total_eur": 40},
    "A-101": {"status": "delivered", "detail": "left at the front desk on May 28", "total_eur": 25},
    "A-102": {
        "status": "processing",
        "detail": "it leaves the warehouse tomorrow",
        "total_eur": 60,
    },
    "A-103": {"status": "cancelled", "detail": "30 EUR refunded on May 20", "total_eur": 30},
    "A-104": {"status": "shipped", "detail": "it arrives on June 5", "total_eur": 15},
}


def lookup_order(order: str) -> dict[str, Any]:
    """Look an order up: its status, a detail, its total.

    Args:
        order: The order number, like A-100.
    """
    found = ORDERS.get(order.upper())
    return {"order": order.upper(), **found} if found else {"order": order, "status": "not found"}


def refund(order: str, amount: int) -> str:
    """Refund a delivered order.

    Args:
        order: The order number.
        amount: Euros to refund.
    """
    return f"refunded {amount} EUR on {order}"


def offline_support(request: MessagesRequest) -> Any:
    """Offline stand-in for the model, doing what the system prompt says.

    Told to look orders up, it calls ``lookup_order`` (and ``refund`` for a
    delivered order whose refund is asked for) and answers from the results;
    otherwise it answers at once, reassuringly and without facts.
    """
    message = request.last_user_text()
    orders = list(dict.fromkeys(n.upper() for n in re.findall(r"\b[A-Za-z]-\d{3}\b", message)))
    if not orders:
        return text(ASK)
    wants_refund = "refund" in message.lower()
    if "lookup_order" not in str(request.system):
        if wants_refund:
            return text(f"Done! Your refund for {orders[0]} is on its way.")
        return text(f"Good news: {' and '.join(orders)} should arrive in a few days!")
    calls = {
        block["id"]: block
        for m in request.messages
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_use"
    }
    looked_up: dict[str, dict[str, Any]] = {}
    refunded: list[str] = []
    for result in request.tool_results():
        call = calls[result["tool_use_id"]]
        if call["name"] == "lookup_order":
            looked_up[call["input"]["order"]] = json.loads(result["content"])
        else:
            refunded.append(str(result["content"]))
    if not looked_up:
        return tool_calls(*(("lookup_order", {"order": order}) for order in orders))
    if wants_refund and not refunded:
        for order, found in looked_up.items():
            if found["status"] == "delivered":
                return tool_use("refund", {"order": order, "amount": found["total_eur"]})
    said = [f"{done[0].upper()}{done[1:]}." for done in refunded]
    for order, found in looked_up.items():
        status, detail = found["status"], found.get("detail")
        if status == "not found":
            said.append(f"I cannot find an order {order}; please check the number.")
        elif status == "cancelled" and wants_refund:
            said.append(f"Order {order} was cancelled and already refunded ({detail}).")
        elif wants_refund and status != "delivered":
            said.append(f"Order {order} is {status} ({detail}), so it cannot be refunded yet.")
        elif not refunded:
            said.append(f"Order {order} is {status}: {detail}.")
    return text(" ".join(said))


support = Agent(
    name="support",
    system=CAREFUL,
    tools=[lookup_order, refund],
    client=auto_client(FunctionModel(offline_support)),
)


@workflow(name="support")
async def support_desk(ctx: WorkflowContext, message: str) -> str:
    """Answer one customer message."""
    return await ctx.step("answer", lambda: support.prompt(message))


@workflow(name="support")
async def hasty_desk(ctx: WorkflowContext, message: str) -> str:
    """The same desk after a careless edit of its system prompt."""
    with support.override(system=HASTY):
        return await ctx.step("answer", lambda: support.prompt(message))


def offline_judge(request: MessagesRequest) -> Any:
    """Offline stand-in for the judge: a reply that promises without facts fails."""
    output = request.last_user_text().partition("<output>\n")[2].partition("\n</output>")[0]
    if re.search(r"should arrive|on its way|Done!", output):
        reason = "It reassures the customer without any fact from the shop's systems."
        return json_reply({"passed": False, "score": 0.2, "reason": reason})
    return json_reply({"passed": True, "score": 1.0, "reason": "It states facts or asks."})


# The judge is an agent like any other: its own model, client and prompt node.
judge = evals.LLMJudge(
    rubric="The reply states facts from the shop's systems (an order's status, a date, an "
    "amount refunded) or asks for the order number. It makes no promise or guess about an "
    "order it has not looked up.",
    agent=Agent(
        name="judge",
        system=JUDGE_SYSTEM,
        max_tokens=1024,
        client=auto_client(FunctionModel(offline_judge)),
    ),
)


async def evaluate(folder: Path) -> tuple[evals.Report, evals.Report]:
    """Run the dataset against the desk (saved as the baseline), then against the hasty desk."""
    dataset = evals.Dataset.load(CASES)
    baseline = await evals.run(
        dataset, support_desk, evaluators=[judge], trace_dir=folder / "baseline"
    )
    baseline.save(folder / "baseline.json")
    if all(run.error for case in baseline.cases for run in case.runs):
        return baseline, baseline  # the model could not be reached: main() says so
    hasty = await evals.run(dataset, hasty_desk, evaluators=[judge], trace_dir=folder / "hasty")
    return baseline, hasty


def gate(folder: Path) -> tuple[int, str]:
    """What CI runs: the hasty desk against the baseline; the exit code and what it said."""
    argv = ["eval", "run", str(CASES), "--target", f"{Path(__file__).resolve()}:hasty_desk"]
    argv += ["--baseline", str(folder / "baseline.json"), "--traces", str(folder / "gate")]
    said = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
        code = groundswell.cli.main([*argv, "--fail-on-regression"])
    return code, said.getvalue().strip()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="groundswell-evals-") as tmp:
        folder = Path(tmp)
        baseline, hasty = asyncio.run(evaluate(folder))
        failed = [run for case in baseline.cases for run in case.runs if run.error]
        if len(failed) == len(baseline.cases):  # e.g. the API cannot be reached
            print(EventTree.load(str(failed[0].trace)).render())
            print(
                f"error: workflow 'support' failed in every case: {failed[0].error}",
                file=sys.stderr,
            )
            return 1
        baseline.print()
        print(EventTree.load(str(baseline.case("refund").runs[0].trace)).render())
        print("\nThe same cases after a careless edit of the system prompt:")
        comparison = evals.compare(hasty, baseline)  # .print() draws it as a wide table
        for change in comparison.cases:
            scores = f"{change.baseline_score:.2f} → {change.score:.2f}"
            print(f"  {change.name:<17} {change.status:<10} {scores}")
        print(f"why 'refund' regressed:\n{textwrap.indent(hasty.case('refund').explain(), '  ')}")
        code, said = gate(folder)
        print("\n$ groundswell eval run 12_evals_cases.yaml --target 12_evals.py:hasty_desk \\")
        print(f"    --baseline baseline.json --fail-on-regression\n{said}\nexit code {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
