"""A user's own project tested the way its author would: record a run, then test offline.

``tests/data/user_project`` is a small app (a module-level agent in a
workflow) with its own tests, written against the public API only. Here its
run is recorded through the CLI against a stand-in for the real API, and then
its test suite runs under plain pytest, with the plugin Groundswell installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from groundswell.testing import FakeAnthropicAPI, LoopbackServer, json_reply, tool_use

from .conftest import UNUSED_PYTEST_PLUGINS

PROJECT = Path(__file__).parent / "data" / "user_project"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    target = tmp_path / "shop"
    shutil.copytree(PROJECT, target)
    return target


@pytest.fixture
def real_api() -> Iterator[LoopbackServer]:
    """Stands in for api.anthropic.com: what it answers is what the recording keeps."""
    fake = FakeAnthropicAPI(
        [
            tool_use("price", {"item": "apple"}),
            json_reply({"item": "apple", "quantity": 3, "total": 1.5}),
        ]
    )
    with fake.serve() as server:
        yield server


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "GROUNDSWELL_"))}
    return {**env, **extra}


def _record(project: Path, api: LoopbackServer) -> Path:
    trace = project / "traces" / "quote.jsonl"
    trace.parent.mkdir()
    env = _env(ANTHROPIC_API_KEY="sk-ant-recording", ANTHROPIC_BASE_URL=api.base_url)
    command = [sys.executable, "-m", "groundswell.cli", "run", "shop.py:quote"]
    command += ["--arg", "item=apple", "--arg", "quantity=3", "--save", str(trace)]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return trace


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [*UNUSED_PYTEST_PLUGINS.split(), *args]
    return subprocess.run(command, cwd=project, env=_env(), capture_output=True, text=True)


@pytest.mark.slow  # runs the user's own pytest in a subprocess
def test_the_users_suite_passes_on_a_recorded_run(project: Path, real_api: LoopbackServer) -> None:
    trace = _record(project, real_api)
    assert "sk-ant-recording" not in trace.read_text()
    done = _pytest(project, "test_shop.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout


@pytest.mark.slow  # runs the user's own pytest in a subprocess
def test_the_users_suite_passes_under_anyio(project: Path) -> None:
    done = _pytest(
        project,
        "-p",
        "no:asyncio",
        "-W",
        "ignore::pytest.PytestConfigWarning",
        "test_shop_anyio.py",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


@pytest.mark.slow  # runs the user's own pytest in a subprocess
def test_a_replay_without_a_recording_says_how_to_make_one(project: Path) -> None:
    done = _pytest(project, "test_shop.py", "-k", "replays_offline")
    assert done.returncode == 1
    assert "no trace at" in done.stdout and "--save" in done.stdout


def test_the_pytest_plugin_imports_nothing_until_a_fixture_is_used() -> None:
    # It is loaded by every pytest run where Groundswell is installed, used or not.
    code = "import sys, groundswell_pytest; print(sorted(m for m in sys.modules if 'groundswell' in m or m == 'anthropic'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['groundswell_pytest']"
