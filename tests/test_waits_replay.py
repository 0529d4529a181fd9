"""A recorded run replays offline with its people's decisions: auto_answer(from_trace=...)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groundswell import Agent, EventTree, ToolCall, WorkflowContext, WorkflowError, waits, workflow
from groundswell.testing import (
    FakeAnthropicAPI,
    NoRecordedDecision,
    auto_answer,
    text,
    tool_calls,
)

REFUNDED: list[tuple[str, int]] = []


def refund(order: str, amount: int) -> str:
    """Refund an order.

    Args:
        order: The order number.
        amount: Euros to refund.
    """
    REFUNDED.append((order, amount))
    return f"refunded {amount} EUR on {order}"


def large(call: ToolCall) -> bool:
    return bool(call.input["amount"] > 100)


def build(client: Any) -> Any:
    support = Agent(name="support", tools=[refund], approval=large, client=client)

    @workflow(name="refunds")
    async def refunds(ctx: WorkflowContext, customer: str) -> str:
        note = await ctx.ask(f"Anything to tell {customer}?")
        done = await ctx.step("refund", lambda: support.prompt("Refund orders A-1, B-2, C-3."))
        return f"{done} Note: {note}"

    return refunds


def script() -> FakeAnthropicAPI:
    return FakeAnthropicAPI(
        [
            tool_calls(
                ("refund", {"order": "A-1", "amount": 30}),
                ("refund", {"order": "B-2", "amount": 900}),
                ("refund", {"order": "C-3", "amount": 250}),
            ),
            text("A-1 and C-3 refunded; B-2 refused."),
        ]
    )


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    REFUNDED.clear()
    before = {w.id for w in waits.pending()}
    yield
    assert not [w for w in waits.pending() if w.id not in before], "waits left open"


async def open_waits(count: int) -> list[waits.Wait]:
    """The open waits, once there are ``count`` (a person watching a console)."""
    for _ in range(2000):
        if len(waits.pending()) >= count:
            return waits.pending()
        await asyncio.sleep(0.005)
    raise AssertionError(f"{count} wait(s) never opened")


async def person() -> None:
    """Ada answers the question, approves C-3 with a smaller amount and rejects B-2."""
    (question,) = await open_waits(1)
    waits.answer(question.id, "sorry for the wait", by="ada")
    by_order = {w.request["input"]["order"]: w for w in await open_waits(2)}
    waits.approve(by_order["C-3"].id, input={"order": "C-3", "amount": 100}, by="ada")
    waits.reject(by_order["B-2"].id, "B-2 was refunded last week", by="ada")


def calls(tree: EventTree) -> list[tuple[str, str, Any]]:
    return sorted(
        (n.status.value, n.payload.get("approval", "-"), n.payload.get("approved_input"))
        for n in tree.find(type="tool_call")
    )


@pytest.fixture
async def recorded(tmp_path: Path) -> tuple[Any, Path]:
    fake = script()
    helper = asyncio.create_task(person())
    result = await build(fake.client()).run("Grace")
    await helper
    saved = tmp_path / "refunds.json"
    saved.write_text(json.dumps(result.tree.to_json()))
    return result, saved


async def test_a_recorded_run_replays_its_decisions_with_nobody_there(
    recorded: tuple[Any, Path],
) -> None:
    result, saved = recorded
    assert REFUNDED == [("A-1", 30), ("C-3", 100)]
    REFUNDED.clear()

    replay = FakeAnthropicAPI.from_trace(saved)
    with auto_answer(from_trace=saved) as auto:
        again = await build(replay.client()).run("Grace")

    assert (
        again.output
        == result.output
        == ("A-1 and C-3 refunded; B-2 refused. Note: sorry for the wait")
    )
    assert REFUNDED == [("A-1", 30), ("C-3", 100)]  # the edited input, B-2 not run
    assert calls(again.tree) == calls(result.tree)
    assert replay.mismatches == [] and replay.remaining == 0
    assert auto.recorded is not None and auto.recorded.remaining == 0
    decided = sorted((d.kind, d.value, d.reason, json.dumps(d.input)) for _, d in auto.answered)
    assert decided == [
        ("answer", "sorry for the wait", None, "null"),
        ("approve", None, None, '{"order": "C-3", "amount": 100}'),
        ("reject", None, "B-2 was refunded last week", "null"),
    ]
    # The model got the same tool results: the rejection's reason included.
    (rejected,) = [r for r in replay.requests[1].tool_results() if r.get("is_error")]
    assert "B-2 was refunded last week" in str(rejected["content"])
    assert {n.payload["answered_by"] for n in again.tree.find(type="wait")} == {"auto_answer"}


async def test_every_trace_form_replays_the_same(
    recorded: tuple[Any, Path], tmp_path: Path
) -> None:
    result, _ = recorded
    log = result.tree.save(tmp_path / "refunds.jsonl")
    for source in (result.tree, result.tree.to_json(), log):
        REFUNDED.clear()
        with auto_answer(from_trace=source):
            again = await build(FakeAnthropicAPI.from_trace(source).client()).run("Grace")
        assert again.output == result.output
        assert REFUNDED == [("A-1", 30), ("C-3", 100)]


async def test_a_wait_the_trace_did_not_record_fails_and_names_it(
    recorded: tuple[Any, Path],
) -> None:
    _, saved = recorded

    @workflow(name="refunds")
    async def asks_twice(ctx: WorkflowContext, customer: str) -> str:
        first = await ctx.ask(f"Anything to tell {customer}?")
        second = await ctx.ask("And a discount code?")
        return f"{first} {second}"

    with pytest.raises(NoRecordedDecision) as caught, auto_answer(from_trace=saved):
        await asks_twice.run("Grace")
    assert caught.value.waits == ["question at refunds/question ('And a discount code?')"]
    assert isinstance(caught.value.__cause__, WorkflowError)
    assert "no recorded decision" in str(caught.value)


async def test_a_replayed_tool_call_the_trace_lacks_fails_the_block(
    recorded: tuple[Any, Path],
) -> None:
    _, saved = recorded
    # A different model this time: a fourth large refund the person never saw.
    fake = FakeAnthropicAPI(
        [
            tool_calls(
                ("refund", {"order": "B-2", "amount": 900}),
                ("refund", {"order": "C-3", "amount": 250}),
                ("refund", {"order": "D-4", "amount": 500}),
            ),
            text("Done."),
        ]
    )
    with pytest.raises(NoRecordedDecision) as caught, auto_answer(from_trace=saved):
        await build(fake.client()).run("Grace")
    # The run went on (the model read an error for D-4); the block still fails.
    assert caught.value.waits == ["approval at refunds/refund/support/refund/approval ('refund')"]
    assert ("D-4", 500) not in REFUNDED


def test_from_trace_refuses_what_is_not_a_trace(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no trace at"):
        auto_answer(from_trace=tmp_path / "missing.jsonl")
    with pytest.raises(TypeError, match=r"auto_answer\(from_trace=\.\.\.\) takes a trace file"):
        auto_answer(from_trace=42)
