"""Events and their delivery to event sinks.

Each sink gets its own bounded queue and worker thread, so a sink that raises
or blocks never breaks or stalls a run: its errors are counted and reported
once, and when its queue is full further events for it are dropped and counted.
Closing works the same way: the worker handles what is queued and then calls
the sink's ``close()``, all within one deadline (``GROUNDSWELL_SINK_TIMEOUT_S``,
5 s by default, at interpreter exit); a sink still busy after it is named in a
warning and left behind, so it never holds the process open.
"""

from __future__ import annotations

import collections
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .tree import EventNode

__all__ = ["Event", "EventKind", "RunSinks", "Sink", "SinkHub", "sink_problems"]

logger = logging.getLogger("groundswell.sinks")

EventKind = Literal["node_start", "node_end", "node_event"]

# Enough for a burst of ~25,000 nodes while a sink catches up; beyond that the
# sink is too slow to keep up and dropping beats unbounded memory.
QUEUE_SIZE = 50_000
# How long an idle worker sleeps before looking for events (a live view's lag),
# and the backlog that wakes it early.
POLL_S = 0.02
WAKE_AT = 256
#: Seconds each sink gets to handle what is queued and close, when the hub closes
#: (at interpreter exit too); ``GROUNDSWELL_SINK_TIMEOUT_S`` overrides it.
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Event:
    """A change to the tree: ``kind`` says what, ``data`` is a JSON-safe snapshot.

    ``node`` is the live node (it keeps changing after the event); ``data`` is
    what was true when the event happened: the full node record for
    ``node_start``, ``{"id", "status", "ended_at", "metrics", "payload",
    "error"}`` for ``node_end``, and ``{"id", "event"}`` for ``node_event``.
    ``run_id`` is the id of the run's root node, so a sink can tell concurrent
    runs apart.
    """

    kind: EventKind
    node: EventNode
    data: dict[str, Any]
    run_id: str = ""

    # Every change of an observed tree makes one on the run's thread: written
    # through the slots directly, it costs half of the generated frozen __init__.
    def __init__(
        self, kind: EventKind, node: EventNode, data: dict[str, Any], run_id: str = ""
    ) -> None:
        _set_kind(self, kind)
        _set_node(self, node)
        _set_data(self, data)
        _set_run_id(self, run_id)

    def to_record(self) -> dict[str, Any]:
        """The JSONL log line for this event: ``{"kind", "run_id", "data"}``."""
        return {"kind": self.kind, "run_id": self.run_id, "data": self.data}


# The slots' own setters: they skip the frozen class's __setattr__ that refuses changes.
_slots = vars(Event)
_set_kind = _slots["kind"].__set__
_set_node = _slots["node"].__set__
_set_data = _slots["data"].__set__
_set_run_id = _slots["run_id"].__set__


@runtime_checkable
class Sink(Protocol):
    """What an event sink's factory returns: plain (not async) methods, called on its own thread.

    The hub calls ``handle`` for every event, in order, from the sink's worker
    thread; the methods never run on an event loop, so blocking there is fine
    and ``async def`` is refused (nothing would await it). An exception in any
    method is counted and logged once, never raised into a run. An optional
    ``flush()`` is called each time the sink has caught up with its queue; when
    it returns ``False`` (it could not finish, say for want of file descriptors)
    it is called again about `POLL_S` seconds later.

    An optional ``every_run`` attribute, read once when the sink starts, says
    which runs reach it: ``True`` (or absent), every run; ``False``, only the
    runs that ask for it with `groundswell.observe_run`. A run no sink takes
    costs nothing for them: its tree is not observed at all.
    """

    def handle(self, event: Event) -> None:
        """Take one event (its ``data`` is a JSON-safe snapshot); the return is ignored."""

    def close(self) -> None:
        """Flush and release resources; called once, after the last ``handle`` and ``flush``."""


def sink_problems(sink: object) -> list[str]:
    """What keeps ``sink`` from working as an event sink, in plain words (empty: nothing)."""
    problems: list[str] = []
    every_run = getattr(sink, "every_run", True)
    if not isinstance(every_run, bool):
        problems.append(
            f"every_run must be True (every run) or False (only runs that ask for it with "
            f"observe_run), got {every_run!r}"
        )
    for name in ("handle", "flush", "close"):
        method = getattr(sink, name, None)
        if method is None:
            if name == "handle":
                problems.append(f"{type(sink).__name__} has no handle(event) method")
        elif not callable(method):
            problems.append(f"{name} is a {type(method).__name__}, not a method")
        elif inspect.iscoroutinefunction(method):
            problems.append(
                f"{name}() is async, and nothing awaits it: make it a plain def (it runs on "
                "the sink's own worker thread, where blocking is fine)"
            )
    return problems


class _Stop:
    pass


_STOP = _Stop()


class _Marker:
    """Queued by flush(): the worker sets it once everything before it was handled."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class _SinkWorker:
    # A deque rather than queue.Queue: appending is one atomic call with no lock,
    # so a run pays well under a microsecond per event and sink; the worker is
    # woken only when it sleeps, not once per event.
    def __init__(self, name: str, sink: Sink) -> None:
        self.name = name
        self.sink = sink
        #: False: only the runs that ask for the sink (`SinkHub.join`) reach it.
        self.every_run: bool = getattr(sink, "every_run", True)
        self.stopped = False  # set by stop(): runs that joined the sink stop sending to it
        self.delivered = 0
        self.errors = 0
        self.dropped = 0
        self._reported_error = False
        self._reported_drop = False
        # Set under _state by the hub once it stops waiting, and by the worker when
        # it starts close(): whichever comes first decides whether close() runs.
        self._state = threading.Lock()
        self._abandoned = False
        self._closing = False
        self._events: collections.deque[Event | _Stop | _Marker] = collections.deque()
        self._wake = threading.Condition(threading.Lock())
        self._sleeping = False
        drained = getattr(sink, "flush", None)
        self._drained = drained if callable(drained) else None
        self._thread = threading.Thread(
            target=self._run, name=f"groundswell-sink-{name}", daemon=True
        )
        self._started = False
        # A sink that takes only the runs asking for it gets its thread when the
        # first run does: an idle thread polling every POLL_S still takes the GIL
        # from runs that never use the sink.
        if self.every_run:
            self.start()

    def start(self) -> None:
        """Start the worker thread, once (thread-safe; idempotent)."""
        if self._started:
            return
        with self._state:
            if not self._started:
                self._thread.start()
                self._started = True

    def _push(self, item: Event | _Stop | _Marker, urgent: bool = False) -> None:
        self._events.append(item)
        # Waking a thread per event would cost the run a thread switch each time;
        # the worker polls every POLL_S instead, and is woken early only for a
        # flush, a stop, or a backlog.
        if self._sleeping and (urgent or len(self._events) >= WAKE_AT):
            self._wake_worker()

    def put(self, event: Event) -> None:
        events = self._events
        if len(events) >= QUEUE_SIZE:
            self.dropped += 1
            if not self._reported_drop:
                self._reported_drop = True
                logger.warning(
                    "event sink %r is not keeping up; dropping events for it "
                    "(the run goes on; see SinkHub.stats())",
                    self.name,
                )
            return
        # _push inlined: this runs on the run's thread for every event and sink.
        events.append(event)
        if self._sleeping and len(events) >= WAKE_AT:
            self._wake_worker()

    def _wake_worker(self) -> None:
        with self._wake:
            # Once per sleep: until the worker runs again, later events would
            # otherwise each take the lock to notify it once more.
            if self._sleeping:
                self._sleeping = False
                self._wake.notify()

    def _run(self) -> None:
        events = self._events
        pending = False  # events handled since the sink's flush() last ran (or it asked again)
        retry = False  # flush() returned False: call it again after a sleep, not at once
        while True:
            try:
                item = events.popleft()
            except IndexError:
                if pending and not retry and self._drained is not None:
                    pending = retry = self._flush_sink()
                    continue
                retry = False
                with self._wake:
                    self._sleeping = True
                    # Checked again under the lock: an event appended just before
                    # _sleeping was set is seen here; urgent ones after it notify.
                    if not events:
                        self._wake.wait(POLL_S)
                    self._sleeping = False
                continue
            if isinstance(item, _Marker):
                if pending and self._drained is not None:
                    pending = retry = self._flush_sink()
                item.done.set()
                continue
            if isinstance(item, _Stop):
                self._close_sink(pending)
                return
            if self._call(self.sink.handle, item):
                self.delivered += 1
                pending = True

    def _flush_sink(self) -> bool:
        """Call the sink's ``flush()``; True when it returned False, asking to be called again."""
        flush: Any = self._drained  # typed to return None; a sink may return False, or worse
        try:
            result = flush()
            if result is not None and inspect.isawaitable(result):
                raise TypeError(_unawaited(flush, result))
        except BaseException as exc:  # even SystemExit: a sink must never reach the run
            self._failed(exc)
            return False
        return result is False

    def _call(self, fn: Any, *args: Any) -> bool:
        try:
            result = fn(*args)
            if result is not None and inspect.isawaitable(result):
                raise TypeError(_unawaited(fn, result))
            return True
        except BaseException as exc:  # even SystemExit: a sink must never reach the run
            self._failed(exc)
            return False

    def _failed(self, exc: BaseException) -> None:
        self.errors += 1
        if not self._reported_error:
            self._reported_error = True
            logger.warning(
                "event sink %r raised %s: %s (reported once; the run goes on)",
                self.name,
                type(exc).__name__,
                exc,
            )

    def flush(self, deadline: float) -> bool:
        if not self._started and self._events:
            self.start()
        if not self._thread.is_alive():
            return not self._events
        marker = _Marker()
        self._push(marker, urgent=True)
        return marker.done.wait(max(0.0, deadline - time.monotonic()))

    def _close_sink(self, pending: bool) -> None:
        with self._state:
            if self._abandoned:  # the hub gave up on a stuck handle(): never close under it
                return
            self._closing = True
        if pending and self._drained is not None:
            self._call(self._drained)
        try:
            close: Any = self.sink.close  # typed to return None; a broken sink may not
            result = close()
            if result is not None and inspect.isawaitable(result):
                raise TypeError(_unawaited(close, result))
        except BaseException as exc:
            logger.warning("event sink %r failed to close: %s", self.name, exc)

    def stop(self) -> None:
        """Ask the worker to handle what is queued, flush, close the sink and end."""
        self.stopped = True
        self._push(_STOP, urgent=True)
        self.start()  # a never-used sink is still closed, on its own thread as always

    def join(self, deadline: float, timeout: float) -> None:
        """Wait for `stop` to finish until ``deadline``; a sink still busy is left behind."""
        # A worker is a daemon thread: one left behind never holds the process open.
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if not self._thread.is_alive():
            return
        with self._state:
            self._abandoned = True
            closing = self._closing
        if closing:
            logger.warning(
                "event sink %r did not finish close() within %g s; going on without it",
                self.name,
                timeout,
            )
        else:
            # handle() is still running: closing under its feet could corrupt its output.
            logger.warning(
                "event sink %r is stuck in handle() after %g s; not closing it",
                self.name,
                timeout,
            )


def _unawaited(fn: Any, result: Any) -> str:
    """The error for a sink method that returned an awaitable (closed, so it warns no more)."""
    close = getattr(result, "close", None)
    if callable(close):
        close()
    name = getattr(fn, "__name__", "handle")
    return (
        f"{name}() returned {type(result).__name__}, which nothing awaits: it must do its "
        "work before returning (a plain def returning None)"
    )


def _close_timeout() -> float:
    raw = os.environ.get("GROUNDSWELL_SINK_TIMEOUT_S")
    if not raw:
        return CLOSE_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if seconds >= 0:
        return seconds
    # Read at shutdown, where raising would lose every sink's last events.
    logger.warning(
        "GROUNDSWELL_SINK_TIMEOUT_S must be a number of seconds >= 0, got %r; using %g",
        raw,
        CLOSE_TIMEOUT_S,
    )
    return CLOSE_TIMEOUT_S


def _stop_all(workers: list[_SinkWorker], timeout: float) -> None:
    # All at once: every sink gets the whole timeout, and closing N sinks takes
    # at most `timeout`, not N times it.
    deadline = time.monotonic() + timeout
    for worker in workers:
        worker.stop()
    for worker in workers:
        worker.join(deadline, timeout)


class _Observable(Protocol):
    """What `SinkHub.join` needs of a run's tree (`groundswell.EventTree`)."""

    @property
    def delivery(self) -> Callable[[Event], None] | None: ...

    def dispatch_to(self, deliver: Callable[[Event], None] | None) -> None: ...


class RunSinks:
    """Where the events of a run that asked for sinks go (`SinkHub.join`).

    ``base`` is what the run delivered to before (the sinks taking every run, or
    nothing), ``joined`` the workers of the sinks it asked for.
    """

    __slots__ = ("base", "joined")

    def __init__(
        self, base: Callable[[Event], None] | None, joined: tuple[_SinkWorker, ...]
    ) -> None:
        self.base = base
        self.joined = joined

    def __call__(self, event: Event) -> None:
        if self.base is not None:
            self.base(event)
        for worker in self.joined:
            if not worker.stopped:
                worker.put(event)


class SinkHub:
    """Delivers events to sinks, each in isolation: every run to the sinks that take
    every run, and a run to the sinks it asked for (`join`)."""

    def __init__(self, sinks: dict[str, Sink] | None = None) -> None:
        self._workers: list[_SinkWorker] = []
        self._every: list[_SinkWorker] = []  # the workers whose sinks take every run
        self._lock = threading.Lock()
        for name, sink in (sinks or {}).items():
            self.add(name, sink)

    def __bool__(self) -> bool:
        return bool(self._workers)

    def names(self) -> list[str]:
        """The names of the sinks receiving events."""
        return [w.name for w in self._workers]

    def _set_workers(self, workers: list[_SinkWorker]) -> None:
        # Replace the lists instead of mutating them: delivery iterates without a lock.
        self._workers = workers
        self._every = [w for w in workers if w.every_run]

    def add(self, name: str, sink: Sink) -> None:
        """Start delivering events to ``sink`` under ``name``."""
        problems = sink_problems(sink)
        if problems:
            raise TypeError(f"event sink {name!r}: {'; '.join(problems)}")
        with self._lock:
            if name in self.names():
                raise ValueError(f"an event sink named {name!r} is already attached")
            self._set_workers([*self._workers, _SinkWorker(name, sink)])

    def remove(self, name: str, timeout: float | None = None) -> None:
        """Stop delivering to the sink ``name``: flush it, then close it (see `close`)."""
        with self._lock:
            gone = [w for w in self._workers if w.name == name]
            self._set_workers([w for w in self._workers if w.name != name])
        _stop_all(gone, _close_timeout() if timeout is None else timeout)

    def dispatch(self, event: Event) -> None:
        """Queue ``event`` for every sink; never blocks, never raises."""
        for worker in self._workers:
            worker.start()
            worker.put(event)

    def deliver(self, event: Event) -> None:
        """Queue ``event`` for every sink that takes every run; never blocks, never raises."""
        for worker in self._every:
            worker.put(event)

    def run_delivery(self) -> Callable[[Event], None] | None:
        """What a new run's tree sends its changes to: `deliver`, or ``None`` when no sink
        takes every run (the run then costs nothing until it asks for a sink, see `join`)."""
        return self.deliver if self._every else None

    def join(
        self,
        sink: str | type[Any],
        tree: _Observable,
        replay: Callable[[], list[Event]] | None = None,
    ) -> bool:
        """Send the rest of ``tree``'s events to the sink named ``sink`` too (or, for a class,
        to every sink of that class); False when there is no such sink.

        For sinks that take only the runs that ask for them (``every_run =
        False``): the tree's delivery becomes a `RunSinks` that includes them.
        Such a sink first gets the events ``replay()`` returns (what it needs of
        the run so far), on every call.
        """
        with self._lock:
            if isinstance(sink, str):
                workers = [w for w in self._workers if w.name == sink]
            else:
                workers = [w for w in self._workers if isinstance(w.sink, sink)]
            if not workers:
                return False
            delivery = tree.delivery
            events: list[Event] | None = None
            for worker in workers:
                reached = self._reaches(delivery, worker)
                if reached and worker.every_run:
                    continue  # it gets every event of the run already
                if events is None:
                    events = replay() if replay is not None else []
                worker.start()
                for event in events:
                    worker.put(event)
                if reached:
                    continue
                if isinstance(delivery, RunSinks):
                    delivery.joined = (*delivery.joined, worker)
                else:
                    delivery = RunSinks(delivery, (worker,))
                    tree.dispatch_to(delivery)
            return True

    def _reaches(self, delivery: Callable[[Event], None] | None, worker: _SinkWorker) -> bool:
        """Whether ``delivery`` (a tree's) already sends its events to ``worker``."""
        if isinstance(delivery, RunSinks):
            return worker in delivery.joined or self._reaches(delivery.base, worker)
        if delivery == self.dispatch:
            return True
        return delivery == self.deliver and worker.every_run

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every sink has handled its queued events; False on timeout."""
        deadline = time.monotonic() + timeout
        return all(w.flush(deadline) for w in self._workers)

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the workers and close every sink (also run at interpreter exit).

        Every sink gets ``timeout`` seconds (default ``GROUNDSWELL_SINK_TIMEOUT_S``,
        else 5) to handle its queued events and return from ``close()``, all sinks
        at once, so one slow sink never uses up the time another needs. A sink
        still busy after that is named in a warning and left behind: it never
        holds up the caller or interpreter exit.
        """
        with self._lock:
            workers = self._workers
            self._set_workers([])
        _stop_all(workers, _close_timeout() if timeout is None else timeout)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per sink: events delivered, errors raised, events dropped."""
        return {
            w.name: {"delivered": w.delivered, "errors": w.errors, "dropped": w.dropped}
            for w in self._workers
        }
