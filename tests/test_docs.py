"""Code in the README and the getting-started page really runs and prints what it says."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def python_block(path: Path, index: int) -> str:
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    assert len(blocks) > index, f"{path.name} has no python block #{index}"
    return str(blocks[index])


def run(code: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    return out.stdout.splitlines()


@pytest.mark.parametrize(
    ("doc", "first_line"),
    [("README.md", "6 completed"), ("docs/index.md", "Hello, Ada!")],
)
def test_first_code_block_runs_and_prints_a_tree(doc: str, first_line: str) -> None:
    lines = run(python_block(ROOT / doc, 0))
    assert lines[0] == first_line
    assert lines[1].startswith("✓ workflow")


def test_readme_agent_example_runs_offline() -> None:
    (line,) = run(python_block(ROOT / "README.md", 1))
    assert line.startswith("approve=") and "reason=" in line


def test_introspection_page_documents_every_tool_and_parameter() -> None:
    from groundswell_introspection import TOOL_NAMES, toolset

    page = (Path(__file__).resolve().parent.parent / "docs" / "introspection.md").read_text()
    for tool in toolset():
        assert f"### `{tool.name}`" in page, tool.name
        for parameter in tool.input_schema.get("properties", {}):
            assert f'"{parameter}"' in page, (tool.name, parameter)
    assert [t.name for t in toolset()] == list(TOOL_NAMES)


def test_budgets_page_example_runs_and_shows_budget_nodes() -> None:
    page = ROOT / "docs" / "budgets.md"
    lines = run(python_block(page, 0))
    assert lines[0] == "Done."
    enforced = [line for line in lines if "budget sliding_window" in line]
    assert enforced, lines
    before, after = re.search(r"(\d+)→(\d+) tok", enforced[0]).groups()  # type: ignore[union-attr]
    assert int(before) > 2_000 >= int(after)  # input limit: max_total 2,500 - 500 reserved


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_python_snippet_in_the_docs_is_valid_python(page: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    for index, block in enumerate(blocks):
        compile(block, f"{page.name} block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
