"""OpenTelemetry export overhead: a 1,000-step workflow with and without the OTel sink.

Three workloads, each run alternately with the sink off and on
(BatchSpanProcessor, an exporter that accepts every batch):

- ``agent_steps_5ms_model``: every step runs one ``agent.prompt`` against the
  in-process fake API answering after 5 ms (real model calls take hundreds of
  milliseconds; 5 ms keeps the run short while leaving the model call I/O-bound);
- ``agent_steps_instant_model``: the same with a fake that answers at once, so
  the whole step is CPU-bound Python and the sink's CPU competes with it;
- ``trivial_steps``: every step awaits a coroutine that does nothing, the worst
  case, where span creation is all there is to measure.

Each agent step makes three spans (step, invoke_agent, chat).

Two times per run: until ``run()`` returns (what the caller waits for) and
until every span has been handed to the exporter. Results go to ``DIR/otel.json``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import statistics
import time
from collections.abc import Sequence
from typing import Any

import groundswell_otel
from _report import output_dir, write
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import groundswell
from groundswell import Agent, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, text

STEPS = 1_000
ROUNDS = 7
TARGET_PCT = 15


class CountingExporter(SpanExporter):
    """Accepts every batch (the network is not what this measures)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


async def nothing() -> int:
    return 1


def agent_workflow(latency_s: float = 0.0) -> Any:
    reply = dataclasses.replace(text("pong"), delay=latency_s)
    client = FakeAnthropicAPI(lambda request: reply).client(max_retries=0)
    agent = Agent(name="bench", client=client, max_tokens=16)

    @workflow(name="agent-steps")
    async def flow(ctx: WorkflowContext) -> None:
        for _ in range(STEPS):
            await ctx.step("ask", agent.prompt("ping"))

    return flow


def trivial_workflow() -> Any:
    @workflow(name="trivial-steps")
    async def flow(ctx: WorkflowContext) -> None:
        for _ in range(STEPS):
            await ctx.step("s", nothing)

    return flow


async def measure(flow: Any, provider: TracerProvider | None) -> tuple[float, float]:
    t0 = time.perf_counter()
    await flow.run()
    t1 = time.perf_counter()
    await asyncio.to_thread(groundswell.flush_sinks, 60)
    if provider is not None:
        provider.force_flush()
    return t1 - t0, time.perf_counter() - t0


async def compare(make: Any) -> dict[str, Any]:
    exporter = CountingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    off_run: list[float] = []
    off_all: list[float] = []
    on_run: list[float] = []
    on_all: list[float] = []
    await measure(make(), None)  # warm up: imports, caches, first connections
    for _ in range(ROUNDS):
        # A fresh workflow and fake API per run (the fake keeps every request it
        # saw), a clean heap, and alternation, so both sides start alike.
        groundswell_otel.uninstrument()
        gc.collect()
        run, total = await measure(make(), None)
        off_run.append(run)
        off_all.append(total)
        groundswell_otel.instrument(provider)
        gc.collect()
        run, total = await measure(make(), provider)
        on_run.append(run)
        on_all.append(total)
    groundswell_otel.uninstrument()
    provider.shutdown()
    med = statistics.median

    def pct(on: list[float], off: list[float]) -> float:
        return round((med(on) / med(off) - 1) * 100, 1)

    return {
        "steps": STEPS,
        "rounds": ROUNDS,
        "spans_exported": exporter.spans,
        "off_run_ms": round(med(off_run) * 1000, 1),
        "on_run_ms": round(med(on_run) * 1000, 1),
        "on_until_exported_ms": round(med(on_all) * 1000, 1),
        "overhead_run_pct": pct(on_run, off_run),
        "overhead_until_exported_pct": pct(on_all, off_all),
        "per_step_us": round((med(on_all) - med(off_all)) / STEPS * 1e6, 1),
    }


async def main() -> dict[str, Any]:
    results = {
        "agent_steps_instant_model": await compare(agent_workflow),
        "agent_steps_5ms_model": await compare(functools.partial(agent_workflow, 0.005)),
        "trivial_steps": await compare(trivial_workflow),
    }
    for name in ("agent_steps_5ms_model", "agent_steps_instant_model"):
        results[name]["target_pct"] = TARGET_PCT
        results[name]["meets_target"] = results[name]["overhead_until_exported_pct"] < TARGET_PCT
    return results


if __name__ == "__main__":
    directory = output_dir(__doc__)
    write(asyncio.run(main()), "otel", directory)
