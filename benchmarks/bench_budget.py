"""Token budget benchmarks: offline counting speed, and what enforcing a budget costs
per model turn on a 200-message conversation.

Results go to ``DIR/budget.json``.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import statistics
import time
from collections.abc import Callable, Coroutine
from typing import Any

from _report import output_dir, write

from groundswell import EventTree, NodeType, TokenBudget
from groundswell.budget.middleware import Enforcer
from groundswell.budget.tokens import clear_memo, estimate_message, estimate_tokens


def real_text() -> str:
    """About 1 MB of real text: standard-library source code and docstrings."""
    import asyncio as a
    import collections
    import dataclasses
    import json as j
    import logging
    import pathlib
    import typing

    parts = []
    for module in (a, collections, dataclasses, j, logging, pathlib, typing, inspect):
        parts.append(inspect.getsource(module))
    return "\n".join(parts)


def counting_speed() -> dict[str, Any]:
    text = real_text()
    chunks = [text[i : i + 4_000] for i in range(0, len(text), 4_000)]
    cold: list[float] = []
    for _ in range(5):
        clear_memo()
        t0 = time.perf_counter()
        tokens = sum(estimate_tokens(c) for c in chunks)
        cold.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(20):
        sum(estimate_tokens(c) for c in chunks)
    warm = (time.perf_counter() - t0) / 20
    best = statistics.median(cold)
    return {
        "text_chars": len(text),
        "estimated_tokens": tokens,
        "cold_ms": round(best * 1e3, 2),
        "cold_mb_per_s": round(len(text) / best / 1e6, 2),
        "cold_tokens_per_s": round(tokens / best),
        "memoized_us_per_4kb_chunk": round(warm / len(chunks) * 1e6, 3),
    }


def conversation(messages: int = 200) -> list[dict[str, Any]]:
    """An instruction and tool turns with realistic tool results, ``messages`` in all."""
    source = real_text()
    convo: list[dict[str, Any]] = [
        {"role": "user", "content": "Review the repository and list every risky change."}
    ]
    i = 0
    while len(convo) < messages:
        i += 1
        call_id = f"toolu_{i:04d}"
        convo.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading file {i} next."},
                    {
                        "type": "tool_use",
                        "id": call_id,
                        "name": "read_file",
                        "input": {"path": f"src/module_{i}.py"},
                    },
                ],
            }
        )
        start = (i * 1_500) % (len(source) - 1_500)
        convo.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": source[start : start + 1_500],
                    }
                ],
            }
        )
    return convo[:messages]


TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


async def per_turn(
    make: Callable[[], Coroutine[Any, Any, None]], rounds: int
) -> tuple[float, float]:
    """Median and p95 microseconds of one awaited call of ``make()``."""
    times = []
    for _ in range(rounds):
        coro = make()
        t0 = time.perf_counter()
        await coro
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times) * 1e6, times[int(len(times) * 0.95)] * 1e6


async def enforcement_cost() -> dict[str, Any]:
    convo = conversation(200)
    total = sum(estimate_message(m) for m in convo)
    results: dict[str, Any] = {"messages": len(convo), "conversation_tokens": total}

    def enforcer(strategy: str, max_total: int) -> tuple[Enforcer, EventTree]:
        tree = EventTree()
        node = tree.start_node(NodeType.PROMPT, "agent")
        budget = TokenBudget(max_total=max_total, reserve_for_output=0, strategy=strategy)  # type: ignore[arg-type]
        guard = Enforcer(
            budget,
            source="agent",
            usage={},
            schema=None,
            tree=tree,
            node=node,
            agent=None,
            client=None,
            model="m",
            max_tokens=1024,
        )
        return guard, tree

    # Under the limit: the steady state of every turn (one new message to count).
    guard, _ = enforcer("sliding_window", total * 2)
    await guard.check(convo, "You review code.", TOOLS)  # first turn counts everything once
    median, p95 = await per_turn(lambda: guard.check(convo, "You review code.", TOOLS), 2_000)
    results["check_under_limit_us"] = {"median": round(median, 1), "p95": round(p95, 1)}

    # First count of a whole 200-message conversation (nothing memoized).
    def cold() -> Coroutine[Any, Any, None]:
        clear_memo()
        fresh, _ = enforcer("sliding_window", total * 2)
        return fresh.check(convo, "You review code.", TOOLS)

    median, p95 = await per_turn(cold, 50)
    results["first_count_us"] = {"median": round(median, 1), "p95": round(p95, 1)}

    # Over the limit: each strategy cutting the conversation to half its size.
    for strategy in ("sliding_window", "prune_oldest"):
        guard, _ = enforcer(strategy, total // 2)
        copies = [copy.copy(convo) for _ in range(300)]
        await guard.check(copy.copy(convo), "You review code.", TOOLS)  # memoize sizes

        async def enforce(g: Enforcer = guard, pool: list[Any] = copies) -> None:
            await g.check(pool.pop(), "You review code.", TOOLS)

        median, p95 = await per_turn(enforce, 300)
        results[f"{strategy}_enforce_us"] = {"median": round(median, 1), "p95": round(p95, 1)}
    results["target_us_per_turn"] = 1_000
    results["meets_target"] = all(
        results[k]["median"] < 1_000
        for k in ("check_under_limit_us", "sliding_window_enforce_us", "prune_oldest_enforce_us")
    )
    return results


def main() -> None:
    directory = output_dir(__doc__)
    report = {
        "counting": counting_speed(),
        "enforcement_200_messages": asyncio.run(enforcement_cost()),
    }
    write(report, "budget", directory)


if __name__ == "__main__":
    main()
