"""The fake API's Message Batches endpoints, driven by the real anthropic client.

Every batch and result the fake sends is also validated strictly against the
installed SDK's own types (the SDK itself builds them without validating).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import pytest
from anthropic.types.messages import (
    DeletedMessageBatch,
    MessageBatch,
    MessageBatchIndividualResponse,
)
from anthropic.types.shared import ErrorResponse

from groundswell.errors import ConfigurationError
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, error, text

Make = Callable[..., anthropic.AsyncAnthropic]


def ask(custom_id: str, question: str, **params: Any) -> dict[str, Any]:
    body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": question}]}
    return {"custom_id": custom_id, "params": {**body, **params}}


@pytest.fixture(params=["in-process", "loopback"])
async def client_for(request: pytest.FixtureRequest) -> AsyncIterator[Make]:
    servers, clients = [], []

    def make(fake: FakeAnthropicAPI, **kw: Any) -> anthropic.AsyncAnthropic:
        if request.param == "in-process":
            client = fake.client(max_retries=0, **kw)
        else:
            server = fake.serve()
            servers.append(server)
            client = server.client(max_retries=0, **kw)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()
    for server in servers:
        server.close()


async def retrieve(client: anthropic.AsyncAnthropic, batch_id: str) -> MessageBatch:
    """A retrieve (a poll), its body validated strictly as the SDK's ``MessageBatch``."""
    raw = await client.messages.batches.with_raw_response.retrieve(batch_id)
    return MessageBatch.model_validate(raw.http_response.json())


async def results(
    client: anthropic.AsyncAnthropic, batch_id: str
) -> dict[str, MessageBatchIndividualResponse]:
    """The results as the SDK reads them, by custom_id; each line also validated strictly."""
    raw = await client.messages.batches.with_raw_response.results(batch_id)
    assert raw.http_response.headers["content-type"] == "application/x-jsonl"
    lines = (await raw.http_response.aread()).decode().splitlines()
    strict = [MessageBatchIndividualResponse.model_validate_json(line) for line in lines]
    typed = {r.custom_id: r async for r in await client.messages.batches.results(batch_id)}
    assert [r.custom_id for r in strict] == list(typed)
    return typed


async def test_a_batch_runs_its_course_and_answers_each_request_from_the_script(
    client_for: Make,
) -> None:
    fake = FakeAnthropicAPI(["Paris", text("Rome")], batch_polls=1)
    client = client_for(fake)
    sent = [ask("france", "Capital of France?"), ask("italy", "Capital of Italy?", system="terse")]
    created = await client.messages.batches.create(requests=sent)  # type: ignore[arg-type]
    assert created.type == "message_batch" and created.id.startswith("msgbatch_")
    assert created.processing_status == "in_progress" and created.results_url is None
    assert created.request_counts.processing == 2 and created.ended_at is None
    assert (created.expires_at - created.created_at).total_seconds() == 24 * 3600

    polled = await retrieve(client, created.id)
    assert polled.processing_status == "in_progress"
    assert polled.request_counts.processing == 2  # counts move only when the batch ends
    ended = await retrieve(client, created.id)
    assert ended.processing_status == "ended" and ended.ended_at is not None
    assert ended.request_counts.succeeded == 2 and ended.request_counts.processing == 0
    base = str(client.base_url).rstrip("/")
    assert ended.results_url == f"{base}/v1/messages/batches/{created.id}/results"

    got = await results(client, created.id)
    answers = {cid: r.result.message.content[0].text for cid, r in got.items()}  # type: ignore[union-attr]
    assert answers == {"france": "Paris", "italy": "Rome"}
    # Each request was recorded like a /v1/messages request, with its custom_id.
    assert [(r.custom_id, r.last_user_text()) for r in fake.requests] == [
        ("france", "Capital of France?"),
        ("italy", "Capital of Italy?"),
    ]
    assert fake.requests[1].system == "terse"
    (batch,) = fake.batches
    assert batch.id == created.id and batch.custom_ids == ["france", "italy"]
    assert batch.polls == 2 and fake.remaining == 0

    # The usage is what the same request to /v1/messages reports.
    fake.add("Rome")
    direct = await client.messages.create(**sent[1]["params"])
    italy = got["italy"].result.message  # type: ignore[union-attr]
    assert italy.usage.input_tokens == direct.usage.input_tokens
    assert italy.usage.output_tokens == direct.usage.output_tokens


async def test_default_batch_ends_at_the_first_retrieve(client_for: Make) -> None:
    client = client_for(FakeAnthropicAPI(["a"]))
    created = await client.messages.batches.create(requests=[ask("one", "hi")])  # type: ignore[list-item]
    assert created.processing_status == "in_progress"
    # results() retrieves the batch first, which ends it.
    got = await results(client, created.id)
    assert got["one"].result.type == "succeeded"


async def test_errored_requests_carry_an_api_error(client_for: Make) -> None:
    def answer(request: MessagesRequest) -> str:
        return f"answer to {request.custom_id}"

    fake = FakeAnthropicAPI(answer)
    fake.batches.answer("broken", error(529))
    client = client_for(fake)
    sent = [
        ask("fine", "hi"),
        ask("broken", "hi"),
        {
            "custom_id": "no-tokens",
            "params": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        },
        ask("streamed", "hi", stream=True),
    ]
    created = await client.messages.batches.create(requests=sent)  # type: ignore[arg-type]
    ended = await retrieve(client, created.id)
    assert ended.request_counts.succeeded == 1 and ended.request_counts.errored == 3
    got = await results(client, created.id)
    assert got["fine"].result.message.content[0].text == "answer to fine"  # type: ignore[union-attr]
    broken = got["broken"].result
    assert broken.type == "errored" and isinstance(broken.error, ErrorResponse)
    assert broken.error.error.type == "overloaded_error"
    tokens = got["no-tokens"].result
    assert tokens.error.error.type == "invalid_request_error"  # type: ignore[union-attr]
    assert tokens.error.error.message == "max_tokens: Field required"  # type: ignore[union-attr]
    assert "stream" in got["streamed"].result.error.error.message  # type: ignore[union-attr]
    # The model saw the two it accepted; refused ones are not recorded.
    assert [r.custom_id for r in fake.requests] == ["fine", "broken"]


async def test_cancel_keeps_answered_results_and_cancels_the_rest(client_for: Make) -> None:
    fake = FakeAnthropicAPI(["one", "two", "three"], batch_polls=1)
    client = client_for(fake)
    sent = [ask("a", "1"), ask("b", "2"), ask("c", "3")]
    created = await client.messages.batches.create(requests=sent)  # type: ignore[arg-type]
    await retrieve(client, created.id)  # the first of two polls answers a third: "a"
    raw = await client.messages.batches.with_raw_response.cancel(created.id)
    canceling = MessageBatch.model_validate(raw.http_response.json())
    assert canceling.processing_status == "canceling"
    assert canceling.cancel_initiated_at is not None and canceling.results_url is None
    ended = await retrieve(client, created.id)
    assert ended.processing_status == "ended"
    counts = ended.request_counts
    assert (counts.succeeded, counts.canceled, counts.processing) == (1, 2, 0)
    got = await results(client, created.id)
    assert {c: r.result.type for c, r in got.items()} == {
        "a": "succeeded",
        "b": "canceled",
        "c": "canceled",
    }
    assert [r.custom_id for r in fake.requests] == ["a"] and fake.remaining == 2
    with pytest.raises(anthropic.BadRequestError, match="can no longer be canceled"):
        await client.messages.batches.cancel(created.id)


async def test_delete_only_an_ended_batch_then_it_is_gone(client_for: Make) -> None:
    fake = FakeAnthropicAPI(["x", "y"], batch_polls=None)
    client = client_for(fake)
    created = await client.messages.batches.create(requests=[ask("q", "hi")])  # type: ignore[list-item]
    with pytest.raises(anthropic.BadRequestError, match="cancel it first") as caught:
        await client.messages.batches.delete(created.id)
    ErrorResponse.model_validate(caught.value.body)
    fake.batches.end(created.id)
    raw = await client.messages.batches.with_raw_response.delete(created.id)
    deleted = DeletedMessageBatch.model_validate(raw.http_response.json())
    assert deleted.id == created.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.batches.retrieve(created.id)
    assert [b.id async for b in client.messages.batches.list()] == []
    assert fake.batches.get(created.id).deleted


async def test_list_is_newest_first_and_pages(client_for: Make) -> None:
    fake = FakeAnthropicAPI(batch_polls=None)
    client = client_for(fake)
    ids = [
        (await client.messages.batches.create(requests=[ask(f"r{i}", "hi")])).id  # type: ignore[list-item]
        for i in range(5)
    ]
    newest_first = ids[::-1]
    page = await client.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == newest_first[:2] and page.has_more
    assert page.first_id == newest_first[0] and page.last_id == newest_first[1]
    assert [b.id async for b in client.messages.batches.list(limit=2)] == newest_first
    later = await client.messages.batches.list(after_id=newest_first[1], limit=10)
    assert [b.id for b in later.data] == newest_first[2:] and not later.has_more
    earlier = await client.messages.batches.list(before_id=newest_first[3], limit=2)
    assert [b.id for b in earlier.data] == newest_first[1:3] and earlier.has_more
    raw = await client.messages.batches.with_raw_response.list()
    for item in raw.http_response.json()["data"]:
        MessageBatch.model_validate(item)
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        await client.messages.batches.list(limit=0)


async def test_batches_wait_for_the_test_and_can_expire(client_for: Make) -> None:
    fake = FakeAnthropicAPI(["done"], batch_polls=None)
    client = client_for(fake)
    kept = await client.messages.batches.create(requests=[ask("k", "hi")])  # type: ignore[list-item]
    lapsed = await client.messages.batches.create(requests=[ask("l", "hi")])  # type: ignore[list-item]
    for _ in range(3):
        assert (await retrieve(client, kept.id)).processing_status == "in_progress"
    with pytest.raises(anthropic.AnthropicError, match="No `results_url`"):
        await client.messages.batches.results(kept.id)
    fake.batches.expire(lapsed.id)
    fake.batches.end(kept.id)
    assert (await retrieve(client, lapsed.id)).request_counts.expired == 1
    assert (await results(client, lapsed.id))["l"].result.type == "expired"
    assert (await results(client, kept.id))["k"].result.type == "succeeded"
    assert [r.custom_id for r in fake.requests] == ["k"]


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([], "requests: List should have at least 1 item"),
        ([ask("same", "a"), ask("same", "b")], "requests.1.custom_id: 'same' is used"),
        ([ask("has space", "a")], "requests.0.custom_id: String should match pattern"),
        ([ask("x" * 65, "a")], "requests.0.custom_id: String should match pattern"),
        ([{"custom_id": "a"}], "requests.0.params: Field required"),
        ([{**ask("a", "a"), "param": {}}], "requests.0.param: Extra inputs are not permitted"),
        ([{"custom_id": "a", "params": "hi"}], "requests.0.params: Input should be a valid dict"),
    ],
)
async def test_bad_batches_are_refused_like_the_real_api(
    client_for: Make, requests: list[Any], message: str
) -> None:
    fake = FakeAnthropicAPI()
    client = client_for(fake)
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.batches.create(requests=requests)
    assert caught.value.status_code == 400
    body = ErrorResponse.model_validate(caught.value.body)
    assert body.error.type == "invalid_request_error" and body.error.message.startswith(message)
    assert len(fake.batches) == 0 and fake.requests == []


async def test_too_many_requests_and_unknown_batches(client_for: Make) -> None:
    fake = FakeAnthropicAPI(api_key="sk-right")
    client = client_for(fake)
    tiny = {"model": "m", "max_tokens": 1, "messages": []}
    many = [{"custom_id": f"r{i}", "params": tiny} for i in range(100_001)]
    with pytest.raises(anthropic.BadRequestError, match="at most 100000 items"):
        await client.post("/v1/messages/batches", body={"requests": many}, cast_to=MessageBatch)
    with pytest.raises(anthropic.NotFoundError) as caught:
        await client.messages.batches.retrieve("msgbatch_nope")
    assert ErrorResponse.model_validate(caught.value.body).error.type == "not_found_error"
    with pytest.raises(anthropic.AuthenticationError):
        await client.with_options(api_key="sk-wrong").messages.batches.list()


async def test_the_beta_batches_client_works_too(client_for: Make) -> None:
    client = client_for(FakeAnthropicAPI(["beta answer"]))
    created = await client.beta.messages.batches.create(requests=[ask("b", "hi")])  # type: ignore[list-item]
    await client.beta.messages.batches.retrieve(created.id)
    (result,) = [r async for r in await client.beta.messages.batches.results(created.id)]
    assert result.result.message.content[0].text == "beta answer"  # type: ignore[union-attr]


def test_batch_knobs_refuse_bad_values() -> None:
    fake = FakeAnthropicAPI()
    with pytest.raises(ConfigurationError, match="an int >= 0, or None"):
        fake.batches.polls = -1
    with pytest.raises(ConfigurationError, match="an int >= 0, or None"):
        FakeAnthropicAPI(batch_polls=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="custom_id 'x'"):
        fake.batches.answer("x", {"text": "hi"})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="no batch 'msgbatch_1'"):
        fake.batches.get("msgbatch_1")
