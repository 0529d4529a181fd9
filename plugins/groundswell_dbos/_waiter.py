"""Waiting for queued runs: one status query per poll for every run this process waits on."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import time
import weakref
from typing import Any

from dbos import DBOS

from groundswell import WorkflowError

from . import _runtime

__all__ = ["POLL_S", "wait_for"]

# How often a parent asks whether its queued children finished, and queues are polled.
POLL_S = float(os.environ.get("GROUNDSWELL_DBOS_POLL_S", "0.2"))
# A queued run nobody has taken after this long gets one warning: is any worker listening?
UNTAKEN_WARNING_S = 30.0

_DONE = ["SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"]


class _Waiter:
    """Waits for many queued runs with one status query per poll, not one per run.

    A parent spawning 200 children would otherwise poll the database 200 times
    per interval. Polls run outside any DBOS workflow context, so a durable
    parent's checkpoints do not depend on how many polls it took.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[str, list[asyncio.Future[Any]]] = {}
        self._queued: dict[str, tuple[str, float]] = {}  # run id -> (queue, since)
        self._task: asyncio.Task[None] | None = None

    async def result(self, workflow_id: str, queue: str) -> Any:
        future: asyncio.Future[Any] = self._loop.create_future()
        self._waiting.setdefault(workflow_id, []).append(future)
        self._queued.setdefault(workflow_id, (queue, time.monotonic()))
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
                self._queued.pop(status.workflow_id, None)
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
                    self._queued.pop(workflow_id, None)
            if self._waiting:
                with contextlib.suppress(Exception):  # only a warning; never stops the wait
                    await self._warn_untaken()
                await asyncio.sleep(POLL_S)

    async def _warn_untaken(self) -> None:
        now = time.monotonic()
        old = [i for i, (_, since) in self._queued.items() if now - since > UNTAKEN_WARNING_S]
        if not old:
            return
        untaken = await DBOS.list_workflows_async(
            workflow_ids=old, status=["ENQUEUED"], load_input=False, load_output=False
        )
        queues = sorted({self._queued[s.workflow_id][0] for s in untaken})
        for queue in queues:
            _runtime.logger.warning(
                "runs on queue %r have waited over %.0f s and no worker has taken them; "
                "start one with: groundswell worker --queue %s",
                queue,
                UNTAKEN_WARNING_S,
                queue,
            )
        for workflow_id in old:  # one warning per run, whatever its state now
            self._queued.pop(workflow_id, None)


_waiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waiter] = (
    weakref.WeakKeyDictionary()
)


async def wait_for(workflow_id: str, queue: str) -> Any:
    """The recorded result of the queued run ``workflow_id`` (raises its recorded error)."""
    loop = asyncio.get_running_loop()
    waiter = _waiters.get(loop)
    if waiter is None:
        waiter = _waiters[loop] = _Waiter(loop)
    return await waiter.result(workflow_id, queue)
