"""The event sink that records agent sessions into the history store.

A session is one top-level ``agent.prompt`` call (a prompt node with no
prompt above it) of an agent built with ``Agent(history=True)``, or of any
agent when ``GROUNDSWELL_HISTORY_URL`` is set. Its iterations are the model
turns and tool calls directly under that prompt node.

`HistorySink.handle` turns events into store operations and queues them; they
are committed in one transaction when ``commit_every`` operations wait
(``GROUNDSWELL_HISTORY_COMMIT_EVERY``, default `COMMIT_EVERY`), when the oldest
has waited ``commit_s`` seconds (``GROUNDSWELL_HISTORY_COMMIT_S``, default
`COMMIT_S`), or when the sink has caught up with the runs (`HistorySink.flush`),
whichever comes first. So a busy process that never lets the sink catch up
still commits steadily, and a crash loses at most the last bound's worth.

When the store cannot be reached the operations are kept and tried again
(bound-triggered tries at most every `RETRY_S` seconds); a warning says so
once per outage, and at most `MAX_PENDING` operations wait: beyond that the
oldest are dropped, counted in `HistorySink.dropped`, and a warning says so
once per outage. A run never fails because of its history.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import groundswell
from groundswell import ConfigurationError, Event

from .store import HistoryStore, default_url, safe_url

__all__ = ["COMMIT_EVERY", "COMMIT_S", "MAX_PENDING", "RETRY_S", "HistorySink", "set_task"]

logger = logging.getLogger("groundswell.history")
#: Operations (a session's start, each of its iterations, its end) per commit.
COMMIT_EVERY = 500
#: Seconds an operation may wait for its commit.
COMMIT_S = 1.0
#: Operations kept while the store is unreachable; the oldest go beyond that.
MAX_PENDING = 100_000
#: Seconds between bound-triggered tries while the store is unreachable.
RETRY_S = 5.0
TASK_EVENT = "history_task"
_RECORDED = ("model_call", "tool_call", "mcp_call")


def set_task(
    title: str,
    *,
    category: str | None = None,
    file_patterns: tuple[str, ...] | list[str] = (),
    task_id: str | None = None,
    **metadata: Any,
) -> dict[str, Any] | None:
    """Say what task the current step (or workflow) works on.

    Sessions started under the current node are recorded with this task: its
    ``task_id``, its `task_signature` and the
    ``metadata``. Returns the recorded event, or ``None`` outside any run.
    """
    from groundswell import record_event

    from .relevance import task_signature

    signature = task_signature(title, category, file_patterns)
    return record_event(
        TASK_EVENT,
        title=title,
        category=category,
        file_patterns=sorted(set(file_patterns)),
        task_id=task_id,
        task_signature=str(signature),
        metadata=metadata,
    )


class HistorySink:
    """Records sessions from tree events; see the module docstring."""

    def __init__(
        self,
        url: str | None = None,
        *,
        record_all: bool | None = None,
        store: Any = None,
        commit_every: int | None = None,
        commit_s: float | None = None,
    ) -> None:
        """``commit_every`` and ``commit_s`` default to ``GROUNDSWELL_HISTORY_COMMIT_EVERY``
        and ``GROUNDSWELL_HISTORY_COMMIT_S``, else `COMMIT_EVERY` and `COMMIT_S`.

        Raises `ConfigurationError` when either is not a number above zero.
        """
        self.url = url or default_url()
        #: Record every agent's sessions, not only ``Agent(history=True)`` ones.
        self.record_all = (
            bool(os.environ.get("GROUNDSWELL_HISTORY_URL")) if record_all is None else record_all
        )
        #: Commit when this many operations wait...
        self.commit_every = int(_setting("COMMIT_EVERY", commit_every, COMMIT_EVERY, whole=True))
        #: ...or when the oldest has waited this many seconds.
        self.commit_s = _setting("COMMIT_S", commit_s, COMMIT_S, whole=False)
        self._store: HistoryStore | None = store
        self._pending: deque[tuple[str, dict[str, Any]]] = deque()
        self._lock = threading.Lock()  # guards _pending, _writing and _oldest
        self._write_lock = threading.Lock()  # one commit at a time, in queue order
        self._writing = 0  # operations taken out of _pending by the commit under way
        self._oldest: float | None = None  # when the oldest waiting operation was queued
        self._retry_at = 0.0  # no bound-triggered try before this (while the store is down)
        self._dropping = False  # dropping since the last commit (warned once)
        #: Operations committed so far.
        self.committed = 0
        # What the sink must remember between events: the parent and type of every
        # node of a run (to find top-level prompts and their tasks), the tasks set
        # on nodes, and the sessions being recorded.
        self._parents: dict[str, str | None] = {}
        self._types: dict[str, str] = {}
        self._tasks: dict[str, dict[str, Any]] = {}
        self._inputs: dict[str, Any] = {}
        # Each session being recorded, with its agent: its iterations and end are
        # written only to that agent's row (a client may have made one with its id).
        self._sessions: dict[str, str] = {}
        self._runs: dict[str, set[str]] = {}
        self.dropped = 0
        self.failures = 0
        self.last_error: str | None = None
        self._outage = False

    @property
    def every_run(self) -> bool:
        """Whether the hub sends this sink every run (`record_all`), or only the runs that
        ask for it: the ``history`` middleware asks for the runs of ``Agent(history=True)``
        prompts (`groundswell.observe_run`), so other runs cost nothing here."""
        return self.record_all

    # -- events ---------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Turn one event into store operations; commit them when a bound is reached."""
        data = event.data
        if event.kind == "node_start":
            self._started(event.run_id, data)
        elif event.kind == "node_end":
            self._ended(event.run_id, data)
        elif event.kind == "node_event":
            inner = data.get("event") or {}
            if inner.get("type") == TASK_EVENT:
                self._tasks[str(data.get("id"))] = dict(inner)
        if self._due():
            self._commit()

    def _started(self, run_id: str, data: Mapping[str, Any]) -> None:
        node_id, parent = str(data["id"]), data.get("parent_id")
        if node_id in self._types:
            return  # seen before: observe_run sends a run's path again for each session
        kind = str(data.get("type"))
        self._parents[node_id] = parent
        self._types[node_id] = kind
        self._runs.setdefault(run_id, set()).add(node_id)
        for recorded in data.get("events") or ():
            # A node that started before the run reached the sink comes with its events.
            if isinstance(recorded, Mapping) and recorded.get("type") == TASK_EVENT:
                self._tasks[node_id] = dict(recorded)
        payload = data.get("payload") or {}
        if kind == "prompt":
            if not (self.record_all or payload.get("history")) or self._inside_prompt(parent):
                return
            task = self._task_for(parent)
            agent = self._sessions[node_id] = str(payload.get("agent") or data.get("name"))
            self._queue(
                "start_session",
                session_id=node_id,
                agent_id=agent,
                started_at=float(data.get("timestamp") or time.time()),
                task_id=task.get("task_id"),
                task_signature=task.get("task_signature"),
                title=task.get("title"),
                category=task.get("category"),
                file_patterns=tuple(task.get("file_patterns") or ()),
                metadata={
                    **(task.get("metadata") or {}),
                    "model": payload.get("model"),
                    "user": payload.get("user"),
                },
                run_id=run_id,
            )
        elif kind in _RECORDED and parent in self._sessions:
            started = float(data.get("timestamp") or time.time())
            agent = self._sessions[str(parent)]
            self._inputs[node_id] = (started, payload, str(data.get("name") or ""), agent)

    def _ended(self, run_id: str, data: Mapping[str, Any]) -> None:
        node_id = str(data["id"])
        kind = self._types.get(node_id)
        status = str(data.get("status"))
        payload = data.get("payload") or {}
        error = data.get("error") or None
        error_text = f"{error.get('type')}: {error.get('message')}" if error else None
        if node_id in self._sessions:
            self._queue(
                "end_session",
                session_id=node_id,
                agent_id=self._sessions.pop(node_id),
                status=_status(status),
                ended_at=data.get("ended_at"),
                output=payload.get("output"),
                error=error_text,
            )
        elif node_id in self._inputs:
            started, start_payload, name, agent = self._inputs.pop(node_id)
            parent = str(self._parents.get(node_id))
            metrics = data.get("metrics") or {}
            if kind == "model_call":
                response = payload.get("response") or {}
                self._queue(
                    "add_iteration",
                    session_id=parent,
                    agent_id=agent,
                    kind="model_turn",
                    name=str(
                        response.get("model") or start_payload.get("request", {}).get("model")
                    ),
                    status=_status(status),
                    output=response.get("text") or response.get("tool_calls") or None,
                    error=error_text,
                    started_at=started,
                    ended_at=data.get("ended_at"),
                    usage=metrics.get("usage") or {},
                )
            else:
                self._queue(
                    "add_iteration",
                    session_id=parent,
                    agent_id=agent,
                    kind="tool_call",
                    name=name,
                    status=_status(status),
                    input=start_payload.get("input"),
                    output=payload.get("output"),
                    error=error_text,
                    started_at=started,
                    ended_at=data.get("ended_at"),
                )
        if self._parents.get(node_id) is None and node_id in self._parents:
            self._forget_run(run_id)  # the root ended: nothing of this run is needed now

    def _inside_prompt(self, parent: str | None) -> bool:
        while parent is not None:
            if self._types.get(parent) == "prompt":
                return True
            parent = self._parents.get(parent)
        return False

    def _task_for(self, parent: str | None) -> dict[str, Any]:
        while parent is not None:
            if parent in self._tasks:
                return self._tasks[parent]
            parent = self._parents.get(parent)
        return {}

    def _forget_run(self, run_id: str) -> None:
        for node_id in self._runs.pop(run_id, set()):
            self._parents.pop(node_id, None)
            self._types.pop(node_id, None)
            self._tasks.pop(node_id, None)
            self._inputs.pop(node_id, None)

    # -- writing --------------------------------------------------------------------

    def _queue(self, method: str, **kwargs: Any) -> None:
        with self._lock:
            if self._oldest is None:
                self._oldest = time.monotonic()
            self._pending.append((method, kwargs))
            self._trim()

    def _trim(self) -> None:
        """Drop the oldest operations beyond MAX_PENDING (with the lock held): only
        while the store is down, since otherwise a commit comes every COMMIT_EVERY."""
        over = len(self._pending) - MAX_PENDING
        if over <= 0:
            return
        for _ in range(over):
            self._pending.popleft()
        if not self._dropping:
            self._dropping = True
            logger.warning(
                "session history: over %d operations wait for %s; dropping the oldest "
                "(counted in HistorySink.dropped)",
                MAX_PENDING,
                self.store_label(),
            )
        self.dropped += over

    def _due(self) -> bool:
        """Whether a bound is reached: COMMIT_EVERY operations, or the oldest COMMIT_S old."""
        if not self._pending or self._oldest is None:
            return False
        now = time.monotonic()
        if now < self._retry_at:
            return False
        return len(self._pending) >= self.commit_every or now - self._oldest >= self.commit_s

    @property
    def store(self) -> HistoryStore:
        """The store, opened on first use."""
        if self._store is None:
            self._store = HistoryStore(self.url)
        return self._store

    def flush(self) -> None:
        """Commit what is queued now (the hub calls this whenever the sink has caught up).

        When the store is down the operations are kept for the next try.
        """
        self._commit()

    def _commit(self) -> None:
        with self._write_lock:
            with self._lock:
                batch = list(self._pending)
                self._pending.clear()
                self._writing = len(batch)
            if not batch:
                return
            try:
                self.store.write_batch(batch)
            except Exception as exc:
                if _bad_data(exc):
                    # One operation the database refuses (say, a value too odd for
                    # it) must not hold back every session after it: write them one
                    # at a time and drop only what is refused.
                    self._write_each(batch)
                else:
                    self._outage_seen(exc, batch)
                return
            self._written(len(batch))

    def _write_each(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        done = 0
        for index, operation in enumerate(batch):
            try:
                self.store.write_batch([operation])
            except Exception as exc:
                if not _bad_data(exc):
                    self.committed += done
                    self._outage_seen(exc, batch[index:])
                    return
                self.dropped += 1
                logger.warning(
                    "session history: %s refused %s (%s: %s); dropped",
                    self.store_label(),
                    operation[0],
                    type(exc).__name__,
                    groundswell.scrub(str(exc).splitlines()[0] if str(exc) else ""),
                )
            else:
                done += 1
        self._written(done)

    def _outage_seen(self, exc: BaseException, kept: list[tuple[str, dict[str, Any]]]) -> None:
        with self._lock:
            # Back in front of what was queued meanwhile, so the order stays the runs' order.
            self._pending.extendleft(reversed(kept))
            self._writing = 0
            self._trim()
        self._retry_at = time.monotonic() + RETRY_S
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {groundswell.scrub(str(exc))}"
        if not self._outage:
            self._outage = True
            logger.warning(
                "session history: cannot write to %s (%s); %d operations kept to retry",
                self.store_label(),
                self.last_error,
                len(kept),
            )

    def _written(self, count: int) -> None:
        with self._lock:
            self.committed += count
            self._writing = 0
            self._oldest = time.monotonic() if self._pending else None
            self._dropping = False
        self._retry_at = 0.0
        if self._outage and count:
            self._outage = False
            logger.warning("session history: writing to %s again", self.store_label())

    def store_label(self) -> str:
        """The store's URL without its password."""
        return safe_url(self.url)

    @property
    def pending(self) -> int:
        """Operations not committed yet (queued, or in a commit under way)."""
        with self._lock:
            return len(self._pending) + self._writing

    def close(self) -> None:
        """Commit what is left (once), then release the store."""
        self._commit()
        if self._pending:
            logger.warning(
                "session history: %d operations could not be written to %s: %s",
                len(self._pending),
                self.store_label(),
                self.last_error,
            )
        if self._store is not None:
            self._store.close()


def _status(node_status: str) -> str:
    """A node's end status as the store's: a node its caller cancelled is ``terminated``
    (the session-history harness's name), one revised afterwards still ``completed``."""
    if node_status in ("completed", "revised"):
        return "completed"
    return "terminated" if node_status == "cancelled" else "failed"


def _setting(name: str, given: float | None, default: float, *, whole: bool) -> float:
    """``given``, else ``GROUNDSWELL_HISTORY_<name>``, else ``default``; above zero."""
    variable = f"GROUNDSWELL_HISTORY_{name}"
    raw: object = given if given is not None else os.environ.get(variable) or default
    try:
        value = int(str(raw)) if whole else float(str(raw))
    except ValueError:
        value = 0
    if not value > 0:
        source = f"{variable}={raw!r}" if given is None else f"{name.lower()}={raw!r}"
        kind = "a whole number of operations" if whole else "a number of seconds"
        raise ConfigurationError(f"session history: {source} must be {kind} above zero")
    return value


def _bad_data(exc: BaseException) -> bool:
    """Whether the database refused the data itself (as opposed to being unreachable)."""
    try:
        from sqlalchemy import exc as sa_exc
    except ImportError:
        return False
    return isinstance(exc, sa_exc.DataError | sa_exc.IntegrityError | ValueError | TypeError)
