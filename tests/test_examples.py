"""The examples run offline and build the trees they promise."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_basic_workflow_tree_shape() -> None:
    example = load("01_basic_workflow")
    result = await example.report.run("a b\nc")
    assert result.output == {"lines": 2, "words": 3}
    root = result.tree.root
    assert [c.name for c in root.children] == ["split", "line-0", "line-1"]
    for line_step in root.children[1:]:
        (child,) = line_step.children
        assert child.name == "summarize-line"
        assert [s.name for s in child.children] == ["count", "shout"]
    assert root.events[0]["type"] == "state_snapshot"


def test_basic_workflow_script_prints_its_tree() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "01_basic_workflow.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.startswith("✓ workflow report")
    assert "output: {'lines': 3, 'words': 9}" in out.stdout
