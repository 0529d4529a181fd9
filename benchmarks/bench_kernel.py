"""Kernel benchmarks: step overhead, big trees, deep ancestry, serialization.

Run with ``nox -s bench`` (or ``python benchmarks/bench_kernel.py --output DIR``);
results are printed and written to ``DIR/kernel.json``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
import tracemalloc
from typing import Any

from _report import output_dir, write

from groundswell import EventTree, NodeStatus, NodeType, WorkflowContext, workflow

BATCH = 1_000
ROUNDS = 31


async def trivial() -> int:
    return 1


async def step_overhead() -> dict[str, Any]:
    """Median cost of ``ctx.step`` around a trivial coroutine, minus awaiting it bare."""
    per_step: list[float] = []
    per_bare: list[float] = []

    @workflow(name="bench")
    async def bench(ctx: WorkflowContext) -> None:
        t0 = time.perf_counter()
        for _ in range(BATCH):
            await ctx.step("s", trivial)
        t1 = time.perf_counter()
        for _ in range(BATCH):
            await trivial()
        t2 = time.perf_counter()
        per_step.append((t1 - t0) / BATCH)
        per_bare.append((t2 - t1) / BATCH)

    for _ in range(ROUNDS):
        await bench.run()
    step_us = statistics.median(per_step) * 1e6
    bare_us = statistics.median(per_bare) * 1e6
    return {
        "step_us": round(step_us, 3),
        "bare_await_us": round(bare_us, 3),
        "overhead_us": round(step_us - bare_us, 3),
        "target_overhead_us": 10,
        "meets_target": step_us - bare_us < 10,
    }


def build_tree(n: int) -> EventTree:
    tree = EventTree()
    root = tree.start_node(NodeType.WORKFLOW, "root")
    per_step = 99
    for i in range((n - 1) // (per_step + 1)):
        step = tree.start_node(NodeType.STEP, f"s{i}", root)
        for j in range(per_step):
            leaf = tree.start_node(NodeType.TOOL_CALL, f"t{j}", step)
            tree.end_node(leaf, NodeStatus.COMPLETED)
        tree.end_node(step, NodeStatus.COMPLETED)
    tree.end_node(root, NodeStatus.COMPLETED)
    return tree


def big_tree() -> tuple[dict[str, Any], EventTree]:
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    tree = build_tree(100_001)
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # Time again without tracemalloc, which slows allocation down several times.
    gc.collect()
    t0 = time.perf_counter()
    build_tree(100_001)
    untraced = time.perf_counter() - t0
    return {
        "nodes": len(tree),
        "build_s": round(untraced, 3),
        "build_s_under_tracemalloc": round(seconds, 3),
        "peak_mb": round(peak / 1e6, 1),
        "target": "under 1 s and under 150 MB",
        "meets_target": untraced < 1 and peak / 1e6 < 150,
    }, tree


def deep_ancestors() -> dict[str, Any]:
    tree = EventTree()
    node = tree.start_node(NodeType.WORKFLOW, "n0")
    for i in range(1, 10_000):
        node = tree.start_node(NodeType.STEP, f"n{i}", node)
    runs = []
    for _ in range(20):
        t0 = time.perf_counter()
        ancestors = tree.get_ancestors(node.id)
        runs.append(time.perf_counter() - t0)
    assert len(ancestors) == 9_999
    return {"depth": 10_000, "median_ms": round(statistics.median(runs) * 1e3, 3)}


def serialize(tree: EventTree) -> dict[str, Any]:
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        data = tree.to_json()
        runs.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    text = json.dumps(data)
    dumps = time.perf_counter() - t0
    t0 = time.perf_counter()
    EventTree.from_json(data)
    back = time.perf_counter() - t0
    return {
        "nodes": len(data["nodes"]),
        "to_json_median_s": round(statistics.median(runs), 3),
        "json_dumps_s": round(dumps, 3),
        "json_mb": round(len(text) / 1e6, 1),
        "from_json_s": round(back, 3),
    }


def main() -> None:
    directory = output_dir(__doc__)
    results: dict[str, Any] = {"step_overhead": asyncio.run(step_overhead())}
    tree_result, tree = big_tree()
    results["tree_100k"] = tree_result
    results["ancestors_depth_10k"] = deep_ancestors()
    results["to_json_100k"] = serialize(tree)
    write(results, "kernel", directory)


if __name__ == "__main__":
    main()
