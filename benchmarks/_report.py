"""Shared plumbing for the benchmark scripts: arguments, machine facts, the results file."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any


def output_dir(description: str | None) -> Path:
    """Parse ``--output DIR`` (default ``benchmarks/results``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results"))
    return Path(parser.parse_args().output)


def write(results: dict[str, Any], name: str, directory: Path) -> None:
    """Print the results with the machine they ran on, and write ``DIR/<name>.json``."""
    machine = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    report = {"machine": machine, **results}
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"{name}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"written to {out}")


def combine(directory: Path, name: str = "results") -> Path:
    """Gather every ``DIR/<script>.json`` into one ``DIR/<name>.json``, keyed by script."""
    reports = {
        path.stem: json.loads(path.read_text())
        for path in sorted(directory.glob("*.json"))
        if path.stem != name
    }
    out = directory / f"{name}.json"
    out.write_text(json.dumps(reports, indent=2) + "\n")
    print(f"{len(reports)} reports ({', '.join(reports)}) combined into {out}")
    return out


if __name__ == "__main__":
    # python benchmarks/_report.py DIR: combine DIR's reports into DIR/results.json.
    import sys

    combine(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results"))
