"""groundswell.testing: the fake API drives the real anthropic SDK over the real protocol."""

from __future__ import annotations

import anthropic
import pytest
from pydantic import BaseModel

from groundswell.testing import (
    FakeAnthropicAPI,
    MessagesRequest,
    Reply,
    SchemaModel,
    error,
    json_reply,
    sample_from_schema,
    text,
    tool_use,
)

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["in-process", "loopback"])
async def client_for(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    servers, clients = [], []

    def make(fake: FakeAnthropicAPI, **kw: object) -> anthropic.AsyncAnthropic:
        if request.param == "in-process":
            client = fake.client(**kw)
        else:
            server = fake.serve()
            servers.append(server)
            client = server.client(**kw)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()
    for server in servers:
        server.close()


async def test_json_reply_with_usage_and_recorded_request(client_for) -> None:  # type: ignore[no-untyped-def]
    fake = FakeAnthropicAPI([text("hello")])
    client = client_for(fake)
    message = await client.messages.create(model="m", max_tokens=10, messages=HI, system="be kind")
    assert message.content[0].text == "hello"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.usage.output_tokens >= 1
    (request,) = fake.requests
    assert request.body["system"] == "be kind" and request.last_user_text() == "hi"
    assert "x-api-key" not in request.headers  # the key is never kept


async def test_sse_stream_of_text_and_tool_input(client_for) -> None:  # type: ignore[no-untyped-def]
    long_text = "a fairly long answer that arrives in several deltas"
    fake = FakeAnthropicAPI([text(long_text), tool_use("lookup", {"query": "x" * 40})])
    client = client_for(fake)
    async with client.messages.stream(model="m", max_tokens=10, messages=HI) as stream:
        deltas = [e.text async for e in stream if e.type == "text"]
        final = await stream.get_final_message()
    assert len(deltas) > 1 and "".join(deltas) == long_text
    assert final.content[0].text == long_text  # type: ignore[union-attr]
    async with client.messages.stream(model="m", max_tokens=10, messages=HI) as stream:
        partials = [e.partial_json async for e in stream if e.type == "input_json"]
        final = await stream.get_final_message()
    assert len(partials) > 1
    assert final.stop_reason == "tool_use" and final.content[0].input == {"query": "x" * 40}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("status", "exc_type"),
    [
        (400, anthropic.BadRequestError),
        (401, anthropic.AuthenticationError),
        (403, anthropic.PermissionDeniedError),
        (429, anthropic.RateLimitError),
        (500, anthropic.InternalServerError),
        (529, anthropic.InternalServerError),
    ],
)
async def test_errors_have_real_status_codes_and_bodies(client_for, status, exc_type) -> None:  # type: ignore[no-untyped-def]
    fake = FakeAnthropicAPI([error(status, "nope")])
    client = client_for(fake, max_retries=0)
    with pytest.raises(exc_type) as info:
        await client.messages.create(model="m", max_tokens=10, messages=HI)
    assert info.value.status_code == status
    assert info.value.body["error"]["message"] == "nope"  # type: ignore[index]


async def test_retryable_errors_are_retried_by_the_sdk_and_401_is_not(client_for) -> None:  # type: ignore[no-untyped-def]
    fake = FakeAnthropicAPI(
        [error(429, retry_after=0.01), error(529, retry_after=0.01), text("ok")]
    )
    client = client_for(fake, max_retries=2)
    message = await client.messages.create(model="m", max_tokens=10, messages=HI)
    assert message.content[0].text == "ok" and len(fake.requests) == 3  # type: ignore[union-attr]
    fake.add(error(401), text("never reached"))
    with pytest.raises(anthropic.AuthenticationError):
        await client.messages.create(model="m", max_tokens=10, messages=HI)
    assert len(fake.requests) == 4


async def test_mid_stream_error_event(client_for) -> None:  # type: ignore[no-untyped-def]
    fake = FakeAnthropicAPI([Reply([{"type": "text", "text": "partial"}], stream_error=error(529))])
    client = client_for(fake)

    async def consume() -> None:
        async with client.messages.stream(model="m", max_tokens=10, messages=HI) as stream:
            async for _ in stream:
                pass

    with pytest.raises(anthropic.APIStatusError) as info:
        await consume()
    assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


async def test_count_tokens_and_wrong_key(client_for) -> None:  # type: ignore[no-untyped-def]
    fake = FakeAnthropicAPI(api_key="sk-right")
    client = client_for(fake)
    counted = await client.messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "x" * 40}]
    )
    assert counted.input_tokens >= 10
    with pytest.raises(anthropic.AuthenticationError):
        await client_for(fake, api_key="sk-wrong").messages.create(
            model="m", max_tokens=5, messages=HI
        )


async def test_exhausted_script_is_a_clear_400() -> None:
    fake = FakeAnthropicAPI([text("one")])
    client = fake.client(max_retries=0)
    await client.messages.create(model="m", max_tokens=5, messages=HI)
    with pytest.raises(anthropic.BadRequestError, match="the script has no reply left"):
        await client.messages.create(model="m", max_tokens=5, messages=HI)


async def test_function_model_sees_the_request() -> None:
    fake = FakeAnthropicAPI(lambda req: f"you said {req.last_user_text()}")
    message = await fake.client().messages.create(model="m", max_tokens=5, messages=HI)
    assert message.content[0].text == "you said hi"  # type: ignore[union-attr]


class Address(BaseModel):
    city: str
    zip_code: int


class Person(BaseModel):
    name: str
    tags: list[str]
    home: Address | None
    age: int = 30


def test_sample_from_schema_is_valid_for_pydantic_models() -> None:
    value = sample_from_schema(Person.model_json_schema())
    person = Person.model_validate(value)
    assert person.home is not None and person.tags and person.age == 30
    transformed = anthropic.transform_schema(Person)
    assert Person.model_validate(sample_from_schema(transformed))


async def test_schema_model_calls_each_tool_once_then_answers_in_schema() -> None:
    fake = FakeAnthropicAPI(SchemaModel())
    client = fake.client()
    tools = [
        {
            "name": "a",
            "description": "",
            "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
        {"name": "b", "description": "", "input_schema": {"type": "object", "properties": {}}},
    ]
    first = await client.messages.create(model="m", max_tokens=5, messages=HI, tools=tools)  # type: ignore[arg-type]
    assert [b.name for b in first.content] == ["a", "b"]  # type: ignore[union-attr]
    messages = [
        *HI,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": "r"} for b in first.content
            ],
        },  # type: ignore[union-attr]
    ]
    schema = {"type": "json_schema", "schema": anthropic.transform_schema(Address)}
    final = await client.messages.create(
        model="m",
        max_tokens=5,
        messages=messages,
        tools=tools,
        output_config={"format": schema},  # type: ignore[arg-type]
    )
    assert Address.model_validate_json(final.content[0].text)  # type: ignore[union-attr]
    assert fake.requests[1].output_schema is not None


def test_messages_request_helpers() -> None:
    request = MessagesRequest(
        path="/v1/messages",
        headers={},
        body={
            "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
            "model": "m",
        },
    )
    assert request.last_user_text() == "q" and request.tool_results() == []
    assert json_reply({"a": 1}).content[0]["text"] == '{"a": 1}'


async def test_pytest_plugin_fixtures(
    fake_anthropic: FakeAnthropicAPI, fake_anthropic_server
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.add(text("in-process"), text("over tcp"))
    first = await fake_anthropic.client().messages.create(model="m", max_tokens=5, messages=HI)
    client = fake_anthropic_server.client()
    second = await client.messages.create(model="m", max_tokens=5, messages=HI)
    await client.close()
    assert [first.content[0].text, second.content[0].text] == ["in-process", "over tcp"]  # type: ignore[union-attr]
    assert len(fake_anthropic.requests) == 2


def test_auto_client_is_real_with_a_key_and_fake_without(monkeypatch: pytest.MonkeyPatch) -> None:
    from groundswell.testing import auto_client

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    offline = auto_client()
    assert str(offline.base_url).startswith("http://fake-anthropic.invalid")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-real-looking")
    online = auto_client()
    assert "api.anthropic.com" in str(online.base_url)


async def test_delays_do_not_block_the_event_loop_in_process() -> None:
    import asyncio
    import time

    fake = FakeAnthropicAPI(lambda request: Reply([{"type": "text", "text": "late"}], delay=0.2))
    client = fake.client()
    started = time.perf_counter()
    await asyncio.gather(
        *(client.messages.create(model="m", max_tokens=5, messages=HI) for _ in range(4))
    )
    assert time.perf_counter() - started < 0.6


async def test_empty_messages_are_refused_like_the_real_api() -> None:
    fake = FakeAnthropicAPI([text("never")])
    messages = [*HI, {"role": "assistant", "content": []}, {"role": "user", "content": "again"}]
    with pytest.raises(anthropic.BadRequestError, match="non-empty content"):
        await fake.client(max_retries=0).messages.create(model="m", max_tokens=5, messages=messages)  # type: ignore[arg-type]


class Node(BaseModel):
    name: str
    children: list[Node] = []
    parent: Node | None = None
    pair: tuple[int, str] = (1, "a")


def test_schema_sampler_terminates_on_recursive_models_and_keeps_lengths() -> None:
    assert Node.model_validate(sample_from_schema(Node.model_json_schema()))
    schema = {"type": "string", "minLength": 3, "maxLength": 5}
    assert 3 <= len(sample_from_schema(schema)) <= 5
    assert (
        sample_from_schema({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 2}) == 1
    )
