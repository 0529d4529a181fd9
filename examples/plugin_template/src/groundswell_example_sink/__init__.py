"""An example Groundswell plugin: the ``tally`` event sink and the ``timing`` middleware."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter

from groundswell import AgentMiddleware, Event, EventSink, hookimpl

from .timing import Timing

__all__ = ["TallySink", "Timing"]


class TallySink:
    """Counts finished nodes as ``"<type>:<status>"``."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path if path is not None else os.environ.get("GROUNDSWELL_TALLY_FILE")
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def handle(self, event: Event) -> None:
        if event.kind == "node_end":
            with self._lock:
                self.counts[f"{event.node.type.value}:{event.data['status']}"] += 1

    def close(self) -> None:
        if self.path:
            with open(self.path, "w", encoding="utf-8") as f:
                json.dump(dict(self.counts), f, sort_keys=True)


@hookimpl
def register_event_sinks() -> EventSink:
    return EventSink(
        name="tally", factory=TallySink, description="Counts nodes by type and status."
    )


@hookimpl
def register_agent_middleware() -> AgentMiddleware:
    # Opt-in (default=False): agents ask for it with Agent(middleware=["timing"]).
    return AgentMiddleware(
        "timing", Timing, Timing.order, description="Milliseconds in the model and in tools."
    )
