"""Code in the README and the getting-started page really runs and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def first_python_block(path: Path) -> str:
    match = re.search(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    assert match, f"no python block in {path.name}"
    return match.group(1)


@pytest.mark.parametrize(
    ("doc", "first_line"),
    [("README.md", "6 completed"), ("docs/index.md", "Hello, Ada!")],
)
def test_first_code_block_runs(doc: str, first_line: str) -> None:
    code = first_python_block(ROOT / doc)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    lines = out.stdout.splitlines()
    assert lines[0] == first_line
    assert lines[1].startswith("✓ workflow")
