"""Durable runs inside this process, on a real PostgreSQL: trees, checkpoints and errors.

DBOS is one instance per process, so this module launches it once on a fresh
database and stops it at the end. Crashes, workers and recovery by other
processes are in ``test_durable.py``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from groundswell import (
    Agent,
    ConfigurationError,
    GroundswellError,
    ModelAPIError,
    ResponseValidationError,
    Workflow,
    WorkflowContext,
    WorkflowError,
    register_secret,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, FunctionModel

from .scratch_db import fresh_database

fake = FakeAnthropicAPI(FunctionModel(lambda r: f"seen: {r.last_user_text()}"))
asker = Agent(name="asker", client=fake.client())


@workflow(name="plain")
async def plain(ctx: WorkflowContext, word: str) -> str:
    return await ctx.step("shout", lambda: word.upper())


@workflow(name="two-steps", durable=True)
async def two_steps(ctx: WorkflowContext, topic: str) -> dict[str, Any]:
    answer = await ctx.step("ask", lambda: asker.prompt(f"about {topic}"))
    size = await ctx.step("measure", lambda: len(answer))
    loud = await plain.run(topic)  # a plain workflow inside: checkpointed with this run
    return {"answer": answer, "size": size, "loud": loud.output}


@workflow(name="flaky", durable=True)
async def flaky(ctx: WorkflowContext, n: int) -> int:
    await ctx.step("fine", lambda: n)

    def boom() -> int:
        raise ValueError(f"bad input {n}")

    return await ctx.step("boom", boom)


@workflow(name="locked", durable=True)
async def locked(ctx: WorkflowContext) -> object:
    return await ctx.step("make-lock", threading.Lock)


@workflow(name="parent", durable=True)
async def parent(ctx: WorkflowContext) -> int:
    base = await ctx.step("prep", lambda: 2)
    child = await two_steps.run("kids")  # a durable child, straight in the body
    return base + int(child.output["size"])


@workflow(name="returns-lock", durable=True)
async def returns_lock(ctx: WorkflowContext) -> object:
    await ctx.step("fine", lambda: 1)
    return threading.Lock()


attempts: list[int] = []


@workflow(name="retrying", durable=True, enable_reflection=True)
async def retrying(ctx: WorkflowContext) -> str:
    def call() -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            raise TimeoutError("the service did not answer")
        return f"ok after {len(attempts)}"

    return await ctx.step("call", call)


@workflow(name="gathered", durable=True)
async def gathered(ctx: WorkflowContext, docs: list[str]) -> dict[str, str]:
    async def branch(i: int, doc: str) -> str:
        # The first branch fetches slowest, so the summaries start in reverse order.
        delay = 0.02 * (len(docs) - i)
        text = await ctx.step("fetch", lambda: asyncio.sleep(delay, result=f"text of {doc}"))
        return await ctx.step("summarize", lambda: f"summary of {text}")

    outs = await asyncio.gather(*(branch(i, d) for i, d in enumerate(docs)))
    return dict(zip(docs, outs, strict=True))


@workflow(name="nests-in-step", durable=True)
async def nests_in_step(ctx: WorkflowContext) -> str:
    inner = await ctx.step("inner", lambda: plain.run("deep"))
    return str(inner.output)


started: list[str] = []
first_done = asyncio.Event()


@workflow(name="cancellable", durable=True)
async def cancellable(ctx: WorkflowContext) -> None:
    async def first() -> None:
        started.append(ctx.workflow_id)
        first_done.set()

    await ctx.step("first", first)
    await ctx.step("wait", lambda: asyncio.sleep(60))


LEAKY_SECRET = "pw-7f3c91d2e8"
register_secret(LEAKY_SECRET)


@workflow(name="leaky", durable=True)
async def leaky(ctx: WorkflowContext) -> None:
    def log_in() -> None:
        raise PermissionError(f"could not log in with {LEAKY_SECRET}")

    await ctx.step("log-in", log_in)


async def bound_elsewhere(ctx: WorkflowContext) -> str:
    return await ctx.step("only", lambda: "bound")


@pytest.fixture(scope="module")
def durable(postgres_url: str) -> Iterator[str]:
    """DBOS launched in this process on a fresh database (module scope: one per process)."""
    import groundswell_dbos
    from groundswell_dbos import _runtime

    with fresh_database(postgres_url) as url:
        groundswell_dbos.configure(system_database_url=url)
        try:
            yield url
        finally:
            _runtime.shutdown()
            _runtime._settings.clear()


async def test_a_durable_run_builds_the_tree_a_local_run_would_and_checkpoints_each_step(
    durable: str,
) -> None:
    from dbos import DBOS

    result = await two_steps.run("tides")
    assert result.output == {"answer": "seen: about tides", "size": 17, "loud": "TIDES"}
    shape = [f"{n.type.value}:{n.name}" for n in result.tree.walk()]
    assert shape == [
        "workflow:two-steps",
        "step:ask",
        "prompt:asker",
        "model_call:claude-sonnet-4-6",
        "step:measure",
        "workflow:plain",
        "step:shout",
    ]
    # The run is the DBOS workflow of the same id, with one checkpoint per step,
    # the plain workflow's step included.
    # Each is named for its key: the step's name and its position in the run.
    steps = await DBOS.list_workflow_steps_async(result.workflow_id)
    assert [s["function_name"] for s in steps] == ["ask@0", "measure@0", "shout@0"]
    assert steps[0]["output"]["output"] == "seen: about tides"
    recorded = steps[0]["output"]["children"][0]  # the prompt's subtree, for recovery
    assert [n["type"] for n in recorded["nodes"]] == ["prompt", "model_call"]


async def test_a_durable_run_inside_a_durable_run_is_checkpointed_as_part_of_it(
    durable: str,
) -> None:
    from dbos import DBOS

    result = await parent.run()
    assert result.output == 2 + len("seen: about kids")
    (child,) = result.tree.find(type="workflow", name="two-steps")
    assert child.parent_id == result.workflow_id  # mounted in place, as any nested run
    assert await DBOS.list_workflows_async(parent_workflow_id=result.workflow_id) == []
    steps = await DBOS.list_workflow_steps_async(result.workflow_id)
    assert [s["function_name"] for s in steps] == ["prep@0", "ask@0", "measure@0", "shout@0"]


async def test_reflection_between_attempts_is_checkpointed_like_a_step(durable: str) -> None:
    from dbos import DBOS

    result = await retrying.run()
    assert result.output == "ok after 2"
    assert [f"{c.type.value}:{c.status.value}" for c in result.tree.root.children] == [  # type: ignore[union-attr]
        "step:failed",
        "reflection:completed",
        "step:completed",
    ]
    steps = await DBOS.list_workflow_steps_async(result.workflow_id)
    # The failed attempt, the reflection's decision and the retry, in order.
    assert [s["function_name"] for s in steps] == ["call@0", "call@1", "call@2"]
    assert isinstance(steps[0]["error"].error, TimeoutError)
    assert steps[1]["output"]["output"].should_retry is True


async def test_a_failing_durable_run_raises_the_original_error_with_its_tree(
    durable: str,
) -> None:
    with pytest.raises(WorkflowError) as info:
        await flaky.run(7)
    assert info.value.node_path == "flaky/boom"
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "bad input 7"
    result = info.value.result
    assert result is not None
    assert [f"{c.name}:{c.status.value}" for c in result.tree.root.children] == [  # type: ignore[union-attr]
        "fine:completed",
        "boom:failed",
    ]


async def test_a_step_output_that_cannot_be_checkpointed_is_a_clear_error(durable: str) -> None:
    from groundswell_dbos import CheckpointError

    with pytest.raises(WorkflowError) as info:
        await locked.run()
    cause = info.value.__cause__
    assert isinstance(cause, CheckpointError) and isinstance(cause, GroundswellError)
    assert "the output of step 'make-lock' is a lock, which cannot be checkpointed" in str(cause)
    assert "use plain data" in str(cause)
    assert info.value.node_path == "locked/make-lock"


async def test_a_result_that_cannot_be_checkpointed_is_a_clear_error(durable: str) -> None:
    from groundswell_dbos import CheckpointError

    with pytest.raises(WorkflowError) as info:
        await returns_lock.run()
    cause = info.value.__cause__
    assert isinstance(cause, CheckpointError)
    assert "the output of durable workflow 'returns-lock' is a lock" in str(cause)
    assert info.value.node_path == "returns-lock"
    result = info.value.result
    assert result is not None and result.status.value == "failed"
    assert result.node.status.value == "failed" and result.node.error["type"] == "CheckpointError"  # type: ignore[index]


async def test_arguments_that_cannot_be_checkpointed_are_refused_before_the_run(
    durable: str,
) -> None:
    from groundswell_dbos import CheckpointError

    with pytest.raises(
        CheckpointError, match="argument 1 of durable workflow 'two-steps' is a lock"
    ):
        await two_steps.run(threading.Lock())  # type: ignore[arg-type]


async def test_a_durable_workflow_must_be_importable_by_other_processes(durable: str) -> None:
    @workflow(name="inner", durable=True)
    async def inner(ctx: WorkflowContext) -> int:
        return 1

    with pytest.raises(ConfigurationError, match="must be a module-level name"):
        await inner.run()


async def test_a_queue_needs_a_distributed_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_DURABLE_BACKEND", "local")

    @workflow(name="hand-off")
    async def hand_off(ctx: WorkflowContext) -> str:
        return await ctx.spawn_workflow(plain, "x", queue="anywhere")

    with pytest.raises(WorkflowError) as info:
        await hand_off.run()
    assert isinstance(info.value.__cause__, ConfigurationError)
    assert "needs a distributed execution backend" in str(info.value.__cause__)
    (spawn,) = info.value.result.tree.find(type="spawn")  # type: ignore[union-attr]
    assert spawn.status.value == "failed" and spawn.payload["queue"] == "anywhere"


def test_durable_must_be_a_bool_or_a_backend_name() -> None:
    async def body(ctx: WorkflowContext) -> None:
        return None

    with pytest.raises(ConfigurationError, match="durable must be True, False or"):
        workflow(durable=3)(body)  # type: ignore[call-overload]


async def test_an_unknown_backend_names_the_installed_ones() -> None:
    @workflow(name="nowhere", durable="nowhere")
    async def nowhere(ctx: WorkflowContext) -> None:
        return None

    with pytest.raises(ConfigurationError, match="no execution backend named 'nowhere'") as info:
        await nowhere.run()
    assert "available: dbos, local" in str(info.value)


def test_without_the_durable_extra_the_error_says_what_to_install(tmp_path: Any) -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['dbos'] = None\n"  # as if DBOS were not installed
        "import asyncio\n"
        "from groundswell import workflow, ConfigurationError\n"
        "@workflow(durable=True)\n"
        "async def job(ctx):\n"
        "    return 1\n"
        "try:\n"
        "    asyncio.run(job.run())\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert 'durable runs need DBOS: pip install "groundswell[durable]"' in out.stdout


async def test_gathered_branches_checkpoint_each_step_under_its_branch_key(durable: str) -> None:
    from dbos import DBOS

    docs = ["doc-a", "doc-b", "doc-c"]
    result = await gathered.run(docs)
    assert result.output == {d: f"summary of text of {d}" for d in docs}
    steps = await DBOS.list_workflow_steps_async(result.workflow_id)
    # DBOS numbers the summaries in the order they started (c, b, a); the keys
    # name the branch, so a recovery finds each one's own checkpoint.
    by_key = {s["function_name"]: s["output"]["output"] for s in steps}
    assert by_key == {
        **{f"fetch@branch#{i}.0": f"text of {d}" for i, d in enumerate(docs)},
        **{f"summarize@branch#{i}.0": f"summary of text of {d}" for i, d in enumerate(docs)},
    }
    summaries = [s["function_name"] for s in steps if s["function_name"].startswith("summ")]
    assert summaries == ["summarize@branch#2.0", "summarize@branch#1.0", "summarize@branch#0.0"]


async def test_a_step_that_runs_a_workflow_checkpoints_its_result(durable: str) -> None:
    from dbos import DBOS

    result = await nests_in_step.run()
    assert result.output == "DEEP"
    (step,) = await DBOS.list_workflow_steps_async(result.workflow_id)
    copy = step["output"]["output"]  # the WorkflowResult, as its checkpoint holds it
    assert copy.output == "DEEP" and copy.status.value == "completed"
    assert [n.name for n in copy.tree.walk()] == ["plain", "shout"]


async def test_a_cancelled_caller_leaves_the_run_pending_and_cancel_ends_it(
    durable: str,
) -> None:
    import groundswell_dbos
    from dbos import DBOS

    task = asyncio.create_task(cancellable.run())
    await first_done.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Like a crash: the run is still there for a recovery to finish.
    status = await DBOS.get_workflow_status_async(started[0])
    assert status is not None and status.status == "PENDING"
    await groundswell_dbos.cancel(started[0])
    status = await DBOS.get_workflow_status_async(started[0])
    assert status is not None and status.status == "CANCELLED"


def stored_errors(url: str, workflow_id: str) -> bytes:
    """The step errors of a run as the database holds them (DBOS stores base64 pickles)."""
    import base64

    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT error FROM dbos.operation_outputs WHERE workflow_uuid = %s AND error IS NOT NULL",
            (workflow_id,),
        ).fetchall()
    return b"".join(base64.b64decode(row[0]) for row in rows)


async def failed_step(flow: Workflow[..., Any]) -> tuple[WorkflowError, Any]:
    """Run ``flow``, whose one step fails; the live error and its step's checkpoint."""
    from dbos import DBOS

    with pytest.raises(WorkflowError) as info:
        await flow.run()
    assert info.value.result is not None
    (step,) = await DBOS.list_workflow_steps_async(info.value.result.workflow_id)
    return info.value, step


async def test_a_step_error_holding_a_secret_is_checkpointed_scrubbed(durable: str) -> None:
    live, step = await failed_step(leaky)
    assert isinstance(live.__cause__, PermissionError)  # this process sees what happened
    assert LEAKY_SECRET in str(live.__cause__)
    assert not hasattr(live.__cause__, "_groundswell_children")  # the user's object untouched
    recorded = step["error"].error  # what a recovery would raise: the same type, scrubbed
    assert type(recorded) is PermissionError
    assert str(recorded) == "could not log in with **********"
    assert LEAKY_SECRET.encode() not in stored_errors(durable, live.result.workflow_id)  # type: ignore[union-attr]


class AuthFailed(Exception):
    """An error that keeps the request it failed on, headers included."""

    def __init__(self, message: str, *, request: dict[str, Any], password: SecretStr) -> None:
        super().__init__(message)
        self.request = request
        self.password = password
        self.status = 401


@workflow(name="deep-leak", durable=True)
async def deep_leak(ctx: WorkflowContext) -> None:
    def call() -> None:
        raise AuthFailed(
            "denied",
            request={"headers": {"x-api-key": LEAKY_SECRET}},
            password=SecretStr("hunter2-in-an-error"),
        )

    await ctx.step("call", call)


async def test_secrets_anywhere_in_a_step_error_stay_out_of_its_checkpoint(
    durable: str,
) -> None:
    live, step = await failed_step(deep_leak)
    recorded = step["error"].error
    assert type(recorded) is AuthFailed and str(recorded) == "denied"
    assert recorded.status == 401  # what can be kept is kept
    assert recorded.request == "(not checkpointed)" and recorded.password == "(not checkpointed)"
    stored = stored_errors(durable, live.result.workflow_id)  # type: ignore[union-attr]
    assert LEAKY_SECRET.encode() not in stored and b"hunter2-in-an-error" not in stored


@workflow(name="unloadable", durable=True)
async def unloadable(ctx: WorkflowContext) -> str:
    def parse() -> str:
        # Keyword-only fields: the class's own pickling could not rebuild it.
        raise ResponseValidationError("no JSON in the reply", raw="oops", errors=[])

    try:
        return await ctx.step("parse", parse)
    except WorkflowError:
        raise
    except ResponseValidationError:
        return "fallback"


async def test_a_step_error_comes_back_as_its_own_class_with_its_fields(durable: str) -> None:
    from dbos import DBOS

    result = await unloadable.run()
    assert result.output == "fallback"
    (step,) = await DBOS.list_workflow_steps_async(result.workflow_id)
    recorded = step["error"].error
    # A recovery raises the same class, so the same `except` takes the same path.
    assert type(recorded) is ResponseValidationError
    assert recorded.raw == "oops" and recorded.errors == []
    assert str(recorded) == "no JSON in the reply"


@workflow(name="chained", durable=True)
async def chained(ctx: WorkflowContext) -> None:
    def call() -> None:
        try:
            raise ConnectionError("refused")
        except ConnectionError as exc:
            raise ModelAPIError("bad key", status_code=401) from exc

    await ctx.step("call", call)


async def test_a_step_error_keeps_its_cause_live_and_in_its_checkpoint(durable: str) -> None:
    live, step = await failed_step(chained)
    cause = live.__cause__
    assert isinstance(cause, ModelAPIError) and cause.status_code == 401
    assert isinstance(cause.__cause__, ConnectionError)  # untouched by the engine
    recorded = step["error"].error
    assert isinstance(recorded, ModelAPIError) and recorded.status_code == 401
    assert isinstance(recorded.__cause__, ConnectionError)
    assert str(recorded.__cause__) == "refused"


@workflow(name="local-error", durable=True)
async def local_error(ctx: WorkflowContext) -> None:
    class Unfindable(Exception):
        pass

    def call() -> None:
        raise Unfindable("made in a function")

    await ctx.step("call", call)


async def test_an_error_of_a_class_no_process_can_import_comes_back_as_step_failed(
    durable: str,
) -> None:
    from groundswell_dbos import StepFailed

    _, step = await failed_step(local_error)
    recorded = step["error"].error
    assert isinstance(recorded, StepFailed) and recorded.recoverable is True
    assert str(recorded).endswith("Unfindable: made in a function")


@workflow(name="long-error", durable=True)
async def long_error(ctx: WorkflowContext) -> None:
    def fail() -> None:
        raise ValueError("x" * 20_000)

    await ctx.step("fail", fail)


async def test_a_long_step_error_is_checkpointed_whole(durable: str) -> None:
    _, step = await failed_step(long_error)
    recorded = step["error"].error
    assert type(recorded) is ValueError and str(recorded) == "x" * 20_000


class FromTheScript:
    """Stands for a class defined in the script being run."""


FromTheScript.__module__ = "__main__"


@workflow(name="script-class", durable=True)
async def script_class(ctx: WorkflowContext) -> None:
    await ctx.step("make", FromTheScript)


async def test_a_value_of_a_class_from_the_running_script_is_refused(durable: str) -> None:
    from groundswell_dbos import CheckpointError

    with pytest.raises(WorkflowError) as info:
        await script_class.run()
    cause = info.value.__cause__
    assert isinstance(cause, CheckpointError)
    assert "the output of step 'make' holds a FromTheScript defined in the script" in str(cause)


async def test_pydantic_secrets_are_refused_as_arguments(durable: str) -> None:
    from groundswell_dbos import CheckpointError

    with pytest.raises(CheckpointError, match="holds a pydantic SecretStr") as info:
        await two_steps.run(SecretStr("hunter2-token"))  # type: ignore[arg-type]
    assert "argument 1 of durable workflow 'two-steps'" in str(info.value)


async def test_a_workflow_bound_in_another_module_is_found_there(durable: str) -> None:
    from groundswell_dbos._targets import target_of

    module = types.ModuleType("gs_bound_flows")
    module.job = Workflow(bound_elsewhere, name="bound", durable=True)  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        result = await module.job.run()  # type: ignore[attr-defined]
        assert result.output == "bound"
        assert target_of(module.job)["module"] == "gs_bound_flows"  # type: ignore[attr-defined]
    finally:
        del sys.modules[module.__name__]


async def test_configure_after_launch_keeps_the_running_settings_and_says_so(
    durable: str, caplog: pytest.LogCaptureFixture
) -> None:
    import groundswell_dbos
    from groundswell_dbos import _runtime

    await two_steps.run("launch")  # DBOS runs in this process from here on
    caplog.set_level(logging.WARNING, logger="groundswell.dbos")
    groundswell_dbos.configure(system_database_url=durable)  # the same settings: fine
    assert not caplog.records
    groundswell_dbos.configure(system_database_url="postgresql://me:pw-secret9@elsewhere/db")
    (record,) = caplog.records
    assert "system_database_url=postgresql://me:***@elsewhere/db ignored" in record.getMessage()
    assert "pw-secret9" not in record.getMessage()
    assert _runtime.settings()["system_database_url"] == durable


async def test_a_live_process_keeps_its_liveness_lock_when_its_connection_drops(
    durable: str,
) -> None:
    import psycopg
    from groundswell_dbos import _runtime

    await two_steps.run("launch")
    live = _runtime.liveness()
    dropped = live._holder
    with psycopg.connect(durable, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (dropped.info.backend_pid,))
    for _ in range(100):  # the keep-alive notices within a second and takes it again
        if live._holder is not dropped:
            break
        await asyncio.sleep(0.1)
    assert live._holder is not dropped
    assert _runtime.Liveness(durable, "an-observer").is_dead(live.me) is False
    # And no second process may start with the same executor id.
    with pytest.raises(ConfigurationError, match="is in use by a live process"):
        _runtime.Liveness(durable, live.me).hold()


async def _app_own_keys() -> list[str]:
    from groundswell_dbos._keys import op_key

    async def spawn_key() -> str:
        keyed = op_key("spawn ident")
        assert keyed is not None
        return keyed[1]

    return list(await asyncio.gather(spawn_key(), spawn_key(), spawn_key()))


async def test_spawns_in_an_applications_own_dbos_workflow_get_distinct_keys(
    durable: str,
) -> None:
    from dbos import DBOS
    from groundswell_dbos._engine import ENGINE

    await ENGINE.ready()
    # The application's own DBOS workflow (not a Groundswell run) spawning from
    # several tasks: each spawn needs an id of its own.
    app_own = DBOS.workflow(name="app-own-keys")(_app_own_keys)
    keys = await app_own()
    assert len(set(keys)) == 3, keys


@workflow(name="noisy", durable=True)
async def noisy(ctx: WorkflowContext, docs: list[str], noise: bool) -> list[str]:
    async def background() -> None:
        await asyncio.sleep(0)

    if noise:  # a task of another function, in one run and not the other
        await asyncio.create_task(background())

    async def branch(doc: str) -> str:
        return await ctx.step("summarize", lambda: f"summary of {doc}")

    return list(await asyncio.gather(*(branch(d) for d in docs)))


async def test_a_task_of_another_function_does_not_renumber_the_branches(durable: str) -> None:
    from dbos import DBOS

    keys = []
    for noise in (False, True):
        result = await noisy.run(["a", "b"], noise)
        steps = await DBOS.list_workflow_steps_async(result.workflow_id)
        keys.append({s["function_name"]: s["output"]["output"] for s in steps})
    assert (
        keys[0]
        == keys[1]
        == {
            "summarize@branch#0.0": "summary of a",
            "summarize@branch#1.0": "summary of b",
        }
    )


async def test_a_task_factory_of_the_two_argument_form_keeps_working(durable: str) -> None:
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def legacy(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
        made.append(coro.__name__)
        return asyncio.Task(coro, loop=loop)

    before = loop.get_task_factory()
    loop.set_task_factory(legacy)
    try:
        result = await gathered.run(["doc-a", "doc-b"])
        assert result.output == {d: f"summary of text of {d}" for d in ("doc-a", "doc-b")}
        await asyncio.create_task(asyncio.sleep(0))  # and after the run, as before it
    finally:
        loop.set_task_factory(before)
    assert made.count("branch") == 2 and "sleep" in made
