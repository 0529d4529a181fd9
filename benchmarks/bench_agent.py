"""Agent benchmarks against the in-process fake API.

Measures what Groundswell adds on top of the SDK: ``agent.prompt`` inside a
step versus a bare ``client.messages.create``, one at a time and 1,000 at once.
Results go to ``DIR/agent.json``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import anthropic
import httpx2
from _report import output_dir, write
from anthropic.resources.messages.messages import AsyncMessages

from groundswell import Agent, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, text

SEQUENTIAL = 500
ROUNDS = 4
CONCURRENT = 1_000
MESSAGES = [{"role": "user", "content": "ping"}]


def fake() -> FakeAnthropicAPI:
    return FakeAnthropicAPI(lambda request: text("pong"))


_CANNED = json.dumps(
    {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "pong"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
).encode()


def canned_client() -> anthropic.AsyncAnthropic:
    """A real client whose transport answers every request with one fixed reply at once.

    The overhead measured through it is the framework's alone: no fake reads the
    request, so a fake that checks more (newer checkouts do) cannot move the figure.
    """

    def answer(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "application/json", "request-id": "req_bench"}
        return httpx2.Response(200, content=_CANNED, headers=headers)

    transport = httpx2.MockTransport(answer)
    return anthropic.AsyncAnthropic(
        api_key="bench",
        base_url="http://canned.invalid",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=transport),
    )


async def sequential(transport: str = "fake") -> dict[str, Any]:
    """Per-call latency, the three forms interleaved call by call so drift hits all alike.

    ``transport``: ``"fake"`` (the in-process fake API) or ``"canned"`` (`canned_client`).
    ``framework_us`` is the step and prompt's time less the SDK's ``create`` inside it
    (timed around the SDK's own method): the framework's own work, without the SDK's
    variation from call to call.
    """
    client = fake().client(max_retries=0) if transport == "fake" else canned_client()
    agent = Agent(name="bench", client=client, max_tokens=16)
    raw: list[int] = []
    in_step: list[int] = []
    via_lambda: list[int] = []
    framework: list[int] = []
    creates: list[int] = []  # each SDK create's own time, raw or inside a prompt
    sdk_create = AsyncMessages.create

    async def timed_create(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return await sdk_create(self, *args, **kwargs)
        finally:
            creates.append(time.perf_counter_ns() - t0)

    @workflow(name="bench")
    async def flow(ctx: WorkflowContext) -> None:
        for _ in range(SEQUENTIAL):
            t0 = time.perf_counter_ns()
            await client.messages.create(
                model="claude-sonnet-4-6", max_tokens=16, messages=MESSAGES
            )
            t1 = time.perf_counter_ns()
            # The awaitable form runs on the event loop...
            await ctx.step("ask", agent.prompt("ping"))
            t2 = time.perf_counter_ns()
            # ...while a sync lambda hops to a worker thread first, so that blocking
            # code in a step never stalls other branches.
            await ctx.step("ask", lambda: agent.prompt("ping"))
            t3 = time.perf_counter_ns()
            raw.append(t1 - t0)
            in_step.append(t2 - t1)
            via_lambda.append(t3 - t2)
            framework.append(t2 - t1 - creates[-2])  # the prompt's own create, one turn

    # The timer wraps the raw create as well, so it adds alike to both forms.
    AsyncMessages.create = timed_create  # type: ignore[method-assign]
    try:
        for _ in range(ROUNDS):
            await flow.run()
    finally:
        AsyncMessages.create = sdk_create  # type: ignore[method-assign]
    r, s, lam = (statistics.median(x) / 1000 for x in (raw, in_step, via_lambda))
    # The fastest call of each form: what the code costs with no interference from
    # the machine (the median moves with the load of everything else running).
    r_min, s_min = min(raw) / 1000, min(in_step) / 1000
    return {
        "framework_us": round(statistics.median(framework) / 1000, 1),
        "framework_min_us": round(min(framework) / 1000, 1),
        "calls": len(raw),
        "raw_create_us": round(r, 1),
        "agent_prompt_in_step_us": round(s, 1),
        "overhead_us": round(s - r, 1),
        "raw_create_min_us": round(r_min, 1),
        "agent_prompt_in_step_min_us": round(s_min, 1),
        "overhead_min_us": round(s_min - r_min, 1),
        "ratio": round(s / r, 3),
        "target_overhead_us": 100,
        "meets_target": s - r < 100,
        "lambda_step_us": round(lam, 1),
        "lambda_step_overhead_us": round(lam - r, 1),
    }


async def prompt_cache_auto() -> dict[str, Any]:
    """What automatic prompt caching (one top-level ``cache_control``) adds to a prompt.

    Three agents with the same system prompt on the canned transport, interleaved
    call by call (in rotating order) inside one step each: ``prompt_cache=True``;
    ``prompt_cache=False`` with the same field passed by hand (``cache_control=``,
    sent as it is); and ``prompt_cache=False`` alone. ``added_us`` is what the
    setting adds over sending nothing; ``added_over_field_us`` what it adds over
    the field itself (the SDK's own cost of one more field excluded).
    """
    system = "You answer in one word."
    agents = {
        "on": Agent(
            name="on", client=canned_client(), max_tokens=16, system=system, prompt_cache=True
        ),
        "field": Agent(
            name="field",
            client=canned_client(),
            max_tokens=16,
            system=system,
            prompt_cache=False,
            cache_control={"type": "ephemeral"},
        ),
        "off": Agent(
            name="off", client=canned_client(), max_tokens=16, system=system, prompt_cache=False
        ),
    }
    order = list(agents.items())
    times: dict[str, list[int]] = {name: [] for name in agents}

    @workflow(name="bench-prompt-cache")
    async def flow(ctx: WorkflowContext) -> None:
        for i in range(SEQUENTIAL):
            k = i % len(order)  # rotating: no agent is always first
            for name, agent in order[k:] + order[:k]:
                t0 = time.perf_counter_ns()
                await ctx.step(name, agent.prompt("ping"))
                times[name].append(time.perf_counter_ns() - t0)

    for _ in range(ROUNDS):
        await flow.run()
    on, field, off = (statistics.median(times[n]) / 1000 for n in ("on", "field", "off"))
    return {
        "calls": len(times["on"]),
        "prompt_cache_on_us": round(on, 1),
        "field_by_hand_us": round(field, 1),
        "prompt_cache_off_us": round(off, 1),
        "added_us": round(on - off, 1),
        "added_over_field_us": round(on - field, 1),
    }


async def concurrent() -> dict[str, Any]:
    api = fake()
    client = api.client(max_retries=0)
    agent = Agent(name="bench", client=client, max_tokens=16)
    raw_runs, agent_runs = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                client.messages.create(model="claude-sonnet-4-6", max_tokens=16, messages=MESSAGES)
                for _ in range(CONCURRENT)
            )
        )
        raw_runs.append(CONCURRENT / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        await asyncio.gather(*(agent.prompt("ping") for _ in range(CONCURRENT)))
        agent_runs.append(CONCURRENT / (time.perf_counter() - t0))
    raw, ours = statistics.median(raw_runs), statistics.median(agent_runs)
    return {
        "prompts": CONCURRENT,
        "raw_per_s": round(raw),
        "agent_per_s": round(ours),
        "fraction_of_raw": round(ours / raw, 3),
        "target_fraction": 0.9,
        "meets_target": ours / raw >= 0.9,
    }


async def counted(transport: str = "canned") -> dict[str, Any]:
    """Python bytecode instructions one ``agent.prompt`` in a step runs beyond a raw create.

    A count, not a time: the same for the same code whatever else the machine does,
    so two trees compare exactly (``compare_agent.py --count``). Warm calls only:
    the first calls of each form fill caches and are left out.
    """
    import sys

    client = fake().client(max_retries=0) if transport == "fake" else canned_client()
    agent = Agent(name="bench", client=client, max_tokens=16)
    counts: dict[str, int] = {}

    def counter(label: str) -> Any:
        def trace(frame: Any, event: str, arg: Any) -> Any:
            frame.f_trace_opcodes = True
            if event == "opcode":
                counts[label] = counts.get(label, 0) + 1
            return trace

        return trace

    @workflow(name="bench")
    async def flow(ctx: WorkflowContext, measure: bool) -> None:
        for _ in range(3):  # warm
            await client.messages.create(
                model="claude-sonnet-4-6", max_tokens=16, messages=MESSAGES
            )
            await ctx.step("ask", agent.prompt("ping"))
        if not measure:
            return
        sys.settrace(counter("raw"))
        await client.messages.create(model="claude-sonnet-4-6", max_tokens=16, messages=MESSAGES)
        sys.settrace(counter("agent"))
        await ctx.step("ask", agent.prompt("ping"))
        sys.settrace(None)

    await flow.run(False)
    await flow.run(True)
    return {
        "raw_create_opcodes": counts["raw"],
        "agent_prompt_in_step_opcodes": counts["agent"],
        "overhead_opcodes": counts["agent"] - counts["raw"],
    }


async def run_all() -> dict[str, Any]:
    return {
        "sequential": await sequential(),
        "sequential_canned": await sequential("canned"),
        "prompt_cache_auto": await prompt_cache_auto(),
        "concurrent_1000": await concurrent(),
    }


def main() -> None:
    directory = output_dir(__doc__)
    write(asyncio.run(run_all()), "agent", directory)


if __name__ == "__main__":
    main()
