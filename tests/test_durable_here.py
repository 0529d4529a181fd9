"""Durable runs inside this process, on a real PostgreSQL: trees, checkpoints and errors.

DBOS is one instance per process, so this module launches it once on a fresh
database and stops it at the end. Crashes, workers and recovery by other
processes are in ``test_durable.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from groundswell import (
    Agent,
    ConfigurationError,
    GroundswellError,
    WorkflowContext,
    WorkflowError,
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
    steps = await DBOS.list_workflow_steps_async(result.workflow_id)
    assert [s["function_name"] for s in steps] == ["ask", "measure", "shout"]
    assert steps[0]["output"]["output"] == "seen: about tides"
    recorded = steps[0]["output"]["children"][0]  # the prompt's subtree, for recovery
    assert [n["type"] for n in recorded["nodes"]] == ["prompt", "model_call"]


async def test_a_durable_run_inside_a_durable_run_is_its_dbos_child(durable: str) -> None:
    from dbos import DBOS

    result = await parent.run()
    assert result.output == 2 + len("seen: about kids")
    (child,) = result.tree.find(type="workflow", name="two-steps")
    assert child.parent_id == result.workflow_id  # mounted in place, as any nested run
    children = await DBOS.list_workflows_async(parent_workflow_id=result.workflow_id)
    assert [c.workflow_id for c in children] == [child.id]
    steps = await DBOS.list_workflow_steps_async(result.workflow_id)
    assert [s["function_name"] for s in steps] == ["prep", "groundswell.run", "DBOS.getResult"]


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
    assert [s["function_name"] for s in steps] == ["call", "call", "call"]
    assert isinstance(steps[0]["error"], TimeoutError)
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
    assert "step 'make-lock' returned a value that cannot be checkpointed" in str(cause)
    assert "use plain data" in str(cause) or "return plain data" in str(cause)
    assert info.value.node_path == "locked/make-lock"


async def test_a_result_that_cannot_be_checkpointed_is_a_clear_error(durable: str) -> None:
    from groundswell_dbos import CheckpointError

    with pytest.raises(CheckpointError, match="the output of durable workflow 'returns-lock'"):
        await returns_lock.run()


async def test_arguments_that_cannot_be_checkpointed_are_refused_before_the_run(
    durable: str,
) -> None:
    from groundswell_dbos import CheckpointError

    with pytest.raises(CheckpointError, match="the arguments of 'two-steps'"):
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
    assert "installed: dbos, local" in str(info.value)


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
