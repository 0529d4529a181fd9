"""The execution seams a durable engine uses for people and tools, with a plugin's engine.

``opening`` names and times a wait, ``decide`` takes decisions on waits of
other processes (``groundswell.waits.approve`` and the rest reach it),
``groundswell.waits.deliver`` hands a wait a decision from elsewhere, and
``once`` runs each tool call with its idempotency key. No DBOS here: the
engine is the test's own, registered as a plugin.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    ExecutionBackend,
    InvalidAnswer,
    Tool,
    ToolContext,
    UnknownWait,
    WaitClosed,
    WorkflowCall,
    WorkflowContext,
    get_plugin_manager,
    hookimpl,
    waits,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, auto_answer, text, tool_use
from groundswell.waits import Answered, Decision, Wait, WaitOpening
from groundswell.workflow import execution


class KeepingEngine:
    """Runs here, like the local engine, and keeps what a durable one would."""

    def __init__(self) -> None:
        self.deadline: float | None = None
        self.elsewhere: dict[str, Wait] = {}
        self.decided: list[tuple[str, Decision]] = []
        self.ops: list[tuple[str, bool]] = []

    async def run_workflow(self, call: WorkflowCall) -> Any:
        return await call.run_here()

    async def run_step(
        self, ctx: WorkflowContext, node: Any, call: Callable[[], Awaitable[Any]]
    ) -> Any:
        return await call()

    async def spawn(self, ctx: WorkflowContext, node: Any, call: WorkflowCall, queue: str) -> Any:
        raise ConfigurationError("no queues here")

    async def opening(
        self, ctx: WorkflowContext, kind: str, name: str, opening: WaitOpening
    ) -> WaitOpening:
        deadline = opening.deadline if self.deadline is None else self.deadline
        return WaitOpening(f"kept-{kind}-{name}", opening.opened_at - 60, deadline)

    async def decide(self, wait_id: str, decision: Decision) -> Answered | None:
        wait = self.elsewhere.get(wait_id)
        if wait is None:
            return None
        self.decided.append((wait_id, decision))
        return Answered(wait, decision)

    async def once(
        self,
        ctx: WorkflowContext,
        node: Any,
        name: str,
        fn: Callable[[str | None], Awaitable[Any]],
        *,
        checkpoint: bool = True,
    ) -> Any:
        self.ops.append((name, checkpoint))
        return await fn(f"run-1:{len(self.ops)}")


@pytest.fixture
def engine() -> Iterator[KeepingEngine]:
    made = KeepingEngine()

    class Plugin:
        @hookimpl
        def register_execution_backends(self) -> ExecutionBackend:
            return ExecutionBackend(name="keeping", factory=lambda: made)

    manager = get_plugin_manager()
    name = manager.register(Plugin(), name="keeping-engine-plugin")
    execution.get_engine("keeping")  # created: groundswell.waits may ask it from now on
    try:
        yield made
    finally:
        manager.unregister(name)
        execution._reset_engines()


@workflow(name="keeps-asking", durable="keeping")
async def keeps_asking(ctx: WorkflowContext) -> int:
    return await ctx.ask("How many?", int, timeout=60, default=5)


async def test_an_engine_gives_a_wait_its_id_and_a_deadline_that_does_not_move(
    engine: KeepingEngine,
) -> None:
    with auto_answer(answers={"How many?": 3}):
        result = await keeps_asking.run()
    (node,) = result.tree.find(type="wait")
    assert result.output == 3 and node.payload["wait_id"] == "kept-question-question"

    engine.deadline = time.time() - 1  # passed while no process ran the run
    began = time.monotonic()
    result = await keeps_asking.run()
    assert result.output == 5 and time.monotonic() - began < 1  # the outcome, at once
    (node,) = result.tree.find(type="wait")
    assert node.payload["timed_out"] is True and node.payload["deadline"] == engine.deadline


async def test_a_decision_on_a_wait_of_another_process_goes_to_the_engine(
    engine: KeepingEngine,
) -> None:
    there = Wait("w-there", "approval", "run-9", "node-9", {"tool": "refund"}, time.time())
    engine.elsewhere[there.id] = there

    answered = await waits.approve("w-there", input={"amount": 10}, by="ada")  # in a coroutine
    assert answered.wait == there and answered.decision.input == {"amount": 10}
    result: list[Answered] = []
    # A plain call, from a thread without a loop (a web handler): delivered before it returns.
    thread = threading.Thread(target=lambda: result.append(waits.reject("w-there", "no")))
    thread.start()
    thread.join()
    assert result[0].decision.kind == "reject"
    assert [(i, d.kind, d.by) for i, d in engine.decided] == [
        ("w-there", "approve", "ada"),
        ("w-there", "reject", None),
    ]
    with pytest.raises(UnknownWait, match="in this process or in the durable runs"):
        await waits.answer("w-nowhere", 1)


async def test_deliver_checks_a_decision_from_elsewhere_and_keeps_its_time() -> None:
    @workflow(name="delivered")
    async def delivered(ctx: WorkflowContext) -> int:
        return await ctx.ask("How many?", int)

    async def opened() -> Wait:
        while True:
            found = waits.pending()
            if found:
                return found[0]
            await asyncio.sleep(0.005)

    run = asyncio.create_task(delivered.run())
    wait = await asyncio.wait_for(opened(), 5)
    with pytest.raises(InvalidAnswer, match="decide it with"):
        waits.deliver(wait.id, Decision.approve())
    with pytest.raises(InvalidAnswer, match="does not fit"):
        waits.deliver(wait.id, Decision.answer("many"))
    sent = Decision("answer", value="4", by="ada", at=1_700_000_000.0)
    assert waits.deliver(wait.id, sent).decision.value == 4
    result = await run
    (node,) = result.tree.find(type="wait")
    assert result.output == 4 and node.payload["answered_at"] == 1_700_000_000.0
    with pytest.raises(WaitClosed):
        waits.deliver(wait.id, sent)


def refund(order: str, ctx: ToolContext) -> str:
    """Refund an order.

    Args:
        order: The order number.
    """
    return f"refunded {order} under {ctx.idempotency_key}"


def look(order: str, ctx: ToolContext) -> str:
    """Look an order up.

    Args:
        order: The order number.
    """
    return f"{order} is open"


def two_calls() -> FakeAnthropicAPI:
    return FakeAnthropicAPI(
        [
            tool_use("refund", {"order": "A-1"}, id="toolu_refund"),
            tool_use("look", {"order": "A-1"}),
            text("Done."),
        ]
    )


async def test_each_tool_call_goes_through_the_engine_with_its_idempotency_key(
    engine: KeepingEngine,
) -> None:
    fake = two_calls()
    agent = Agent(name="clerk", tools=[refund, Tool(look, checkpoint=False)], client=fake.client())

    @workflow(name="clerk-run", durable="keeping")
    async def clerk_run(ctx: WorkflowContext) -> str:
        return await ctx.step("work", lambda: agent.prompt("Refund A-1"))

    assert (await clerk_run.run()).output == "Done."
    assert fake.requests[1].tool_results()[0]["content"] == "refunded A-1 under run-1:1"
    (refund_op, look_op) = engine.ops
    assert refund_op[0].startswith("tool refund ") and refund_op[1] is True
    assert look_op[0].startswith("tool look ") and look_op[1] is False
    # The same tool and input make the same name: how a recovery finds the call again.
    assert refund_op[0] == f"tool refund {look_op[0].split()[2]}"


async def test_outside_a_durable_run_the_idempotency_key_is_the_tool_use_id() -> None:
    fake = two_calls()
    agent = Agent(name="clerk", tools=[refund, look], client=fake.client())
    await agent.prompt("Refund A-1")
    assert fake.requests[1].tool_results()[0]["content"] == "refunded A-1 under toolu_refund"


def test_checkpoint_is_true_or_false() -> None:
    assert Tool(look).checkpoint is True and Tool(look, checkpoint=False).checkpoint is False
    with pytest.raises(ConfigurationError, match="checkpoint must be True or False"):
        Tool(look, checkpoint="no")  # type: ignore[arg-type]


def test_the_seams_are_named_in_the_execution_module() -> None:
    assert isinstance(KeepingEngine(), execution.RemoteWaits)
    assert isinstance(KeepingEngine(), execution.CheckpointingEngine)
    assert groundswell.waits.WaitOpening("x", 1.0).deadline is None
