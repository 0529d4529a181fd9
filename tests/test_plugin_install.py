"""Install the example plugin and a broken one into a fresh virtual environment.

The new environment reuses this environment's packages (Groundswell and its
dependencies) through a .pth line, so the test needs no network; the plugins
themselves are built and installed by pip as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from .conftest import UNUSED_PYTEST_PLUGINS

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSWELL_")}
    env["PIP_NO_INDEX"] = "1"
    env.update(kw.pop("env", {}))  # type: ignore[arg-type]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    # No pip of its own (seconds to set up): the parent's, found through the .pth line
    # below, installs into this environment.
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    parent = sysconfig.get_path("purelib")
    Path(site.stdout.strip(), "parent_env.pth").write_text(
        f"import site; site.addsitedir({parent!r})\n"
    )
    install = run(
        [
            str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation",
            str(ROOT / "examples" / "plugin_template"),
            str(ROOT / "tests" / "data" / "broken_plugin"),
        ]
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    return python


def test_plugins_command_lists_the_example_and_reports_the_broken_one(fresh_python: Path) -> None:
    out = run([str(fresh_python), "-m", "groundswell.cli", "plugins", "--json"])
    assert out.returncode == 0, out.stderr
    infos = {d["name"]: d for d in json.loads(out.stdout)}
    example = infos["example-sink"]
    assert example["ok"] and example["version"] == "0.1.0"
    assert example["distribution"] == "groundswell-example-sink"
    assert example["hooks"] == ["register_agent_middleware", "register_event_sinks"]
    broken = infos["broken"]
    assert not broken["ok"] and broken["version"] == "6.6.6"
    assert "this plugin is broken on purpose" in broken["errors"][0]
    assert infos["lru"]["ok"]

    every = run([str(fresh_python), "-m", "groundswell.cli", "plugins", "--all", "--json"])
    listed = {d["name"]: d for d in json.loads(every.stdout)}
    assert listed["example-sink"]["agent_middleware"] == [
        {"name": "timing", "order": 500, "default": False}
    ]

    table = run([str(fresh_python), "-m", "groundswell.cli", "plugins"])
    assert table.returncode == 0
    assert "broken" in table.stdout and "ERROR" in table.stdout
    assert "Traceback" not in table.stderr


def test_installed_example_sink_sees_a_real_run(fresh_python: Path, tmp_path: Path) -> None:
    tally = tmp_path / "tally.json"
    code = (
        "import asyncio, groundswell\n"
        "@groundswell.workflow\n"
        "async def w(ctx):\n"
        "    await ctx.step('a', lambda: 1)\n"
        "    return await ctx.step('b', lambda: 2)\n"
        "print(asyncio.run(w.run()).output)\n"
    )
    out = run([str(fresh_python), "-c", code], env={"GROUNDSWELL_TALLY_FILE": str(tally)})
    # The broken plugin is reported on stderr, and the run still completes.
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"
    assert "this plugin is broken on purpose" in out.stderr
    assert json.loads(tally.read_text()) == {"step:completed": 2, "workflow:completed": 1}


def test_example_plugin_own_tests_pass(fresh_python: Path) -> None:
    tests = ROOT / "examples" / "plugin_template" / "tests"
    pytest_cmd = [str(fresh_python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    out = run(
        [*pytest_cmd, *UNUSED_PYTEST_PLUGINS.split(), str(tests)],
        cwd=str(tests.parent),
        # As in a user's environment, where the template's entry point loads too;
        # only the deliberately broken plugin is kept out.
        env={"GROUNDSWELL_DISABLE_PLUGINS": "broken"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "6 passed" in out.stdout
