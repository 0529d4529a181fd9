"""Starting a durable run and leaving it: `start` and its `DurableRun` handle."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from groundswell import ConfigurationError, Workflow, WorkflowResult
from groundswell.waits import Wait

__all__ = ["DurableRun", "start"]


class DurableRun:
    """A durable run started with `start`: its ``workflow_id``, its waits and its result."""

    def __init__(self, workflow_id: str, task: asyncio.Task[WorkflowResult[Any]]) -> None:
        self.workflow_id = workflow_id
        self._task = task

    async def waiting(self, *, timeout: float | None = None) -> list[Wait]:
        """The run's open waits once it has some (as every process sees them, from the
        database); ``[]`` if it finished first. `TimeoutError` after ``timeout`` seconds."""
        from ._remote import pending

        limit = None if timeout is None else time.monotonic() + timeout
        while True:
            waits = await pending(run_id=self.workflow_id)
            if waits or self._task.done():
                return waits
            if limit is not None and time.monotonic() > limit:
                raise TimeoutError(f"durable run {self.workflow_id!r} opened no wait in {timeout}s")
            await asyncio.sleep(0.05)

    async def result(self) -> WorkflowResult[Any]:
        """Wait for the run here and return its result (raises its `WorkflowError`)."""
        return await self._task


async def start(
    workflow: Workflow[..., Any], *args: Any, workflow_id: str | None = None, **kwargs: Any
) -> DurableRun:
    """Start a durable run of ``workflow`` here and return at once.

    The run goes on in this process's event loop; a script may leave once the run
    waits for a person (``await run.waiting()``): the run stays pending, and a
    worker (or ``recover()``) resumes it when the decision arrives.
    """
    if not isinstance(workflow, Workflow):
        raise ConfigurationError(f"start() needs a Workflow, got {type(workflow).__name__}")
    if not workflow.durable:
        raise ConfigurationError(
            f"groundswell_dbos.start({workflow.name!r}): the workflow is not durable; a run "
            "that goes on without this process needs @workflow(..., durable=True)"
        )
    from ._engine import ENGINE

    await ENGINE.ready()
    run_id = workflow_id or os.urandom(8).hex()
    task = asyncio.get_running_loop().create_task(workflow.run_with_id(run_id, *args, **kwargs))
    return DurableRun(run_id, task)
