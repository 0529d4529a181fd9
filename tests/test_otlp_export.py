"""Exporting over OTLP/HTTP to a real receiver on loopback, as a deployment would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import groundswell_otel
import pytest

import groundswell
from groundswell import Agent, WorkflowContext, workflow
from groundswell.testing import FAKE_API_KEY, FakeAnthropicAPI, text

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
