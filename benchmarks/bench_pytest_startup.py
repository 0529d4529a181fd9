"""What Groundswell's pytest plugin adds to every pytest run, in any project.

The plugin is registered for every pytest run in an environment where
Groundswell is installed, so its import must cost next to nothing until a
test asks for one of its fixtures. Measured here, alternating in one run:

- ``pytest`` on a one-assert test file, with the plugin and with
  ``-p no:groundswell`` (median wall time of ROUNDS runs each; the goal is a
  difference within 50 ms);
- importing the plugin module alone in a fresh interpreter (``-X importtime``).

Results go to ``DIR/pytest_startup.json``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import output_dir, write

GOAL_MS = 50.0
ROUNDS = 15


def _pytest(folder: Path, *extra: str) -> float:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *extra,
        "test_one.py",
    ]
    started = time.perf_counter()
    subprocess.run(command, cwd=folder, check=True, capture_output=True)
    return time.perf_counter() - started


def _import_us(module: str) -> int:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import pytest; import {module}"],
        capture_output=True,
        text=True,
        check=True,
    )
    # "import time: self | cumulative | name": the module's own line, cumulative µs.
    for line in out.stderr.splitlines():
        fields = [f.strip() for f in line.removeprefix("import time:").split("|")]
        if len(fields) == 3 and fields[2] == module:
            return int(fields[1])
    raise RuntimeError(f"{module} not in the import-time report")


def main() -> None:
    directory = output_dir(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        _pytest(folder)  # warm the file system cache and .pyc files
        with_plugin: list[float] = []
        without: list[float] = []
        for _ in range(ROUNDS):
            with_plugin.append(_pytest(folder))
            without.append(_pytest(folder, "-p", "no:groundswell"))
    difference_ms = (statistics.median(with_plugin) - statistics.median(without)) * 1000
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, groundswell_pytest; print('anthropic' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    results = {
        "rounds": ROUNDS,
        "pytest_with_plugin_ms": round(statistics.median(with_plugin) * 1000, 1),
        "pytest_without_plugin_ms": round(statistics.median(without) * 1000, 1),
        "difference_ms": round(difference_ms, 1),
        "plugin_import_us": _import_us("groundswell_pytest"),
        "plugin_imports_anthropic": imported == "True",
        "goal_ms": GOAL_MS,
        "goal_met": difference_ms <= GOAL_MS,
    }
    write(results, "pytest_startup", directory)


if __name__ == "__main__":
    main()
