"""Durable runs under an id the caller chooses: ``wf.run_with_id("order-1234", ...)``.

On a real PostgreSQL (DBOS launched once for this module, on a fresh
database): a second call with the same id starts nothing, runs no step and
makes no model request; it returns (or raises) what the first recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from groundswell import (
    Agent,
    ConfigurationError,
    WorkflowContext,
    WorkflowError,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, FunctionModel

from .scratch_db import fresh_database

fake = FakeAnthropicAPI(FunctionModel(lambda r: f"charged: {r.last_user_text()}"))
cashier = Agent(name="cashier", client=fake.client())
ran: list[str] = []  # every step body that ran, by name


def record(name: str, value: Any) -> Any:
    ran.append(name)
    return value


@workflow(name="order", durable=True)
async def order(ctx: WorkflowContext, order_no: str, amount: int) -> dict[str, Any]:
    total = await ctx.step("price", lambda: record("price", amount * 2))
    note = await ctx.step("charge", lambda: cashier.prompt(f"{order_no} for {total}"))
    ran.append("charge")
    return {"total": total, "note": note}


@workflow(name="refund", durable=True)
async def refund(ctx: WorkflowContext, order_no: str) -> str:
    return await ctx.step("refund", lambda: record("refund", f"refunded {order_no}"))


@workflow(name="declined", durable=True)
async def declined(ctx: WorkflowContext, order_no: str) -> None:
    def decline() -> None:
        ran.append("decline")
        raise PermissionError(f"card declined for {order_no}")

    await ctx.step("decline", decline)


@workflow(name="slow-order", durable=True)
async def slow_order(ctx: WorkflowContext, order_no: str) -> str:
    await ctx.step("wait", lambda: asyncio.sleep(0.3))
    return await ctx.step("charge", lambda: cashier.prompt(f"slow {order_no}"))


parked_started = asyncio.Event()


@workflow(name="parked", durable=True)
async def parked(ctx: WorkflowContext) -> str:
    async def park() -> None:
        parked_started.set()
        await asyncio.sleep(1.0)

    await ctx.step("park", park)
    return await ctx.step("after", lambda: record("after", "done"))


@workflow(name="outer", durable=True)
async def outer(ctx: WorkflowContext) -> Any:
    return (await refund.run_with_id("inner-1", "x")).output


@workflow(name="local-order")
async def local_order(ctx: WorkflowContext, order_no: str) -> str:
    return await ctx.step("charge", lambda: record("local", order_no))


@pytest.fixture(scope="module")
def durable(postgres_url: str) -> Iterator[str]:
    """DBOS launched in this process on a fresh database (module scope: one per process)."""
    import groundswell_dbos
    from groundswell_dbos import _runtime

    with fresh_database(postgres_url, prefix="gs_durable_id") as url:
        groundswell_dbos.configure(system_database_url=url)
        try:
            yield url
        finally:
            _runtime.shutdown()
            _runtime._settings.clear()


@pytest.fixture(autouse=True)
def clean() -> None:
    ran.clear()


async def test_the_same_id_again_returns_the_recorded_result_without_running_anything(
    durable: str,
) -> None:
    from dbos import DBOS

    first = await order.run_with_id("order-1234", "A-1", 21)
    assert first.output == {"total": 42, "note": "charged: A-1 for 42"}
    assert first.workflow_id == "order-1234"  # the run is the DBOS workflow of that id
    assert ran == ["price", "charge"]
    asked = len(fake.requests)

    again = await order.run_with_id("order-1234", "A-1", 21)  # a retried request
    assert again.output == first.output
    assert ran == ["price", "charge"]  # no step ran, and not the body either
    assert len(fake.requests) == asked  # no model request
    assert again.workflow_id == "order-1234"
    assert [f"{n.type.value}:{n.name}" for n in again.tree.walk()] == [
        "workflow:order",
        "step:price",
        "step:charge",
        "prompt:cashier",
        "model_call:claude-sonnet-4-6",
    ]  # the first run's tree, as recorded
    assert [e["type"] for e in again.node.events] == ["recorded"]
    assert again.node.events[0]["workflow_id"] == "order-1234"
    (status,) = await DBOS.list_workflows_async(workflow_ids=["order-1234"])
    assert status.status == "SUCCESS" and status.recovery_attempts == 1  # one run, ever


async def test_concurrent_calls_with_one_id_start_one_run(durable: str) -> None:
    asked = len(fake.requests)
    results = await asyncio.gather(*(slow_order.run_with_id("order-77", "B-7") for _ in range(4)))
    assert {r.output for r in results} == {"charged: slow B-7"}
    assert len(fake.requests) == asked + 1  # one model request between them
    assert sum(1 for r in results if not r.node.events) == 1  # one ran; three waited for it


async def test_a_failed_run_stays_failed_under_its_id(durable: str) -> None:
    with pytest.raises(WorkflowError) as first:
        await declined.run_with_id("order-9", "C-9")
    assert isinstance(first.value.__cause__, PermissionError)
    with pytest.raises(WorkflowError) as again:
        await declined.run_with_id("order-9", "C-9")
    assert ran == ["decline"]  # the step did not run again
    assert again.value.node_path == "declined/decline"
    assert "card declined for C-9" in str(again.value)
    result = again.value.result
    assert result is not None and [e["type"] for e in result.node.events] == ["recorded"]


async def test_a_cancelled_run_stays_cancelled_under_its_id(durable: str) -> None:
    import groundswell_dbos

    parked_started.clear()
    first = asyncio.create_task(parked.run_with_id("order-parked"))
    await asyncio.wait_for(parked_started.wait(), 10)
    await groundswell_dbos.cancel("order-parked")
    for call in (first, parked.run_with_id("order-parked")):
        with pytest.raises(WorkflowError, match=r"durable run 'order-parked' .* was cancelled"):
            await call
    assert ran == []  # the step after the cancelled one never ran


async def test_an_id_of_another_workflows_run_is_refused(durable: str) -> None:
    await refund.run_with_id("shared-5", "D-5")
    with pytest.raises(ConfigurationError, match="belongs to a run of workflow 'refund'"):
        await order.run_with_id("shared-5", "D-5", 1)
    assert ran == ["refund"]


async def test_other_ids_start_their_own_runs(durable: str) -> None:
    one = await refund.run_with_id("refund-1", "E-1")
    two = await refund.run_with_id("refund-2", "E-1")
    plain = await refund.run("E-1")
    assert one.output == two.output == plain.output == "refunded E-1"
    assert ran == ["refund", "refund", "refund"]
    assert len({one.workflow_id, two.workflow_id, plain.workflow_id}) == 3


async def test_a_chosen_id_inside_a_durable_run_is_refused(durable: str) -> None:
    with pytest.raises(WorkflowError) as info:
        await outer.run()
    cause = info.value.__cause__
    assert isinstance(cause, ConfigurationError)
    assert "run_with_id('inner-1', ...) inside the durable run" in str(cause)


async def test_a_local_workflow_refuses_a_chosen_id() -> None:
    with pytest.raises(ConfigurationError, match=r"needs a durable workflow \(durable=True\)"):
        await local_order.run_with_id("order-1", "F-1")
    assert ran == []


@pytest.mark.parametrize("bad", ["", "  ", "parent/child", 1234])
async def test_ids_are_checked_before_anything_runs(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="a run's id must be a non-empty string"):
        await order.run_with_id(bad, "G-1", 1)
    assert ran == []
