"""Durable and distributed runs on DBOS (Postgres or SQLite): the ``dbos`` execution backend.

```python
@workflow(name="nightly", durable=True)
async def nightly(ctx, day: str) -> dict: ...

await nightly.run("2026-11-23")               # each step checkpointed
results = await groundswell_dbos.recover()    # in a new process, after a crash
await ctx.spawn_workflow(report, region, queue="reports")   # on a worker
run = await groundswell_dbos.start(nightly, "2026-11-24")   # returns at once
await run.waiting()                           # once it waits for a person
await groundswell.waits.approve(wait_id)      # from any process configured here
```

Workers: ``groundswell worker --queue reports``. Settings come from DBOS:
``groundswell_dbos.configure(system_database_url=...)`` or
``DBOS_SYSTEM_DATABASE_URL`` (default: SQLite in ``~/.groundswell``). The waits
of durable runs are also reached with ``groundswell pending --url
postgresql://...`` (and ``approve``, ``reject``, ``answer``).
Needs ``pip install "groundswell[durable]"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from groundswell import (
    CliCommand,
    ConfigurationError,
    ExecutionBackend,
    GroundswellError,
    Workflow,
    WorkflowResult,
    hookimpl,
)
from groundswell.waits import Wait

from ._handle import DurableRun

__all__ = [
    "CheckpointError",
    "DurableRun",
    "StepFailed",
    "cancel",
    "configure",
    "executor_id",
    "pending",
    "recover",
    "start",
]

_INSTALL = 'durable runs need DBOS: pip install "groundswell[durable]"'


class CheckpointError(GroundswellError):
    """A durable workflow's arguments, a step's output or a run's result cannot be checkpointed.

    Checkpoints are pickled: use plain data (dicts, lists, strings, numbers,
    dataclasses or pydantic models defined at module level). A pydantic
    ``SecretStr``/``SecretBytes`` is refused too: the checkpoint would hold it in clear.
    """


class StepFailed(GroundswellError):
    """A step's failure replayed from its checkpoint, standing in for the original exception.

    A failed step's exception is checkpointed as it is, so a recovered run takes
    the same path; when it cannot be pickled and loaded back, or holds a
    secret, its type name and scrubbed message are checkpointed as this
    instead. ``recoverable`` keeps whether reflection could retry the original.
    """

    recoverable: bool = True


def _require_dbos() -> None:
    try:
        import dbos  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(f"{_INSTALL} ({exc})") from exc


def _make_engine() -> Any:
    _require_dbos()
    from ._engine import ENGINE

    return ENGINE


@hookimpl
def register_execution_backends() -> ExecutionBackend:
    return ExecutionBackend(
        name="dbos",
        factory=_make_engine,
        description="durable runs and queued workflows on DBOS (Postgres or SQLite)",
    )


#: The URL schemes of DBOS system databases: ``groundswell pending --url`` reaches the
#: waits of durable runs there.
WAITS_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "sqlite")


def _waits_at(url: str, token: str | None) -> Any:
    _require_dbos()
    from ._remote import DBOSWaits

    return DBOSWaits(url, token)


def _register_waits() -> None:
    """Answer ``groundswell pending --url postgresql://...`` and its siblings from DBOS."""
    try:
        from groundswell.waits.client import register_scheme
    except ImportError:  # a kernel without the waits client
        return
    for scheme in WAITS_SCHEMES:
        register_scheme(scheme, _waits_at)


@hookimpl
def register_cli_commands() -> CliCommand:
    _register_waits()

    def setup(parser: Any) -> None:
        from .cli import add_arguments

        add_arguments(parser)

    return CliCommand(
        name="worker",
        factory=setup,
        description="run queued durable workflows: groundswell worker --queue NAME",
    )


def configure(**config: Any) -> None:
    """Set DBOS settings (``DBOSConfig`` keys, e.g. ``system_database_url``) before the first run.

    Also registers Groundswell's DBOS workflow, so an application that launches
    DBOS itself calls this (with no settings) before ``DBOS.launch()``. Once
    DBOS runs in this process, settings that differ from its own are ignored
    with a warning: a worker keeps the database it was started on when it
    imports a module that calls this.
    """
    _require_dbos()
    from groundswell import get_engine

    from . import _engine, _runtime  # noqa: F401 - importing _engine registers the workflow

    _runtime.configure(**config)
    # The engine from now on: groundswell.waits.approve(...) for a wait of another
    # process reaches durable runs through it.
    get_engine("dbos")
    _register_waits()


def executor_id() -> str:
    """This process's DBOS executor id: host, pid and a random suffix, unless one was set.

    ``DBOS__VMID``, ``configure(executor_id=...)`` or ``groundswell worker
    --executor-id`` set one; an application that launches DBOS itself sets its own.
    """
    _require_dbos()
    from . import _runtime

    return _runtime.executor_id()


async def cancel(run_id: str) -> None:
    """End a durable run for good, with every child it queued (at any depth).

    ``run_id`` is the run's workflow id (``result.workflow_id``, or
    ``ctx.workflow_id`` inside it). Cancelling the task that awaits a durable
    run only stops that process waiting: the run stays pending and is
    recovered, as after a crash. A running execution stops at its next step.
    """
    _require_dbos()
    from dbos import DBOS

    from . import _runtime
    from ._keys import outside

    if not _runtime.is_launched():
        await asyncio.to_thread(_runtime.launch)

    async def cancel_all() -> None:
        # Children's ids start with their parent's id and "/": one query finds every level.
        children = await DBOS.list_workflows_async(
            workflow_id_prefix=f"{run_id}/", load_input=False, load_output=False
        )
        await DBOS.cancel_workflows_async([run_id, *(c.workflow_id for c in children)])

    await outside(cancel_all())


async def start(
    workflow: Workflow[..., Any], *args: Any, workflow_id: str | None = None, **kwargs: Any
) -> DurableRun:
    """Start a durable run of ``workflow`` here, and return a `DurableRun` at once.

    The run goes on in this process; ``await run.waiting()`` returns its open
    waits once it waits for a person, after which a script may leave: the run
    stays pending, and a worker or ``recover()`` resumes it (a decision sent
    meanwhile is kept for it). ``await run.result()`` waits for it here.
    ``workflow_id`` chooses the run's id, as in ``run_with_id``.
    """
    _require_dbos()
    from ._handle import start as started

    return await started(workflow, *args, workflow_id=workflow_id, **kwargs)


async def pending(
    *, kind: str | None = None, agent: str | None = None, run_id: str | None = None
) -> list[Wait]:
    """The open waits of every durable run in the system database, oldest first.

    Runs publish their waits in the database, so every process sees the same
    list; ``kind``, ``agent`` and ``run_id`` (a run's workflow id) filter it.
    Decide one with ``groundswell.waits.approve`` (``reject``, ``answer``) from
    any process that called `configure`.
    """
    _require_dbos()
    from ._remote import pending as listed

    return await listed(kind=kind, agent=agent, run_id=run_id)


async def recover(
    *, executor_ids: Sequence[str] | None = None, timeout: float | None = None
) -> list[WorkflowResult[Any]]:
    """Finish the durable runs of processes that died, and return their results.

    Every process holds a lock for its executor id while it lives; the runs of
    executors whose lock is free are handed back and finished (here, or by any
    worker), and this waits for them. ``executor_ids`` limits it to those
    executors. Each result carries the whole tree: steps finished before the
    crash come back from their checkpoints, marked ``recovered``. A run that
    fails is returned with ``status`` ``failed`` (``.error`` says why). Queued
    children of dead workers go back to their queues and are not returned.
    An executor counts as dead once its lock has stayed free for the takeover
    grace (5 s, ``GROUNDSWELL_DBOS_TAKEOVER_GRACE_S``), so this takes that
    long when it finds one.
    """
    _require_dbos()
    from dbos import DBOS
    from dbos._utils import INTERNAL_QUEUE_NAME

    from . import _runtime
    from ._engine import WORKFLOW_NAME, DurableRunFailed, result_of
    from ._targets import resolve

    if not _runtime.is_launched():
        await asyncio.to_thread(_runtime.launch)
    only = list(executor_ids) if executor_ids else None
    dead = await asyncio.to_thread(_runtime.dead_executors, WORKFLOW_NAME, only=only)
    runs = {
        status.workflow_id: executor
        for executor, statuses in dead.items()
        for status in statuses
        if status.parent_workflow_id is None and status.queue_name in (None, INTERNAL_QUEUE_NAME)
    }
    if runs:
        # A run whose workflow this process cannot import would fail for good here:
        # leave its executor to a process with the code.
        listed = await DBOS.list_workflows_async(workflow_ids=list(runs), load_output=False)
        for status in listed:
            try:
                resolve(status.input["args"][0] if status.input else {})
            except Exception as exc:
                executor = runs[status.workflow_id]
                _runtime.logger.warning(
                    "not recovering executor %s here: %s: %s",
                    executor,
                    type(exc).__name__,
                    _runtime._first_line(exc),
                )
                dead.pop(executor, None)
        runs = {run: executor for run, executor in runs.items() if executor in dead}
    if dead:
        await asyncio.to_thread(DBOS._recover_pending_workflows, list(dead))

    async def finish(workflow_id: str) -> WorkflowResult[Any] | None:
        handle: Any = await DBOS.retrieve_workflow_async(workflow_id)
        try:
            record: Any = await handle.get_result()
        except DurableRunFailed as exc:
            record = exc
        except Exception as exc:  # cancelled meanwhile, or unreadable: the others still count
            _runtime.logger.warning(
                "recovered run %s: %s: %s",
                workflow_id,
                type(exc).__name__,
                _runtime._first_line(exc),
            )
            return None
        return result_of(record)

    finished = await asyncio.wait_for(asyncio.gather(*map(finish, runs)), timeout=timeout)
    return [result for result in finished if result is not None]
