"""Workflows and steps: mounting, concurrency, statuses, failures, timeouts, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import warnings
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

import groundswell
from groundswell import (
    ConfigurationError,
    MissingAwait,
    NodeStatus,
    NodeType,
    StepTimeout,
    Workflow,
    WorkflowContext,
    WorkflowError,
    workflow,
)


def shape(node: groundswell.EventNode) -> Any:
    """(type:name, [children...]) for comparing tree shapes."""
    return (f"{node.type.value}:{node.name}", [shape(c) for c in node.children])


async def test_steps_accept_async_sync_and_awaitables_and_record_outputs() -> None:
    async def fetch() -> int:
        return 2

    @workflow(name="mixed")
    async def mixed(ctx: WorkflowContext, base: int) -> int:
        a = await ctx.step("async-fn", fetch)
        b = await ctx.step("lambda-coro", lambda: fetch())
        c = await ctx.step("sync", lambda: base * 10)
        d = await ctx.step("awaitable", asyncio.sleep(0, 5))
        return a + b + c + d

    result = await mixed.run(3)
    assert result.output == 2 + 2 + 30 + 5
    assert result.status is NodeStatus.COMPLETED and result.status == "completed"
    assert result.duration > 0
    root = result.tree.root
    assert root is result.node and root.payload["input"] == {"args": [3], "kwargs": {}}
    assert [c.payload["output"] for c in root.children] == [2, 2, 30, 5]
    assert all(c.status is NodeStatus.COMPLETED for c in result.tree.walk())
    assert root.payload["output"] == 39


async def test_sync_steps_run_in_a_worker_thread_and_still_mount() -> None:
    seen: dict[str, Any] = {}

    def blocking() -> str:
        seen["thread"] = threading.current_thread().name
        seen["node"] = groundswell.current_node()
        return "ok"

    @workflow
    async def flow(ctx: WorkflowContext) -> str:
        return await ctx.step("blocking", blocking)

    result = await flow.run()
    assert seen["thread"] != threading.main_thread().name
    assert seen["node"] is result.node.children[0]


async def test_sync_step_needing_the_event_loop_gets_a_clear_error() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> Any:
        # e.g. a lambda around asyncio.gather/create_task: needs the loop, gets a thread.
        return await ctx.step("needs-loop", lambda: asyncio.get_running_loop().create_future())

    with pytest.raises(WorkflowError) as info:
        await flow.run()
    assert isinstance(info.value.__cause__, ConfigurationError)
    assert "make it an `async def`" in str(info.value.__cause__)


async def test_nested_workflow_mounts_under_the_calling_step() -> None:
    @workflow(name="child")
    async def child(ctx: WorkflowContext, x: int) -> int:
        return await ctx.step("double", lambda: x * 2)

    @workflow(name="parent")
    async def parent(ctx: WorkflowContext) -> int:
        r = await ctx.step("call-child", lambda: child.run(4))
        spawned = await ctx.spawn_workflow(child, 5)
        return r.output + spawned

    result = await parent.run()
    assert result.output == 18
    assert shape(result.tree.root) == (
        "workflow:parent",
        [
            ("step:call-child", [("workflow:child", [("step:double", [])])]),
            ("workflow:child", [("step:double", [])]),
        ],
    )
    call_step = result.tree.root.children[0]
    child_node = call_step.children[0]
    assert child_node.parent_id == call_step.id


async def test_nested_run_result_and_workflow_ids() -> None:
    ids: dict[str, Any] = {}

    @workflow
    async def inner(ctx: WorkflowContext) -> None:
        ids["inner"] = (ctx.workflow_id, ctx.parent_workflow_id, ctx.event_tree)

    @workflow
    async def outer(ctx: WorkflowContext) -> Any:
        ids["outer"] = (ctx.workflow_id, ctx.parent_workflow_id, ctx.event_tree)
        return await inner.run()

    result = await outer.run()
    inner_result = result.output
    assert ids["inner"][1] == ids["outer"][0]
    assert ids["outer"][1] is None
    assert inner_result.tree is result.tree is ids["outer"][2]
    assert inner_result.node.id == ids["inner"][0]


async def test_a_nested_result_pickles_as_data_with_its_own_tree() -> None:
    import pickle

    @workflow(name="inner")
    async def inner(ctx: WorkflowContext, word: str) -> str:
        return await ctx.step("shout", lambda: word.upper())

    @workflow(name="outer")
    async def outer(ctx: WorkflowContext) -> Any:
        return await ctx.step("call", lambda: inner.run("hi"))

    nested = (await outer.run()).output
    copy = pickle.loads(pickle.dumps(nested))
    assert copy.output == "HI" and copy.status is NodeStatus.COMPLETED
    assert copy.tree is not nested.tree and copy.node is copy.tree.root
    assert [n.name for n in copy.tree.walk()] == ["inner", "shout"]
    assert copy.node.id == nested.node.id and copy.duration == nested.duration


async def test_gather_branches_mount_under_their_own_steps_without_cross_talk() -> None:
    @workflow(name="leaf")
    async def leaf(ctx: WorkflowContext, i: int) -> int:
        await asyncio.sleep(0.001 * (i % 3))
        await ctx.step(f"leaf-step-{i}", asyncio.sleep(0))
        return i

    @workflow(name="fan")
    async def fan(ctx: WorkflowContext) -> list[int]:
        async def branch(i: int) -> int:
            await asyncio.sleep(0.001 * (i % 4))
            return (await leaf.run(i)).output or 0

        return await asyncio.gather(
            *(ctx.step(f"branch-{i}", lambda i=i: branch(i)) for i in range(50))
        )

    result = await fan.run()
    assert result.output == list(range(50))
    steps = result.tree.root.children
    assert [s.name for s in steps] == [f"branch-{i}" for i in range(50)]
    for i, step in enumerate(steps):
        assert shape(step) == (
            f"step:branch-{i}",
            [("workflow:leaf", [(f"step:leaf-step-{i}", [])])],
        )


async def test_taskgroup_and_steps_inside_steps_nest() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        async def outer() -> None:
            async with asyncio.TaskGroup() as tg:
                for i in range(3):
                    tg.create_task(ctx.step(f"inner-{i}", asyncio.sleep(0)))

        await ctx.step("outer", outer)

    result = await flow.run()
    outer = result.tree.root.children[0]
    assert sorted(c.name for c in outer.children) == ["inner-0", "inner-1", "inner-2"]
    assert all(c.parent_id == outer.id for c in outer.children)


async def test_workflow_started_from_a_worker_thread_mounts_under_the_step() -> None:
    @workflow(name="threaded-child")
    async def child(ctx: WorkflowContext) -> str:
        return await ctx.step("in-thread-loop", lambda: "x")

    def run_in_own_loop() -> str:
        # A sync step body that runs a whole workflow on its own event loop.
        return asyncio.run(child.run()).output or ""

    @workflow
    async def flow(ctx: WorkflowContext) -> list[str]:
        return list(
            await asyncio.gather(ctx.step("t1", run_in_own_loop), ctx.step("t2", run_in_own_loop))
        )

    result = await flow.run()
    assert result.output == ["x", "x"]
    for step in result.tree.root.children:
        assert shape(step) == (
            f"step:{step.name}",
            [("workflow:threaded-child", [("step:in-thread-loop", [])])],
        )


async def test_current_node_and_tree_are_none_outside_a_run() -> None:
    assert groundswell.current_node() is None
    assert groundswell.current_tree() is None
    assert groundswell.record_event("x") is None

    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        assert groundswell.current_node() is ctx.node
        assert groundswell.current_tree() is ctx.event_tree

    await flow.run()
    assert groundswell.current_node() is None


async def test_failure_names_the_failing_node_and_keeps_the_cause_and_tree() -> None:
    @workflow(name="child")
    async def child(ctx: WorkflowContext) -> None:
        await ctx.step("ok", lambda: 1)
        await ctx.step("explode", lambda: 1 / 0)

    @workflow(name="review")
    async def review(ctx: WorkflowContext) -> None:
        await ctx.step("facts", lambda: "fine")
        await ctx.step("judge", lambda: child.run())

    with pytest.raises(WorkflowError) as info:
        await review.run()
    err = info.value
    assert err.node_path == "review/judge/child/explode"
    assert isinstance(err.__cause__, ZeroDivisionError)
    assert "review/judge/child/explode" in str(err) and "ZeroDivisionError" in str(err)
    result = err.result
    assert result is not None and result.status is NodeStatus.FAILED
    assert result.output is None and isinstance(result.error, WorkflowError)
    tree = result.tree
    statuses = {n.name: n.status for n in tree.walk()}
    assert statuses == {
        "review": "failed",
        "facts": "completed",
        "judge": "failed",
        "child": "failed",
        "ok": "completed",
        "explode": "failed",
    }
    (explode,) = tree.find(name="explode")
    assert explode.error is not None
    assert explode.error["type"] == "ZeroDivisionError"
    assert explode.error["message"] == "division by zero"
    assert groundswell.EventTree.from_json(tree.to_json()) == tree


async def test_exception_caught_inside_the_workflow_does_not_fail_it() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> str:
        try:
            await ctx.step("flaky", lambda: int("x"))
        except ValueError:
            return await ctx.step("fallback", lambda: "recovered")
        return "unreachable"

    result = await flow.run()
    assert result.output == "recovered"
    assert [(n.name, n.status.value) for n in result.tree.root.children] == [
        ("flaky", "failed"),
        ("fallback", "completed"),
    ]


async def test_step_timeout_cancels_the_step_and_its_children() -> None:
    started = asyncio.Event()

    @workflow(name="slow")
    async def slow(ctx: WorkflowContext) -> None:
        async def hang() -> None:
            started.set()
            await asyncio.sleep(30)

        async def body() -> None:
            await ctx.step("inner", hang)

        await ctx.step("outer", body, timeout=0.05)

    with pytest.raises(StepTimeout) as info:
        await slow.run()
    err = info.value
    assert isinstance(err, TimeoutError) and isinstance(err, WorkflowError)
    assert started.is_set()
    assert err.node_path == "slow/outer"
    tree = err.result.tree  # type: ignore[union-attr]
    assert {n.name: n.status.value for n in tree.walk()} == {
        "slow": "failed",
        "outer": "cancelled",
        "inner": "cancelled",
    }


async def test_timeout_raised_by_the_step_code_itself_is_not_a_step_timeout() -> None:
    async def own_timeout() -> None:
        raise TimeoutError("upstream timed out")

    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        await ctx.step("s", own_timeout, timeout=10)

    with pytest.raises(WorkflowError) as info:
        await flow.run()
    assert not isinstance(info.value, StepTimeout)
    assert isinstance(info.value.__cause__, TimeoutError)


async def test_cancelling_a_run_marks_running_nodes_cancelled() -> None:
    gate = asyncio.Event()
    trees: list[groundswell.EventTree] = []

    @workflow(name="child")
    async def child(ctx: WorkflowContext) -> None:
        async def wait_forever() -> None:
            gate.set()
            await asyncio.Event().wait()

        await ctx.step("waiting", wait_forever)

    @workflow(name="parent")
    async def parent(ctx: WorkflowContext) -> str:
        trees.append(ctx.event_tree)
        task = asyncio.ensure_future(ctx.step("spawned", lambda: child.run()))
        await gate.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return "parent survived"

    result = await parent.run()
    assert result.output == "parent survived"
    assert {n.name: n.status.value for n in result.tree.walk()} == {
        "parent": "completed",
        "spawned": "cancelled",
        "child": "cancelled",
        "waiting": "cancelled",
    }


async def test_cancelling_a_top_level_run_propagates() -> None:
    gate = asyncio.Event()

    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        gate.set()
        await ctx.step("forever", asyncio.Event().wait)

    task = asyncio.create_task(flow.run())
    await gate.wait()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_state_snapshot_is_a_deep_copy_recorded_with_secrets_redacted() -> None:
    class Creds(BaseModel):
        user: str
        token: SecretStr

    @workflow
    async def flow(ctx: WorkflowContext) -> dict[str, Any]:
        ctx.state["items"] = [1]
        ctx.state["creds"] = Creds(user="ann", token=SecretStr("hunter2-secret"))
        snap = ctx.snapshot_state()
        ctx.state["items"].append(2)
        return snap

    result = await flow.run()
    snap = result.output
    assert snap is not None and snap["items"] == [1]
    (event,) = result.node.events
    assert event["type"] == "state_snapshot"
    assert event["state"]["items"] == [1]
    assert event["state"]["creds"] == {"user": "ann", "token": "**********"}
    assert "hunter2-secret" not in str(result.tree.to_json())
    assert result.node.payload["state"]["items"] == [1, 2]


async def test_bad_arguments_raise_configuration_errors() -> None:
    def not_async(ctx: WorkflowContext) -> None:
        return None

    with pytest.raises(ConfigurationError, match="async def"):
        Workflow(not_async)  # type: ignore[arg-type]

    @workflow
    async def flow(ctx: WorkflowContext, what: str) -> None:
        if what == "name":
            await ctx.step("", lambda: 1)
        elif what == "timeout":
            await ctx.step("t", lambda: 1, timeout=-1)
        elif what == "fn":
            await ctx.step("n", 42)  # type: ignore[call-overload]
        else:
            await ctx.spawn_workflow(lambda: 1)  # type: ignore[arg-type]

    for what, message in [
        ("name", "non-empty string"),
        ("timeout", "timeout must be seconds"),
        ("fn", "expected a callable or an awaitable"),
        ("spawn", "needs a Workflow"),
    ]:
        with pytest.raises(WorkflowError) as info:
            await flow.run(what)
        assert isinstance(info.value.__cause__, ConfigurationError)
        assert message in str(info.value.__cause__)


async def test_decorator_forms_and_names() -> None:
    @workflow
    async def plain(ctx: WorkflowContext) -> int:
        return 1

    @workflow(name="custom")
    async def named(ctx: WorkflowContext) -> int:
        return 2

    assert isinstance(plain, Workflow) and plain.name == "plain"
    assert named.name == "custom"
    assert (await named.run()).tree.root.name == "custom"  # type: ignore[union-attr]


async def test_concurrent_top_level_runs_get_separate_trees() -> None:
    @workflow
    async def flow(ctx: WorkflowContext, i: int) -> int:
        await asyncio.sleep(0)
        return await ctx.step(f"s{i}", lambda: i)

    results = await asyncio.gather(*(flow.run(i) for i in range(20)))
    trees = {id(r.tree) for r in results}
    assert len(trees) == 20
    for i, r in enumerate(results):
        assert [c.name for c in r.tree.root.children] == [f"s{i}"]  # type: ignore[union-attr]


def test_node_type_of_runs_and_steps() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        await ctx.step("s", lambda: None)

    result = asyncio.run(flow.run())
    assert result.node.type is NodeType.WORKFLOW
    assert result.node.children[0].type is NodeType.STEP


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


async def test_exception_that_cannot_be_printed_still_fails_cleanly() -> None:
    @workflow(name="odd")
    async def flow(ctx: WorkflowContext) -> None:
        async def boom() -> None:
            raise Unprintable

        await ctx.step("s", boom)

    with pytest.raises(WorkflowError) as info:
        await flow.run()
    assert info.value.node_path == "odd/s"
    assert isinstance(info.value.__cause__, Unprintable)
    (step,) = info.value.result.tree.find(name="s")  # type: ignore[union-attr]
    assert step.status == "failed"
    assert step.error is not None
    assert step.error["type"] == "Unprintable"
    assert step.error["message"] == "<unprintable Unprintable>"


async def test_output_that_cannot_be_printed_is_recorded_as_such() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> str:
        await ctx.step("bad", lambda: BadRepr())
        ctx.state["bad"] = BadRepr()
        return "fine"

    result = await flow.run()
    assert result.output == "fine"
    (step,) = result.tree.find(name="bad")
    assert step.status == "completed" and step.payload["output"] == "<unprintable BadRepr>"


async def test_taskgroup_failure_names_the_failing_step() -> None:
    @workflow(name="tg")
    async def flow(ctx: WorkflowContext) -> None:
        async def fail() -> None:
            raise KeyError("missing")

        async with asyncio.TaskGroup() as group:
            group.create_task(ctx.step("ok", asyncio.sleep(0)))
            group.create_task(ctx.step("bad", fail))

    with pytest.raises(WorkflowError) as info:
        await flow.run()
    assert info.value.node_path == "tg/bad"
    assert isinstance(info.value.__cause__, KeyError)
    assert "tg/bad: KeyError" in str(info.value)


async def test_the_same_exception_object_in_two_runs_reports_each_runs_path() -> None:
    shared = KeyError("shared")

    def raise_shared() -> None:
        raise shared

    @workflow(name="first")
    async def first(ctx: WorkflowContext) -> None:
        await ctx.step("first-step", raise_shared)

    @workflow(name="second")
    async def second(ctx: WorkflowContext) -> None:
        await ctx.step("second-step", raise_shared)

    for wf, path in [(first, "first/first-step"), (second, "second/second-step")]:
        with pytest.raises(WorkflowError) as info:
            await wf.run()
        assert info.value.node_path == path


async def test_steps_are_refused_once_the_workflow_has_ended() -> None:
    kept: list[WorkflowContext] = []

    @workflow(name="done")
    async def flow(ctx: WorkflowContext) -> None:
        kept.append(ctx)

    await flow.run()
    with pytest.raises(ConfigurationError, match="workflow 'done' has already ended"):
        await kept[0].step("late", lambda: 1)


async def test_work_left_running_by_a_failed_run_is_reported() -> None:
    release = asyncio.Event()

    @workflow(name="g")
    async def flow(ctx: WorkflowContext) -> None:
        async def fail() -> None:
            raise ValueError("x")

        await asyncio.gather(ctx.step("slow", release.wait), ctx.step("fail", fail))

    with pytest.raises(WorkflowError) as info:
        await flow.run()
    root = info.value.result.node  # type: ignore[union-attr]
    (event,) = [e for e in root.events if e["type"] == "detached"]
    assert event["nodes"] == ["g/slow"] and event["count"] == 1
    release.set()
    await asyncio.sleep(0.01)


@pytest.mark.parametrize("bad", [True, float("nan"), float("inf"), 0, "1"])
async def test_nonsense_timeouts_are_refused(bad: Any) -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        await ctx.step("s", lambda: 1, timeout=bad)

    with pytest.raises(WorkflowError) as info:
        await flow.run()
    assert "timeout must be seconds > 0" in str(info.value.__cause__)


async def test_timed_out_step_records_why() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        await ctx.step("slow", asyncio.sleep(5), timeout=0.01)

    with pytest.raises(StepTimeout) as info:
        await flow.run()
    (node,) = info.value.result.tree.find(name="slow")  # type: ignore[union-attr]
    assert node.error == {"type": "StepTimeout", "message": "step 'slow' timed out after 0.01s"}


async def test_event_data_cannot_shadow_type_or_timestamp() -> None:
    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        groundswell.record_event("note", text="hi")
        with pytest.raises(ValueError, match="reserved key"):
            groundswell.record_event("note", timestamp=1)

    result = await flow.run()
    assert result.node.events[0]["text"] == "hi"


async def test_nested_result_in_a_step_output_is_summarised() -> None:
    @workflow(name="kid")
    async def kid(ctx: WorkflowContext) -> int:
        return 7

    @workflow
    async def flow(ctx: WorkflowContext) -> None:
        await ctx.step("call", lambda: kid.run())

    result = await flow.run()
    output = result.tree.root.children[0].payload["output"]  # type: ignore[union-attr]
    assert output["status"] == "completed" and output["output"] == 7


# -- a forgotten `await` ----------------------------------------------------------------


async def answer() -> int:
    return 42


def never_awaited_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    gc.collect()  # a dropped coroutine warns when it is collected
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


async def test_a_step_without_await_fails_the_run_saying_to_add_await() -> None:
    ran: list[str] = []

    def record() -> str:
        ran.append("record")
        return "recorded"

    @workflow(name="audit")
    async def audit(ctx: WorkflowContext) -> str:
        ctx.step("record", record)  # forgot `await`
        return "done"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(WorkflowError) as info:
            await audit.run()
        cause = info.value.__cause__
        assert isinstance(cause, MissingAwait) and isinstance(cause, ConfigurationError)
        assert cause.steps == ("record",)
        assert str(cause).startswith(
            "workflow 'audit' ended with a step it never awaited ('record'): ctx.step(...) "
            "makes a coroutine that runs only when awaited; add `await`"
        )
        assert "add `await`" in str(info.value)
        result = info.value.result
        assert result is not None and result.status is NodeStatus.FAILED
        assert result.node.error is not None and result.node.error["type"] == "MissingAwait"
        assert [n.type for n in result.tree.walk()] == [NodeType.WORKFLOW]
        assert ran == []
        # The error says it all: Python's own warning at collection does not repeat it.
        assert never_awaited_warnings(caught) == []


async def test_a_workflow_returning_a_step_or_any_coroutine_fails_the_run() -> None:
    @workflow(name="returns-step")
    async def returns_step(ctx: WorkflowContext) -> Any:
        return ctx.step("answer", answer)

    @workflow(name="returns-coroutine")
    async def returns_coroutine(ctx: WorkflowContext) -> Any:
        return answer()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(WorkflowError) as info:
            await returns_step.run()
        assert isinstance(info.value.__cause__, MissingAwait)
        assert info.value.__cause__.steps == ("answer",)
        with pytest.raises(WorkflowError) as info:
            await returns_coroutine.run()
        cause = info.value.__cause__
        assert isinstance(cause, MissingAwait) and cause.steps == ()
        assert str(cause) == (
            "workflow 'returns-coroutine' returned a coroutine (answer) instead of its "
            "result: add `await` (`return await ...`)"
        )
        assert never_awaited_warnings(caught) == []


async def test_a_step_made_inside_a_step_and_never_awaited_fails_the_run() -> None:
    @workflow(name="outer")
    async def outer(ctx: WorkflowContext) -> int:
        async def body() -> int:
            ctx.step("inner", answer)
            return 1

        return await ctx.step("outer-step", body)

    with pytest.raises(WorkflowError) as info:
        await outer.run()
    assert isinstance(info.value.__cause__, MissingAwait)
    assert info.value.__cause__.steps == ("inner",)


async def test_a_task_running_a_step_the_workflow_never_waited_for_fails_the_run() -> None:
    # The task would start after the workflow ended, where a step can no longer run.
    tasks: list[asyncio.Task[int]] = []

    @workflow(name="fire-and-forget")
    async def fire(ctx: WorkflowContext) -> str:
        tasks.append(asyncio.create_task(ctx.step("background", answer)))
        return "done"

    with pytest.raises(WorkflowError) as info:
        await fire.run()
    assert isinstance(info.value.__cause__, MissingAwait)
    assert "await the task or gather running it" in str(info.value.__cause__)
    with pytest.raises(ConfigurationError, match="has already ended"):
        await tasks[0]


async def test_steps_awaited_through_gather_tasks_helpers_and_wait_for_all_run() -> None:
    async def later(step: Any) -> int:
        await asyncio.sleep(0)
        return int(await step)

    @workflow(name="patterns")
    async def patterns(ctx: WorkflowContext) -> list[int]:
        gathered = await asyncio.gather(ctx.step("g1", answer), ctx.step("g2", answer))
        task = asyncio.create_task(ctx.step("task", answer))
        kept = ctx.step("helper", answer)  # handed to a helper that awaits it later
        waited = await asyncio.wait_for(ctx.step("wait_for", answer), timeout=30)
        async with asyncio.TaskGroup() as group:
            grouped = group.create_task(ctx.step("group", answer))
        return [*gathered, await task, await later(kept), waited, grouped.result()]

    result = await patterns.run()
    assert result.status is NodeStatus.COMPLETED and result.output == [42] * 6
    steps = sorted(n.name for n in result.tree.find(type=NodeType.STEP))
    assert steps == ["g1", "g2", "group", "helper", "task", "wait_for"]


async def test_a_step_whose_task_was_cancelled_before_it_started_is_not_a_missing_await() -> None:
    @workflow(name="cancels")
    async def cancels(ctx: WorkflowContext) -> str:
        task = asyncio.create_task(ctx.step("skipped", answer))
        task.cancel()  # before it ever ran: awaited, and cancelled on purpose
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return "went on"

    result = await cancels.run()
    assert result.status is NodeStatus.COMPLETED and result.output == "went on"
    assert result.tree.find(type=NodeType.STEP) == []
