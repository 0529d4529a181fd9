"""Stable keys for the operations of a durable run, whatever their timing.

DBOS numbers a workflow's operations in the order they are called, which under
``asyncio.gather`` depends on timing, and a recovered run replays finished
steps at once, which changes it again. So every step and queued child gets a
*key* that does not depend on timing: its branch, its name, and how many
operations of that name its branch made before it. Every task that takes part
in a run is a branch, named for its coroutine and numbered among its parent's
tasks of that coroutine in the order the parent created them (a task factory
sees each creation), so the branches of a ``gather`` keep their numbers even
when they start their work in another order. Work that tasks take by timing (from a shared queue) lands in
different branches on a recovery: such steps find no checkpoint under their
key and run again (named for the item, ``f"summarize {doc}"``), or, if all
share one name, can take another item's checkpoint. The docs say so.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import weakref
from collections.abc import Coroutine
from typing import Any

from dbos import DBOS

__all__ = [
    "Run",
    "branch_here",
    "current_run",
    "install_task_factory",
    "op_key",
    "outside",
    "root_branch",
]


class Run:
    """One execution of a durable run in this process: its recorded checkpoints by key.

    ``received`` holds the answers to waits that an earlier execution took from
    DBOS's message queue, by wait id: DBOS records them by step number, which a
    recovery does not keep (see `load`). ``waits`` is the waiting state of this
    execution (``_waits``).
    """

    __slots__ = ("loaded", "received", "recorded", "waits", "workflow_id")

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self.recorded: dict[str, dict[str, Any]] = {}
        self.received: dict[str, list[dict[str, Any]]] = {}
        self.waits: Any = None
        #: True when an earlier execution may have left checkpoints (`load` ran).
        self.loaded = False

    async def load(self) -> None:
        """Read the checkpoints an earlier execution of this run left (recovery, a takeover)."""
        self.loaded = True
        # Outside the workflow's DBOS context: inside it, DBOS would checkpoint the
        # listing itself, and a later recovery would read that stale copy.
        steps = await outside(DBOS.list_workflow_steps_async(self.workflow_id))
        self.recorded = {s["function_name"]: s for s in steps if "@" in s["function_name"]}
        for step in sorted(steps, key=lambda s: s["function_id"]):
            message = step["output"] if step["function_name"] == "DBOS.recv" else None
            if isinstance(message, dict) and isinstance(message.get("wait"), str):
                self.received.setdefault(message["wait"], []).append(message)
        highest = max((s["function_id"] for s in steps), default=0)
        if highest:
            # New steps must not take the numbers of recorded ones: draw (and leave
            # unused) step ids up to the highest recorded one.
            reservation = DBOS.reserve_step()
            while reservation.step_id < highest:
                reservation = DBOS.reserve_step()


class _Branch:
    """The operations of one task of a run; tasks it creates are its numbered sub-branches."""

    __slots__ = ("__weakref__", "counts", "forks", "parent", "path", "run", "task")

    forks: dict[str, int]

    def __init__(
        self,
        run: Run,
        path: str,
        task: asyncio.Task[Any] | None,
        parent: _Branch | None = None,
    ) -> None:
        self.run = run
        self.path = path
        #: Kept so a root lives as long as any of its branches (see ``_foreign``).
        self.parent = parent
        #: The task making this branch's operations; None until its first one.
        self.task = task
        self.counts: dict[str, int] = {}
        self.forks = {}

    def fork(self, task: asyncio.Task[Any] | None, kind: str) -> _Branch:
        """A sub-branch for a task running the coroutine ``kind``.

        Numbered among this branch's tasks of the same coroutine, so a task of
        another function created in between (a timeout's helper, a library's
        background task) does not renumber them.
        """
        n = self.forks.get(kind, 0)
        self.forks[kind] = n + 1
        return _Branch(self.run, f"{self.path}{kind}#{n}.", task, self)


_branch: contextvars.ContextVar[_Branch | None] = contextvars.ContextVar(
    "groundswell_dbos_branch", default=None
)
# Root branches of DBOS workflows that are not Groundswell runs (an application's own).
_foreign: weakref.WeakValueDictionary[str, _Branch] = weakref.WeakValueDictionary()


def root_branch(run: Run) -> contextvars.Token[_Branch | None]:
    """Make the current task the root branch of ``run``; reset the returned token after."""
    install_task_factory()
    return _branch.set(_Branch(run, "", asyncio.current_task()))


def branch_here(run: Run, key: str) -> contextvars.Token[_Branch | None]:
    """Operations inside the step ``key`` (queued children) get keys under it."""
    return _branch.set(_Branch(run, f"{key}/", asyncio.current_task()))


def current_run() -> Run | None:
    """The Groundswell run this code takes part in, if DBOS runs it as a workflow."""
    branch = _branch.get()
    workflow_id = DBOS.workflow_id
    if branch is None or workflow_id is None or branch.run.workflow_id != workflow_id:
        return None
    return branch.run


def op_key(name: str) -> tuple[Run, str] | None:
    """The current durable run and the key of the operation ``name`` now starting in it.

    ``None`` outside any DBOS workflow.
    """
    workflow_id = DBOS.workflow_id
    if workflow_id is None:
        return None
    task = asyncio.current_task()
    branch = _branch.get()
    if branch is None or branch.run.workflow_id != workflow_id:
        install_task_factory()
        root = _foreign.get(workflow_id)
        if root is None:
            root = _foreign[workflow_id] = _Branch(Run(workflow_id), "", None)
        branch = root.fork(task, _kind(task))
        _branch.set(branch)
    elif branch.task is None:
        branch.task = task  # a branch the task factory made for this task
    elif branch.task is not task:
        # A task created past the task factory (one that takes no context):
        # numbered at its first operation instead.
        branch = branch.fork(task, _kind(task))
        _branch.set(branch)
    seen = branch.counts.get(name, 0)
    branch.counts[name] = seen + 1
    return branch.run, f"{name}@{branch.path}{seen}"


async def outside(coro: Coroutine[Any, Any, Any]) -> Any:
    """Await ``coro`` with no DBOS context, so DBOS does not count it as an operation of the run."""
    return await asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


def _kind(task: Any) -> str:
    coro = task.get_coro() if task is not None else None
    return str(getattr(coro, "__name__", None) or "task")


def _make_factory(previous: Any) -> Any:
    # A factory written for the two-argument form cannot be given a context.
    takes_context = previous is None or _accepts_context(previous)

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        given = kwargs.get("context")
        base = given if given is not None else contextvars.copy_context()
        parent = base.get(_branch)
        if parent is not None and takes_context:
            # Numbered now, in the order the parent creates tasks, not when they
            # run; in a copy, never in a context the caller passed in.
            context = given.copy() if given is not None else base
            context.run(_branch.set, parent.fork(None, str(getattr(coro, "__name__", "task"))))
            kwargs["context"] = context
        if previous is not None:
            return previous(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    factory.groundswell_dbos = True  # type: ignore[attr-defined]
    return factory


def _accepts_context(factory: Any) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "context" or p.kind is p.VAR_KEYWORD for p in params)


def install_task_factory() -> None:
    """Have the running loop number each task a durable run creates (keeps another factory)."""
    loop = asyncio.get_running_loop()
    current = loop.get_task_factory()
    if not getattr(current, "groundswell_dbos", False):
        loop.set_task_factory(_make_factory(current))
