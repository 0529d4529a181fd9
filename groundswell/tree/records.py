"""A node's JSON records: its event-log dicts, and a node read back from one (checked)."""

from __future__ import annotations

import math
from typing import Any

from .node import EventNode, NodeStatus, metrics_of, payload_of, recorded_events
from .tracebacks import check_traceback


def start_record(node: EventNode) -> dict[str, Any]:
    """The data of a ``node_start`` event: the node's `to_dict` record, without children."""
    # Copies, not the node's live containers: the node keeps changing after this event.
    # Built directly (as `to_dict` would, keys in its order): this runs on the run's
    # thread for every node of an observed tree. `_value_` is the member's value
    # without the enum descriptor.
    return {
        "id": node.id,
        "type": node.type._value_,
        "name": node.name,
        "status": node.status._value_,
        "timestamp": node.timestamp,
        "ended_at": node.ended_at,
        "parent_id": node.parent_id,
        "payload": dict(payload_of(node)),
        "metrics": dict(metrics_of(node)),
        "events": list(recorded_events(node)),
        "error": node.error,
        "children": [],
    }


def end_record(node: EventNode) -> dict[str, Any]:
    """The data of a ``node_end`` event: what a node has when it ends."""
    return {
        "id": node.id,
        "status": node.status._value_,
        "ended_at": node.ended_at,
        "metrics": dict(metrics_of(node)),
        "payload": dict(payload_of(node)),
        "error": node.error,
    }


def node_from_record(record: Any) -> EventNode:
    """A node from its `to_dict` record; ``ValueError`` naming what is malformed."""
    if not isinstance(record, dict):
        raise ValueError(f"a node record should be an object, got {record!r:.40}")
    try:
        node = EventNode(
            record_field(record, "type", str, required=True),
            record_field(record, "name", str, required=True),
            id=record_field(record, "id", str, required=True),
            parent_id=record_field(record, "parent_id", str),
            status=record_status(record.get("status", NodeStatus.RUNNING.value)),
            timestamp=record_field(record, "timestamp", (int, float), required=True),
            payload=dict(record_field(record, "payload", dict) or {}),
        )
        node.ended_at = record_field(record, "ended_at", (int, float))
        node.metrics = dict(record_field(record, "metrics", dict) or {})
        events = record_field(record, "events", list)
        if events:
            node.events = list(events)
        node.error = record_error(record)
    except ValueError as exc:
        raise ValueError(f"malformed node record {record.get('id', '?')!r}: {exc}") from None
    return node


def record_field(record: dict[str, Any], key: str, kind: Any, *, required: bool = False) -> Any:
    """``record[key]`` when it has type ``kind`` (or is absent/None and not required)."""
    value = record.get(key)
    if value is None:
        if required:
            raise ValueError(f"{key!r} is missing")
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        expected = " or ".join(dict.fromkeys(_JSON_NAMES.get(k, k.__name__) for k in kinds))
        raise ValueError(f"{key!r} should be {expected}, got {value!r:.40}")
    if isinstance(value, float) and not math.isfinite(value):  # NaN/Infinity parse as JSON
        raise ValueError(f"{key!r} should be a finite number, got {value!r}")
    return value


_JSON_NAMES = {
    str: "a string",
    int: "a number",
    float: "a number",
    dict: "an object",
    list: "a list",
}


def record_error(record: dict[str, Any]) -> dict[str, Any] | None:
    """A record's ``error``: an object whose traceback, if any, is well formed."""
    error: dict[str, Any] | None = record_field(record, "error", dict)
    if error is not None:
        check_traceback(error)
    return error


def record_status(value: Any) -> NodeStatus:
    """A record's ``status`` as a `NodeStatus`; ``ValueError`` listing the known ones."""
    try:
        return NodeStatus(value)
    except ValueError:
        known = ", ".join(s.value for s in NodeStatus)
        raise ValueError(f"unknown status {value!r:.40} (expected one of {known})") from None
