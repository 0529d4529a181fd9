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
    [("README.md", "approve=True reason="), ("docs/index.md", "Hello, Ada!")],
)
def test_first_code_block_runs_and_prints_a_tree(doc: str, first_line: str) -> None:
    lines = run(python_block(ROOT / doc, 0))
    assert lines[0].startswith(first_line)
    assert lines[1].startswith("✓ workflow")


def test_readme_example_mounts_the_agent_under_its_step() -> None:
    lines = run(python_block(ROOT / "README.md", 0))
    shape = [line.lstrip("│├└─ ").split("  ")[0] for line in lines[1:]]
    assert shape == [
        "✓ workflow review",
        "✓ step judge",
        "✓ prompt judge",
        "✓ model_call claude-sonnet-4-6",
    ]


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


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    nav = re.findall(r"^  - [^:]+: (\S+\.md)$", config, flags=re.M)
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(nav) == pages
    assert nav[0] == "index.md" and len(set(nav)) == len(nav)


def test_api_reference_names_only_public_objects() -> None:
    import importlib

    import groundswell

    names = re.findall(r"^::: (\S+)$", (ROOT / "docs" / "api.md").read_text(), flags=re.M)
    assert len(names) > 40
    for dotted in names:
        module, _, attr = dotted.rpartition(".")
        if dotted == "groundswell.errors":
            continue
        assert hasattr(importlib.import_module(module), attr), dotted
        if module == "groundswell":
            assert attr in groundswell.__all__, dotted


def test_api_reference_documents_every_public_name() -> None:
    import importlib

    import groundswell
    import groundswell.errors

    page = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^::: groundswell\.(\w+)$", page, flags=re.M))
    # `::: groundswell.errors` documents the module's whole exception tree.
    documented |= {n for n in groundswell.errors.__all__ if "errors" in documented}
    if "`groundswell.__version__`" in page:
        documented.add("__version__")
    missing = sorted(set(groundswell.__all__) - documented)
    assert not missing, f"docs/api.md leaves out {missing}"
    # A bundled plugin with a section of its own there is documented whole too.
    for plugin in set(re.findall(r"^::: (groundswell_\w+)\.", page, flags=re.M)):
        shown = set(re.findall(rf"^::: {plugin}\.(\w+)$", page, flags=re.M))
        left = sorted(set(importlib.import_module(plugin).__all__) - shown)
        assert not left, f"docs/api.md leaves out {plugin}: {left}"


@pytest.mark.slow
def test_docs_build_strict_and_show_every_example_with_its_real_output(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["NO_MKDOCS_2_WARNING"] = "1"
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "examples" / "index.html").read_text()
    for script in sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")):
        assert f'id="{script.stem}"' in page, script.name
    # Real output of the runs, not placeholders: example 4's failed region, example 8's notes.
    assert page.count("✓ workflow") >= 10
    assert "failed at deploy/rollout/verify/health-check" in page
    assert "## 2.1.0-beta" in page
    api = (tmp_path / "api" / "index.html").read_text()
    assert 'id="groundswell.Agent"' in api and 'id="groundswell.WorkflowContext.step"' in api


def test_docs_build_fails_when_an_example_fails(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT))
    from mkdocs.exceptions import PluginError

    script = tmp_path / "01_broken.py"
    script.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(PluginError, match=r"example 01_broken\.py failed") as info:
        docs_hooks._run(script)
    assert "RuntimeError: boom" in str(info.value)
