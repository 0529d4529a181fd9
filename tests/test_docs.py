"""The docs' code really runs: every python block of every page, offline, checked
against the output the page shows (see tests/docs_runner.py for the convention)."""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import docs_runner
from .conftest import UNUSED_PYTEST_PLUGINS

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(docs_runner.__file__).resolve()
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# A page whose code reads one of these is run only when that server is there.
SERVICES = {"REDIS_URL": "redis_server_url", "GROUNDSWELL_TEST_POSTGRES_URL": "postgres_url"}
PAGE_TIMEOUT_S = 100  # under pytest's own 120 s, so a stuck page fails with its output


def python_block(path: Path, index: int) -> str:
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    assert len(blocks) > index, f"{path.name} has no python block #{index}"
    return str(blocks[index])


@functools.cache  # README's first block is checked by two tests: run it once
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


def page_env(home: Path) -> dict[str, str]:
    """A reader's environment: no key, no fake behind ``ANTHROPIC_BASE_URL``, no settings.

    A snippet that calls the model must bring its own fake (``auto_client()``,
    ``FakeAnthropicAPI(...).client()``, ``use_fake()``), so it runs offline when
    copied, or be a ``# fragment``.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "GROUNDSWELL_", "OTEL_", "DBOS_"))
    }
    env["HOME"] = str(home)  # ~/.groundswell (history, DBOS) lands in the temporary folder
    # A reader has none of this repository's test tools; their pytest plugins would take
    # seconds to load in every pytest a page runs (its test files, its own subprocesses).
    env["PYTEST_ADDOPTS"] = UNUSED_PYTEST_PLUGINS
    return env


def run_page(page: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUNNER), str(page)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_of_the_page_runs_as_printed(
    page: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    code = "".join(b.code for b in docs_runner.parse(page) if not b.is_fragment)
    env = page_env(tmp_path)
    for variable, fixture in SERVICES.items():
        if variable in code:
            request.getfixturevalue(fixture)  # skips (or fails in CI) without the server
            if variable in os.environ:
                env[variable] = os.environ[variable]
    try:
        out = run_page(page, env, tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{page.relative_to(ROOT)}: its python blocks did not finish within "
            f"{PAGE_TIMEOUT_S} s. They printed:\n{exc.stdout}\n{exc.stderr}",
            pytrace=False,
        )
    if out.returncode != 0:
        pytest.fail(
            f"{page.relative_to(ROOT)}: its python blocks do not run as printed, offline "
            f"(rerun: ./dev test tests/test_docs.py -k {page.name}):\n{out.stderr}",
            pytrace=False,
        )


def test_a_failing_block_is_named_with_its_line_traceback_and_output(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    page.write_text(
        "# Guide\n\n```python\nx = 1\n```\n\nThen:\n\n```python\nprint(x)\nprint(add(1, 2))\n```\n"
    )
    out = run_page(page, page_env(tmp_path), tmp_path)
    assert out.returncode == 1
    assert f"{page} block 2 (line 9: `print(x)`) raised:" in out.stderr
    assert f'File "{page}", line 11, in <module>' in out.stderr  # the page's own line
    assert "NameError: name 'add' is not defined" in out.stderr
    assert "What the block printed before that:\n1\n" in out.stderr
    assert "docs_runner.py" not in out.stderr  # the traceback starts in the page


def test_output_blocks_are_compared_after_normalising_and_ellipses(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    text = (
        "```python\n# Fragment: only compiled\nraise SystemExit('never run')\n```\n\n"
        "```python\nimport asyncio\n\n\nasync def answer() -> int:\n    return 42\n```\n\n"
        "```python\nprint(await answer())  # top-level await\n"
        "print(f'took {asyncio.get_running_loop().time() % 100:.1f}ms, id {id(answer)}')\n"
        "for i in range(3):\n    print(i)\n```\n\n"
        "```output\n42\ntook 1.2ms, id 9f86d081884c7d65\n...\n2\n```\n\n"
        "```python\nprint(await answer())\n```\n\n"
        "```output\n{expected}\n```\n"
    )
    env = page_env(tmp_path)
    page.write_text(text.replace("{expected}", "42"))
    ok = run_page(page, env, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "never run" not in ok.stdout + ok.stderr
    page.write_text(text.replace("{expected}", "41"))
    wrong = run_page(page, env, tmp_path)
    assert wrong.returncode == 1
    assert f"{page} block 4 (line 28: `print(await answer())`)" in wrong.stderr
    assert "printed something other than its output block" in wrong.stderr
    assert "-41\n+42" in wrong.stderr


def test_a_page_runs_as_a_script_or_as_a_session_never_both(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    define = "```python\nimport asyncio\n\n\nasync def answer() -> int:\n    return 42\n```\n\n"
    script = "```python\nprint(asyncio.run(answer()))\n```\n"
    page.write_text(define + script)  # no top-level await: `python` runs it as printed
    out = run_page(page, page_env(tmp_path), tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "42\n"
    # One top-level await makes it a session (`python -m asyncio`, a notebook), where
    # a loop is running and asyncio.run() fails for the reader, as it does here.
    page.write_text(define + "```python\nprint(await answer())\n```\n\n" + script)
    mixed = run_page(page, page_env(tmp_path), tmp_path)
    assert mixed.returncode == 1
    assert "block 3 (line 13: `print(asyncio.run(answer()))`) raised" in mixed.stderr
    assert "asyncio.run() cannot be called from a running event loop" in mixed.stderr


def test_a_snippet_that_needs_an_api_key_fails_its_page(tmp_path: Path) -> None:
    # The page runs in a reader's environment: no key and no fake behind the SDK.
    page = tmp_path / "guide.md"
    agent = "```python\nfrom groundswell import Agent\n\nagent = Agent(name='bare'{client})\n"
    run = "print(agent.run_sync('Hi').node.status.value)\n```\n"
    page.write_text(agent.replace("{client}", "") + run)
    out = run_page(page, page_env(tmp_path), tmp_path)
    assert out.returncode == 1
    assert "agent 'bare' has no API key" in out.stderr
    offline = ", client=__import__('groundswell.testing').testing.auto_client()"
    page.write_text(agent.replace("{client}", offline) + run)
    ok = run_page(page, page_env(tmp_path), tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "completed\n"


def test_test_files_run_under_pytest_after_the_page(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    app = "```python\n# file: app.py\ndef double(x: int) -> int:\n    return 2 * x\n```\n\n"
    test = (
        "```python\n# file: test_app.py\nfrom app import double\n\n\n"
        "async def test_double():\n    assert double(2) == {expected}\n```\n"
    )
    page.write_text(app + test.replace("{expected}", "4"))
    ok = run_page(page, page_env(tmp_path), tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "1 passed" in ok.stdout
    page.write_text(app + test.replace("{expected}", "5"))
    failing = run_page(page, page_env(tmp_path), tmp_path)
    assert failing.returncode == 1
    assert "its test files (test_app.py) fail under pytest" in failing.stderr
    assert "assert 4 == 5" in failing.stderr


def test_a_test_outside_a_test_file_fails_its_page(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    page.write_text(
        "```python\nasync def test_x():\n    assert True\n\n\n"
        "await test_x()  # pytest calls it for you\n```\n"
    )
    out = run_page(page, page_env(tmp_path), tmp_path)
    assert out.returncode == 1
    assert "block 1 (line 1: `async def test_x():`) defines test_x" in out.stderr
    assert "`# file: test_NAME.py`" in out.stderr


def test_a_file_block_is_saved_for_later_blocks_to_run_not_run_itself(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    page.write_text(
        "```python\n# file: job.py\nprint('job ran')\n```\n\n"
        "```python\nimport subprocess, sys\n"
        "print(subprocess.run([sys.executable, 'job.py'], capture_output=True, text=True).stdout)\n"
        "```\n\n```output\njob ran\n```\n"
    )
    out = run_page(page, page_env(tmp_path), tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("job ran") == 1  # printed by the second process only
    assert (tmp_path / "job.py").read_text() == "# file: job.py\nprint('job ran')\n"


def test_page_conventions_are_checked(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    page.write_text("```python\nx = 1\n```\n\nIt prints:\n\n```output\n1\n```\n")
    with pytest.raises(docs_runner.PageError, match=r"guide.md:7: an ```output block must"):
        docs_runner.parse(page)
    page.write_text("```python\n# fragment\nx = 1\n```\n```output\n1\n```\n")
    with pytest.raises(docs_runner.PageError, match="is a fragment but has an output block"):
        docs_runner.parse(page)
    page.write_text("```python\n# file: job.py\nx = 1\n```\n```output\n1\n```\n")
    with pytest.raises(docs_runner.PageError, match="is a file but has an output block"):
        docs_runner.parse(page)
    page.write_text("```python\nx = 1\n")
    with pytest.raises(docs_runner.PageError, match="never closed"):
        docs_runner.parse(page)
    page.write_text("- a list item:\n\n    ```python\n    if True:\n        x = 1\n    ```\n")
    (block,) = docs_runner.parse(page)
    assert block.code == "if True:\n    x = 1\n" and not block.is_fragment


def test_normalising_durations_and_ids() -> None:
    shown = docs_runner.normalise("✓ step a  12.3ms\nrun 9f86d081884c7d65 took 0.4s, 1.2µs\n\n")
    printed = docs_runner.normalise("✓ step a  0.1ms   \nrun 0123456789abcdef took 7s, 3.0µs")
    assert shown == printed == ["✓ step a  <duration>", "run <id> took <duration>, <duration>"]
    assert docs_runner.matches(["a", "...", "z"], ["a", "z"])
    assert docs_runner.matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert not docs_runner.matches(["a", "...", "z"], ["a", "b"])
    assert not docs_runner.matches(["a", "b"], ["a", "b", "c"])


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
