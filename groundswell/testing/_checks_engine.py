"""The execution engine checker: durable workflows run on the engine."""

from __future__ import annotations

import asyncio
from typing import Any

from ..cache.guard import shown
from ..errors import WorkflowError
from ..hookspecs import ExecutionBackend, hookimpl
from ..plugins.manager import get_plugin_manager
from ..workflow.execution import ExecutionEngine
from ..workflow.workflow import WorkflowContext, WorkflowResult, workflow
from ._checks import CALL_TIMEOUT_S, Findings, error, fail, object_to_check, subject, unique

__all__ = ["check_engine"]


async def check_engine(engine: Any) -> None:
    """Check an execution engine against `groundswell.ExecutionEngine`; raise `ProtocolViolation`.

    ``engine`` is the engine, its factory or its `ExecutionBackend` record. It
    is registered under a name of its own and runs ``Workflow(durable=name)``
    workflows: ``run_workflow`` must return the `WorkflowResult` of
    ``call.run_here()``, steps must return their bodies' outputs, a failing
    step must fail the run with its own error as the cause, and concurrent runs
    must each get their own result. ``spawn`` (queues) is not exercised.
    """
    findings = Findings(subject(engine), "execution engine")
    made, _ = object_to_check(
        engine, ExecutionBackend, "execution backend", "run_workflow", findings
    )
    findings.subject = subject(made)
    if not isinstance(made, ExecutionEngine):
        raise findings.stop(
            "it lacks run_workflow, run_step or spawn; an engine has all three (async)"
        )
    name = unique("check-engine-")

    class Register:
        @hookimpl
        def register_execution_backends(self) -> ExecutionBackend:
            return ExecutionBackend(name=name, factory=lambda: made)

    manager = get_plugin_manager()
    manager.register(Register(), name=name)
    try:
        await _engine_runs(name, findings)
    finally:
        manager.unregister(name)
    findings.raise_any()


async def _engine_runs(name: str, findings: Findings) -> None:
    async def later(value: int) -> int:
        await asyncio.sleep(0)
        return value

    @workflow(name="engine-check", durable=name)
    async def adding(ctx: WorkflowContext, a: int, b: int) -> int:
        first = await ctx.step("first", lambda: a)
        second = await ctx.step("second", lambda: later(b))
        return int(first) + int(second)

    @workflow(name="engine-check-failing", durable=name)
    async def failing(ctx: WorkflowContext) -> None:
        await ctx.step("fail", fail)

    try:
        results: list[Any] = await asyncio.wait_for(
            asyncio.gather(*(adding.run(i, 10 * i) for i in (1, 2, 3))), CALL_TIMEOUT_S * 2
        )
    except Exception as exc:
        findings.add(f"a workflow run through it failed: {error(exc)}")
        return
    for i, result in zip((1, 2, 3), results, strict=True):
        if not isinstance(result, WorkflowResult):
            findings.add(
                f"run_workflow returned {shown(result)}; it must return the WorkflowResult "
                "that `await call.run_here()` returned"
            )
            break
        if result.output != 11 * i:
            findings.add(
                f"a workflow returning {11 * i} gave {result.output!r}: steps must return their "
                "bodies' outputs (run_step: `return await call()`)"
            )
            break
    try:
        await failing.run()
    except WorkflowError as exc:
        if not isinstance(exc.__cause__, ValueError):
            findings.add(
                f"a step's ValueError reached the caller as {error(exc.__cause__ or exc)}; "
                "let a step's exception propagate unchanged"
            )
    except Exception as exc:
        findings.add(
            f"a failing step raised {error(exc)} instead of a WorkflowError; run_workflow "
            "must let call.run_here()'s WorkflowError propagate"
        )
    else:
        findings.add("a workflow whose step raised did not fail: exceptions must propagate")
