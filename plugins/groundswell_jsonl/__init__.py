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
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

from groundswell import Event, EventSink, hookimpl, redact

__all__ = ["TRACE_DIR_ENV", "JsonlSink", "trace_path"]

TRACE_DIR_ENV = "GROUNDSWELL_TRACE_DIR"
# Paths of finished runs remembered so late events (background work outliving
# its run) append to the right file.
_KEEP_PATHS = 1024


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "run"


def trace_path(directory: str | os.PathLike[str], run_id: str) -> Path | None:
    """The log file of run ``run_id`` in ``directory``, if it was written there."""
    matches = sorted(Path(directory).glob(f"*-{run_id}.jsonl"))
    return matches[0] if matches else None


class JsonlSink:
    """Writes each run's events to its own JSONL file as they arrive."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}
        self._paths: OrderedDict[str, Path] = OrderedDict()
        self._finished: set[str] = set()  # runs whose root ended (bounded with _paths)

    def _file(self, event: Event) -> IO[str]:
        run_id = event.run_id
        f = self._files.get(run_id)
        if f is not None:
            return f
        path = self._paths.get(run_id)
        if path is None:
            data = event.data
            started = data.get("timestamp") if event.kind == "node_start" else None
            stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(started or time.time()))
            name = data.get("name", "run") if event.kind == "node_start" else "partial"
            path = self.directory / f"{stamp}-{_safe(str(name))}-{_safe(run_id)}.jsonl"
            self._paths[run_id] = path
            while len(self._paths) > _KEEP_PATHS:
                self._finished.discard(self._paths.popitem(last=False)[0])
        f = self._files[run_id] = path.open("a", encoding="utf-8")
        return f

    def handle(self, event: Event) -> None:
        run_id = event.run_id
        f = self._file(event)
        f.write(json.dumps(redact(event.to_record()), separators=(",", ":")) + "\n")
        if event.kind == "node_end" and event.data.get("id") == run_id:
            self._finished.add(run_id)
        if run_id in self._finished:
            # The run is over (late events come from work that outlived it):
            # keep no file open for it.
            self._files.pop(run_id).close()

    def flush(self) -> None:
        """Push buffered lines to disk; the hub calls it whenever the sink has caught up."""
        for f in self._files.values():
            f.flush()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


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
