"""The ``dbos`` execution engine: durable runs, checkpointed steps, queued children.

Every durable Groundswell run is one DBOS workflow, ``groundswell.run``, whose
input names the Groundswell workflow to run (module and attribute) and its
arguments. Inside it, each ``ctx.step`` is checkpointed as a DBOS step named
for its stable key (see ``_keys``), holding the step's output *and* the
subtree it built, so a recovered run rebuilds the whole tree without running
finished steps (or their model calls) again. A step's body runs in the
workflow itself, as a scope, and is recorded when it ends: so what happens
inside it (a tool call checkpointed on its own by `DBOSEngine.once`, a wait
for a person receiving DBOS messages, ``_waits``) is workflow code, as DBOS
requires. A queued child's DBOS workflow id is its parent's id and its key.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from dbos import DBOS, SetWorkflowID
from dbos._error import DBOSAwaitedWorkflowCancelledError, DBOSConflictingWorkflowError

from groundswell import (
    ConfigurationError,
    EventNode,
    EventTree,
    NodeStatus,
    WorkflowCall,
    WorkflowContext,
    WorkflowError,
    WorkflowResult,
    current_node,
    current_tree,
    redact,
)
from groundswell.waits import Answered, Decision, Wait, WaitOpening

from . import CheckpointError, _runtime, _waits
from ._checkpoint import StepFailure, check_arguments, check_checkpointable
from ._keys import Run, branch_here, current_run, op_key, outside, root_branch
from ._targets import resolve, target_of
from ._waiter import wait_for

__all__ = ["ENGINE", "WORKFLOW_NAME", "DBOSEngine", "DurableRunFailed", "result_of"]

WORKFLOW_NAME = "groundswell.run"

_live: contextvars.ContextVar[WorkflowCall | None] = contextvars.ContextVar(
    "groundswell_dbos_live", default=None
)
# Set inside a step's body: a step nested in it is part of it (its checkpoint holds it).
_in_step: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "groundswell_dbos_in_step", default=False
)


class DurableRunFailed(Exception):
    """How a failed durable run is checkpointed (picklable); callers see a `WorkflowError`."""

    def __init__(
        self, message: str, node_path: str, failed_id: str | None, tree: dict[str, Any]
    ) -> None:
        super().__init__(message)
        self.message = message
        self.node_path = node_path
        self.failed_id = failed_id
        self.tree = tree

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.node_path, self.failed_id, self.tree))


# -- the one DBOS workflow -----------------------------------------------------------


@DBOS.workflow(name=WORKFLOW_NAME)
async def durable_run(
    target: dict[str, str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Run a Groundswell workflow as a DBOS workflow; return its output and tree."""
    if not _runtime.is_launched():
        # Run by an application's own DBOS before any Groundswell call (a run it
        # resumed at launch): adopt that DBOS, which takes this process's lock.
        await asyncio.to_thread(_runtime.launch)
    call = _live.get()
    run = Run(str(DBOS.workflow_id))
    if call is not None:  # started just now by run_workflow: nothing to recover
        _live.set(None)  # runs started inside this one must not take it
    else:  # recovery, a queued child on a worker, or a rerun elsewhere
        call = WorkflowCall(resolve(target), tuple(args), dict(kwargs))
        await run.load()
    token = root_branch(run)
    try:
        result = await call.run_here(run_id=run.workflow_id, engine=ENGINE)
    except WorkflowError as exc:
        raise _recordable_failure(exc) from None
    finally:
        _branch_reset(token)
    try:
        check_checkpointable(
            result.output, f"the output of durable workflow {call.workflow.name!r}"
        )
    except CheckpointError as exc:
        error = _fail_finished_run(result, exc)
        call.outcome = error
        raise _recordable_failure(error) from None
    return {
        "output": result.output,
        "tree": result.tree.to_json(start=result.node.id),
        "duration": result.duration,
    }


def _branch_reset(token: contextvars.Token[Any]) -> None:
    token.var.reset(token)


def _fail_finished_run(result: WorkflowResult[Any], exc: CheckpointError) -> WorkflowError:
    """Turn a run whose result cannot be checkpointed into a failed one, as any failure is."""
    tree, node = result.tree, result.node
    node.error = {"type": type(exc).__name__, "message": redact(str(exc))}
    tree.set_status(node, NodeStatus.FAILED)
    failed = dataclasses.replace(result, output=None, status=NodeStatus.FAILED, error=exc)
    path = tree.path(node.id)
    error = WorkflowError(
        f"workflow {result.node.name!r} failed at {path}: CheckpointError: {exc}",
        node_path=path,
        result=failed,
    )
    error.__cause__ = exc
    return error


def _recordable_failure(exc: WorkflowError) -> DurableRunFailed:
    result = exc.result
    tree = result.tree.to_json(start=result.node.id) if result is not None else {}
    failed_id = None
    if result is not None and exc.node_path:
        failed_id = next(
            (
                n.id
                for n in result.tree.walk(result.node.id)
                if result.tree.path(n.id) == exc.node_path
            ),
            None,
        )
    return DurableRunFailed(redact(str(exc)), exc.node_path, failed_id, tree)


# -- turning checkpoints back into trees ---------------------------------------------


def _unreadable(what: str, value: Any) -> CheckpointError:
    # DBOS hands back the stored text when it cannot unpickle a checkpoint.
    return CheckpointError(
        f"the checkpoint of {what} cannot be loaded in this process (DBOS gave back a "
        f"{type(value).__name__}); a class it holds is not importable here: run workers "
        "and recovering processes with the same code"
    )


def _recorded_result(record: Any, what: str = "a queued run") -> WorkflowResult[Any]:
    """A `WorkflowResult` for a run that finished elsewhere, mounted here when inside a run."""
    if not isinstance(record, dict) or "tree" not in record:
        raise _unreadable(what, record)
    tree, parent = current_tree(), current_node()
    if tree is not None and parent is not None:
        node = tree.mount(record["tree"], parent)
    else:
        tree = EventTree.from_json(record["tree"])
        assert tree.root is not None
        node = tree.root
    state = node.payload.get("state") or {}
    return WorkflowResult(
        output=record["output"],
        status=NodeStatus.COMPLETED,
        tree=tree,
        node=node,
        duration=float(record.get("duration") or node.duration or 0.0),
        state=dict(state) if isinstance(state, dict) else {},
    )


def _recorded_error(failure: DurableRunFailed) -> WorkflowError:
    tree, parent = current_tree(), current_node()
    if not failure.tree:
        return WorkflowError(failure.message, node_path=failure.node_path)
    if tree is not None and parent is not None:
        node = tree.mount(failure.tree, parent)
    else:
        tree = EventTree.from_json(failure.tree)
        assert tree.root is not None
        node = tree.root
    failed = failure.failed_id
    path = tree.path(failed) if failed is not None and failed in tree else failure.node_path
    result: WorkflowResult[Any] = WorkflowResult(
        output=None,
        status=NodeStatus.FAILED,
        tree=tree,
        node=node,
        duration=node.duration or 0.0,
        state=dict(node.payload.get("state") or {}),
    )
    error = WorkflowError(failure.message, node_path=path, result=result)
    # The result is frozen and refers to the error that refers to it: tie the knot.
    object.__setattr__(result, "error", error)
    return error


def _check_owner(tree: Any, call: WorkflowCall, workflow_id: str) -> None:
    """Refuse the recorded run of another workflow that has the id the caller chose.

    Every Groundswell run is the same DBOS workflow, so DBOS itself cannot tell them apart.
    """
    nodes = tree.get("nodes") if isinstance(tree, dict) else None
    name = nodes[0].get("name") if nodes and isinstance(nodes[0], dict) else None
    if name is not None and name != call.workflow.name:
        raise ConfigurationError(
            f"workflow {call.workflow.name!r}: the id {workflow_id!r} belongs to a run of "
            f"workflow {name!r}; choose ids that name the workflow too (e.g. "
            f"'{call.workflow.name}-{workflow_id}')"
        )


def _mark_recorded(result: WorkflowResult[Any], workflow_id: str) -> None:
    """Say on the run's node that this call returned an earlier call's recorded run."""
    result.tree.add_event(result.node, "recorded", workflow_id=workflow_id)


def result_of(record: Any) -> WorkflowResult[Any]:
    """A recorded run's `WorkflowResult` (``record`` is a result or a `DurableRunFailed`)."""
    if isinstance(record, DurableRunFailed):
        error = _recorded_error(record)
        assert error.result is not None
        return error.result
    return _recorded_result(record, "a recovered run")


def _mount_children(tree: EventTree, node: EventNode, children: Any) -> None:
    for child in children or ():
        try:
            tree.mount(child, node)
        except (KeyError, ValueError):
            continue  # already mounted (a re-raised checkpoint), or not a tree


def _rebind(value: Any, tree: EventTree) -> Any:
    """A checkpointed `WorkflowResult` has its own copy of the tree; point it at ``tree``."""
    if isinstance(value, WorkflowResult) and value.node.id in tree:
        return dataclasses.replace(value, tree=tree, node=tree.get_node(value.node.id))
    if type(value) in (list, tuple):
        return type(value)(_rebind(v, tree) for v in value)
    if type(value) is dict:
        return {k: _rebind(v, tree) for k, v in value.items()}
    return value


def _replay_step(
    tree: EventTree, node: EventNode, recorded: dict[str, Any], what: str | None = None
) -> Any:
    """A step (or a tool call) that finished before: its subtree and output (or error)
    from its checkpoint."""
    what = what or f"step {node.name!r}"
    error, output = recorded["error"], recorded["output"]
    if error is not None and not isinstance(error, StepFailure):
        raise _unreadable(what, error)
    if error is None and not (isinstance(output, dict) and "children" in output):
        raise _unreadable(what, output)
    _mount_children(tree, node, error.children if error is not None else output["children"])
    node.metrics["recovered"] = True
    tree.add_event(node, "recovered", workflow_id=DBOS.workflow_id)
    if error is not None:
        raise error.error
    return _rebind(output["output"], tree)


# -- the engine ------------------------------------------------------------------------


class DBOSEngine:
    """Durable execution on DBOS: the ``dbos`` execution backend (one per process: `ENGINE`)."""

    async def ready(self) -> None:
        """Launch DBOS in this process if nothing has yet (in a thread: it connects)."""
        if not _runtime.is_launched():
            await asyncio.to_thread(_runtime.launch)

    async def run_workflow(self, call: WorkflowCall) -> WorkflowResult[Any]:
        chosen = call.workflow_id
        if DBOS.step_id is not None or current_run() is not None:
            if chosen is not None:
                raise ConfigurationError(
                    f"workflow {call.workflow.name!r}: run_with_id({chosen!r}, ...) inside the "
                    f"durable run {DBOS.workflow_id}: a workflow run there is part of that run "
                    "(its steps are checkpointed with it); call run(...) instead, or "
                    "ctx.spawn_workflow(..., queue=...) for a run of its own"
                )
            # Inside a durable run (or one of its steps): part of that run, its
            # steps checkpointed with the run's.
            return await call.run_here(engine=self)
        await self.ready()
        target = target_of(call.workflow)
        check_arguments(call)
        token = _live.set(call)
        run_id: str | None = chosen
        try:
            if DBOS.workflow_id is not None and chosen is None:
                # Called from an application's own DBOS workflow: a child of it.
                record = await durable_run(target, call.args, call.kwargs)
            else:
                run_id = chosen or os.urandom(8).hex()
                # DBOS starts one workflow per id: for an id it knows, this starts
                # nothing and waits for that run's recorded result (or error).
                with SetWorkflowID(run_id):
                    record = await durable_run(target, call.args, call.kwargs)
        except DurableRunFailed as exc:
            if isinstance(call.outcome, BaseException):
                # It ran here: re-raise the original error, with its tree and cause.
                raise call.outcome  # noqa: B904
            if chosen is not None:
                _check_owner(exc.tree, call, chosen)
            error = _recorded_error(exc)
            if chosen is not None and error.result is not None:
                _mark_recorded(error.result, chosen)
            raise error from None
        except (DBOSAwaitedWorkflowCancelledError, DBOSConflictingWorkflowError) as exc:
            if chosen is None:
                raise
            if isinstance(exc, DBOSConflictingWorkflowError):
                raise ConfigurationError(
                    f"workflow {call.workflow.name!r}: the id {chosen!r} belongs to another "
                    f"DBOS workflow: {exc}"
                ) from exc
            raise WorkflowError(
                f"durable run {chosen!r} (workflow {call.workflow.name!r}) was cancelled; a "
                "cancelled run stays cancelled under its id",
                node_path=call.workflow.name,
            ) from exc
        except asyncio.CancelledError:
            # Only this process stopped (a shutdown, a timeout around the call): the
            # durable run stays pending for recover() or a worker to finish, as after
            # a crash. groundswell_dbos.cancel(run_id) is how a run is ended for good.
            _runtime.logger.info(
                "the caller of durable run %s (%r) was cancelled; the run stays pending "
                "until recover() or a worker finishes it, or groundswell_dbos.cancel() ends it",
                run_id,
                call.workflow.name,
            )
            raise
        finally:
            _live.reset(token)
        if isinstance(call.outcome, WorkflowResult):
            return call.outcome
        if chosen is None:
            return _recorded_result(record, "a durable run")
        # An earlier call's run: its recorded result, no step run again.
        _check_owner(record.get("tree") if isinstance(record, dict) else None, call, chosen)
        result = _recorded_result(record, f"durable run {chosen!r}")
        _mark_recorded(result, chosen)
        return result

    async def run_step(
        self, ctx: WorkflowContext, node: EventNode, call: Callable[[], Awaitable[Any]]
    ) -> Any:
        if DBOS.workflow_id is None or DBOS.step_id is not None or _in_step.get():
            # Not in a durable run, or inside a step already, whose checkpoint holds this one.
            return await call()
        keyed = op_key(node.name)
        assert keyed is not None
        run, key = keyed
        recorded = run.recorded.pop(key, None)
        if recorded is not None:
            return _replay_step(ctx.event_tree, node, recorded)
        token = _in_step.set(True)
        try:
            return await _scope(run, key, ctx.event_tree, node, call, f"step {node.name!r}")
        finally:
            _in_step.reset(token)

    async def once(
        self,
        ctx: WorkflowContext,
        node: EventNode,
        name: str,
        fn: Callable[[str | None], Awaitable[Any]],
        *,
        checkpoint: bool = True,
    ) -> Any:
        """A tool call: checkpointed when it returns, replayed on recovery (`CheckpointingEngine`)."""
        keyed = op_key(name) if DBOS.step_id is None else None
        if keyed is None:  # not in a durable run, or inside an application's own DBOS step
            return await fn(None)
        run, key = keyed
        idempotency_key = f"{run.workflow_id}:{hashlib.sha256(key.encode()).hexdigest()[:20]}"
        if not checkpoint:
            return await fn(idempotency_key)
        tree = ctx.event_tree
        what = f"{node.type.value} {node.name!r}"
        recorded = run.recorded.pop(key, None)
        if recorded is not None:
            return _replay_step(tree, node, recorded, what)
        return await _scope(
            run, key, tree, node, lambda: fn(idempotency_key), what, len(node.children)
        )

    def opening(
        self, ctx: WorkflowContext, kind: str, name: str, opening: WaitOpening
    ) -> Awaitable[WaitOpening]:
        return _waits.opening(ctx, name, opening)

    def wait(
        self, ctx: WorkflowContext, node: EventNode, wait: Wait, decision: Awaitable[Decision]
    ) -> Awaitable[Decision]:
        return _waits.wait(ctx, node, wait, decision)

    async def decide(self, wait_id: str, decision: Decision) -> Answered | None:
        from . import _remote

        return await _remote.decide(wait_id, decision)

    async def spawn(
        self, ctx: WorkflowContext, node: EventNode, call: WorkflowCall, queue: str
    ) -> Any:
        # The key first, before anything awaits.
        keyed = op_key(f"spawn {node.name}")
        target = target_of(call.workflow)
        check_arguments(call)
        await self.ready()
        if keyed is not None:
            # Inside a DBOS workflow: the child's id follows from the parent's and the
            # spawn's key, so a recovered parent finds the child it started before.
            run, key = keyed
            child_id = f"{run.workflow_id}/{key}"
        else:
            child_id = os.urandom(8).hex()

        async def enqueue() -> None:
            with SetWorkflowID(child_id):
                # Enqueuing an id that exists already returns that run (DBOS is idempotent).
                await DBOS.enqueue_workflow_async(
                    queue, durable_run, target, call.args, call.kwargs
                )

        await outside(enqueue())
        ctx.event_tree.add_event(node, "enqueued", queue=queue, workflow_id=child_id)
        try:
            record = await wait_for(child_id, queue)
        except DurableRunFailed as exc:
            raise _recorded_error(exc) from None
        return _recorded_result(record, f"queued run {child_id}").output


async def _scope(
    run: Run,
    key: str,
    tree: EventTree,
    node: EventNode,
    call: Callable[[], Awaitable[Any]],
    what: str,
    first: int = 0,
) -> Any:
    """Run ``call`` in the workflow, under the branch ``key``, and checkpoint what it gave.

    Its output and the nodes it added under ``node`` (from index ``first``) go in
    one DBOS step named ``key``; an exception goes there as a `StepFailure`, and
    is raised as it was. Cancellation is not checkpointed: the work runs again.
    """

    def children() -> list[dict[str, Any]]:
        return [tree.to_json(start=c.id) for c in node.children[first:]]

    # Numbered when it starts, as DBOS numbers a step it runs itself: its tools list
    # a run's steps in the order they started.
    reservation = DBOS.reserve_step()
    failed: Exception | None = None
    token = branch_here(run, key)
    try:
        output = await call()
        # Checked here, so the failure is checkpointed like any other (and DBOS
        # never logs a value it could not serialize). Children are JSON.
        check_checkpointable(output, f"the output of {what}")
    except Exception as exc:
        failed = exc
    finally:
        _branch_reset(token)
    if failed is None:
        record = {"output": output, "children": children()}
        await reservation.run_async({"name": key}, lambda: record)
        return output
    failure = StepFailure(failed, children())

    def fail() -> None:
        raise failure

    with contextlib.suppress(StepFailure):
        await reservation.run_async({"name": key}, fail)
    # Raised here, outside any handler, so that Python chains nothing onto it and
    # its own cause stays.
    raise failed


ENGINE = DBOSEngine()


class _QuietCancellation(logging.Filter):
    """Drop DBOS's warning on every cancelled task: the tree records cancellations."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Asyncio task cancelled for workflow or step")


logging.getLogger("dbos").addFilter(_QuietCancellation())
