"""``batch=True``: model calls go through the Message Batches API of the fake, by the real client.

Prompts that wait at the same time share one batch; each gets its own answer
(or its own error); a tool loop takes a batch per turn; the setting follows
the usual precedence, with ``@workflow(batch=...)`` as the default below it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

import groundswell
from groundswell import (
    Agent,
    BatchUnanswered,
    ConfigurationError,
    ModelAPIError,
    NodeStatus,
    NodeType,
    Prompt,
    PromptOverrides,
    WorkflowContext,
    WorkflowError,
    workflow,
)
from groundswell.model import batching
from groundswell.model.batching import BatchTicket, wait_result
from groundswell.testing import (
    FakeAnthropicAPI,
    MessagesRequest,
    check_middleware,
    error,
    text,
    tool_calls,
)

from .conftest import RecordingSink


@pytest.fixture(autouse=True)
def quick_polls() -> Iterator[None]:
    """Batches collect for 20 ms and are polled every few ms (the fake ends them at once)."""
    before = batching.configure(window=0.02, first_poll=0.001, max_poll=0.005)
    yield
    batching.configure(**vars(before))


def capitals(request: MessagesRequest) -> Any:
    asked = request.last_user_text()
    if "Atlantis" in asked:
        return error(400, "no such country")
    return text("Paris" if "France" in asked else "Rome")


def calls_of(tree: Any) -> list[Any]:
    return [n for n in tree.walk() if n.type is NodeType.MODEL_CALL]


async def wait_for_batch(fake: FakeAnthropicAPI) -> str:
    """The id of the fake's first batch, once the agent has sent it."""
    for _ in range(1000):
        if len(fake.batches):
            return fake.batches[0].id
        await asyncio.sleep(0.005)
    raise AssertionError("no batch was sent")


async def test_two_prompts_waiting_together_go_in_one_batch_and_each_gets_its_answer() -> None:
    fake = FakeAnthropicAPI(capitals)
    agent = Agent(name="geo", batch=True, client=fake.client())
    france, italy = await asyncio.gather(
        agent.run("Capital of France?"), agent.run("Capital of Italy?")
    )
    assert (france.output, italy.output) == ("Paris", "Rome")
    assert len(fake.batches) == 1
    batch = fake.batches[0]
    assert len(batch.custom_ids) == 2 and batch.processing_status == "ended"
    # Each model call is the loop's own node, named in the batch by its id.
    for result in (france, italy):
        (call,) = calls_of(result.tree)
        assert call.status is NodeStatus.COMPLETED
        assert call.payload["batch"] == {"id": batch.id, "custom_id": call.id}
        assert call.id in batch.custom_ids
        assert call.metrics["usage"]["output_tokens"] > 0 and call.metrics["batch_wait_s"] >= 0
        (waited,) = [e for e in call.events if e["type"] == "batch_wait"]
        assert waited["batch_id"] == batch.id and waited["custom_id"] == call.id
    assert france.cost_usd is not None and france.cost_usd > 0


async def test_the_request_in_the_batch_is_the_one_a_direct_call_sends() -> None:
    fake = FakeAnthropicAPI(capitals)
    agent = Agent(
        name="geo",
        client=fake.client(),
        system="Answer with one word.",
        temperature=0.2,
        metadata={"user_id": "u-1"},
        extra_body={"top_k": 3},
        extra_headers={"x-team": "geo"},
    )
    await agent.run("Capital of France?")
    await agent.run("Capital of France?", PromptOverrides(batch=True))
    direct, batched = fake.requests
    assert direct.path == "/v1/messages" and batched.custom_id is not None
    assert batched.body == direct.body and "batch" not in batched.body
    assert batched.body["top_k"] == 3  # extra_body is part of the request, as sent directly
    assert fake.batches[0].requests[0].headers["x-team"] == "geo"  # headers go on the batch


async def test_a_beta_request_goes_in_a_beta_batch_with_its_betas_as_the_header() -> None:
    fake = FakeAnthropicAPI(capitals)
    agent = Agent(name="geo", betas=["files-api-2025-04-14"], batch=True, client=fake.client())
    assert await agent.prompt("Capital of Italy?") == "Rome"
    (sent,) = fake.batches[0].requests
    assert sent.headers["anthropic-beta"] == "files-api-2025-04-14"
    assert "betas" not in sent.body


async def test_a_tool_loop_continues_turn_by_turn_each_turn_in_a_batch_of_its_own() -> None:
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    fake = FakeAnthropicAPI([tool_calls(("weather", {"city": "Oslo"})), text("Sunny.")])
    agent = Agent(name="weather", tools=[weather], batch=True, client=fake.client())
    result = await agent.run("Weather in Oslo?")
    assert result.output == "Sunny." and result.turns == 2
    assert len(fake.batches) == 2
    assert [len(b.requests) for b in fake.batches] == [1, 1]
    (answered,) = fake.batches[1].requests[0].tool_results()
    assert answered["content"] == "sunny in Oslo"
    first, second = calls_of(result.tree)
    assert first.payload["batch"]["id"] == fake.batches[0].id
    assert second.payload["batch"]["id"] == fake.batches[1].id
    assert [n.type for n in result.node.children] == [
        NodeType.MODEL_CALL,
        NodeType.TOOL_CALL,
        NodeType.MODEL_CALL,
    ]


async def test_a_request_that_errors_in_the_batch_fails_its_prompt_only() -> None:
    fake = FakeAnthropicAPI(capitals)
    agent = Agent(name="geo", batch=True, client=fake.client())
    france, atlantis = await asyncio.gather(
        agent.run("Capital of France?"),
        agent.run("Capital of Atlantis?"),
        return_exceptions=True,
    )
    assert len(fake.batches) == 1
    assert not isinstance(france, BaseException) and france.output == "Paris"
    assert isinstance(atlantis, ModelAPIError)
    assert (atlantis.status_code, atlantis.error_type) == (400, "invalid_request_error")
    assert str(atlantis) == "Anthropic API error 400 invalid_request_error: no such country"
    import anthropic

    assert isinstance(atlantis.__cause__, anthropic.BadRequestError)  # as a direct call's


async def test_a_batch_that_expires_fails_its_prompts_with_batch_unanswered() -> None:
    fake = FakeAnthropicAPI(capitals, batch_polls=None)  # ends only when the test says
    agent = Agent(name="geo", batch=True, client=fake.client())

    @workflow
    async def ask(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", lambda: agent.prompt("Capital of France?"))

    running = asyncio.create_task(ask.run())
    batch_id = await wait_for_batch(fake)
    fake.batches.expire(batch_id)
    with pytest.raises(WorkflowError) as caught:
        await running
    unanswered = caught.value.__cause__
    assert isinstance(unanswered, BatchUnanswered) and isinstance(unanswered, ModelAPIError)
    assert "got no answer: its batch expired" in str(unanswered)
    assert (unanswered.outcome, unanswered.batch_id) == ("expired", batch_id)
    assert caught.value.result is not None
    call = caught.value.result.tree.get_node(unanswered.custom_id)  # the call's own node
    assert call.type is NodeType.MODEL_CALL and call.status is NodeStatus.FAILED
    assert call.error is not None and call.error["type"] == "BatchUnanswered"


async def test_a_canceled_batch_fails_its_prompts_with_batch_unanswered() -> None:
    fake = FakeAnthropicAPI(capitals, batch_polls=None)
    client = fake.client()
    agent = Agent(name="geo", batch=True, client=client)
    asked = asyncio.create_task(agent.run("Capital of Italy?"))
    batch_id = await wait_for_batch(fake)
    await client.messages.batches.cancel(batch_id)
    with pytest.raises(BatchUnanswered, match="its batch was canceled first") as caught:
        await asked
    assert caught.value.outcome == "canceled"


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("agent", True),
        ("prompt", True),
        ("overrides", True),
        ("workflow", True),
        ("nested workflow", True),
        ("nothing", False),
        ("agent, overrides False", False),
        ("prompt, overrides False", False),
        ("workflow, overrides False", False),
        ("workflow, agent False", False),
        ("workflow, prompt False", False),
    ],
)
async def test_batch_is_set_on_agent_prompt_overrides_or_workflow_and_the_nearest_wins(
    where: str, expected: bool
) -> None:
    fake = FakeAnthropicAPI(capitals)
    agent = Agent(
        name="geo",
        client=fake.client(),
        batch=True if where.startswith("agent") else (False if "agent False" in where else None),
    )
    prompt: Prompt[str] = Prompt(
        user="Capital of France?",
        batch=True if where.startswith("prompt") else (False if "prompt False" in where else None),
    )
    overrides = PromptOverrides(
        batch=True if where == "overrides" else (False if "overrides False" in where else None)
    )

    async def ask() -> str:
        return await agent.prompt(prompt, overrides)

    @workflow(batch=True if "workflow" in where else None)
    async def inner(ctx: WorkflowContext) -> str:
        return await ctx.step("ask", ask)

    @workflow(batch=True)
    async def outer(ctx: WorkflowContext) -> str:
        return (await inner.run()).output

    if where == "nested workflow":
        answer = (await outer.run()).output
    elif "workflow" in where:
        answer = (await inner.run()).output
    else:
        answer = await ask()
    assert answer == "Paris"
    assert len(fake.batches) == (1 if expected else 0)
    assert fake.requests[0].path == ("/v1/messages/batches" if expected else "/v1/messages")


async def test_prompts_in_parallel_steps_of_a_batch_workflow_share_one_batch() -> None:
    fake = FakeAnthropicAPI(capitals)
    agent = Agent(name="geo", client=fake.client())

    @workflow(batch=True)
    async def both(ctx: WorkflowContext) -> list[str]:
        return list(
            await asyncio.gather(
                ctx.step("france", lambda: agent.prompt("Capital of France?")),
                ctx.step("italy", lambda: agent.prompt("Capital of Italy?")),
            )
        )

    result = await both.run()
    assert result.output == ["Paris", "Rome"]
    assert len(fake.batches) == 1 and len(fake.batches[0].requests) == 2
    assert {c.payload["batch"]["id"] for c in calls_of(result.tree)} == {fake.batches[0].id}


async def test_a_streamed_prompt_with_batch_is_refused_naming_the_fix() -> None:
    fake = FakeAnthropicAPI(capitals)
    agent = Agent(name="geo", batch=True, client=fake.client())
    with pytest.raises(
        ConfigurationError, match=r"does not stream.*PromptOverrides\(batch=False\)"
    ):
        async for _ in agent.stream("Capital of France?"):
            pass
    assert fake.requests == [] and len(fake.batches) == 0
    events = [e async for e in agent.stream("Capital of France?", PromptOverrides(batch=False))]
    assert events[-1].result == "Paris"


def make_workflow(batch: Any) -> None:
    @workflow(batch=batch)
    async def w(ctx: WorkflowContext) -> None:
        return None


@pytest.mark.parametrize(
    "make",
    [
        lambda: Agent(name="geo", batch="yes"),
        lambda: Prompt(user="hi", batch=1),
        lambda: PromptOverrides(batch="no"),
        lambda: make_workflow("on"),
    ],
    ids=["agent", "prompt", "overrides", "workflow"],
)
def test_batch_takes_only_true_false_or_none(make: Any) -> None:
    with pytest.raises(ConfigurationError, match="batch must be True"):
        make()


async def test_a_prompt_cancelled_while_its_batch_runs_ends_cancelled(
    recording_sink: RecordingSink,
) -> None:
    fake = FakeAnthropicAPI(capitals, batch_polls=None)
    agent = Agent(name="geo", batch=True, client=fake.client())
    asked = asyncio.create_task(agent.run("Capital of France?"))
    await wait_for_batch(fake)
    await asyncio.sleep(0.02)  # polling
    asked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asked
    assert groundswell.flush_sinks()
    ended = {e.node.type: e.data["status"] for e in recording_sink.events if e.kind == "node_end"}
    assert ended == {NodeType.MODEL_CALL: "cancelled", NodeType.PROMPT: "cancelled"}
    assert fake.batches[0].processing_status == "in_progress"  # the batch itself goes on
    fake.batches.end()  # and its answer, when it comes, finds nobody waiting: nothing breaks
    await asyncio.sleep(0.02)


async def test_a_prompt_cancelled_while_its_batch_is_created_leaves_nothing_polling() -> None:
    fake = FakeAnthropicAPI(capitals, batch_polls=10**6)  # it would take 10**6 retrieves
    creating = asyncio.Event()

    async def slow_create(request: httpx2.Request) -> None:
        if request.method == "POST" and request.url.path == "/v1/messages/batches":
            creating.set()
            await asyncio.sleep(0.1)  # a slow round trip to the API

    http = httpx2.AsyncClient(transport=fake.transport(), event_hooks={"request": [slow_create]})
    agent = Agent(name="geo", batch=True, client=fake.client(http_client=http))
    asked = asyncio.create_task(agent.prompt("Capital of France?"))
    await creating.wait()
    asked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asked
    await asyncio.sleep(0.2)  # the batch is created meanwhile: dozens of polls' time
    (batch,) = fake.batches
    assert batch.processing_status == "in_progress" and batch.polls == 0  # nobody polls it
    # A ticket for it, waited for afresh (as after a restart), is still polled and answered.
    fake.batches.polls = 0
    result = await wait_result(fake.client(), BatchTicket(batch.id, batch.custom_ids[0]))
    assert result.type == "succeeded"


async def test_a_client_without_message_batches_fails_the_prompt_naming_the_fix() -> None:
    fake = FakeAnthropicAPI(capitals)

    class Messages:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def create(self, **params: Any) -> Any:
            return await self._inner.create(**params)

    class Wrapped:
        """A client wrapper (e.g. one that logs) passing only ``messages.create`` through."""

        max_retries = 0

        def __init__(self, inner: Any) -> None:
            self.messages = Messages(inner.messages)

    agent = Agent(name="geo", batch=True, client=Wrapped(fake.client()))
    with pytest.raises(ModelAPIError, match=r"\(Wrapped\) has no messages\.batches") as failed:
        await asyncio.wait_for(agent.prompt("Capital of France?"), 5)  # not a hang
    assert isinstance(failed.value.__cause__, ConfigurationError)
    assert len(fake.batches) == 0  # nothing was sent


async def test_wait_result_needs_only_the_ticket_as_after_a_restart() -> None:
    # The seam a durable engine uses: a ticket recorded before, waited for afresh.
    fake = FakeAnthropicAPI(capitals, batch_polls=2)
    client = fake.client()
    question = {"model": "m", "max_tokens": 50}
    created = await client.messages.batches.create(
        requests=[
            {
                "custom_id": "france",
                "params": {**question, "messages": [{"role": "user", "content": "France?"}]},
            }
        ]
    )
    ticket = BatchTicket(created.id, "france")
    result = await wait_result(client, ticket)
    assert result.type == "succeeded"
    message = batching.message_of(result, client, ticket)
    assert [block.text for block in message.content] == ["Paris"]


def test_batch_timing_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="window must be a number of seconds >= 0"):
        batching.configure(window=-1)
    with pytest.raises(ConfigurationError, match="max_poll must be a number"):
        batching.BatchTiming(max_poll=float("inf"))


async def test_the_batch_middleware_keeps_the_middleware_protocol() -> None:
    await check_middleware("batch", agent_options={"batch": True})


async def test_a_batched_call_costs_half_the_direct_price_of_the_same_usage() -> None:
    fake = FakeAnthropicAPI(capitals)
    batched = await Agent(name="geo", batch=True, client=fake.client()).run("Capital of France?")
    direct = await Agent(name="geo", client=fake.client()).run("Capital of France?")
    (b_call,) = calls_of(batched.tree)
    (d_call,) = calls_of(direct.tree)
    assert b_call.metrics["usage"] == d_call.metrics["usage"]  # the same tokens...
    assert d_call.metrics["cost_usd"] > 0
    # ...at the batch price: half, as the node, the prompt and the result say.
    assert b_call.metrics["cost_usd"] == pytest.approx(d_call.metrics["cost_usd"] / 2)
    assert batched.cost_usd == pytest.approx(direct.cost_usd / 2)
    assert groundswell.budget.pricing.BATCH_DISCOUNT == 0.5
