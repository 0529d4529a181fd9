"""The history store's tables, their migrations, and the rows its writes build.

Version 1 was the first schema. Version 2 renamed the status of a session (or
iteration) its caller cancelled from ``cancelled`` to ``terminated``, the
session-history harness's name, and added the ``gs_usage`` counters.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import groundswell

__all__ = [
    "FINAL_STATUSES",
    "METADATA_MAX_BYTES",
    "METADATA_MAX_KEYS",
    "SCHEMA_VERSION",
    "STATUSES",
    "SUMMARY_CHARS",
    "check_metadata",
    "clean",
    "end_row",
    "iteration_row",
    "migrate_rows",
    "session_row",
    "sqlite_pragmas",
    "summarize",
    "tables",
]

SCHEMA_VERSION = 2
#: Every status a session (or iteration) can have.
STATUSES = ("running", "completed", "failed", "terminated")
#: The statuses of a session that has ended.
FINAL_STATUSES = ("completed", "failed", "terminated")
SUMMARY_CHARS = 2_000
#: The most keys a session's metadata may have (set through the API).
METADATA_MAX_KEYS = 64
#: The most bytes a session's metadata may take as JSON (set through the API).
METADATA_MAX_BYTES = 16_384
_WAL_TRIES = 20


def clean(value: Any) -> Any:
    """``value`` made JSON-safe by `groundswell.redact` (the scrubber every output
    uses), with NUL characters removed from its text (PostgreSQL cannot store them)."""
    cleaned = groundswell.redact(value)
    stripped = _no_nul(cleaned)
    # Removing a NUL can join a secret back together ("pass\0word=..."): scrub again.
    return stripped if stripped == cleaned else groundswell.redact(stripped)


def _no_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {k: _no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    return value


def summarize(value: Any, limit: int = SUMMARY_CHARS) -> str:
    """A short, secret-free text for ``value`` (what the store keeps of inputs and outputs)."""
    cleaned = clean(value)
    text = cleaned if isinstance(cleaned, str) else json.dumps(cleaned, ensure_ascii=False)
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"


def _text(value: Any) -> str | None:
    return None if value is None else str(clean(str(value)))


def check_metadata(metadata: Mapping[str, Any]) -> None:
    """Raise `ValueError` when ``metadata`` has over `METADATA_MAX_KEYS` keys or takes
    over `METADATA_MAX_BYTES` bytes as JSON: it is stored with every session and sent
    back with every answer, so one client must not fill the store through it."""
    if len(metadata) > METADATA_MAX_KEYS:
        raise ValueError(
            f"metadata may have at most {METADATA_MAX_KEYS} keys, got {len(metadata)}; "
            "nest related values under one key or keep them elsewhere"
        )
    size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode())
    if size > METADATA_MAX_BYTES:
        raise ValueError(
            f"metadata may take at most {METADATA_MAX_BYTES} bytes as JSON, got {size}; "
            "keep large values elsewhere and store a reference to them"
        )


def check_status(status: str, allowed: Sequence[str] = STATUSES) -> str:
    """``status`` when it is one of ``allowed``; else a ValueError naming them."""
    if status not in allowed:
        raise ValueError(f"status must be one of {', '.join(allowed)}; got {status!r}")
    return status


def session_row(
    session_id: str,
    agent_id: str,
    *,
    status: str = "running",
    started_at: float | None = None,
    ended_at: float | None = None,
    task_id: str | None = None,
    task_signature: str | None = None,
    title: str | None = None,
    category: str | None = None,
    file_patterns: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    output: Any = None,
    error: str | None = None,
) -> dict[str, Any]:
    """The ``gs_sessions`` row of a session that starts (``start_session``)."""
    check_status(status)
    started_at = time.time() if started_at is None else started_at
    if status != "running" and ended_at is None:
        ended_at = max(time.time(), started_at)
    if ended_at is not None and ended_at < started_at:
        raise ValueError("a session cannot end before it started")
    return {
        "id": session_id,
        "agent_id": agent_id,
        "status": status,
        "started_at": started_at,
        "ended_at": ended_at,
        "task_id": _text(task_id),
        "task_signature": str(task_signature) if task_signature else None,
        "title": _text(title) if title else None,
        "category": _text(category),
        "file_patterns": json.dumps(sorted({str(clean(p)) for p in file_patterns})),
        "metadata": json.dumps(clean(dict(metadata or {}))),
        "output_summary": None if output is None else summarize(output),
        "error": None if error is None else summarize(error),
        "run_id": run_id,
    }


def end_row(
    session_id: str,
    status: str,
    *,
    ended_at: float | None = None,
    output: Any = None,
    error: str | None = None,
    agent_id: str | None = None,
) -> dict[str, Any]:
    """The values that end a session (``end_session``); with ``agent_id``, only that
    agent's session of that id ends."""
    check_status(status, FINAL_STATUSES)
    return {
        "session": session_id,
        "agent": agent_id,
        "status": status,
        "ended_at": time.time() if ended_at is None else ended_at,
        "output_summary": None if output is None else summarize(output),
        "error": None if error is None else summarize(error),
    }


def iteration_row(
    session_id: str,
    kind: str,
    *,
    name: str = "",
    status: str = "completed",
    input: Any = None,
    output: Any = None,
    error: str | None = None,
    started_at: float | None = None,
    ended_at: float | None = None,
    usage: Mapping[str, int] | None = None,
    agent_id: str | None = None,
) -> dict[str, Any]:
    """The ``gs_iterations`` row of one model turn or tool call (``add_iteration``);
    ``agent_id`` (not a column) is whose session it must belong to, if given."""
    return {
        "agent": agent_id,
        "session_id": session_id,
        "kind": kind,
        "name": name,
        "status": check_status(status),
        "input_summary": None if input is None else summarize(input),
        "output_summary": None if output is None else summarize(output),
        "error": None if error is None else summarize(error),
        "started_at": started_at,
        "ended_at": ended_at,
        "usage": json.dumps(dict(usage or {})),
    }


def migrate_rows(conn: Any, found: int, all_tables: tuple[Any, ...]) -> None:
    """Convert the rows of a store at schema version ``found`` to `SCHEMA_VERSION`.

    The tables themselves are created (``create_all``) before this runs.
    """
    sessions, iterations = all_tables[2], all_tables[3]
    if found < 2:
        for table in (sessions, iterations):
            conn.execute(
                table.update().where(table.c.status == "cancelled").values(status="terminated")
            )


def sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL, a busy timeout and NORMAL sync on each new SQLite connection."""
    # WAL lets readers and one writer work at once and survives a killed process;
    # the busy timeout makes concurrent writers wait instead of failing.
    import sqlite3

    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")
    # Switching a new database to WAL needs it to itself, and SQLite answers
    # "locked" at once (no busy wait) when another connection opens it at that
    # moment, as a sink's store and a tool's do: try again for up to ~4 s.
    for attempt in range(_WAL_TRIES):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == _WAL_TRIES - 1:
                raise
            time.sleep(0.02 * (attempt + 1))
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def tables(sa: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    """``(metadata, info, sessions, iterations, memories, usage)``."""
    meta = sa.MetaData()
    info = sa.Table(
        "gs_history_info",
        meta,
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    sessions = sa.Table(
        "gs_sessions",
        meta,
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("agent_id", sa.Text, nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float),
        sa.Column("task_id", sa.Text),
        sa.Column("task_signature", sa.String(64), index=True),
        sa.Column("title", sa.Text),
        sa.Column("category", sa.Text),
        sa.Column("file_patterns", sa.Text, nullable=False, default="[]"),
        sa.Column("metadata", sa.Text, nullable=False, default="{}"),
        sa.Column("output_summary", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("run_id", sa.String(64)),
    )
    iterations = sa.Table(
        "gs_iterations",
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("gs_sessions.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("name", sa.Text, nullable=False, default=""),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("input_summary", sa.Text),
        sa.Column("output_summary", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("started_at", sa.Float),
        sa.Column("ended_at", sa.Float),
        sa.Column("usage", sa.Text, nullable=False, default="{}"),
    )
    memories = sa.Table(
        "gs_memories",
        meta,
        sa.Column("agent_id", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("importance", sa.Float, nullable=False),
        sa.Column("access_count", sa.Integer, nullable=False, default=0),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("last_accessed_at", sa.Float),
        sa.Column("expires_at", sa.Float),
        sa.Column("metadata", sa.Text, nullable=False, default="{}"),
    )
    # Counters, one row per agent and source ("api", "tool"), so they never grow
    # with the number of queries.
    usage = sa.Table(
        "gs_usage",
        meta,
        sa.Column("agent_id", sa.Text, primary_key=True),
        sa.Column("source", sa.String(16), primary_key=True),
        sa.Column("queries", sa.Integer, nullable=False, default=0),
        sa.Column("empty", sa.Integer, nullable=False, default=0),
        sa.Column("returned", sa.Integer, nullable=False, default=0),
        sa.Column("relevance_sum", sa.Float, nullable=False, default=0.0),
        sa.Column("first_at", sa.Float, nullable=False),
        sa.Column("last_at", sa.Float, nullable=False),
    )
    return meta, info, sessions, iterations, memories, usage
