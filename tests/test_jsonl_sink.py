"""The bundled JSONL sink: every run saved as it happens, replayable after the process ends."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from groundswell_jsonl import TRACE_DIR_ENV, trace_path

import groundswell
from groundswell import EventTree, NodeStatus, WorkflowContext, workflow


@pytest.fixture
def trace_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "traces"
    monkeypatch.setenv(TRACE_DIR_ENV, str(directory))
    manager = groundswell.get_plugin_manager()
    manager.refresh_sinks("jsonl")  # the sink reads the variable when it is made
    yield directory
    monkeypatch.delenv(TRACE_DIR_ENV)
    manager.refresh_sinks("jsonl")


def logs(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


@workflow(name="saved")
async def saved(ctx: WorkflowContext, n: int) -> int:
    a, b = await asyncio.gather(ctx.step("a", lambda: n), ctx.step("b", lambda: n + 1))
    ctx.snapshot_state()
    return a + b


async def test_every_run_is_saved_and_replays_to_the_same_tree(trace_dir: Path) -> None:
    first, second = await asyncio.gather(saved.run(1), saved.run(2))
    assert groundswell.flush_sinks()
    for result in (first, second):
        path = trace_path(trace_dir, result.node.id)
        assert path is not None and path.name.endswith(f"-saved-{result.node.id}.jsonl")
        assert EventTree.load(path) == result.tree
    assert len(logs(trace_dir)) == 2


async def test_without_the_variable_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRACE_DIR_ENV, raising=False)
    manager = groundswell.get_plugin_manager()
    manager.refresh_sinks("jsonl")
    await saved.run(1)
    assert "jsonl" not in manager.sink_hub().names()


def test_a_killed_process_leaves_a_log_that_still_loads(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, os, groundswell

            @groundswell.workflow(name="doomed")
            async def doomed(ctx):
                await ctx.step("one", lambda: 1)
                await ctx.step("two", lambda: 2)
                groundswell.flush_sinks()  # what was recorded so far is on disk
                os._exit(9)  # no cleanup, no atexit: as if the machine lost power

            asyncio.run(doomed.run())
            """
        )
    )
    directory = tmp_path / "traces"
    env = {**os.environ, TRACE_DIR_ENV: str(directory)}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, timeout=60)
    assert out.returncode == 9
    (log,) = directory.glob("*-doomed-*.jsonl")
    tree = EventTree.load(log)
    assert tree.root is not None and tree.root.status is NodeStatus.RUNNING
    assert [(n.name, n.status) for n in tree.root.children] == [
        ("one", NodeStatus.COMPLETED),
        ("two", NodeStatus.COMPLETED),
    ]
    # A line cut off mid-write (a crash inside write()) is skipped, not fatal.
    with log.open("a", encoding="utf-8") as f:
        f.write('{"kind": "node_sta')
    assert EventTree.load(log) == tree
    rendered = subprocess.run(
        [sys.executable, "-m", "groundswell.cli", "tree", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rendered.returncode == 0 and "✓ step two" in rendered.stdout


async def test_late_events_of_a_finished_run_keep_no_file_open(trace_dir: Path) -> None:
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "late"

    @workflow(name="outlived")
    async def outlived(ctx: WorkflowContext) -> None:
        await asyncio.gather(ctx.step("slow", slow), ctx.step("fail", lambda: 1 / 0))

    with pytest.raises(groundswell.WorkflowError) as caught:
        await outlived.run()
    release.set()
    await asyncio.sleep(0.05)
    assert groundswell.flush_sinks()
    sink = next(
        w.sink for w in groundswell.get_plugin_manager().sink_hub()._workers if w.name == "jsonl"
    )
    assert sink._files == {}
    result = caught.value.result
    assert result is not None
    tree = EventTree.load(trace_path(trace_dir, result.node.id))
    assert tree.find(name="slow")[0].status is NodeStatus.COMPLETED
