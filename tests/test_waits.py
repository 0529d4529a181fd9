"""People in the loop on the local engine: ctx.ask, groundswell.waits and auto_answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import groundswell_otel
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    EventTree,
    ExecutionBackend,
    InvalidAnswer,
    NodeStatus,
    NodeType,
    UnknownWait,
    WaitClosed,
    WaitTimedOut,
    WorkflowCall,
    WorkflowContext,
    WorkflowError,
    get_plugin_manager,
    hookimpl,
    waits,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, auto_answer, text, tool_use
from groundswell.waits import Decision, Wait
from groundswell.waits.core import open_wait
from groundswell.workflow import execution

from .conftest import RecordingSink


class Plan(BaseModel):
    steps: int
    owner: str


# Every test here ends with no wait of its own left open (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_wait_left_open")


async def opened(count: int = 1, kind: str | None = None) -> Wait:
    """The newest open wait, once ``count`` are open (of ``kind``, when given)."""

    async def poll() -> Wait:
        while True:
            found = [w for w in waits.pending() if kind is None or w.kind == kind]
            if len(found) >= count:
                return found[-1]
            await asyncio.sleep(0.005)

    return await asyncio.wait_for(poll(), 5)


class Trees:
    """Keeps the tree of each run that calls it (the tests look at it while the run waits)."""

    def __init__(self) -> None:
        self.kept: list[EventTree] = []

    def __call__(self, ctx: WorkflowContext) -> None:
        self.kept.append(ctx.event_tree)


@workflow(name="greet")
async def greet(ctx: WorkflowContext) -> str:
    name = await ctx.ask("What is your name?")
    return f"Hello, {name}!"


async def test_ask_returns_the_answer_given_from_another_task() -> None:
    run = asyncio.create_task(greet.run())
    wait = await opened()
    assert wait.kind == "question"
    assert wait.request == {"question": "What is your name?", "schema": {"type": "string"}}
    assert [w.id for w in waits.pending()] == [wait.id]
    answered = waits.answer(wait.id, "Ada", by="ada@example.com")
    assert answered.decision.kind == "answer" and answered.decision.value == "Ada"
    result = await run
    assert result.output == "Hello, Ada!"
    assert waits.pending() == []
    (node,) = result.tree.find(type=NodeType.WAIT)
    assert node.parent_id == result.node.id and node.name == "question"
    assert node.status is NodeStatus.COMPLETED
    assert node.payload["wait_id"] == wait.id == wait.to_dict()["id"]
    assert node.payload["answer"] == "Ada" and node.payload["decision"] == "answer"
    assert node.payload["answered_by"] == "ada@example.com"
    assert wait.opened_at <= node.payload["answered_at"] <= node.ended_at  # type: ignore[operator]
    assert wait.run_id == result.node.id and wait.node_id == node.id


async def test_an_answer_from_another_thread_reaches_the_run() -> None:
    run = asyncio.create_task(greet.run())
    wait = await opened()
    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: results.append(waits.answer(wait.id, "Grace", by="cli"))
    )
    worker.start()
    result = await asyncio.wait_for(run, 5)
    worker.join()
    assert result.output == "Hello, Grace!"
    assert results[0].decision.by == "cli"
    # Awaited, the same call works too (the form that can reach another process).
    run = asyncio.create_task(greet.run())
    wait = await opened()
    answered = await waits.answer(wait.id, "Linus")
    assert answered.wait == wait and (await run).output == "Hello, Linus!"


async def test_the_tree_shows_the_wait_waiting_then_completed_with_who_answered() -> None:
    keep = Trees()

    @workflow(name="plan")
    async def plan(ctx: WorkflowContext) -> Plan:
        keep(ctx)
        return await ctx.step("agree", lambda: ctx.ask("Which plan?", Plan))

    run = asyncio.create_task(plan.run())
    wait = await opened()
    (tree,) = keep.kept
    node = tree.get_node(wait.node_id)
    assert node.status is NodeStatus.WAITING and node.ended_at is None
    assert tree.find(status="waiting") == [node]
    assert tree.path(node.id) == "plan/agree/question"  # under the step that asked
    assert "⧖ wait question" in tree.render() and "waiting" in tree.render()
    assert wait.request["schema"]["required"] == ["steps", "owner"]
    waits.answer(wait.id, {"steps": 3, "owner": "ops"}, by="ada")
    result = await run
    assert result.output == Plan(steps=3, owner="ops")
    assert node.status is NodeStatus.COMPLETED
    assert node.payload["answer"] == {"steps": 3, "owner": "ops"}
    assert node.payload["answered_by"] == "ada"


async def test_an_answer_that_does_not_fit_is_refused_and_the_wait_stays_open() -> None:
    @workflow(name="typed")
    async def typed(ctx: WorkflowContext) -> Plan:
        return await ctx.ask("Which plan?", Plan)

    run = asyncio.create_task(typed.run())
    wait = await opened()
    with pytest.raises(InvalidAnswer, match=r"steps: Input should be a valid integer") as info:
        waits.answer(wait.id, {"steps": "many", "owner": "ops"})
    assert info.value.wait_id == wait.id
    assert [e["loc"] for e in info.value.errors] == [("steps",)]
    with pytest.raises(InvalidAnswer, match="owner: Field required"):
        waits.answer(wait.id, '{"steps": 2}')  # JSON text, as a form or a command line sends
    assert waits.pending() == [wait] and not run.done()
    # A question without response_format takes text only.
    with pytest.raises(InvalidAnswer, match="approve"):
        waits.approve(wait.id)  # the wrong verb for a question
    waits.answer(wait.id, '{"steps": 2, "owner": "qa"}')
    assert (await run).output == Plan(steps=2, owner="qa")


async def test_a_text_question_refuses_other_values() -> None:
    run = asyncio.create_task(greet.run())
    wait = await opened()
    with pytest.raises(InvalidAnswer, match="asks for text, got int"):
        waits.answer(wait.id, 42)
    waits.answer(wait.id, "42")
    assert (await run).output == "Hello, 42!"


async def test_a_deadline_gives_the_default_or_raises_wait_timed_out() -> None:
    @workflow(name="patient")
    async def patient(ctx: WorkflowContext) -> list[Any]:
        size = await ctx.ask("Batch size?", int, timeout=0.05, default=10)
        try:
            await ctx.ask("Really?", timeout=0.05)
        except WaitTimedOut as exc:
            return [size, exc.timeout, exc.wait_id]
        return [size]

    result = await patient.run()
    size, timeout, wait_id = result.output
    assert (size, timeout) == (10, 0.05)
    first, second = result.tree.find(type="wait")
    assert first.status is NodeStatus.COMPLETED and first.payload["timed_out"] is True
    assert first.payload["answer"] == 10 and first.payload["answered_by"] == "deadline"
    assert first.payload["deadline"] == pytest.approx(first.timestamp + 0.05, abs=0.01)
    assert second.status is NodeStatus.FAILED and second.error["type"] == "WaitTimedOut"
    assert second.payload["wait_id"] == wait_id
    with pytest.raises(WaitClosed, match=r"timed out after 0\.05 s") as info:
        waits.answer(wait_id, "too late")
    assert info.value.closed == "timed out after 0.05 s"


async def test_an_unanswered_question_without_default_fails_the_run() -> None:
    @workflow(name="asks")
    async def asks(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: ctx.ask("Anyone?", timeout=0.02))

    with pytest.raises(WorkflowError, match="asks/ask/question") as info:
        await asks.run()
    assert isinstance(info.value.__cause__, WaitTimedOut)
    assert "declared no outcome" in str(info.value.__cause__)


async def test_unknown_and_closed_ids_and_bad_arguments_are_typed_errors() -> None:
    with pytest.raises(UnknownWait, match=r"no open wait has the id 'nope'.*pending\(\)"):
        waits.answer("nope", "x")
    with pytest.raises(UnknownWait, match="a wait id is a string"):
        waits.approve(7)  # type: ignore[arg-type]
    run = asyncio.create_task(greet.run())
    wait = await opened()
    with pytest.raises(InvalidAnswer, match="by= names who decided"):
        waits.answer(wait.id, "Ada", by=3)  # type: ignore[arg-type]
    waits.answer(wait.id, "Ada", by="ada")
    with pytest.raises(WaitClosed, match=r"closed already \(answered by ada\)") as info:
        waits.answer(wait.id, "Bob")
    assert isinstance(info.value, UnknownWait) and isinstance(info.value, LookupError)
    assert (await run).output == "Hello, Ada!"
    with pytest.raises(WorkflowError, match=r"ctx.ask\('Hi\?'\): timeout must be seconds > 0"):
        await greet_with_timeout.run(-1)
    with pytest.raises(WorkflowError, match="give the question as text") as failed:
        await greet_with_timeout.run(None, question="")
    assert isinstance(failed.value.__cause__, groundswell.ConfigurationError)


@workflow(name="greet-timeout")
async def greet_with_timeout(ctx: WorkflowContext, timeout: Any, question: str = "Hi?") -> str:
    return await ctx.ask(question, timeout=timeout)


async def test_cancelling_the_run_cancels_the_wait_and_closes_it() -> None:
    keep = Trees()

    @workflow(name="cancelled")
    async def cancelled(ctx: WorkflowContext) -> str:
        keep(ctx)
        return await ctx.ask("Still there?")

    run = asyncio.create_task(cancelled.run())
    wait = await opened()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert waits.pending() == []
    (tree,) = keep.kept
    assert tree.get_node(wait.node_id).status is NodeStatus.CANCELLED
    assert tree.root is not None and tree.root.status is NodeStatus.CANCELLED
    with pytest.raises(WaitClosed, match="cancelled"):
        waits.answer(wait.id, "yes")


async def test_auto_answer_answers_at_once_and_records_it_like_a_person() -> None:
    with auto_answer(answers={"What is your name?": "Ada"}) as auto:
        result = await greet.run()
    assert result.output == "Hello, Ada!"
    (node,) = result.tree.find(type="wait")
    assert node.payload["answered_by"] == "auto_answer" and node.payload["answer"] == "Ada"
    ((wait, decision),) = auto.answered
    assert wait.node_id == node.id and decision.value == "Ada"
    # A callable sees the Wait; async with works too; by= names the answerer.
    async with auto_answer(lambda w: Decision.answer(w.request["question"][:4]), by="bot"):
        result = await greet.run()
    assert result.output == "Hello, What!"
    assert result.tree.find(type="wait")[0].payload["answered_by"] == "bot"
    # Outside the block nothing answers.
    run = asyncio.create_task(greet.run())
    wait = await opened()
    waits.answer(wait.id, "by hand")
    assert (await run).output == "Hello, by hand!"


async def test_auto_answer_passes_on_what_it_has_no_rule_for_and_checks_its_answers() -> None:
    @workflow(name="two")
    async def two(ctx: WorkflowContext) -> list[Any]:
        return [await ctx.ask("Known?"), await ctx.ask("How many?", int)]

    with auto_answer(answers={"Known?": "yes"}):
        run = asyncio.create_task(two.run())
        wait = await opened()  # the second question: no rule answers it
    assert wait.request["question"] == "How many?"
    waits.answer(wait.id, "3")
    assert (await run).output == ["yes", 3]
    with auto_answer(answers={"question": "not a number"}), pytest.raises(WorkflowError) as info:
        await two.run()
    assert isinstance(info.value.__cause__, InvalidAnswer)
    with pytest.raises(
        groundswell.ConfigurationError, match=r"approve=\.\.\.\) takes True or False"
    ):
        auto_answer(approve="yes")  # type: ignore[arg-type]


@workflow(name="deploy")
async def deploy(ctx: WorkflowContext, timeout: float | None = None) -> dict[str, Any]:
    """Opens an approval the way the agent loop will: through the kernel's seam."""
    decision = await open_wait(
        "approval",
        {"tool": "deploy", "input": {"env": "prod"}},
        tree=ctx.event_tree,
        parent=ctx.node,
        name="deploy",
        timeout=timeout,
        on_timeout=Decision.reject("nobody approved in time"),
        workflow=ctx,
    )
    return {"kind": decision.kind, "input": decision.input, "reason": decision.reason}


async def test_approvals_take_approve_or_reject_and_a_declared_deadline_outcome() -> None:
    run = asyncio.create_task(deploy.run())
    wait = await opened(kind="approval")
    assert wait.request == {"tool": "deploy", "input": {"env": "prod"}}
    with pytest.raises(InvalidAnswer, match=r"approval: decide it with .*approve.* or .*reject"):
        waits.answer(wait.id, "yes")
    with pytest.raises(InvalidAnswer, match="give the reason"):
        waits.reject(wait.id, "")
    with pytest.raises(InvalidAnswer, match="input must be a dict"):
        waits.approve(wait.id, input=["staging"])  # type: ignore[arg-type]
    waits.approve(wait.id, input={"env": "staging"}, by="ops")
    result = await run
    assert result.output == {"kind": "approve", "input": {"env": "staging"}, "reason": None}
    (node,) = result.tree.find(type="wait")
    assert node.payload["decision"] == "approve" and node.payload["input"] == {"env": "staging"}
    run = asyncio.create_task(deploy.run())
    waits.reject((await opened(kind="approval")).id, "not on a Friday", by="ops")
    assert (await run).output["reason"] == "not on a Friday"
    result = await deploy.run(0.02)
    assert result.output["kind"] == "reject"
    assert result.output["reason"] == "nobody approved in time"
    with auto_answer(approve=True):
        assert (await deploy.run()).output["kind"] == "approve"
    with auto_answer(answers={"deploy": False}, by="policy"):
        result = await deploy.run()
    assert result.output["reason"] == "rejected by policy"


async def test_every_opened_wait_reaches_the_event_sinks(recording_sink: RecordingSink) -> None:
    with auto_answer(answers={"What is your name?": "Ada"}):
        result = await greet.run()
    assert groundswell.flush_sinks()
    (wait_node,) = result.tree.find(type="wait")
    opened_events = [
        e
        for e in recording_sink.events
        if e.kind == "node_event" and e.data["event"]["type"] == "wait_opened"
    ]
    (event,) = opened_events
    assert event.run_id == result.node.id and event.data["id"] == wait_node.id
    data = event.data["event"]
    assert data["kind"] == "question" and data["wait_id"] == wait_node.payload["wait_id"]
    assert data["status"] == "waiting" and data["deadline"] is None
    assert data["request"] == {"question": "What is your name?", "schema": {"type": "string"}}
    end = next(e for e in recording_sink.events if e.kind == "node_end" and e.node is wait_node)
    assert end.data["status"] == "completed" and end.data["payload"]["answer"] == "Ada"
    # The events alone rebuild the same tree, the wait and its answer included.
    assert EventTree.replay(e.to_record() for e in recording_sink.events) == result.tree


async def test_the_otel_sink_shows_a_wait_as_a_span_with_its_opening() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    groundswell_otel.instrument(provider)
    try:
        with auto_answer(answers={"What is your name?": "Ada"}):
            result = await greet.run()
        assert groundswell.flush_sinks()
    finally:
        groundswell_otel.uninstrument()
    (span,) = [s for s in memory.get_finished_spans() if s.name == "wait question"]
    assert span.status.status_code is StatusCode.OK
    (opening,) = [e for e in span.events if e.name == "wait_opened"]
    wait_id = result.tree.find(type="wait")[0].payload["wait_id"]
    assert (opening.attributes or {})["groundswell.wait_id"] == wait_id


async def test_a_tool_of_an_agent_asks_through_the_workflow_and_the_wait_nests_under_it() -> None:
    async def confirm(item: str) -> str:
        """Ask the operator whether to order an item."""
        frame = groundswell.current_frame()
        assert frame is not None and frame.workflow is not None
        return await frame.workflow.ask(f"Order {item}?")

    fake = FakeAnthropicAPI([tool_use("confirm", {"item": "coffee"}), text("Ordered.")])
    agent = Agent(name="shopper", tools=[confirm], client=fake.client())

    @workflow(name="shop")
    async def shop(ctx: WorkflowContext) -> str:
        return await ctx.step("buy", lambda: agent.prompt("Buy coffee"))

    with auto_answer(answers={"Order coffee?": "yes, one"}, by="operator"):
        result = await shop.run()
    assert result.output == "Ordered."
    (node,) = result.tree.find(type="wait")
    assert result.tree.path(node.id) == "shop/buy/shopper/confirm/question"
    assert fake.requests[1].tool_results()[0]["content"] == "yes, one"


class RecordingWaitEngine:
    """A plugin's execution engine that takes waits over (it has `wait`)."""

    def __init__(self) -> None:
        self.waited: list[str] = []

    async def run_workflow(self, call: WorkflowCall) -> Any:
        return await call.run_here()

    async def run_step(
        self, ctx: WorkflowContext, node: Any, call: Callable[[], Awaitable[Any]]
    ) -> Any:
        return await call()

    async def spawn(self, ctx: WorkflowContext, node: Any, call: WorkflowCall, queue: str) -> Any:
        raise groundswell.ConfigurationError("no queues here")

    async def wait(
        self, ctx: WorkflowContext, node: Any, wait: Wait, decision: Awaitable[Decision]
    ) -> Decision:
        self.waited.append(f"{wait.kind} {node.name} in {ctx.workflow.name}")
        return await decision


async def test_a_workflow_s_engine_takes_the_waiting_over_when_it_can() -> None:
    engine = RecordingWaitEngine()

    class Plugin:
        @hookimpl
        def register_execution_backends(self) -> ExecutionBackend:
            return ExecutionBackend(name="waiting-engine", factory=lambda: engine)

    @workflow(name="on-engine", durable="waiting-engine")
    async def on_engine(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: ctx.ask("Proceed?"))

    manager = get_plugin_manager()
    name = manager.register(Plugin(), name="waiting-engine-plugin")
    try:
        with auto_answer(answers={"Proceed?": "go"}):
            result = await on_engine.run()
    finally:
        manager.unregister(name)
        execution._reset_engines()
    assert result.output == "go"
    assert engine.waited == ["question question in on-engine"]


class _Login(BaseModel):
    username: str
    password: str


async def test_a_forms_secret_named_fields_are_shown_and_its_secret_answers_are_masked() -> None:
    @workflow(name="login")
    async def login(ctx: WorkflowContext) -> str:
        creds = await ctx.ask("Log-in for staging?", _Login)
        return creds.username

    run = asyncio.create_task(login.run())
    wait = await opened()
    # The schema is the code's: its "password" field is shown as a field to fill in.
    assert wait.request["schema"]["properties"]["password"]["type"] == "string"
    waits.answer(wait.id, {"username": "ada", "password": "hunter2-hunter2"})
    result = await run
    assert result.output == "ada"
    (node,) = result.tree.find(type="wait")
    assert node.payload["answer"] == {"username": "ada", "password": "**********"}


async def test_a_text_answer_that_looks_like_json_is_taken_as_text() -> None:
    @workflow(name="zip")
    async def zip_code(ctx: WorkflowContext) -> str | None:
        return await ctx.ask("Your ZIP code?", str | None)  # type: ignore[arg-type]

    run = asyncio.create_task(zip_code.run())
    wait = await opened()
    waits.answer(wait.id, "12345")  # what `groundswell answer ID --text 12345` sends
    assert (await run).output == "12345"
