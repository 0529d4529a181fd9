"""Exporting over OTLP/HTTP to a real receiver on loopback, as a deployment would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import groundswell_otel
import pytest
from pydantic import BaseModel, ConfigDict, TypeAdapter

import groundswell
from groundswell import Agent, WorkflowContext, workflow
from groundswell.testing import FAKE_API_KEY, FakeAnthropicAPI, text, tool_use

from .otlp_receiver import OTLPReceiver

# OTLP's numeric span kinds and status codes.
KIND_INTERNAL, KIND_CLIENT = 1, 3
STATUS_OK, STATUS_ERROR = 1, 2


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as running:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "otlp-test")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
        monkeypatch.setenv(groundswell_otel.CONTENT_ENV, "SPAN_ONLY")
        yield running


async def test_a_run_arrives_at_an_otlp_receiver_with_its_tree_intact(
    receiver: OTLPReceiver,
) -> None:
    fake = FakeAnthropicAPI([text(f"the key is {FAKE_API_KEY}")])
    agent = Agent(name="writer", client=fake.client())

    @workflow(name="exported")
    async def exported(ctx: WorkflowContext) -> str:
        await ctx.step("prepare", lambda: "ready")
        return await ctx.step("write", agent.prompt("write one line"))

    groundswell_otel.instrument()  # no provider given and no global one: OTLP from the env
    try:
        result = await exported.run()
    finally:
        groundswell_otel.uninstrument()  # flushes the batch processor and shuts it down
    spans = {s.attributes["groundswell.node.id"]: s for s in receiver.spans}
    assert set(spans) == {n.id for n in result.tree.walk()}
    assert len({s.trace_id for s in spans.values()}) == 1
    for node in result.tree.walk():
        parent = spans[node.parent_id].span_id if node.parent_id else None
        assert spans[node.id].parent_span_id == parent
    by_name = {s.name: s for s in spans.values()}
    assert set(by_name) == {
        "invoke_workflow exported",
        "step prepare",
        "step write",
        "invoke_agent writer",
        "chat claude-sonnet-4-6",
    }
    chat = by_name["chat claude-sonnet-4-6"]
    assert chat.kind == KIND_CLIENT and chat.status_code == STATUS_OK
    assert chat.attributes["gen_ai.provider.name"] == "anthropic"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert by_name["step prepare"].kind == KIND_INTERNAL
    assert chat.resource["service.name"] == "otlp-test"
    # Content was on; the API key in the reply was redacted before it left.
    output = by_name["invoke_agent writer"].attributes["gen_ai.output.messages"]
    assert "the key is" in output and FAKE_API_KEY not in output
    assert by_name["step write"].start_ns <= chat.start_ns <= chat.end_ns


def test_an_unreachable_collector_never_fails_the_run(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, groundswell

            @groundswell.workflow(name="alone")
            async def alone(ctx):
                return await ctx.step("s", lambda: 41) + 1

            print(asyncio.run(alone.run()).output)
            """
        )
    )
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
    }
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "42"


def test_loading_the_plugin_with_no_call_exports_when_the_endpoint_is_set(
    receiver: OTLPReceiver, tmp_path: Path
) -> None:
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, groundswell

            @groundswell.workflow(name="auto")
            async def auto(ctx):
                return await ctx.step("s", lambda: 1)

            asyncio.run(auto.run())
            """
        )
    )
    # The plugin loads through its entry point; the spans leave at interpreter exit.
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(s.name for s in receiver.spans) == ["invoke_workflow auto", "step s"]
    assert groundswell.flush_sinks()


# -- what Phoenix reads: GenAI messages that validate, on every chat span -------------
# Phoenix turns gen_ai.input.messages / gen_ai.output.messages into its own message
# view only when the whole list validates against the conventions' JSON schemas
# (gen-ai-input-messages.json, gen-ai-output-messages.json); these mirror them.


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextPart(_Part):
    type: Literal["text"]
    content: str


class ToolCallRequestPart(_Part):
    type: Literal["tool_call"]
    id: str | None = None
    name: str
    arguments: Any = None


class ToolCallResponsePart(_Part):
    type: Literal["tool_call_response"]
    id: str | None = None
    response: Any


class GenericPart(_Part):
    type: str


class ChatMessage(_Part):
    role: str
    parts: list[TextPart | ToolCallRequestPart | ToolCallResponsePart | GenericPart]


class OutputMessage(ChatMessage):
    finish_reason: str


KNOWN = {
    "text": TextPart,
    "tool_call": ToolCallRequestPart,
    "tool_call_response": ToolCallResponsePart,
}


def phoenix_reads(value: Any, model: type[ChatMessage] = ChatMessage) -> list[Any]:
    """The messages as a viewer validating the conventions' schema gets them."""
    assert isinstance(value, str), value  # a JSON string attribute
    messages = TypeAdapter(list[model]).validate_json(value)  # type: ignore[valid-type]
    for message in messages:
        assert message.role in ("system", "user", "assistant", "tool")
        for part in message.parts:  # a known part type must be that part, whole
            assert type(part) is KNOWN.get(part.type, GenericPart), part
    return messages


def lookup(city: str) -> str:
    """The weather in a city."""
    return f"rainy in {city}, 14 C"


async def test_chat_spans_reach_a_receiver_with_tool_results_and_call_arguments(
    receiver: OTLPReceiver,
) -> None:
    fake = FakeAnthropicAPI(
        [tool_use("lookup", {"city": "Paris"}, text="Let me look."), text("It is rainy.")]
    )
    agent = Agent(name="weather", tools=[lookup], client=fake.client())
    groundswell_otel.instrument()
    try:
        await agent.run("Weather in Paris?")
    finally:
        groundswell_otel.uninstrument()
    chats = sorted(
        (s for s in receiver.spans if s.name.startswith("chat ")), key=lambda s: s.start_ns
    )
    assert len(chats) == 2
    call_id = fake.requests[1].messages[1]["content"][1]["id"]

    first_out = phoenix_reads(chats[0].attributes["gen_ai.output.messages"], OutputMessage)
    assert first_out[0].finish_reason == "tool_use"
    calls = [p for p in first_out[0].parts if isinstance(p, ToolCallRequestPart)]
    assert [(c.id, c.name, c.arguments) for c in calls] == [(call_id, "lookup", {"city": "Paris"})]

    (asked,) = phoenix_reads(chats[0].attributes["gen_ai.input.messages"])
    assert asked.role == "user" and asked.parts == [
        TextPart(type="text", content="Weather in Paris?")
    ]

    second_in = phoenix_reads(chats[1].attributes["gen_ai.input.messages"])
    assert [m.role for m in second_in] == ["user", "assistant", "tool"]
    said, called = second_in[1].parts
    assert isinstance(said, TextPart) and said.content == "Let me look."
    assert isinstance(called, ToolCallRequestPart) and called.arguments == {"city": "Paris"}
    (result,) = second_in[2].parts
    assert isinstance(result, ToolCallResponsePart)
    assert (result.id, result.response) == (call_id, "rainy in Paris, 14 C")
    # The last answer, and the agent's input and output, read as well.
    phoenix_reads(chats[1].attributes["gen_ai.output.messages"], OutputMessage)
    (agent_span,) = [s for s in receiver.spans if s.name == "invoke_agent weather"]
    phoenix_reads(agent_span.attributes["gen_ai.input.messages"])
    phoenix_reads(agent_span.attributes["gen_ai.output.messages"], OutputMessage)
    # The service is the one OTEL_SERVICE_NAME names, and Phoenix's project follows it.
    for span in receiver.spans:
        assert span.resource["service.name"] == "otlp-test"
        assert span.resource["openinference.project.name"] == "otlp-test"


@pytest.mark.parametrize(
    ("env", "service", "project", "extra"),
    [
        ({}, "groundswell", "groundswell", {}),
        ({"OTEL_SERVICE_NAME": "billing"}, "billing", "billing", {}),
        (
            {"OTEL_RESOURCE_ATTRIBUTES": "service.name=billing,deployment.environment=prod"},
            "billing",
            "billing",
            {"deployment.environment": "prod"},
        ),
        (
            {
                "OTEL_SERVICE_NAME": "billing",
                "OTEL_RESOURCE_ATTRIBUTES": "openinference.project.name=agents",
            },
            "billing",
            "agents",
            {},
        ),
    ],
    ids=["default", "service-name", "resource-attributes", "own-project"],
)
def test_the_resource_comes_from_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    service: str,
    project: str,
    extra: dict[str, str],
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    attributes = groundswell_otel.otlp_resource().attributes
    assert attributes["service.name"] == service
    assert attributes["openinference.project.name"] == project
    assert {k: attributes[k] for k in extra} == extra
    assert json.dumps(dict(attributes))  # plain values only
