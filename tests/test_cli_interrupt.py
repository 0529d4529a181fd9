"""Ctrl-C during ``groundswell run``, pressed as a user presses it: a real SIGINT.

Whatever the run is doing when it comes (awaiting a model, blocking the event loop,
running a sync step in a thread) and however often it comes, the command prints
the run's tree, one line on stderr and exits 130; never a traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from groundswell_history import HistoryStore

from groundswell import EventTree

from .test_cli import start

FLOWS = """
import asyncio, dataclasses, os, pathlib, time

import groundswell
from groundswell.testing import FakeAnthropicAPI, text

MARKER = pathlib.Path(os.environ["MARKER"])

def started():
    MARKER.write_text("started")  # the test presses Ctrl-C now

slow_reply = dataclasses.replace(text("too late"), delay=600)
agent = groundswell.Agent(
    name="thinker", history=True, client=FakeAnthropicAPI([slow_reply]).client()
)

@groundswell.workflow(name="asking")
async def asking(ctx):
    async def ask():
        task = asyncio.ensure_future(agent.prompt("think hard"))
        await asyncio.sleep(0.2)  # the model call is under way
        started()
        return await task

    await ctx.step("first", lambda: 1)
    return await ctx.step("ask", ask)

@groundswell.workflow(name="hogging")
async def hogging(ctx):
    async def hog():
        started()
        time.sleep(600)  # blocks the event loop: the first Ctrl-C cannot cancel it

    await ctx.step("first", lambda: 1)
    return await ctx.step("hog", hog)

@groundswell.workflow(name="threaded")
async def threaded(ctx, seconds: float):
    def nap():
        started()
        time.sleep(seconds)  # a sync step, in a thread: nothing can stop it
        pathlib.Path(os.environ["MARKER"] + ".done").write_text("done")

    await ctx.step("first", lambda: 1)
    return await ctx.step("nap", nap)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "flows.py").write_text(FLOWS)
    return tmp_path


def press_ctrl_c(
    project: Path, *args: str, times: int = 1, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str, str, float]:
    """Run ``groundswell ARGS``; once the run has started, press Ctrl-C ``times`` times.

    Returns the process, its stdout and stderr, and the seconds from the last Ctrl-C
    to its exit.
    """
    marker = project / "started"
    process = start(*args, cwd=project, env={"MARKER": str(marker), **(env or {})})
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.05)
    for press in range(times):
        if press:
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)
    pressed = time.monotonic()
    stdout, stderr = process.communicate(timeout=60)
    return process, stdout, stderr, time.monotonic() - pressed


def statuses(tree: EventTree) -> list[tuple[str, str]]:
    return [(n.name, n.status.value) for n in tree.walk()]


def test_ctrl_c_during_a_model_call_cancels_the_run_its_trace_and_its_session(
    project: Path,
) -> None:
    traces = project / "traces"
    env = {"GROUNDSWELL_HOME": str(project), "GROUNDSWELL_TRACE_DIR": str(traces)}
    env["GROUNDSWELL_HISTORY_URL"] = ""  # the SQLite store under GROUNDSWELL_HOME
    process, stdout, stderr, _ = press_ctrl_c(
        project, "run", "flows:asking", "--save", "t.jsonl", "--no-live", env=env
    )
    assert process.returncode == 130
    assert stderr == "groundswell: interrupted; the run was cancelled\n"
    assert stdout.startswith("⊘ workflow asking")
    expected = [
        ("asking", "cancelled"),
        ("first", "completed"),
        ("ask", "cancelled"),
        ("thinker", "cancelled"),
        ("claude-sonnet-4-6", "cancelled"),
    ]
    assert statuses(EventTree.load(project / "t.jsonl")) == expected
    (trace,) = traces.glob("*.jsonl")  # the JSONL sink's own trace of the run
    assert statuses(EventTree.load(trace)) == expected
    with HistoryStore(f"sqlite:///{project / 'history.db'}") as store:
        assert [s.status for s in store.sessions("thinker")] == ["terminated"]


@pytest.mark.parametrize("output", ["tree", "json", "jsonl"])
def test_ctrl_c_twice_while_the_run_blocks_the_loop_stops_it_quietly(
    project: Path, output: str
) -> None:
    flags = {"tree": ["--no-live"], "json": ["--json"], "jsonl": ["--jsonl"]}[output]
    process, stdout, stderr, waited = press_ctrl_c(
        project, "run", "flows:hogging", "--save", "t.jsonl", *flags, times=2
    )
    assert process.returncode == 130
    assert stderr == "groundswell: interrupted; the run was cancelled\n"  # no traceback
    assert waited < 30  # not the 600 s the step would have blocked
    expected = [("hogging", "cancelled"), ("first", "completed"), ("hog", "cancelled")]
    assert statuses(EventTree.load(project / "t.jsonl")) == expected
    if output == "json":
        data = json.loads(stdout)
        assert data["status"] == "cancelled"
        assert [(n["name"], n["status"]) for n in data["tree"]["nodes"]] == expected
    elif output == "jsonl":
        ends = [json.loads(line) for line in stdout.splitlines()]
        assert [e["data"]["status"] for e in ends if e["kind"] == "node_end"] == [
            "completed",
            "cancelled",
            "cancelled",
        ]
    else:
        assert stdout.startswith("⊘ workflow hogging")
        assert "⊘ step hog" in stdout


def test_ctrl_c_during_a_sync_step_shows_the_tree_then_waits_for_its_thread(
    project: Path,
) -> None:
    process, stdout, stderr, _ = press_ctrl_c(
        project, "run", "flows:threaded", "3", "--save", "t.jsonl", "--no-live"
    )
    assert process.returncode == 130
    assert stderr.splitlines() == [
        "groundswell: interrupted; the run was cancelled",
        "groundswell: waiting for 1 thread of the run (a sync step or asyncio.to_thread "
        "call, which Python cannot stop); Ctrl-C again to quit now",
    ]
    assert stdout.startswith("⊘ workflow threaded")
    assert (project / "started.done").exists()  # the thread was let finish its work
    expected = [("threaded", "cancelled"), ("first", "completed"), ("nap", "cancelled")]
    assert statuses(EventTree.load(project / "t.jsonl")) == expected


def test_ctrl_c_again_quits_without_waiting_for_the_thread(project: Path) -> None:
    process, _, stderr, waited = press_ctrl_c(
        project, "run", "flows:threaded", "600", "--save", "t.jsonl", "--no-live", times=2
    )
    assert process.returncode == 130
    assert waited < 30
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert lines[0] == "groundswell: interrupted; the run was cancelled"
    assert len(lines) <= 2  # and the line that says it waits, when it got there
    assert not (project / "started.done").exists()
    expected = [("threaded", "cancelled"), ("first", "completed"), ("nap", "cancelled")]
    assert statuses(EventTree.load(project / "t.jsonl")) == expected
