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
