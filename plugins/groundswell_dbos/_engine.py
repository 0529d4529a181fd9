"""The ``dbos`` execution engine: durable runs, checkpointed steps, queued children.

Every durable Groundswell run is one DBOS workflow, ``groundswell.run``, whose
input names the Groundswell workflow to run (module and attribute) and its
arguments. Inside it, each ``ctx.step`` is a DBOS step whose checkpoint holds
the step's output *and* the subtree it built, so a recovered run rebuilds the
whole tree without running finished steps (or their model calls) again.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import importlib
import importlib.util
import os
import pickle
import sys
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID

from groundswell import (
    ConfigurationError,
    EventNode,
    EventTree,
    GroundswellError,
    NodeStatus,
    Workflow,
    WorkflowCall,
    WorkflowContext,
    WorkflowError,
    WorkflowResult,
    current_node,
    current_tree,
    redact,
)

from . import CheckpointError, _runtime

__all__ = ["ENGINE", "WORKFLOW_NAME", "DBOSEngine", "DurableRunFailed"]

WORKFLOW_NAME = "groundswell.run"
# How often a parent asks whether a queued child finished, and a queue is polled.
POLL_S = float(os.environ.get("GROUNDSWELL_DBOS_POLL_S", "0.2"))
# Set on a step's exception before DBOS checkpoints it, so a replayed failure
# still shows what the failed attempt did.
_CHILDREN_ATTR = "_groundswell_children"

_live: contextvars.ContextVar[WorkflowCall | None] = contextvars.ContextVar(
    "groundswell_dbos_live", default=None
)
_targets: weakref.WeakKeyDictionary[Workflow[Any, Any], dict[str, str]] = (
    weakref.WeakKeyDictionary()
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


class StepFailed(GroundswellError):
    """Stands in for a step's exception that could not be checkpointed (on replay)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.args, self.__dict__)


def _checkpointable(value: Any, what: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as exc:
        raise CheckpointError(
            f"{what} is a {type(value).__name__}, which cannot be checkpointed "
            f"({type(exc).__name__}: {exc}); use plain data: dicts, lists, strings, "
            "numbers, dataclasses or pydantic models defined at module level"
        ) from exc


# -- naming workflows so another process can import them ----------------------------


def target_of(wf: Workflow[Any, Any]) -> dict[str, str]:
    """Where another process finds ``wf``: its module and the attribute holding it."""
    known = _targets.get(wf)
    if known is not None:
        return known
    module_name = getattr(wf.executor, "__module__", None) or ""
    module = sys.modules.get(module_name)
    attr = next((k for k, v in vars(module).items() if v is wf), None) if module else None
    if module is None or attr is None:
        raise ConfigurationError(
            f"durable workflow {wf.name!r} must be a module-level name, so that a recovering "
            f"process or a worker can import it; it is not found in module {module_name!r} "
            "(was it made inside a function, or at run time?)"
        )
    target = {"module": module_name, "attr": attr, "name": wf.name}
    if module_name == "__main__":
        file = getattr(module, "__file__", None)
        if not file:
            raise ConfigurationError(
                f"durable workflow {wf.name!r} is defined in an interactive session; "
                "define it in a file that other processes can import"
            )
        target["file"] = str(Path(file).resolve())
    _targets[wf] = target
    return target


def resolve(target: dict[str, str]) -> Workflow[Any, Any]:
    """Import the workflow ``target`` names; `ConfigurationError` saying how to fix it."""
    label = f"{target.get('module')}:{target.get('attr')}"
    try:
        module = _import(target)
        wf = getattr(module, target["attr"])
    except Exception as exc:
        raise ConfigurationError(
            f"durable workflow {target.get('name')!r} ({label}) cannot be imported by "
            f"executor {_runtime.executor_id()}: {type(exc).__name__}: {exc}; run workers "
            "and recovering processes with the same code, from the project folder or with "
            "PYTHONPATH set so that the module imports"
        ) from exc
    if not isinstance(wf, Workflow):
        raise ConfigurationError(
            f"{label} is a {type(wf).__name__}, not a Workflow; was it renamed since the run started?"
        )
    return wf


def _import(target: dict[str, str]) -> Any:
    if target["module"] != "__main__":
        return importlib.import_module(target["module"])
    # A script's workflows: this process may be that script, or a worker that
    # loads it by path (its `if __name__ == "__main__":` block does not run).
    file = target["file"]
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if main_file and os.path.exists(file) and os.path.samefile(main_file, file):
        return main
    name = "groundswell_script_" + hashlib.sha256(file.encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"no script at {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# -- the one DBOS workflow -----------------------------------------------------------


@DBOS.workflow(name=WORKFLOW_NAME)
async def durable_run(
    target: dict[str, str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Run a Groundswell workflow as a DBOS workflow; return its output and tree."""
    call = _live.get()
    if call is not None:
        _live.set(None)  # runs started inside this one must not take it
    else:  # recovery, a queued child on a worker, or a rerun elsewhere
        call = WorkflowCall(resolve(target), tuple(args), dict(kwargs))
    try:
        result = await call.run_here(run_id=DBOS.workflow_id, engine=ENGINE)
    except WorkflowError as exc:
        raise _recordable_failure(exc) from None
    record = {
        "output": result.output,
        "tree": result.tree.to_json(start=result.node.id),
        "duration": result.duration,
    }
    _checkpointable(result.output, f"the output of durable workflow {call.workflow.name!r}")
    return record


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


def _recorded_result(record: dict[str, Any]) -> WorkflowResult[Any]:
    """A `WorkflowResult` for a run that finished elsewhere, mounted here when inside a run."""
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


def result_of(record: Any) -> WorkflowResult[Any]:
    """A recorded run's `WorkflowResult` (``record`` is a result or a `DurableRunFailed`)."""
    if isinstance(record, DurableRunFailed):
        error = _recorded_error(record)
        assert error.result is not None
        return error.result
    return _recorded_result(record)


def _mount_children(tree: EventTree, node: EventNode, children: Any) -> None:
    for child in children or ():
        try:
            tree.mount(child, node)
        except (KeyError, ValueError):
            continue  # already mounted (a re-raised checkpoint), or not a tree


# -- the engine ------------------------------------------------------------------------


class DBOSEngine:
    """Durable execution on DBOS: the ``dbos`` execution backend (one per process: `ENGINE`)."""

    def __init__(self) -> None:
        self._queues: set[str] = set()

    async def ready(self) -> None:
        """Launch DBOS in this process if nothing has yet (in a thread: it connects)."""
        if not _runtime.is_launched():
            await asyncio.to_thread(_runtime.launch)

    async def run_workflow(self, call: WorkflowCall) -> WorkflowResult[Any]:
        await self.ready()
        if DBOS.step_id is not None:
            # Inside a durable step: the step's checkpoint already covers this run.
            return await call.run_here()
        target = target_of(call.workflow)
        _checkpointable((call.args, call.kwargs), f"the arguments of {call.workflow.name!r}")
        token = _live.set(call)
        try:
            if DBOS.workflow_id is not None:
                # A child of a durable run: DBOS gives it an id derived from its place
                # in the parent, so a recovered parent finds the child's checkpoint.
                record = await durable_run(target, call.args, call.kwargs)
            else:
                with SetWorkflowID(os.urandom(8).hex()):
                    record = await durable_run(target, call.args, call.kwargs)
        except DurableRunFailed as exc:
            if isinstance(call.outcome, BaseException):
                # It ran here: re-raise the original error, with its tree and cause.
                raise call.outcome  # noqa: B904
            raise _recorded_error(exc) from None
        finally:
            _live.reset(token)
        if isinstance(call.outcome, WorkflowResult):
            return call.outcome
        return _recorded_result(record)

    async def run_step(
        self, ctx: WorkflowContext, node: EventNode, call: Callable[[], Awaitable[Any]]
    ) -> Any:
        if DBOS.workflow_id is None or DBOS.step_id is not None:
            return await call()  # not in a durable run, or nested in a step already
        tree = ctx.event_tree
        ran = returned = False
        original: BaseException | None = None

        def children() -> list[dict[str, Any]]:
            return [tree.to_json(start=c.id) for c in node.children]

        async def body() -> dict[str, Any]:
            nonlocal ran, returned, original
            ran = True
            try:
                output = await call()
            except Exception as exc:
                original = exc
                raise _recordable_step_error(exc, children())  # noqa: B904 - often exc itself
            returned = True
            return {"output": output, "children": children()}

        try:
            record = await DBOS.run_step_async({"name": node.name}, body)
        except Exception as exc:
            if original is not None:
                raise original  # noqa: B904 - the live failure, exactly as it happened
            if ran and returned:
                raise CheckpointError(
                    f"step {node.name!r} returned a value that cannot be checkpointed "
                    f"({type(exc).__name__}: {exc}); return plain data: dicts, lists, "
                    "strings, numbers, dataclasses or pydantic models defined at module level"
                ) from exc
            if not ran:  # a checkpointed failure, replayed
                _mount_children(tree, node, getattr(exc, _CHILDREN_ATTR, None))
                _mark_recovered(tree, node)
            raise
        if not ran:
            _mount_children(tree, node, record.get("children"))
            _mark_recovered(tree, node)
        return record["output"]

    async def spawn(
        self, ctx: WorkflowContext, node: EventNode, call: WorkflowCall, queue: str
    ) -> Any:
        await self.ready()
        target = target_of(call.workflow)
        _checkpointable((call.args, call.kwargs), f"the arguments of {call.workflow.name!r}")
        if queue not in self._queues:
            await DBOS.register_queue_async(
                queue, polling_interval_sec=POLL_S, on_conflict="never_update"
            )
            self._queues.add(queue)
        handle = await DBOS.enqueue_workflow_async(
            queue, durable_run, target, call.args, call.kwargs
        )
        ctx.event_tree.add_event(node, "enqueued", queue=queue, workflow_id=handle.workflow_id)
        try:
            record = await _waiter().result(handle.workflow_id)
        except DurableRunFailed as exc:
            raise _recorded_error(exc) from None
        return _recorded_result(record).output


ENGINE = DBOSEngine()

_DONE = ["SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"]


class _Waiter:
    """Waits for many queued runs with one status query per poll, not one per run.

    A parent spawning 200 children would otherwise poll the database 200 times
    per interval. The poll runs outside any DBOS workflow context, so a durable
    parent's checkpoints do not depend on how many polls it took.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[str, list[asyncio.Future[Any]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def result(self, workflow_id: str) -> Any:
        future: asyncio.Future[Any] = self._loop.create_future()
        self._waiting.setdefault(workflow_id, []).append(future)
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._poll(), context=contextvars.Context())
        return await future

    async def _poll(self) -> None:
        while self._waiting:
            ids = list(self._waiting)
            try:
                done = await DBOS.list_workflows_async(
                    workflow_ids=ids, status=_DONE, load_input=False
                )
            except Exception as exc:  # the database blinked; ask again next round
                _runtime.logger.warning("polling queued runs failed: %s", exc)
                done = []
            for status in done:
                for future in self._waiting.pop(status.workflow_id, []):
                    if future.done():
                        continue
                    if status.status == "SUCCESS":
                        future.set_result(status.output)
                    elif isinstance(status.error, BaseException):
                        future.set_exception(status.error)
                    else:
                        future.set_exception(
                            WorkflowError(f"queued run {status.workflow_id} ended {status.status}")
                        )
            for workflow_id, futures in list(self._waiting.items()):
                futures[:] = [f for f in futures if not f.done()]  # cancelled waiters
                if not futures:
                    del self._waiting[workflow_id]
            if self._waiting:
                await asyncio.sleep(POLL_S)


_waiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waiter] = (
    weakref.WeakKeyDictionary()
)


def _waiter() -> _Waiter:
    loop = asyncio.get_running_loop()
    waiter = _waiters.get(loop)
    if waiter is None:
        waiter = _waiters[loop] = _Waiter(loop)
    return waiter


def _recordable_step_error(exc: Exception, children: list[dict[str, Any]]) -> Exception:
    try:
        setattr(exc, _CHILDREN_ATTR, children)
        pickle.dumps(exc)
        return exc
    except Exception:
        stand_in = StepFailed(f"{type(exc).__name__}: {redact(str(exc))}")
        setattr(stand_in, _CHILDREN_ATTR, children)
        return stand_in


def _mark_recovered(tree: EventTree, node: EventNode) -> None:
    node.metrics["recovered"] = True
    tree.add_event(node, "recovered", workflow_id=DBOS.workflow_id)
