"""The bundled JSONL sink: every run saved as it happens, replayable after the process ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from groundswell_jsonl import MAX_OPEN, TRACE_DIR_ENV, trace_path

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
    sink: Any = next(
        w.sink for w in groundswell.get_plugin_manager().sink_hub()._workers if w.name == "jsonl"
    )
    assert sink.open_files == 0 and sink.unwritten == 0
    result = caught.value.result
    assert result is not None
    tree = EventTree.load(trace_path(trace_dir, result.node.id))
    assert tree.find(name="slow")[0].status is NodeStatus.COMPLETED


MANY_RUNS = """
import asyncio, json, os, resource, sys

resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # as under `ulimit -n 256`
import groundswell
from groundswell import workflow


@workflow(name="many")
async def many(ctx, n):
    await ctx.step("a", lambda: n)
    await asyncio.sleep(0.05)  # all the runs are live at once here
    return await ctx.step("b", lambda: n + 1)


async def main():
    return await asyncio.gather(*(many.run(i) for i in range(int(sys.argv[1]))))


results = asyncio.run(main())
assert groundswell.flush_sinks(60)
stats = groundswell.get_plugin_manager().sink_hub().stats()["jsonl"]
print(json.dumps({"runs": [r.node.id for r in results], "stats": stats}))
"""


def _complete(path: Path | None, run_id: str) -> bool:
    """The log parses, rebuilds a finished tree, and ends with the run's closing record."""
    if path is None:
        return False
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    last = records[-1]
    closed = last["kind"] == "node_end" and last["data"]["id"] == run_id
    tree = EventTree.load(path)
    return closed and tree.root is not None and tree.root.status is NodeStatus.COMPLETED


@pytest.mark.slow  # a subprocess of 1,000 concurrent runs
def test_a_thousand_concurrent_runs_under_256_descriptors_all_complete(tmp_path: Path) -> None:
    directory = tmp_path / "traces"
    env = {**os.environ, TRACE_DIR_ENV: str(directory)}
    env.pop("GROUNDSWELL_LOAD_PLUGINS", None)  # as installed: every default plugin loaded
    out = subprocess.run(
        [sys.executable, "-c", MANY_RUNS, "1000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["stats"]["errors"] == 0 and report["stats"]["dropped"] == 0, report["stats"]
    assert "JSONL traces" not in out.stderr  # never short of descriptors, nothing kept back
    runs = report["runs"]
    assert len(set(runs)) == 1000 and len(logs(directory)) == 1000
    incomplete = [r for r in runs if not _complete(trace_path(directory, r), r)]
    assert incomplete == []


STARVED = """
import asyncio, json, os, sys
import groundswell
from groundswell import workflow


@workflow(name="starved")
async def starved(ctx, n):
    return await ctx.step("a", lambda: n)


async def main():
    await starved.run(-1)  # the sink has started, and holds a file or two
    assert groundswell.flush_sinks(10)
    hog = []
    try:  # take every free descriptor, as 1,000 runs' sockets would
        while True:
            hog.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    results = await asyncio.gather(*(starved.run(i) for i in range(50)))
    await asyncio.sleep(0.3)  # the sink tries, and fails, to open the runs' files
    for fd in hog:
        os.close(fd)
    return [r.node.id for r in results]


runs = asyncio.run(main())
assert groundswell.flush_sinks(10)
stats = groundswell.get_plugin_manager().sink_hub().stats()["jsonl"]
print(json.dumps({"runs": runs, "stats": stats}))
"""


def test_no_trace_is_lost_while_the_process_is_out_of_descriptors(tmp_path: Path) -> None:
    directory = tmp_path / "traces"
    env = {**os.environ, TRACE_DIR_ENV: str(directory)}
    out = subprocess.run(
        [sys.executable, "-c", STARVED], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["stats"]["errors"] == 0 and report["stats"]["dropped"] == 0, report["stats"]
    # It was starved (said once), kept the lines, and wrote them once it could.
    assert out.stderr.count("JSONL traces: cannot write") == 1, out.stderr[-3000:]
    assert "JSONL traces: writing to" in out.stderr
    incomplete = [r for r in report["runs"] if not _complete(trace_path(directory, r), r)]
    assert incomplete == []


def _open_traces(directory: Path) -> int:
    """Descriptors this process holds on files in ``directory``."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            held += os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory))
    return held


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
async def test_open_files_stay_bounded_however_many_runs_are_live(trace_dir: Path) -> None:
    live, release = 300, asyncio.Event()
    peak = 0

    @workflow(name="held")
    async def held(ctx: WorkflowContext, n: int) -> int:
        await ctx.step("before", lambda: n)
        await release.wait()
        return await ctx.step("after", lambda: n)

    runs = [asyncio.ensure_future(held.run(i)) for i in range(live)]
    for _ in range(5):  # the sink writes every run's first lines while all are live
        await asyncio.sleep(0.05)
        assert await asyncio.to_thread(groundswell.flush_sinks)
        peak = max(peak, _open_traces(trace_dir))
    assert len(logs(trace_dir)) == live
    assert 0 < peak <= MAX_OPEN
    release.set()
    results = await asyncio.gather(*runs)
    assert await asyncio.to_thread(groundswell.flush_sinks)
    assert _open_traces(trace_dir) == 0  # every run has ended: no file is kept open
    for result in results:
        path = trace_path(trace_dir, result.node.id)
        assert path is not None and EventTree.load(path) == result.tree
