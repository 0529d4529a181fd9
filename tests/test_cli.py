"""The ``groundswell`` command, run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FLOWS = """
import groundswell

@groundswell.workflow(name="greet")
async def greet(ctx, who):
    return await ctx.step("hello", lambda: f"hello {who}")

@groundswell.workflow(name="crash")
async def crash(ctx):
    await ctx.step("boom", lambda: 1 / 0)

not_a_workflow = 3
"""


def gs(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groundswell.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd or "")},
        timeout=60,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "flows.py").write_text(FLOWS)
    return tmp_path


def test_plugins_lists_the_bundled_plugin() -> None:
    out = gs("plugins")
    assert out.returncode == 0
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("lru"))
    assert "ok" in line and "register_cache_backends" in line
    data = json.loads(gs("plugins", "--json").stdout)
    assert {"name": "lru", "ok": True}.items() <= next(
        d for d in data if d["name"] == "lru"
    ).items()


def test_run_prints_the_tree_and_exits_zero(project: Path) -> None:
    out = gs("run", "flows:greet", "ann", cwd=project)
    assert out.returncode == 0, out.stderr
    assert "✓ workflow greet" in out.stdout and "└── ✓ step hello" in out.stdout
    assert "output: 'hello ann'" in out.stdout


def test_run_json_and_save_then_render_the_saved_trace(project: Path) -> None:
    out = gs("run", "flows:greet", "bo", "--json", "--save", "trace.jsonl", cwd=project)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["status"] == "completed" and data["output"] == "hello bo"
    assert [n["name"] for n in data["tree"]["nodes"]] == ["greet", "hello"]
    rendered = gs("tree", "trace.jsonl", cwd=project)
    assert rendered.returncode == 0 and "└── ✓ step hello" in rendered.stdout
    as_json = json.loads(gs("tree", "trace.jsonl", "--json", cwd=project).stdout)
    assert as_json["nodes"] == data["tree"]["nodes"]


def test_failed_run_exits_one_and_still_shows_the_tree(project: Path) -> None:
    out = gs("run", "flows:crash", cwd=project)
    assert out.returncode == 1
    assert "✗ step boom" in out.stdout and "ZeroDivisionError" in out.stdout
    assert "failed at crash/boom" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "flows"], "expected module:workflow"),
        (["run", "nowhere:thing"], "cannot import 'nowhere'"),
        (["run", "flows:not_a_workflow"], "is a int, not a Workflow"),
        (["run", "flows:missing"], "has no attribute 'missing'"),
        (["tree", "missing.jsonl"], "no such file"),
    ],
)
def test_bad_input_is_one_clear_line(project: Path, args: list[str], message: str) -> None:
    out = gs(*args, cwd=project)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_tree_rejects_a_file_that_is_not_a_trace(project: Path) -> None:
    (project / "junk.jsonl").write_text('{"kind": "nope", "data": {}}\n')
    out = gs("tree", "junk.jsonl", cwd=project)
    assert out.returncode == 2 and "not a Groundswell trace" in out.stderr
