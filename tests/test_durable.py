"""Durable and distributed runs on DBOS, against the real PostgreSQL.

Every run here is a real process: a parent killed with SIGKILL, workers
started with ``groundswell worker``, a recovering process. They share a fresh
PostgreSQL database and talk to one fake Anthropic API on a loopback port, so
the test sees every model request any process made. Each step body also
appends a line to a log, which shows what really ran, where, and how often.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groundswell import EventTree
from groundswell.testing import FakeAnthropicAPI, FunctionModel, LoopbackServer

from .scratch_db import fresh_database

pytestmark = pytest.mark.slow

FLOWS = """
import asyncio
import os
from pathlib import Path

import anthropic

import groundswell_dbos
from groundswell import Agent, WorkflowContext, workflow

# As the docs show: settings in the module that holds the workflows. A worker
# imports this module after DBOS has launched, where it is a no-op.
groundswell_dbos.configure(system_database_url=os.environ["DBOS_SYSTEM_DATABASE_URL"])
LOG = Path(os.environ["GS_TEST_LOG"])


def note(line: str) -> None:
    with LOG.open("a") as f:
        f.write(f"{line} pid={os.getpid()}\\n")


writer = Agent(
    name="writer",
    client=anthropic.AsyncAnthropic(
        api_key="test-key", base_url=os.environ["FAKE_URL"], max_retries=0
    ),
)


@workflow(name="nightly", durable=True)
async def nightly(ctx: WorkflowContext, day: str) -> list[str]:
    answers = []
    for k in range(1, 5):
        async def body(k: int = k) -> str:
            note(f"nightly step {k}")
            hang = os.environ.get("GS_TEST_HANG_AT_3")
            if k == 3 and hang:
                Path(hang).write_text("step 3 started")
                await asyncio.sleep(120)
            return await writer.prompt(f"step {k} of {day}")
        answers.append(await ctx.step(f"step-{k}", body))
    return answers


@workflow(name="child")
async def child(ctx: WorkflowContext, i: int) -> int:
    def double() -> int:
        note(f"child {i}")
        return i * 2
    doubled = await ctx.step("double", double)
    return await ctx.step("inc", lambda: doubled + 1)


@workflow(name="fanout")
async def fanout(ctx: WorkflowContext, n: int) -> int:
    outs = await asyncio.gather(*(ctx.spawn_workflow(child, i, queue="kids") for i in range(n)))
    return sum(outs)


@workflow(name="slow-child")
async def slow_child(ctx: WorkflowContext, i: int) -> int:
    def first() -> int:
        note("slow first")
        return i

    got = await ctx.step("first", first)

    async def second() -> int:
        note("slow second")
        mark = Path(os.environ["GS_TEST_MARK"])
        if not mark.exists():
            mark.write_text("second started")
            await asyncio.sleep(120)
        return got + 1

    return await ctx.step("second", second)


@workflow(name="one-slow")
async def one_slow(ctx: WorkflowContext) -> int:
    return await ctx.step("hand-off", lambda: ctx.spawn_workflow(slow_child, 41, queue="slow"))


async def hang_once() -> None:
    hang = os.environ.get("GS_TEST_HANG")
    if hang:
        Path(hang).write_text("hanging")
        await asyncio.sleep(120)


@workflow(name="gathered", durable=True)
async def gathered(ctx: WorkflowContext, docs: list[str]) -> dict[str, str]:
    async def branch(i: int, doc: str) -> str:
        # I/O outside any step first, whose latency differs between runs: in the
        # first run the branches reach their first step in reverse order, in the
        # recovery (GS_TEST_HANG unset) in order.
        if os.environ.get("GS_TEST_HANG"):
            await asyncio.sleep(0.2 * (len(docs) - i))

        async def fetch() -> str:
            note(f"fetch {doc}")
            await asyncio.sleep(0.2 * (len(docs) - i))
            return f"text of {doc}"

        text = await ctx.step("fetch", fetch)

        def summarize() -> str:
            note(f"summarize {doc}")
            return f"summary of {text}"

        return await ctx.step("summarize", summarize)

    outs = await asyncio.gather(*(branch(i, d) for i, d in enumerate(docs)))
    await ctx.step("hang", hang_once)
    return dict(zip(docs, outs))


@workflow(name="pool", durable=True)
async def pool(ctx: WorkflowContext, docs: list[str]) -> dict[str, str]:
    # Two workers take documents from a queue: who takes which depends on timing.
    todo: asyncio.Queue[str] = asyncio.Queue()
    for doc in docs:
        todo.put_nowait(doc)
    done: dict[str, str] = {}

    async def worker() -> None:
        while not todo.empty():
            doc = todo.get_nowait()

            async def summarize(doc: str = doc) -> str:
                note(f"summarize {doc}")
                await asyncio.sleep(0.05 * (1 + docs.index(doc) % 3))
                return f"summary of {doc}"

            # Named for its document: a recovery never takes another one's checkpoint.
            done[doc] = await ctx.step(f"summarize {doc}", summarize)

    await asyncio.gather(worker(), worker())
    await ctx.step("hang", hang_once)
    return done


@workflow(name="ident")
async def ident(ctx: WorkflowContext, i: int) -> int:
    def mark() -> int:
        note(f"ident {i}")
        return i
    return await ctx.step("mark", mark)


@workflow(name="spawner", durable=True)
async def spawner(ctx: WorkflowContext, n: int) -> list[int]:
    outs = list(await asyncio.gather(*(ctx.spawn_workflow(ident, i, queue="sq") for i in range(n))))
    # A spawn inside a step of a durable run, too.
    outs.append(await ctx.step("hand-off", lambda: ctx.spawn_workflow(ident, 100, queue="sq")))
    await ctx.step("hang", hang_once)
    return outs
"""

# Runs a workflow in a fresh process and prints {"status", "output", "tree"} as JSON.
RUN = """
import asyncio, json, sys
import flows
from groundswell import WorkflowError

async def main():
    wf = getattr(flows, sys.argv[1])
    try:
        result = await wf.run(*json.loads(sys.argv[2]))
    except WorkflowError as exc:
        result = exc.result
    print(json.dumps({"status": result.status.value, "output": result.output,
                      "tree": result.tree.to_json()}))

asyncio.run(main())
"""

RECOVER = """
import asyncio, json
import groundswell_dbos

results = asyncio.run(groundswell_dbos.recover(timeout=90))
print(json.dumps([{"status": r.status.value, "output": r.output, "tree": r.tree.to_json()}
                  for r in results]))
"""


def _liveness_locks(url: str) -> int:
    """How many Groundswell executors hold their liveness lock in ``url``'s database."""
    import psycopg
    from groundswell_dbos._runtime import _LOCK_CLASS

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objsubid = 2 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (_LOCK_CLASS,),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def database(postgres_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database for DBOS's system tables."""
    with fresh_database(postgres_url) as url:
        yield url


@pytest.fixture
def fake() -> Iterator[tuple[FakeAnthropicAPI, LoopbackServer]]:
    api = FakeAnthropicAPI(FunctionModel(lambda r: f"done: {r.last_user_text()}"))
    with api.serve() as server:
        yield api, server


class Project:
    """A project folder with flows.py, and the processes started in it."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.log = Path(env["GS_TEST_LOG"])
        self.procs: list[subprocess.Popen[str]] = []

    @classmethod
    def make(cls, root: Path, flows: str, database: str, fake_url: str, **env: str) -> Project:
        """A folder with ``flows`` as flows.py, run with this machine's environment less its
        own Groundswell and DBOS settings, plus ``env`` (``GS_TEST_LOG`` among them)."""
        (root / "flows.py").write_text(flows)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("GROUNDSWELL_", "DBOS"))}
        base.update(
            DBOS_SYSTEM_DATABASE_URL=database,
            FAKE_URL=fake_url,
            GROUNDSWELL_HOME=str(root / "home"),
            PYTHONUNBUFFERED="1",
            **env,
        )
        return cls(root, base)

    def stop(self, *, kill: bool = False) -> None:
        """End every process started here: SIGTERM (``kill``: SIGKILL), then SIGKILL
        for one still running 20 s later; their pipes closed."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.communicate(timeout=20)  # also closes its pipes
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()

    def kill(self, proc: subprocess.Popen[str]) -> None:
        """SIGKILL ``proc``, and return once its database session is gone.

        The process's liveness lock (a PostgreSQL advisory lock) goes with its
        session, which the server ends only when it notices the dead connection:
        on a busy machine, later than the process's exit. A recover() that looked
        before then would see a live executor and (rightly) take nothing.
        """
        url = self.env["DBOS_SYSTEM_DATABASE_URL"]
        held = _liveness_locks(url) if url.startswith("postgresql") else 0
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while held and _liveness_locks(url) >= held:
            assert time.monotonic() < deadline, "the killed process's session never ended"
            time.sleep(0.05)

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def start(self, *args: str, **env: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=self.root,
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def run(self, *args: str, timeout: float = 120, **env: str) -> Any:
        return self.run_logged(*args, timeout=timeout, **env)[0]

    def run_logged(self, *args: str, timeout: float = 120, **env: str) -> tuple[Any, str]:
        """The JSON the process printed last, and what it logged on stderr."""
        out = subprocess.run(
            [sys.executable, *args],
            cwd=self.root,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert out.returncode == 0, out.stderr[-4000:]
        return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr

    def worker(
        self, queue: str, *extra: str, wait: bool = True, **env: str
    ) -> subprocess.Popen[str]:
        """A worker for ``queue``, listening once this returns (``wait=False``: starting)."""
        proc = self.start(
            "-m", "groundswell.cli", "worker", "--queue", queue,
            "--takeover-interval", "0.5", *extra, **env,
        )  # fmt: skip
        if not wait:
            return proc
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once the worker listens
        assert line.startswith("worker "), line + (proc.stderr.read() if proc.stderr else "")
        return proc


@pytest.fixture
def project(
    tmp_path: Path, database: str, fake: tuple[FakeAnthropicAPI, LoopbackServer]
) -> Iterator[Project]:
    made = Project.make(
        tmp_path,
        FLOWS,
        database,
        fake[1].base_url,
        GS_TEST_LOG=str(tmp_path / "steps.log"),
        GROUNDSWELL_DBOS_POLL_S="0.1",
        # No grace: a test kills a process with Project.kill, which returns once its
        # liveness lock is gone, and no live process here ever loses its lock.
        GROUNDSWELL_DBOS_TAKEOVER_GRACE_S="0",
    )
    yield made
    made.stop(kill=True)  # the processes are done with; a graceful stop only takes longer


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def shape(tree: EventTree, node_id: str) -> list[str]:
    return [f"{c.type.value}:{c.name}" for c in tree.get_children(node_id)]


def test_a_run_killed_after_step_2_of_4_is_finished_by_a_new_process_without_repeats(
    project: Project, fake: tuple[FakeAnthropicAPI, LoopbackServer]
) -> None:
    api = fake[0]
    hang = project.root / "hang"
    first = project.start("-c", RUN, "nightly", '["mon"]', GS_TEST_HANG_AT_3=str(hang))
    wait_for(hang)  # steps 1 and 2 are checkpointed; step 3 has started
    project.kill(first)
    assert [r.last_user_text() for r in api.requests] == ["step 1 of mon", "step 2 of mon"]

    (recovered,) = project.run("-c", RECOVER)

    # The fake API saw each step's request exactly once across both processes.
    assert [r.last_user_text() for r in api.requests] == [f"step {k} of mon" for k in (1, 2, 3, 4)]
    assert recovered["status"] == "completed"
    assert recovered["output"] == [f"done: step {k} of mon" for k in (1, 2, 3, 4)]
    tree = EventTree.from_json(recovered["tree"])
    assert tree.root is not None and tree.root.name == "nightly"
    steps = tree.get_children(tree.root.id)
    assert [s.name for s in steps] == ["step-1", "step-2", "step-3", "step-4"]
    assert [bool(s.metrics.get("recovered")) for s in steps] == [True, True, False, False]
    for step in steps:  # recovered steps keep the prompt and model call they made
        (prompt,) = tree.get_children(step.id)
        assert shape(tree, step.id) == ["prompt:writer"]
        assert shape(tree, prompt.id) == ["model_call:claude-sonnet-4-6"]
        assert prompt.metrics["usage"]["input_tokens"] > 0
    assert any(e["type"] == "recovered" for e in steps[0].events)
    # What ran where: steps 1-2 only in the killed process, step 3 again after it.
    ran = Counter(line.split(" pid=")[0] for line in project.lines())
    assert ran == Counter(
        {"nightly step 1": 1, "nightly step 2": 1, "nightly step 3": 2, "nightly step 4": 1}
    )
    pids = {line.split(" pid=")[1] for line in project.lines()}
    assert len(pids) == 2 and str(first.pid) in pids


def test_200_children_on_a_queue_run_once_on_two_workers_and_mount_in_the_parent(
    project: Project,
) -> None:
    workers = [project.worker("kids", "--concurrency", "8") for _ in range(2)]
    result = project.run("-c", RUN, "fanout", "[200]", timeout=240)

    assert result["status"] == "completed"
    assert result["output"] == sum(2 * i + 1 for i in range(200))
    # Every child ran exactly once, and both workers took a share.
    ran = Counter(line.split(" pid=")[0] for line in project.lines())
    assert ran == Counter({f"child {i}": 1 for i in range(200)})
    by_worker = Counter(line.split(" pid=")[1] for line in project.lines())
    assert set(by_worker) == {str(w.pid) for w in workers}
    assert min(by_worker.values()) >= 20
    # Each child's tree mounted under its spawn node in the parent's tree.
    tree = EventTree.from_json(result["tree"])
    assert tree.root is not None
    spawns = tree.get_children(tree.root.id)
    assert len(spawns) == 200 and {s.type.value for s in spawns} == {"spawn"}
    for spawn in spawns:
        assert spawn.payload["queue"] == "kids"
        (child,) = tree.get_children(spawn.id)
        assert f"{child.type.value}:{child.name}" == "workflow:child"
        assert shape(tree, child.id) == ["step:double", "step:inc"]
        assert child.status.value == "completed"
        assert spawn.events[0]["type"] == "enqueued"


def test_a_worker_killed_mid_child_leaves_the_child_to_the_other_worker(project: Project) -> None:
    mark = project.root / "second-started"
    doomed = project.worker("slow", GS_TEST_MARK=str(mark))
    parent = project.start("-c", RUN, "one_slow", "[]")
    wait_for(mark)  # the child's first step is checkpointed; its second hangs on `doomed`
    survivor = project.worker("slow", GS_TEST_MARK=str(mark))
    project.kill(doomed)

    out, err = parent.communicate(timeout=120)
    assert parent.returncode == 0, err[-4000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "completed" and result["output"] == 42
    # The first step ran once, on the dead worker; the survivor ran only the second.
    lines = [line.split(" pid=") for line in project.lines()]
    assert [(what, pid) for what, pid in lines if what == "slow first"] == [
        ("slow first", str(doomed.pid))
    ]
    assert [pid for what, pid in lines if what == "slow second"] == [
        str(doomed.pid),
        str(survivor.pid),
    ]
    tree = EventTree.from_json(result["tree"])
    (child,) = tree.find(type="workflow", name="slow-child")
    first, second = tree.get_children(child.id)
    assert first.metrics.get("recovered") is True and "recovered" not in second.metrics
    assert tree.get_node(child.parent_id).type.value == "spawn"


def test_gathered_steps_recover_into_their_own_branches(project: Project) -> None:
    docs = ["doc-a", "doc-b", "doc-c"]
    hang = project.root / "hang"
    first = project.start("-c", RUN, "gathered", json.dumps([docs]), GS_TEST_HANG=str(hang))
    wait_for(hang)  # every fetch and summary is checkpointed; they finished c, b, a
    project.kill(first)

    (recovered,) = project.run("-c", RECOVER)

    # A recovery replays the checkpoints in start order (a, b, c); each still
    # lands in its own branch.
    assert recovered["output"] == {d: f"summary of text of {d}" for d in docs}
    ran = Counter(line.split(" pid=")[0] for line in project.lines())
    assert ran == Counter({f"{what} {d}": 1 for d in docs for what in ("fetch", "summarize")})
    tree = EventTree.from_json(recovered["tree"])
    assert tree.root is not None
    steps = {f"{s.name}:{s.payload['output']}": s for s in tree.root.children[:-1]}
    assert sorted(steps) == sorted(
        [f"fetch:text of {d}" for d in docs] + [f"summarize:summary of text of {d}" for d in docs]
    )
    assert all(s.metrics.get("recovered") is True for s in steps.values())
    (hang_step,) = tree.find(type="step", name="hang")
    assert "recovered" not in hang_step.metrics  # it was running at the crash: it ran again


def test_steps_handed_out_by_timing_never_take_another_items_checkpoint(
    project: Project,
) -> None:
    docs = [f"d{i}" for i in range(6)]
    hang = project.root / "hang"
    first = project.start("-c", RUN, "pool", json.dumps([docs]), GS_TEST_HANG=str(hang))
    wait_for(hang)
    project.kill(first)

    (recovered,) = project.run("-c", RECOVER)

    # On a recovery the workers may take other documents; a step whose key moved
    # runs again, but every document keeps its own summary.
    assert recovered["output"] == {d: f"summary of {d}" for d in docs}
    tree = EventTree.from_json(recovered["tree"])
    for step in tree.find(type="step"):
        if step.name.startswith("summarize "):
            assert step.payload["output"] == f"summary of {step.name.split()[1]}"


def test_a_killed_durable_parent_finds_its_queued_children_again(project: Project) -> None:
    # A worker hands back the runs of a process it has seen dead for the takeover grace.
    # Had it done so with the parent's run before recover() below (what this test is
    # about) looked, as happens on a busy machine, recover() would find nothing to return.
    project.worker("sq", "--concurrency", "8", GROUNDSWELL_DBOS_TAKEOVER_GRACE_S="600")
    hang = project.root / "hang"
    first = project.start("-c", RUN, "spawner", "[30]", GS_TEST_HANG=str(hang))
    wait_for(hang)  # all 31 children finished, in whatever order the worker took them
    project.kill(first)

    results, log = project.run_logged("-c", RECOVER)

    # recover() skips, with a warning, an executor it cannot finish here: say why.
    assert len(results) == 1, f"recover() finished {len(results)} runs; it logged:\n{log}"
    (recovered,) = results
    assert recovered["status"] == "completed"
    assert recovered["output"] == [*range(30), 100]  # each result back in its own place
    ran = Counter(line.split(" pid=")[0] for line in project.lines())
    assert ran == Counter({f"ident {i}": 1 for i in [*range(30), 100]})  # none ran twice
    tree = EventTree.from_json(recovered["tree"])
    spawns = tree.find(type="spawn")
    assert len(spawns) == 31
    for spawn in spawns:  # each spawn node holds the child it started, with its input
        (child,) = tree.get_children(spawn.id)
        assert child.payload["input"]["args"] == spawn.payload["input"]["args"]
        assert spawn.payload["output"] == spawn.payload["input"]["args"][0]


def test_on_sqlite_a_killed_run_is_finished_by_a_new_process_on_the_same_machine(
    project: Project, fake: tuple[FakeAnthropicAPI, LoopbackServer]
) -> None:
    project.env["DBOS_SYSTEM_DATABASE_URL"] = f"sqlite:///{project.root / 'runs.sqlite'}"
    hang = project.root / "hang"
    first = project.start("-c", RUN, "nightly", '["tue"]', GS_TEST_HANG_AT_3=str(hang))
    wait_for(hang)
    project.kill(first)

    (recovered,) = project.run("-c", RECOVER)

    assert recovered["output"] == [f"done: step {k} of tue" for k in (1, 2, 3, 4)]
    assert [r.last_user_text() for r in fake[0].requests] == [
        f"step {k} of tue" for k in (1, 2, 3, 4)
    ]
    tree = EventTree.from_json(recovered["tree"])
    assert [bool(s.metrics.get("recovered")) for s in tree.root.children] == [  # type: ignore[union-attr]
        True,
        True,
        False,
        False,
    ]


def test_a_worker_that_cannot_import_the_workflow_fails_the_child_with_the_fix(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("no-flows-here")
    proc = subprocess.Popen(
        [sys.executable, "-m", "groundswell.cli", "worker", "--queue", "kids"],
        cwd=elsewhere,
        env=project.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    project.procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().startswith("worker ")

    result = project.run("-c", RUN, "fanout", "[1]")

    assert result["status"] == "failed"
    tree = EventTree.from_json(result["tree"])
    (spawn,) = tree.find(type="spawn")
    assert spawn.status.value == "failed"
    message = spawn.error["message"]  # type: ignore[index]
    assert "durable workflow 'child' (flows:child) cannot be imported by executor" in message
    assert "ModuleNotFoundError" in message and "PYTHONPATH" in message


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--concurrency", "0"], "--concurrency must be at least 1, got 0"),
        (["--import", "no_such_module"], "cannot import 'no_such_module': ModuleNotFoundError"),
        (
            ["--url", "postgresql://postgres@127.0.0.1:1/nothing"],
            "DBOS could not launch on postgresql://postgres@127.0.0.1:1/nothing",
        ),
    ],
)
def test_worker_errors_are_one_line(tmp_path: Path, args: list[str], error: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GROUNDSWELL_", "DBOS"))}
    env["GROUNDSWELL_HOME"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "groundswell.cli", "worker", "--queue", "q", *args],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"groundswell worker: {error}"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_worker_cannot_take_the_executor_id_of_a_live_one(project: Project) -> None:
    project.worker("kids", "--executor-id", "worker-one")
    out = subprocess.run(
        [sys.executable, "-m", "groundswell.cli", "worker", "--queue", "kids",
         "--executor-id", "worker-one"],
        capture_output=True, text=True, timeout=60, env=project.env, cwd=project.root,
    )  # fmt: skip
    # Refused before DBOS launches: launching would hand the live worker's runs to this one.
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(
        "groundswell worker: executor id 'worker-one' is in use by a live process"
    ), out.stderr


def test_recover_in_a_process_without_the_code_leaves_the_run_for_one_with_it(
    project: Project, fake: tuple[FakeAnthropicAPI, LoopbackServer], tmp_path_factory: Any
) -> None:
    hang = project.root / "hang"
    first = project.start("-c", RUN, "nightly", '["wed"]', GS_TEST_HANG_AT_3=str(hang))
    wait_for(hang)
    project.kill(first)

    elsewhere = tmp_path_factory.mktemp("no-flows-here")
    out = subprocess.run(
        [sys.executable, "-c", RECOVER], cwd=elsewhere, env=project.env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert "not recovering executor" in out.stderr and "ModuleNotFoundError" in out.stderr

    (recovered,) = project.run("-c", RECOVER)  # from the project folder: finished
    assert recovered["output"] == [f"done: step {k} of wed" for k in (1, 2, 3, 4)]
    assert [r.last_user_text() for r in fake[0].requests] == [
        f"step {k} of wed" for k in (1, 2, 3, 4)
    ]
