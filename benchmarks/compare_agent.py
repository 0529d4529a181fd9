"""The agent overhead of two source trees, measured back to back in one run (A/B).

For a change to the agent's hot path, check out the revision before it next
to this one and compare::

    git worktree add ../before HEAD~1
    python benchmarks/compare_agent.py ../before .

Each tree's ``groundswell`` (and bundled plugins) is imported in its own
subprocess, alternating several times so that drift of the machine hits both
alike; both run this checkout's ``bench_agent.sequential`` measurement, which
uses the public API only. Each is measured in two columns, as the bench session
measures them: ``bare`` (the kernel alone) and ``installed`` (every plugin of the
entry-point group, the defaults on); and over two transports: ``fake`` (each
tree's own fake API, as the other benchmarks) and ``canned`` (one fixed reply at
once, read by no fake: the framework's overhead alone, whatever each tree's fake
does). Each cell has the median overhead and the overhead of the fastest calls
(``overhead_min_us``), which stays put when the machine is busy, and the framework's
own time (``framework_us``: a step and prompt less the SDK's create inside it, the
steadiest of the three, since the SDK's own time varies most from call to call). ``--count`` measures
instead the Python bytecode instructions one warm prompt runs beyond a raw create
(``bench_agent.counted``): exact, and the same however busy the machine is. Results go
to ``DIR/compare_agent.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _report import write

HERE = Path(__file__).resolve().parent
CODE = (
    "import asyncio, json, sys; sys.path.insert(0, {here!r}); import bench_agent; "
    "print(json.dumps(asyncio.run(bench_agent.{measure}({transport!r}))))"
)
COLUMNS = ("bare", "installed")
TRANSPORTS = ("fake", "canned")


def measure(tree: Path, column: str, transport: str, how: str = "sequential") -> dict[str, Any]:
    """One ``bench_agent.sequential()`` (or ``counted()``) run with ``tree``'s groundswell."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "plugins")])}
    if column == "bare":  # the kernel alone
        env["GROUNDSWELL_LOAD_PLUGINS"] = ""
    else:  # as installed: the entry-point group's plugins, the defaults on
        env.pop("GROUNDSWELL_LOAD_PLUGINS", None)
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(here=str(HERE), transport=transport, measure=how)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--columns", default=",".join(COLUMNS), help="bare,installed")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help="fake,canned")
    parser.add_argument(
        "--count", action="store_true", help="count bytecode instructions instead of timing"
    )
    args = parser.parse_args()
    if args.count:
        count(args)
        return
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    cells = [
        (column, transport)
        for column in args.columns.split(",")
        for transport in args.transports.split(",")
    ]
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        for column, transport in cells:
            for label, tree in trees.items():
                got = measure(tree, column, transport)
                runs.setdefault((column, transport, label), []).append(got)

    def summary(key: tuple[str, str, str]) -> dict[str, Any]:
        def med(name: str) -> float:
            return round(statistics.median(r[name] for r in runs[key]), 1)

        return {
            "raw_create_us": med("raw_create_us"),
            "agent_prompt_in_step_us": med("agent_prompt_in_step_us"),
            "overhead_us": med("overhead_us"),
            "overhead_us_each_round": [r["overhead_us"] for r in runs[key]],
            # Fastest calls: steady under load, where the medians move with the machine.
            "overhead_min_us": med("overhead_min_us"),
            "overhead_min_us_each_round": [r["overhead_min_us"] for r in runs[key]],
            # The step and prompt less the SDK's create inside: no SDK variation in it.
            "framework_us": med("framework_us"),
            "framework_us_each_round": [r["framework_us"] for r in runs[key]],
            "framework_min_us": med("framework_min_us"),
        }

    results: dict[str, Any] = {
        "rounds": args.rounds,
        "trees": {k: str(v) for k, v in trees.items()},
    }
    for column, transport in cells:
        before = summary((column, transport, "before"))
        after = summary((column, transport, "after"))
        results[f"{column}/{transport}"] = {
            "before": before,
            "after": after,
            "overhead_change_us": round(after["overhead_us"] - before["overhead_us"], 1),
            "overhead_min_change_us": round(
                after["overhead_min_us"] - before["overhead_min_us"], 1
            ),
            "framework_change_us": round(after["framework_us"] - before["framework_us"], 1),
            "framework_min_change_us": round(
                after["framework_min_us"] - before["framework_min_us"], 1
            ),
        }
    write(results, "compare_agent", args.output)


def count(args: argparse.Namespace) -> None:
    """Instructions per warm prompt beyond a raw create, per tree and cell (one run each)."""
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    results: dict[str, Any] = {"measure": "bytecode instructions per warm prompt"}
    results["trees"] = {k: str(v) for k, v in trees.items()}
    for column in args.columns.split(","):
        for transport in args.transports.split(","):
            got = {
                label: measure(tree, column, transport, "counted")["overhead_opcodes"]
                for label, tree in trees.items()
            }
            got["change"] = got["after"] - got["before"]
            results[f"{column}/{transport}"] = got
    write(results, "compare_agent_count", args.output)


if __name__ == "__main__":
    main()
