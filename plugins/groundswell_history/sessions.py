"""Sessions as Python objects, and the edits the sessions API makes to them.

`Session` is one stored session (Unix times; `Session.to_dict` is its JSON
form). `SessionEdits` is the part of `HistoryStore` that creates, updates and
terminates sessions for the sessions API.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from groundswell import GroundswellError

from .schema import check_metadata, check_status, clean, session_row, summarize

__all__ = ["Session", "SessionConflict", "SessionEdits", "session_from_row"]

_UNSET: Any = object()


class SessionConflict(GroundswellError):
    """A session cannot be changed that way: its id is taken, or it has ended already."""


@dataclass
class Session:
    """One recorded agent session: a top-level ``agent.prompt`` call and its turns.

    Times are Unix times here; `groundswell_history.session_record` gives the
    JSON form (the harness's field names, ISO 8601 times) the API and the
    history tool answer with.
    """

    id: str
    agent_id: str
    status: str
    started_at: float
    ended_at: float | None = None
    task_id: str | None = None
    task_signature: str | None = None
    title: str | None = None
    category: str | None = None
    file_patterns: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    output_summary: str | None = None
    error: str | None = None
    run_id: str | None = None
    iterations: list[dict[str, Any]] | None = None

    def to_dict(self, relevance: float | None = None) -> dict[str, Any]:
        """The session as JSON: the names and ISO 8601 times the API answers with."""
        from .serialize import session_record

        return session_record(self, relevance)


def session_from_row(row: Any) -> Session:
    """A `Session` from a ``gs_sessions`` row."""
    data = dict(row._mapping)
    data["file_patterns"] = json.loads(data["file_patterns"] or "[]")
    data["metadata"] = json.loads(data["metadata"] or "{}")
    return Session(**data)


class _Store(Protocol):
    """What `SessionEdits` needs of the store it is part of."""

    engine: Any
    _tables: tuple[Any, ...]

    def session(self, session_id: str, *, include_iterations: bool = True) -> Session | None: ...

    def update_session(
        self,
        session_id: str,
        *,
        status: str | None = None,
        summary: str | None = ...,
        error: str | None = ...,
        ended_at: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        task_id: str | None = ...,
        expected_status: str | None = None,
    ) -> Session | None: ...


class SessionEdits:
    """`HistoryStore`'s sessions API operations."""

    def create_session(
        self: _Store,
        agent_id: str,
        *,
        session_id: str | None = None,
        status: str = "running",
        started_at: float | None = None,
        ended_at: float | None = None,
        task_id: str | None = None,
        task_signature: str | None = None,
        title: str | None = None,
        category: str | None = None,
        file_patterns: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        summary: str | None = None,
        error: str | None = None,
    ) -> Session:
        """Create a session (any status; a new ``api-...`` id when none is given) and return it.

        Raises `SessionConflict` when ``session_id`` is taken (by any agent: the
        message does not say whose it is).
        """
        from sqlalchemy.exc import IntegrityError

        # The prefix keeps made ids apart from recorded sessions' (prompt node ids).
        sid = session_id or f"api-{uuid.uuid4().hex}"
        row = session_row(
            sid,
            agent_id,
            status=status,
            started_at=started_at,
            ended_at=ended_at,
            task_id=task_id,
            task_signature=task_signature,
            title=title,
            category=category,
            file_patterns=file_patterns,
            metadata=metadata,
            output=summary,
            error=error,
        )
        try:
            with self.engine.begin() as conn:
                conn.execute(self._tables[2].insert(), [row])
        except IntegrityError:
            raise SessionConflict(
                f"a session with id {sid!r} exists already; choose another id"
            ) from None
        made = self.session(sid, include_iterations=False)
        assert made is not None  # just written
        return made

    def update_session(
        self: _Store,
        session_id: str,
        *,
        status: str | None = None,
        summary: str | None = _UNSET,
        error: str | None = _UNSET,
        ended_at: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        task_id: str | None = _UNSET,
        expected_status: str | None = None,
    ) -> Session | None:
        """Change a session: its status, summary, error, end, task id; ``metadata`` is
        merged into what it has. ``None`` when there is no such session.

        Ending it sets its end time (now, unless ``ended_at``). Raises
        `SessionConflict` for a session that has ended being set ``running``, and
        when ``expected_status`` is given and the session's status is another
        (checked in the same transaction as the change). Raises `ValueError` when
        the merged metadata would pass `METADATA_MAX_KEYS` or `METADATA_MAX_BYTES`.
        """
        import sqlalchemy as sa

        sessions = self._tables[2]
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(sessions).where(sessions.c.id == session_id)).first()
            if row is None:
                return None
            found = session_from_row(row)
            if expected_status is not None and found.status != expected_status:
                raise SessionConflict(
                    f"session {session_id!r} has ended already ({found.status}); "
                    f"only a running session can be {status or 'changed'}"
                    if expected_status == "running"
                    else f"session {session_id!r} is {found.status}, not {expected_status}"
                )
            if ended_at is not None and ended_at < found.started_at:
                raise ValueError("a session cannot end before it started")
            if ended_at is not None and (status or found.status) == "running":
                raise ValueError("a running session has no end: give the status it ended with")
            values: dict[str, Any] = {}
            if status is not None and status != found.status:
                check_status(status)
                if status == "running":
                    raise SessionConflict(
                        f"session {session_id!r} has ended ({found.status}); it cannot run again"
                    )
                values["status"] = status
                if found.ended_at is None and ended_at is None:
                    values["ended_at"] = time.time()
            if ended_at is not None:
                values["ended_at"] = ended_at
            if summary is not _UNSET:
                values["output_summary"] = None if summary is None else summarize(summary)
            if error is not _UNSET:
                values["error"] = None if error is None else summarize(error)
            if task_id is not _UNSET:
                values["task_id"] = None if task_id is None else str(clean(task_id))
            if metadata:
                merged = clean({**found.metadata, **dict(metadata)})
                check_metadata(merged)
                values["metadata"] = json.dumps(merged)
            if values:
                # Only if nobody changed its status meanwhile (a sink ending it, say).
                changed = conn.execute(
                    sessions.update()
                    .where((sessions.c.id == session_id) & (sessions.c.status == found.status))
                    .values(**values)
                ).rowcount
                if not changed:
                    raise SessionConflict(
                        f"session {session_id!r} changed while it was being updated; try again"
                    )
        return self.session(session_id, include_iterations=False)

    def terminate_session(
        self: _Store, session_id: str, *, reason: str | None = None, at: float | None = None
    ) -> Session | None:
        """End a running session as ``terminated`` (``reason`` becomes its error).

        ``None`` when there is no such session; raises `SessionConflict` when it
        has ended already, even when it ends (a sink ending it, say) while this runs.
        """
        return self.update_session(
            session_id,
            status="terminated",
            ended_at=at,
            error=reason if reason is not None else _UNSET,
            expected_status="running",
        )
