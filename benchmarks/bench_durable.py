"""Durable runs on DBOS: what a checkpointed step costs, and queued children's throughput.

Needs PostgreSQL (``GROUNDSWELL_TEST_POSTGRES_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``; a scratch database is created
and dropped). Run with ``nox -s bench`` or
``python benchmarks/bench_durable.py --output DIR``; results go to
``DIR/durable.json``.

- Step overhead: a 100-step workflow of trivial steps, run locally and as a
  durable run on PostgreSQL and on SQLite (each durable variant in a process of
  its own, since DBOS is one instance per process).
- Queue throughput: 200 children spawned on a queue, run by 1 and then 2
  worker processes (``groundswell worker --concurrency 8``); trivial children,
  and children that wait 50 ms on I/O.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This benchmark measures the durable backend itself, so its plugin must load.
os.environ["GROUNDSWELL_LOAD_PLUGINS"] = "dbos"

HERE = Path(__file__).resolve().parent
STEPS = 100
ROUNDS = 5
CHILDREN = 200

FLOWS = """
import asyncio
from groundswell import WorkflowContext, workflow


async def trivial() -> int:
    return 1


async def hundred_steps(ctx: WorkflowContext) -> int:
    total = 0
    for _ in range(100):
        total += await ctx.step("s", trivial)
    return total


steps_local = workflow(name="steps-local")(hundred_steps)
steps_durable = workflow(name="steps-durable", durable=True)(hundred_steps)


@workflow(name="child")
async def child(ctx: WorkflowContext, i: int, wait_s: float) -> int:
    if wait_s:
        await ctx.step("io", lambda: asyncio.sleep(wait_s))
    return await ctx.step("work", lambda: i)


@workflow(name="fanout")
async def fanout(ctx: WorkflowContext, n: int, wait_s: float) -> int:
    return sum(await asyncio.gather(
        *(ctx.spawn_workflow(child, i, wait_s, queue="bench") for i in range(n))
    ))
"""

STEP_PART = """
import asyncio, json, statistics, sys, time
import groundswell_dbos
groundswell_dbos.configure(system_database_url=sys.argv[1])
import flows

async def main():
    await flows.steps_durable.run()  # launch DBOS and warm up
    local, durable = [], []
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter(); await flows.steps_local.run(); local.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); await flows.steps_durable.run(); durable.append(time.perf_counter() - t0)
    print(json.dumps({"local": statistics.median(local), "durable": statistics.median(durable)}))

asyncio.run(main())
"""

FAN_PART = """
import asyncio, json, sys, time
import flows

async def main():
    t0 = time.perf_counter()
    result = await flows.fanout.run(int(sys.argv[1]), float(sys.argv[2]))
    print(json.dumps({"seconds": time.perf_counter() - t0, "output": result.output}))

asyncio.run(main())
"""


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBOS")}
    env.update(DBOS_SYSTEM_DATABASE_URL=url, PYTHONUNBUFFERED="1")
    return env


def _json(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"benchmark part failed: {out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def step_overhead(project: Path, url: str) -> dict[str, Any]:
    times = _json([sys.executable, "-c", STEP_PART, url, str(ROUNDS)], project, _env(url))
    local_us = times["local"] / STEPS * 1e6
    durable_ms = times["durable"] / STEPS * 1e3
    return {
        "steps_per_run": STEPS,
        "local_step_us": round(local_us, 1),
        "durable_step_ms": round(durable_ms, 2),
        "extra_per_durable_step_ms": round(durable_ms - local_us / 1e3, 2),
    }


def throughput(project: Path, url: str, workers: int, wait_s: float) -> dict[str, Any]:
    env = _env(url)
    procs = []
    for _ in range(workers):
        proc = subprocess.Popen(
            [sys.executable, "-m", "groundswell.cli", "worker", "--queue", "bench",
             "--concurrency", "8"],
            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        if not proc.stdout.readline().startswith("worker "):
            raise SystemExit("a worker did not start")
        procs.append(proc)
    try:
        got = _json([sys.executable, "-c", FAN_PART, str(CHILDREN), str(wait_s)], project, env)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.communicate(timeout=60)
    assert got["output"] == sum(range(CHILDREN)), got
    return {
        "children": CHILDREN,
        "workers": workers,
        "child_io_wait_s": wait_s,
        "seconds": round(got["seconds"], 2),
        "children_per_s": round(CHILDREN / got["seconds"], 1),
    }


def main() -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from _report import output_dir, write

    from tests.scratch_db import fresh_database

    directory = output_dir(__doc__)
    server = os.environ.get(
        "GROUNDSWELL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    )
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "flows.py").write_text(FLOWS)
        with fresh_database(server) as url:
            results["step_overhead_postgresql"] = step_overhead(project, url)
        results["step_overhead_sqlite"] = step_overhead(
            project, f"sqlite:///{project / 'steps.sqlite'}"
        )
        runs = []
        for wait_s in (0.0, 0.05):
            for workers in (1, 2):
                with fresh_database(server) as url:
                    runs.append(throughput(project, url, workers, wait_s))
        results["queue_throughput"] = runs
    write(results, "durable", directory)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - t0:.0f} s")
