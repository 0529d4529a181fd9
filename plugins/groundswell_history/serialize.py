"""Sessions and iterations as JSON: the one form the HTTP API and the history tool use.

The names are the session-history harness's (``session_id``, ``agent_id``,
``task_id``, ``status``, ``started_at``, ``completed_at``,
``relevance_score``, ``summary``, ``iterations``) and times are ISO 8601 in
UTC (``2026-02-08T06:06:04.123456Z``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sessions import Session

__all__ = ["iso", "iteration_record", "session_record"]

_FIRST = datetime(1970, 1, 1, tzinfo=UTC).timestamp()
_LAST = datetime(9999, 12, 31, tzinfo=UTC).timestamp()


def iso(moment: float | None) -> str | None:
    """A Unix time as ISO 8601 in UTC (``None`` stays ``None``)."""
    if moment is None:
        return None
    # Clamped: a stored time outside what datetime can show must not fail a reader.
    clamped = min(max(float(moment), _FIRST), _LAST)
    return datetime.fromtimestamp(clamped, UTC).isoformat().replace("+00:00", "Z")


def _cut(text: str | None, limit: int | None) -> str | None:
    if text is None or limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}…"


def iteration_record(item: dict[str, Any], text_limit: int | None = None) -> dict[str, Any]:
    """One stored iteration as JSON; ``text_limit`` cuts its input, output and error."""
    return {
        "seq": item["seq"],
        "kind": item["kind"],
        "name": item["name"],
        "status": item["status"],
        "input_summary": _cut(item.get("input_summary"), text_limit),
        "output_summary": _cut(item.get("output_summary"), text_limit),
        "error": _cut(item.get("error"), text_limit),
        "started_at": iso(item.get("started_at")),
        "completed_at": iso(item.get("ended_at")),
        "usage": item.get("usage") or {},
    }


def session_record(
    session: Session,
    relevance: float | None = None,
    *,
    brief: bool = False,
    text_limit: int | None = None,
) -> dict[str, Any]:
    """A session as JSON; ``iterations`` only when they were loaded.

    ``relevance`` is its score for a query (``relevance_score``, else null).
    ``brief`` leaves out what a model reading it has no use for (the signature
    digest and the run id) and ``text_limit`` cuts the iterations' texts.
    """
    record: dict[str, Any] = {
        "session_id": session.id,
        "agent_id": session.agent_id,
        "task_id": session.task_id,
        "status": session.status,
        "started_at": iso(session.started_at),
        "completed_at": iso(session.ended_at),
        "relevance_score": None if relevance is None else round(relevance, 6),
        "summary": session.output_summary,
        "error": session.error,
        "title": session.title,
        "category": session.category,
        "file_patterns": list(session.file_patterns),
        "metadata": dict(session.metadata),
    }
    if not brief:
        record["task_signature"] = session.task_signature
        record["run_id"] = session.run_id
    if session.iterations is not None:
        record["iterations"] = [iteration_record(i, text_limit) for i in session.iterations]
    return record
