"""The built wheel, installed in a fresh virtual environment, does what the README says.

The wheel is built and installed by pip as a user's would be (not editable).
Its dependencies come from this environment's site-packages through a plain
path line, so the test needs no network; that line is not processed as a site
directory, so the checkout's editable install stays invisible. ``nox -s
wheel`` runs the same check with dependencies installed from the index.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GROUNDSWELL_", "ANTHROPIC_"))}
    env["PIP_NO_INDEX"] = "1"
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, **kw)  # type: ignore[call-overload]


def test_wheel_in_a_fresh_venv_follows_the_readme(groundswell_wheel: Path, tmp_path: Path) -> None:
    wheel = groundswell_wheel  # pip wheel of the checkout, shared with the run's other tests
    venv = tmp_path / "venv"
    # No pip of its own (seconds to set up): the parent's, found through the path line
    # below, installs the wheel into this environment.
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    python = venv / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    # A plain path (not `import site; site.addsitedir`): the parent's .pth files,
    # among them the editable install of the checkout, are not processed.
    Path(purelib.stdout.strip(), "deps_from_parent.pth").write_text(
        sysconfig.get_path("purelib") + "\n"
    )
    install = run([str(python), "-m", "pip", "install", "--no-deps", str(wheel)])
    assert install.returncode == 0, install.stderr

    work = tmp_path / "elsewhere"
    work.mkdir()
    check = run(
        [str(python), str(ROOT / "tests" / "readme_check.py"), str(ROOT / "README.md")], cwd=work
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert "readme_check: ok" in check.stdout
    assert f"from {venv}" in check.stdout  # the wheel's copy answered, not the checkout
