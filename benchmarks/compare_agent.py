"""The agent overhead of two source trees, measured back to back in one run (A/B).

For a change to the agent's hot path, check out the revision before it next
to this one and compare::

    git worktree add ../before HEAD~1
    python benchmarks/compare_agent.py ../before .

Each tree's ``groundswell`` (and bundled plugins) is imported in its own
subprocess, alternating several times so that drift of the machine hits both
alike; both run this checkout's ``bench_agent.sequential`` measurement, which
uses the public API only. Results go to ``DIR/compare_agent.json``.
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
    "print(json.dumps(asyncio.run(bench_agent.sequential())))"
)


def measure(tree: Path) -> dict[str, Any]:
    """One ``bench_agent.sequential()`` run with ``tree``'s groundswell."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "plugins")]),
        # The kernel alone, as the bench session measures it.
        "GROUNDSWELL_LOAD_PLUGINS": "",
    }
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(here=str(HERE))],
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
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            runs[label].append(measure(tree))

    def summary(label: str) -> dict[str, Any]:
        def med(key: str) -> float:
            return round(statistics.median(r[key] for r in runs[label]), 1)

        return {
            "tree": str(trees[label]),
            "raw_create_us": med("raw_create_us"),
            "agent_prompt_in_step_us": med("agent_prompt_in_step_us"),
            "overhead_us": med("overhead_us"),
            "overhead_us_each_round": [r["overhead_us"] for r in runs[label]],
        }

    before, after = summary("before"), summary("after")
    write(
        {
            "rounds": args.rounds,
            "before": before,
            "after": after,
            "overhead_change_us": round(after["overhead_us"] - before["overhead_us"], 1),
        },
        "compare_agent",
        args.output,
    )


if __name__ == "__main__":
    main()
