"""Save every run as a JSONL event log (bundled plugin ``jsonl``).

Set ``GROUNDSWELL_TRACE_DIR`` and each run is written, as it happens, to
``$GROUNDSWELL_TRACE_DIR/<start time>-<root name>-<run id>.jsonl`` (the run id
is ``result.tree.root.id``). Lines reach the file each time the sink has
caught up with the run (every 20 ms or so while it runs), so a crashed process
leaves a log that still loads: ``EventTree.load(path)`` (or ``groundswell tree
path``) rebuilds the tree, as far as it got, after the process has gone.
Without the variable the sink is off and costs nothing. Every line goes
through `groundswell.redact`, the scrubber every output uses, so the log
holds no secret.

However many runs are live, the sink keeps at most `MAX_OPEN` files open: it
writes through a small pool of open files, the least recently written one
closed first, and closes a run's file once the run has ended. When a file
cannot be opened (the process is out of file descriptors, say), the run's
lines stay in memory and are written at the next try, about 20 ms later; a
warning says so once per outage. Only beyond `MAX_BUFFERED_BYTES` of
unwritten lines are the oldest dropped (counted in `JsonlSink.dropped`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import time
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

from groundswell import Event, EventSink, hookimpl, redact

__all__ = ["MAX_BUFFERED_BYTES", "MAX_OPEN", "TRACE_DIR_ENV", "JsonlSink", "trace_path"]

logger = logging.getLogger("groundswell.jsonl")

TRACE_DIR_ENV = "GROUNDSWELL_TRACE_DIR"
#: Files the sink keeps open at most, however many runs are live.
MAX_OPEN = 32
#: Unwritten lines kept while files cannot be written; beyond it the oldest are dropped.
MAX_BUFFERED_BYTES = 64 * 1024 * 1024
# Lines waiting for more than this are written without waiting for the sink to catch up.
_WRITE_AT_BYTES = 1024 * 1024
# After a failed write, handle() leaves the next try to flush() for this long.
_RETRY_S = 0.02
# Paths of finished runs remembered so late events (background work outliving
# its run) append to the right file.
_KEEP_PATHS = 1024
# Out of file descriptors (the process's or the system's): closing our own files may help.
_FD_PRESSURE = (errno.EMFILE, errno.ENFILE)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "run"


def trace_path(directory: str | os.PathLike[str], run_id: str) -> Path | None:
    """The log file of run ``run_id`` in ``directory``, if it was written there."""
    matches = sorted(Path(directory).glob(f"*-{run_id}.jsonl"))
    return matches[0] if matches else None


class JsonlSink:
    """Writes each run's events to its own JSONL file, with at most ``max_open`` files open.

    ``handle`` turns each event into a line and keeps it; ``flush`` (called by
    the hub each time the sink has caught up) appends each run's lines to its
    file. A file that cannot be opened or written keeps its lines for the next
    ``flush``, which then returns ``False`` so the hub tries again shortly.
    """

    def __init__(self, directory: str | os.PathLike[str], *, max_open: int = MAX_OPEN) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, got {max_open!r}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        #: Files kept open at most.
        self.max_open = max_open
        #: Lines dropped because too much was waiting to be written (see the module docstring).
        self.dropped = 0
        #: Times a file could not be opened or written (its lines were kept to retry).
        self.failures = 0
        self._pool: OrderedDict[str, IO[str]] = OrderedDict()  # open files, least recent first
        self._live: dict[str, Path] = {}  # runs whose root has not ended
        self._done: OrderedDict[str, Path] = OrderedDict()  # ended runs (bounded)
        self._lines: dict[str, list[str]] = {}  # lines not yet written, per run
        self._buffered = 0  # characters in _lines
        self._outage = False  # a write failed since the last one that worked (warned once)
        self._starved = False  # the last open failed for want of file descriptors
        self._retry_at = 0.0  # after a failed write, handle() does not try again before this

    @property
    def open_files(self) -> int:
        """How many files the sink holds open now (never more than ``max_open``)."""
        return len(self._pool)

    @property
    def unwritten(self) -> int:
        """Lines kept in memory, not yet in their files."""
        return sum(len(lines) for lines in list(self._lines.values()))

    def _new_path(self, event: Event) -> Path:
        data = event.data
        started = data.get("timestamp") if event.kind == "node_start" else None
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(started or time.time()))
        name = data.get("name", "run") if event.kind == "node_start" else "partial"
        return self.directory / f"{stamp}-{_safe(str(name))}-{_safe(event.run_id)}.jsonl"

    def handle(self, event: Event) -> None:
        run_id = event.run_id
        if run_id not in self._live and run_id not in self._done:
            self._live[run_id] = self._new_path(event)
        line = json.dumps(redact(event.to_record()), separators=(",", ":")) + "\n"
        lines = self._lines.get(run_id)
        if lines is None:
            self._lines[run_id] = [line]
        else:
            lines.append(line)
        self._buffered += len(line)
        if event.kind == "node_end" and event.data.get("id") == run_id:
            path = self._live.pop(run_id, None)
            if path is not None:
                self._done[run_id] = path
                self._forget_ended()
        if self._buffered >= _WRITE_AT_BYTES and time.monotonic() >= self._retry_at:
            # The runs never let the sink catch up: write now rather than hold it all.
            self._write()

    def flush(self) -> bool:
        """Append every run's waiting lines to its file; False when some must wait for a retry."""
        return self._write()

    def _write(self) -> bool:
        done = True
        for run_id in list(self._lines):
            f = self._open(run_id)
            if f is None:
                done = False
                if self._starved:  # out of descriptors: the other runs' files would fail too
                    break
                continue
            lines = self._lines[run_id]
            try:
                f.write("".join(lines))
                f.flush()
            except OSError as exc:
                self._close(run_id)
                self._failed(exc)
                done = False
                continue
            del self._lines[run_id]
            self._buffered -= sum(map(len, lines))
            if run_id not in self._live:
                self._close(run_id)  # the run has ended: keep no file open for it
        self._forget_ended()
        if not done:
            self._retry_at = time.monotonic() + _RETRY_S
            self._trim()
            return False
        if self._outage:
            self._outage = False
            logger.warning("JSONL traces: writing to %s again", self.directory)
        return True

    def _forget_ended(self) -> None:
        # Oldest first, and never a run whose lines are still waiting for its file.
        done = self._done
        while len(done) > _KEEP_PATHS:
            oldest = next(iter(done))
            if oldest in self._lines:
                break
            del done[oldest]

    def _open(self, run_id: str) -> IO[str] | None:
        f = self._pool.get(run_id)
        if f is not None:
            self._pool.move_to_end(run_id)
            return f
        path = self._live.get(run_id) or self._done.get(run_id)
        if path is None:  # cannot happen: a run with waiting lines keeps its path
            path = self._live[run_id] = self.directory / f"partial-{_safe(run_id)}.jsonl"
        while len(self._pool) >= self.max_open:
            self._close(next(iter(self._pool)))
        self._starved = False
        try:
            f = path.open("a", encoding="utf-8")
        except OSError as exc:
            if exc.errno not in _FD_PRESSURE or not self._pool:
                self._starved = exc.errno in _FD_PRESSURE
                self._failed(exc)
                return None
            # Out of descriptors: give ours back and try once more.
            for other in list(self._pool):
                self._close(other)
            try:
                f = path.open("a", encoding="utf-8")
            except OSError as again:
                self._starved = again.errno in _FD_PRESSURE
                self._failed(again)
                return None
        self._pool[run_id] = f
        return f

    def _close(self, run_id: str) -> None:
        f = self._pool.pop(run_id, None)
        if f is not None:
            try:
                f.close()
            except OSError as exc:  # its lines were flushed already; nothing is lost
                self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        self.failures += 1
        if not self._outage:
            self._outage = True
            logger.warning(
                "JSONL traces: cannot write to %s (%s: %s); keeping the lines to try again",
                self.directory,
                type(exc).__name__,
                exc,
            )

    def _trim(self) -> None:
        """Drop the oldest waiting lines beyond MAX_BUFFERED_BYTES (only while writes fail)."""
        over = self._buffered - MAX_BUFFERED_BYTES
        if over <= 0:
            return
        dropped = 0
        for run_id in list(self._lines):  # runs in the order their first waiting line came
            lines = self._lines[run_id]
            cut = 0
            while cut < len(lines) and over > 0:
                over -= len(lines[cut])
                self._buffered -= len(lines[cut])
                cut += 1
            dropped += cut
            if cut < len(lines):
                del lines[:cut]
                break
            del self._lines[run_id]
        self.dropped += dropped
        logger.warning(
            "JSONL traces: over %d bytes wait to be written to %s; dropped the oldest %d lines "
            "(counted in JsonlSink.dropped)",
            MAX_BUFFERED_BYTES,
            self.directory,
            dropped,
        )

    def close(self) -> None:
        """Write what is left (trying for up to a second while files cannot be opened)."""
        deadline = time.monotonic() + 1.0
        while not self._write() and time.monotonic() < deadline:
            time.sleep(0.02)
        for run_id in list(self._pool):
            self._close(run_id)
        if self._lines:
            logger.warning(
                "JSONL traces: %d lines could not be written to %s",
                self.unwritten,
                self.directory,
            )


def _make_sink() -> JsonlSink | None:
    directory = os.environ.get(TRACE_DIR_ENV)
    return JsonlSink(directory) if directory else None


@hookimpl
def register_event_sinks() -> Any:
    return EventSink(
        name="jsonl",
        factory=_make_sink,
        description=f"every run as a JSONL event log in ${TRACE_DIR_ENV}",
    )
