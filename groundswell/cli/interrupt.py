"""How ``groundswell run`` runs a workflow so that Ctrl-C loses nothing: the first
cancels the run and shows its tree, another stops waiting for it; either way the
command prints one line and exits 130 (`INTERRUPTED`).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, ParamSpec, Protocol, TypeVar

from ..errors import WorkflowError
from ..hookspecs import EventSink, hookimpl
from ..plugins.manager import flush_sinks
from ..scrubbing.serialize import redact
from ..tree._render import rich_tree
from ..tree.events import Event
from ..tree.tree import EventTree, NodeStatus, Replayer
from ..workflow.workflow import Workflow

__all__ = [
    "INTERRUPTED",
    "Outcome",
    "RunThreads",
    "Tap",
    "TapPlugin",
    "Watch",
    "drive",
    "dump_record",
    "quit_now",
    "wait_for_threads",
]

# A live view redraws this often, and shows at most this many nodes (huge runs
# would otherwise spend their time redrawing); the full tree prints at the end.
LIVE_REFRESH_S = 0.25
LIVE_MAX_NODES = 300
# The exit code of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130

_P = ParamSpec("_P")
_T = TypeVar("_T")


def dump_record(record: dict[str, Any]) -> str:
    """``record`` as one compact JSON line (``--jsonl``)."""
    return json.dumps(record, separators=(",", ":"))


class Tap:
    """An in-process event sink that hands the CLI every event of its run."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[Event] = queue.SimpleQueue()

    def handle(self, event: Event) -> None:
        self.events.put(event)

    def close(self) -> None:
        pass

    def drain(self) -> list[dict[str, Any]]:
        """The events so far as JSONL records, scrubbed like the JSONL sink's (``--jsonl``)."""
        out = []
        while True:
            try:
                # Sinks get events as recorded: each output scrubs what it writes.
                out.append(redact(self.events.get_nowait().to_record()))
            except queue.Empty:
                return out


class TapPlugin:
    """The plugin that registers a `Tap` as an event sink."""

    def __init__(self, tap: Tap) -> None:
        self.tap = tap

    @hookimpl
    def register_event_sinks(self) -> EventSink:
        return EventSink(name="cli-tap", factory=lambda: self.tap, description="groundswell run")


@dataclass
class Outcome:
    """How a run ended, as ``groundswell run`` reports it."""

    tree: EventTree
    status: NodeStatus
    output: Any = None
    error: str | None = None
    interrupted: bool = False


class RunThreads(concurrent.futures.ThreadPoolExecutor):
    """The run's default executor (sync steps, ``asyncio.to_thread``), knowing what still runs.

    Python cannot stop a thread: once Ctrl-C has cancelled the run, its tree is shown
    first and only then is such work waited for (a further Ctrl-C quits without it).
    """

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="groundswell-run")
        self._lock = threading.Lock()
        self._jobs: set[concurrent.futures.Future[Any]] = set()

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        future = super().submit(fn, *args, **kwargs)
        with self._lock:
            self._jobs.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._jobs.discard(future)

    def running(self) -> list[concurrent.futures.Future[Any]]:
        """The jobs that have not returned yet."""
        with self._lock:
            return [job for job in self._jobs if not job.done()]


class _LiveView(Protocol):
    """Where the live tree is drawn: a ``rich.live.Live`` (only cli.py imports rich)."""

    def update(self, renderable: Any) -> None: ...


# `flush_sinks` runs here, not on the run's threads, which its sync steps may all hold.
_FLUSHER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="groundswell-flush")


class Watch:
    """One ``groundswell run``: the workflow's task, and its tree rebuilt from its events."""

    def __init__(
        self,
        wf: Workflow[Any, Any],
        call: tuple[tuple[Any, ...], dict[str, Any]],
        args: argparse.Namespace,
        tap: Tap,
        live: _LiveView | None,
    ) -> None:
        self.wf, self.call, self.args, self.tap, self.live = wf, call, args, tap, live
        # Rebuilt from the run's events: the tree to show if the run is interrupted.
        self.replayer = Replayer()
        self.task: asyncio.Future[Any] | None = None

    def pump(self) -> None:
        """Take the events sent so far: print them (``--jsonl``) and add them to the tree."""
        for record in self.tap.drain():
            if self.args.jsonl:
                print(dump_record(record), flush=True)
            # A record of some other run in this process (one the tap joined
            # half-way) fits no tree here; it is not this run's, so skip it.
            with contextlib.suppress(ValueError):
                self.replayer.apply(record)
        if self.live is not None and self.replayer.trees:
            tree = self.replayer.trees[0]
            self.live.update(rich_tree(tree, max_nodes=LIVE_MAX_NODES, crop=True))

    async def run(self) -> Outcome:
        """Run the workflow, showing it as it goes; the first Ctrl-C cancels it."""
        self.task = task = asyncio.ensure_future(self.wf.run(*self.call[0], **self.call[1]))
        interrupted = False
        try:
            try:
                while not task.done():
                    await asyncio.wait([task], timeout=LIVE_REFRESH_S)
                    self.pump()
            except asyncio.CancelledError:
                # Ctrl-C: the runner cancels this task. Cancel the run as well, so its
                # nodes end `cancelled`, and wait for that instead of losing the run.
                interrupted = True
                task.cancel()
                await asyncio.wait([task])
        finally:
            # Whatever happened, show every event of the run before leaving.
            await asyncio.wrap_future(_FLUSHER.submit(flush_sinks))
            self.pump()
        return self.outcome(interrupted)

    def outcome(self, interrupted: bool) -> Outcome:
        """How the run ended, from its task (or from its events, when it did not end)."""
        task = self.task
        if task is None or not task.done() or task.cancelled():
            return self.cut_short(interrupted)
        if isinstance(task.exception(), KeyboardInterrupt):  # a Ctrl-C raised inside the run
            return self.cut_short(True)
        try:
            result = task.result()
        except WorkflowError as exc:
            if exc.result is None:
                raise
            return Outcome(exc.result.tree, NodeStatus.FAILED, error=str(exc))
        return Outcome(result.tree, result.status, result.output)

    def cut_short(self, interrupted: bool = True) -> Outcome:
        """The outcome of a run that was stopped: its tree as its events left it.

        Nodes still running (or waiting for a person) then are shown ``cancelled``: the
        command stops them all.
        """
        if self.task is not None and self.task.done() and not self.task.cancelled():
            self.task.exception()  # seen: never reported as "never retrieved"
        tree = self.replayer.trees[0] if self.replayer.trees else EventTree()
        for node in tree.walk():
            if node.status in (NodeStatus.RUNNING, NodeStatus.WAITING):
                tree.end_node(node, NodeStatus.CANCELLED)
        return Outcome(tree, NodeStatus.CANCELLED, interrupted=interrupted)


def drive(watch: Watch, threads: RunThreads) -> tuple[Outcome, bool]:
    """``asyncio.run(watch.run())``, such that no Ctrl-C loses the run or prints a traceback.

    The first Ctrl-C cancels the run and waits for it to end ``cancelled``. Another,
    before it has (its code holds the event loop, or takes long to stop), stops the
    waiting: what is left of the run is cancelled, and its tree is what its events
    showed. Returns the outcome, and whether Ctrl-C was pressed again (then the
    command waits for nothing more).
    """
    runner = asyncio.Runner()
    runner.get_loop().set_default_executor(threads)
    outcome: Outcome | None = None
    again = False
    try:
        outcome = runner.run(watch.run())
    except KeyboardInterrupt:  # Ctrl-C again, before the run had ended
        again = True
    if outcome is None or outcome.interrupted:
        # What the run left in threads cannot be stopped: never waited for here (the
        # loop's shutdown waits for its default executor; give it an idle one).
        runner.get_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
        threads.shutdown(wait=False, cancel_futures=True)
    try:
        runner.close()  # cancels, and waits for, what is left of the run
    except KeyboardInterrupt:
        again = True
    if outcome is None:
        with contextlib.suppress(KeyboardInterrupt):
            flush_sinks(timeout=1.0)
        watch.pump()
        outcome = watch.cut_short()
    return outcome, again


def wait_for_threads(threads: RunThreads) -> None:
    """After Ctrl-C: wait for the run's threads Python cannot stop; Ctrl-C again quits now."""
    running = threads.running()
    if not running:
        return
    print(
        f"groundswell: waiting for {len(running)} thread{'s' if len(running) > 1 else ''} "
        "of the run (a sync step or asyncio.to_thread call, which Python cannot stop); "
        "Ctrl-C again to quit now",
        file=sys.stderr,
        flush=True,
    )
    try:
        concurrent.futures.wait(running)
    except KeyboardInterrupt:
        quit_now()


def quit_now() -> NoReturn:
    """Exit with code 130 at once (Ctrl-C pressed again), leaving the run's threads behind."""
    with contextlib.suppress(BaseException):
        flush_sinks(timeout=1.0)  # the trace files and history of the run, as far as they got
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(INTERRUPTED)
