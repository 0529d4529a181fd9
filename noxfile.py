"""Every chore in one place: ``nox -s tests lint typing examples wheel docs bench``."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests", "lint", "typing", "examples"]
nox.options.reuse_existing_virtualenvs = True

PYTHONS = ["3.11", "3.12", "3.13"]
HERE = Path(__file__).resolve().parent


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite (args go to pytest; without any, on workers as ``./dev test``)."""
    session.install("-e", ".[dev]")
    session.run("pytest", *(session.posargs or ["-n", "logical", "--maxprocesses", "4"]))


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """Ruff lint and format check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python="3.11")
def typing(session: nox.Session) -> None:
    """mypy --strict on the kernel."""
    session.install("-e", ".[dev]")
    session.run("mypy")


@nox.session(python="3.11")
def examples(session: nox.Session) -> None:
    """Run every example script (offline unless ANTHROPIC_API_KEY is set)."""
    session.install("-e", ".")
    for path in sorted(glob.glob("examples/[0-9][0-9]_*.py")):
        session.run("python", path)


@nox.session(python="3.11", reuse_venv=False)
def wheel(session: nox.Session) -> None:
    """Build the wheel, install it in a fresh venv (not editable) and follow the README."""
    tmp = Path(session.create_tmp()).resolve()
    dist = tmp / "dist"
    session.run("python", "-m", "pip", "wheel", "--no-deps", "-w", str(dist), ".")
    (built,) = dist.glob("groundswell-*.whl")
    # Kept in dist/ of the checkout too: the README tells users to install it from there.
    (HERE / "dist").mkdir(exist_ok=True)
    shutil.copy2(built, HERE / "dist" / built.name)
    session.log(f"built {Path('dist') / built.name}")
    session.install(str(built))
    checker = str(HERE / "tests" / "readme_check.py")
    readme = str(HERE / "README.md")
    session.chdir(str(tmp))  # away from the checkout, so nothing is imported from it
    session.run("python", checker, readme, env={"ANTHROPIC_API_KEY": ""})


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Build the documentation site with warnings as errors."""
    session.install("-e", ".[docs]")
    # Material for MkDocs prints a banner about its successor on every build.
    env = {"NO_MKDOCS_2_WARNING": "1"}
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", env=env)


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Run the benchmarks (args: which, e.g. ``-- hotpaths kernel``; default all).

    Each writes benchmarks/results/<name>.json; then all of them are gathered
    into benchmarks/results/results.json, keyed by name.
    """
    # Installed as users install it (.[all]): bench_hotpaths.py measures that as well as
    # the bare kernel. tokenizers reads the reference tokenizer of
    # bench_token_accuracy.py; psycopg serves bench_history.py on PostgreSQL.
    session.install("-e", ".[all]", "tokenizers", "psycopg[binary]")
    out = HERE / "benchmarks" / "results"
    # Earlier reports would be gathered into results.json as if they were this run's.
    for old in out.glob("*.json"):
        old.unlink()
    for path in sorted(glob.glob("benchmarks/bench_*.py")):
        name = Path(path).stem.removeprefix("bench_")
        if session.posargs and name not in session.posargs:
            continue
        # bench_hotpaths.py sets the plugins of each of its two columns itself (the bare
        # kernel, and every default plugin loaded). The others measure the kernel alone and
        # load what they need, except bench_history.py's Agent(history=True) processes,
        # which need the history plugin loaded.
        env = {"GROUNDSWELL_LOAD_PLUGINS": "history" if name == "history" else ""}
        if name == "hotpaths":
            env = {}
        session.run("python", path, "--output", str(out), env=env)
    session.run("python", "benchmarks/_report.py", str(out))
