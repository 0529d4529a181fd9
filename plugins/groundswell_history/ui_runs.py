"""Where the dev UI finds runs: a trace folder's JSONL logs, and the runs of its own process.

`TraceFolder` reads the files the ``jsonl`` sink writes (``GROUNDSWELL_TRACE_DIR``)
and follows one while it grows. `LiveRuns` is an event sink that keeps the
events of the runs of this process (the workflows the UI starts), each
record scrubbed as the JSONL sink scrubs it, and hands them to followers as
they happen. `Runs` puts both together: one list, one tree per run id.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundswell import Event, EventTree, NodeStatus, NodeType, redact

__all__ = ["LiveRuns", "RunSummary", "Runs", "TraceFolder", "summarize"]

#: Runs of this process kept in memory, newest kept, oldest dropped first.
LIVE_KEPT = 200
#: How often a followed trace file is read for new lines.
TAIL_INTERVAL_S = 0.1
_END = "end"


@dataclass
class RunSummary:
    """One line of the runs list."""

    run_id: str
    name: str
    status: str
    started_at: float | None
    ended_at: float | None
    duration: float | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cost_usd: float | None
    source: str  # "trace" (a file in the trace folder) or "live" (this process)
    file: str | None = None
    waiting: int = 0

    def to_dict(self) -> dict[str, Any]:
        started = self.started_at
        return {
            **self.__dict__,
            "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat()
            if started is not None
            else None,
        }


def _waiting(tree: EventTree) -> int:
    return sum(1 for node in tree.walk() if node.status is NodeStatus.WAITING)


def summarize(tree: EventTree, source: str, file: str | None = None) -> RunSummary | None:
    """The list line of ``tree`` (``None`` for a tree without a root)."""
    root = tree.root
    if root is None:
        return None
    metrics = root.metrics
    usage = metrics.get("usage") if isinstance(metrics.get("usage"), dict) else {}
    if not usage:  # a run still going has no sums on its root yet: add its model calls'
        usage = {}
        for node in tree.walk():
            own = node.metrics.get("usage")
            if node.type.value == "model_call" and isinstance(own, dict):
                for key, value in own.items():
                    if isinstance(value, int):
                        usage[key] = usage.get(key, 0) + value
    cost = metrics.get("cost_usd")
    duration = metrics.get("duration")
    if not isinstance(duration, int | float) and root.ended_at is not None:
        duration = root.ended_at - root.timestamp
    waiting = _waiting(tree)
    status = root.status.value
    if waiting and root.status is NodeStatus.RUNNING:
        status = NodeStatus.WAITING.value  # a run held up by a person, as the list shows it
    return RunSummary(
        run_id=root.id,
        name=root.name,
        status=status,
        started_at=root.timestamp,
        ended_at=root.ended_at,
        duration=duration if isinstance(duration, int | float) else None,
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cost_usd=cost if isinstance(cost, int | float) else None,
        source=source,
        file=file,
        waiting=waiting,
    )


def read_records(path: Path) -> list[dict[str, Any]]:
    """The event records of a JSONL log; lines that are not JSON (a cut-off last line) skipped."""
    records = []
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.endswith("\n"):
                break  # still being written
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def _trees(records: list[dict[str, Any]]) -> list[EventTree]:
    try:
        trees = EventTree.replay_all(records)
    except (ValueError, TypeError, KeyError):
        return []
    for tree in trees:
        _mark_waiting(tree)
    return trees


def _mark_waiting(tree: EventTree) -> None:
    """Give a replayed wait that is still open the ``waiting`` status it has in its process.

    A wait node starts ``running`` and becomes ``waiting`` with its ``wait_opened``
    event; an event log carries the event, not the change of status.
    """
    for node in tree.walk():
        if (
            node.type is NodeType.WAIT
            and node.status is NodeStatus.RUNNING
            and any(event.get("type") == "wait_opened" for event in node.events)
        ):
            node.status = NodeStatus.WAITING


@dataclass
class _Cached:
    stamp: tuple[int, int]
    summaries: list[RunSummary]


@dataclass
class TraceFolder:
    """The JSONL logs in ``directory`` (one run per file, as the ``jsonl`` sink writes them)."""

    directory: Path
    _cache: dict[Path, _Cached] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob("*.jsonl"))

    def summaries(self) -> list[RunSummary]:
        """Every run in the folder; a file read again only when it has changed."""
        out: list[RunSummary] = []
        for path in self.files():
            try:
                stat = path.stat()
            except OSError:
                continue
            stamp = (stat.st_mtime_ns, stat.st_size)
            with self._lock:
                cached = self._cache.get(path)
            if cached is None or cached.stamp != stamp:
                try:
                    trees = _trees(read_records(path))
                except OSError:
                    continue
                found = [summarize(t, "trace", path.name) for t in trees]
                cached = _Cached(stamp, [s for s in found if s is not None])
                with self._lock:
                    self._cache[path] = cached
            out.extend(cached.summaries)
        return out

    def path_of(self, run_id: str) -> Path | None:
        """The file holding run ``run_id``: named for it by the sink, else found by reading."""
        if not self.directory.is_dir():
            return None
        named = sorted(self.directory.glob(f"*-{_glob_safe(run_id)}.jsonl"))
        if named:
            return named[0]
        self.summaries()
        with self._lock:
            for path, cached in self._cache.items():
                if any(s.run_id == run_id for s in cached.summaries):
                    return path
        return None

    def tree(self, run_id: str) -> EventTree | None:
        path = self.path_of(run_id)
        if path is None:
            return None
        for tree in _trees(read_records(path)):
            if tree.root is not None and tree.root.id == run_id:
                return tree
        return None

    async def follow(self, run_id: str) -> AsyncIterator[dict[str, Any]]:
        """The run's records so far, then each new one as the file grows, until the run ends."""
        path = self.path_of(run_id)
        if path is None:
            return
        offset, partial = 0, ""
        while True:
            try:
                with path.open(encoding="utf-8", errors="replace") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                    offset = handle.tell()
            except OSError:
                return
            partial += chunk
            *lines, partial = partial.split("\n")
            for line in lines:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(record, dict) or record.get("run_id") not in (None, run_id):
                    continue
                yield record
                if _ends_run(record, run_id):
                    return
            await asyncio.sleep(TAIL_INTERVAL_S)


def _glob_safe(run_id: str) -> str:
    return "".join(c for c in run_id if c.isalnum() or c in "_.-")


def _ends_run(record: dict[str, Any], run_id: str) -> bool:
    data = record.get("data")
    return (
        record.get("kind") == "node_end"
        and isinstance(data, dict)
        and data.get("id") == run_id
        and data.get("status") != NodeStatus.WAITING.value
    )


class _Follower:
    """One follower of a live run: records reach its asyncio queue from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def put(self, record: dict[str, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the follower's loop has closed
            self.loop.call_soon_threadsafe(self.queue.put_nowait, record)


class LiveRuns:
    """An event sink keeping the runs of this process, and followers of each.

    Every record is scrubbed the way the ``jsonl`` sink scrubs its lines
    (`groundswell.redact` of the event's record), so what the UI shows of a
    run in this process is what a trace file would hold.
    """

    every_run = True

    def __init__(self, kept: int = LIVE_KEPT) -> None:
        self.kept = kept
        self._records: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._followers: dict[str, list[_Follower]] = {}
        self._summaries: dict[str, tuple[int, RunSummary | None]] = {}
        self._lock = threading.Lock()

    def handle(self, event: Event) -> None:
        record: dict[str, Any] = redact(event.to_record())
        run_id = event.run_id
        with self._lock:
            records = self._records.get(run_id)
            if records is None:
                records = self._records[run_id] = []
                while len(self._records) > self.kept:
                    gone, _ = self._records.popitem(last=False)
                    self._followers.pop(gone, None)
                    self._summaries.pop(gone, None)
            records.append(record)
            followers = list(self._followers.get(run_id, ()))
        for follower in followers:
            follower.put(record)

    def close(self) -> None:
        pass

    def expect(self, run_id: str) -> None:
        """Make ``run_id`` followable before its first event arrives (a run just started)."""
        with self._lock:
            self._records.setdefault(run_id, [])

    def run_ids(self) -> list[str]:
        with self._lock:
            return list(self._records)

    def records(self, run_id: str) -> list[dict[str, Any]] | None:
        with self._lock:
            found = self._records.get(run_id)
            return list(found) if found is not None else None

    def tree(self, run_id: str) -> EventTree | None:
        records = self.records(run_id)
        if not records:
            return None
        trees = _trees(records)
        return trees[0] if trees else None

    def summaries(self) -> list[RunSummary]:
        out = []
        for run_id in self.run_ids():
            records = self.records(run_id) or []
            # A run is replayed again only when it has new events since the last list.
            cached = self._summaries.get(run_id)
            if cached is None or cached[0] != len(records):
                trees = _trees(records) if records else []
                cached = (len(records), summarize(trees[0], "live") if trees else None)
                self._summaries[run_id] = cached
            if cached[1] is not None:
                out.append(cached[1])
        return out

    async def follow(self, run_id: str) -> AsyncIterator[dict[str, Any]]:
        """The run's records so far, then each new one as it happens, until the run ends."""
        follower = _Follower(asyncio.get_running_loop())
        with self._lock:
            so_far = list(self._records.get(run_id, ()))
            self._followers.setdefault(run_id, []).append(follower)
        try:
            for record in so_far:
                yield record
                if _ends_run(record, run_id):
                    return
            while True:
                record = await follower.queue.get()
                yield record
                if _ends_run(record, run_id):
                    return
        finally:
            with self._lock:
                listed = self._followers.get(run_id, [])
                if follower in listed:
                    listed.remove(follower)


@dataclass
class Runs:
    """The runs the UI shows: this process's (``live``) and a trace folder's (``traces``)."""

    live: LiveRuns
    traces: TraceFolder | None

    def summaries(self) -> list[RunSummary]:
        """Every run, newest first; a run of this process wins over its trace file."""
        live = self.live.summaries()
        seen = {s.run_id for s in live}
        from_files = self.traces.summaries() if self.traces is not None else []
        every = live + [s for s in from_files if s.run_id not in seen]
        return sorted(every, key=lambda s: s.started_at or 0.0, reverse=True)

    def tree(self, run_id: str) -> tuple[EventTree, str] | None:
        tree = self.live.tree(run_id)
        if tree is not None:
            return tree, "live"
        if self.traces is not None:
            found = self.traces.tree(run_id)
            if found is not None:
                return found, "trace"
        return None

    def follow(self, run_id: str) -> AsyncIterator[dict[str, Any]] | None:
        if self.live.records(run_id) is not None:
            return self.live.follow(run_id)
        if self.traces is not None and self.traces.path_of(run_id) is not None:
            return self.traces.follow(run_id)
        return None
