"""The history store: sessions, iterations and memory in SQL through SQLAlchemy 2.

``HistoryStore(url)`` takes any SQLAlchemy URL; the default is a SQLite file
at ``$GROUNDSWELL_HOME/history.db`` (``~/.groundswell/history.db``). The
schema is created, and migrated, by the store itself. SQLite runs in WAL mode
with a busy timeout, so several processes can write at once and a process
killed mid-write leaves a readable file.

Everything stored passes through `groundswell.redact`, the scrubber every
output uses, so credentials never reach the store.

A session's status is ``running``, ``completed``, ``failed`` or
``terminated`` (its caller cancelled it, or someone terminated it). A
session's first end wins: ending one that has ended already changes nothing.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import groundswell
from groundswell import ConfigurationError, GroundswellError

from .improvement import ImprovementMethods
from .memory import MEMORY_KINDS, Memory
from .relevance import scorer
from .schema import (
    FINAL_STATUSES,
    SCHEMA_VERSION,
    STATUSES,
    check_status,
    clean,
    end_row,
    iteration_row,
    migrate_rows,
    session_row,
    sqlite_pragmas,
    summarize,
    tables,
)
from .sessions import Session, SessionConflict, SessionEdits, session_from_row

__all__ = [
    "FINAL_STATUSES",
    "MEMORY_KINDS",
    "SCHEMA_VERSION",
    "STATUSES",
    "HistoryStore",
    "Memory",
    "Session",
    "SessionConflict",
    "StoreUnavailable",
    "clean",
    "default_url",
    "groundswell_home",
    "safe_url",
    "summarize",
]

_MIGRATE_TRIES = 6  # schema creation raced by other stores (see HistoryStore.migrate)


def _sqlalchemy() -> Any:
    try:
        import sqlalchemy
    except ImportError as exc:
        raise ConfigurationError(
            'session history needs SQLAlchemy: pip install "groundswell[history]"'
        ) from exc
    return sqlalchemy


class StoreUnavailable(GroundswellError):
    """The history store's database cannot be reached (down, refusing, or not there)."""


def groundswell_home() -> Path:
    """``GROUNDSWELL_HOME``, else ``~/.groundswell``: where the default store and secret live."""
    return Path(os.environ.get("GROUNDSWELL_HOME") or Path.home() / ".groundswell")


def default_url() -> str:
    """``GROUNDSWELL_HISTORY_URL``, else a SQLite file in `groundswell_home`."""
    url = os.environ.get("GROUNDSWELL_HISTORY_URL")
    if url:
        return url
    return f"sqlite:///{groundswell_home() / 'history.db'}"


def safe_url(url: str) -> str:
    """The URL without its password (for messages and logs).

    The password is masked wherever it is: in the user part (even one holding
    an unescaped ``@``), or as a ``password`` (or other secret-named) query
    parameter. A URL SQLAlchemy cannot read is shown as ``<unparseable URL>``.
    """
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:  # not a URL SQLAlchemy reads (or SQLAlchemy is not installed)
        return "<unparseable URL>"
    mask = uuid.uuid4().hex  # URL-safe, so it renders as given; then it becomes the marker
    host = parsed.host or ""
    if "@" in host:
        # An unescaped "@" in the password ("u:p@ss@host"): SQLAlchemy splits at the
        # first "@", so the rest of the password would show as part of the host.
        parsed = parsed.set(password=mask, host=host.rpartition("@")[2])
    elif parsed.password is not None:
        parsed = parsed.set(password=mask)
    hidden = [
        key
        for key in parsed.query
        if key.lower() in _PASSWORD_KEYS or groundswell.is_secret_key(key.lower())
    ]
    if hidden:
        parsed = parsed.update_query_dict(dict.fromkeys(hidden, mask))
    elif parsed.password is None:
        return groundswell.scrub(url)  # as given: rendering would escape a SQLite path
    shown = parsed.render_as_string(hide_password=False).replace(mask, _MARKER)
    return groundswell.scrub(shown)


_PASSWORD_KEYS = frozenset({"password", "passwd", "pwd", "sslpassword"})
_MARKER = "**********"  # what groundswell.scrub puts in place of a secret


# write_batch's operations: each builds the row its method writes.
_ROWS: dict[str, Any] = {
    "start_session": session_row,
    "add_iteration": iteration_row,
    "end_session": end_row,
}


class HistoryStore(SessionEdits, ImprovementMethods):
    """Sessions, iterations and memories of agents, in any SQLAlchemy database."""

    def __init__(self, url: str | None = None, *, echo: bool = False) -> None:
        sa = _sqlalchemy()
        self.url = url or default_url()
        if self.url.startswith("sqlite:///") and not self.url.startswith("sqlite:///:memory:"):
            folder = Path(self.url.removeprefix("sqlite:///")).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigurationError(
                    f"history store: cannot create the folder {str(folder)!r} for "
                    f"{safe_url(self.url)!r}: {exc.strerror or exc}"
                ) from exc
        try:
            options: dict[str, Any] = {"echo": echo, "future": True}
            if self.url.startswith("sqlite"):
                options["connect_args"] = {"timeout": 30}
            else:
                options["pool_pre_ping"] = True
                if self.url.startswith("postgresql"):
                    # An unreachable server must fail a query in seconds, not hang
                    # a prompt that only wanted its history.
                    options["connect_args"] = {"connect_timeout": 10}
            self.engine = sa.create_engine(self.url, **options)
        except Exception as exc:  # a malformed URL, an unknown dialect or driver
            raise ConfigurationError(
                f"history store: cannot use {safe_url(self.url)!r}: {exc}"
            ) from exc
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", sqlite_pragmas)
        self._tables = tables(sa)
        try:
            # Reach the server once before migrating, so an unreachable one fails
            # fast instead of going through migrate()'s retry.
            self.ping()
        except sa.exc.DBAPIError as exc:  # the server is down, refuses us, or is not there
            self.engine.dispose()
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise StoreUnavailable(
                f"history store at {safe_url(self.url)!r} cannot be reached: {reason}"
            ) from exc
        self.migrate()

    # -- schema -------------------------------------------------------------------------

    def migrate(self) -> int:
        """Create the tables, or bring an older schema up to date; returns the version."""
        sa = _sqlalchemy()
        for attempt in range(_MIGRATE_TRIES):
            try:
                return self._migrate(sa)
            except (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.OperationalError):
                # Stores creating the schema at once: all but one lose the race, and
                # with several at once a loser may race another loser on its next try
                # too; each try finds more of the schema made, until one only checks it.
                if attempt == _MIGRATE_TRIES - 1:
                    raise
                time.sleep(0.1 * (attempt + 1))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _migrate(self, sa: Any) -> int:
        meta, info, *_ = self._tables
        with self.engine.begin() as conn:
            meta.create_all(conn, checkfirst=True)
            row = conn.execute(
                sa.select(info.c.value).where(info.c.key == "schema_version")
            ).first()
            found = int(row[0]) if row else 0
            if found > SCHEMA_VERSION:
                raise ConfigurationError(
                    f"history store at {safe_url(self.url)!r} has schema version {found}, newer "
                    f"than this groundswell understands ({SCHEMA_VERSION}); upgrade groundswell"
                )
            if row is None:
                conn.execute(info.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
            elif found < SCHEMA_VERSION:
                migrate_rows(conn, found, self._tables)
                conn.execute(
                    info.update()
                    .where(info.c.key == "schema_version")
                    .values(value=str(SCHEMA_VERSION))
                )
        return SCHEMA_VERSION

    def ping(self) -> None:
        """Run a trivial query; raises when the database cannot be reached."""
        sa = _sqlalchemy()
        with self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    # -- recording ---------------------------------------------------------------------

    def start_session(
        self,
        session_id: str,
        agent_id: str,
        *,
        started_at: float | None = None,
        task_id: str | None = None,
        task_signature: str | None = None,
        title: str | None = None,
        category: str | None = None,
        file_patterns: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> None:
        """Record that a session started (status ``running``)."""
        fields: dict[str, Any] = {"started_at": started_at, "task_id": task_id, "run_id": run_id}
        fields |= {"task_signature": task_signature, "title": title, "category": category}
        fields |= {"file_patterns": file_patterns, "metadata": metadata}
        self.write_batch(
            [("start_session", {"session_id": session_id, "agent_id": agent_id, **fields})]
        )

    def write_batch(self, operations: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Apply ``(method, kwargs)`` operations (``start_session``, ``add_iteration``,
        ``end_session``) in one transaction: all of them or none.

        The rows are built first and written with one multi-row statement per
        table, so a batch of thousands costs a few statements, not thousands. An
        iteration or end given an ``agent_id`` is written only to that agent's
        session of that id, and left out otherwise: a session someone else made
        with a recorded session's id does not collect its iterations.
        """
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in _ROWS}
        for method, kwargs in operations:
            if method not in _ROWS:
                raise ValueError(f"write_batch: unknown operation {method!r}")
            rows[method].append(_ROWS[method](**kwargs))
        sa = _sqlalchemy()
        sessions, iterations = self._tables[2], self._tables[3]
        with self.engine.begin() as conn:
            if rows["start_session"]:
                conn.execute(sessions.insert(), rows["start_session"])
            if rows["add_iteration"]:
                started = {r["id"]: r["agent_id"] for r in rows["start_session"]}
                added = self._owned(conn, rows["add_iteration"], started)
                self._number(conn, added, set(started))
                if added:
                    conn.execute(iterations.insert(), added)
            if rows["end_session"]:
                # The SET clause comes from the rows' keys other than "session" and
                # "agent"; only a running session ends, so a terminate that came first
                # is kept.
                running = (sessions.c.id == sa.bindparam("session")) & (
                    sessions.c.status == "running"
                )
                owned = [r for r in rows["end_session"] if r["agent"] is not None]
                anyone = [
                    {k: v for k, v in r.items() if k != "agent"}
                    for r in rows["end_session"]
                    if r["agent"] is None
                ]
                if anyone:
                    conn.execute(sessions.update().where(running), anyone)
                if owned:
                    mine = running & (sessions.c.agent_id == sa.bindparam("agent"))
                    conn.execute(sessions.update().where(mine), owned)

    def _owned(
        self, conn: Any, rows: list[dict[str, Any]], started: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """The iteration rows (without their ``agent`` key) whose ``agent``, when given,
        owns their session: the one started in this batch (``started``) or stored."""
        sa = _sqlalchemy()
        sessions = self._tables[2]
        asked = sorted({r["session_id"] for r in rows if r["agent"] is not None} - set(started))
        owners = dict(started)
        for start in range(0, len(asked), 500):  # under every database's parameter limit
            chunk = asked[start : start + 500]
            found = conn.execute(
                sa.select(sessions.c.id, sessions.c.agent_id).where(sessions.c.id.in_(chunk))
            )
            owners.update((sid, agent) for sid, agent in found)
        kept = []
        for row in rows:
            agent = row.pop("agent")
            owner = owners.get(row["session_id"])
            if agent is None or owner is None or owner == agent:
                kept.append(row)
        return kept

    def _number(self, conn: Any, rows: list[dict[str, Any]], new: set[str]) -> None:
        """Give each iteration row its ``seq``: after the iterations its session already
        has (none for a session started in this batch), in the order given."""
        sa = _sqlalchemy()
        iterations = self._tables[3]
        known = sorted({row["session_id"] for row in rows} - new)
        counts: dict[str, int] = {}
        for start in range(0, len(known), 500):  # under every database's parameter limit
            chunk = known[start : start + 500]
            found = conn.execute(
                sa.select(iterations.c.session_id, sa.func.count())
                .where(iterations.c.session_id.in_(chunk))
                .group_by(iterations.c.session_id)
            )
            counts.update((sid, int(count)) for sid, count in found)
        for row in rows:
            row["seq"] = counts[row["session_id"]] = counts.get(row["session_id"], 0) + 1

    def end_session(
        self,
        session_id: str,
        status: Literal["completed", "failed", "terminated"],
        *,
        ended_at: float | None = None,
        output: Any = None,
        error: str | None = None,
        agent_id: str | None = None,
    ) -> None:
        """Record how a session ended, with a secret-free summary of its output or error.

        A session that has ended already keeps its first end; with ``agent_id``,
        only that agent's session of that id ends.
        """
        fields: dict[str, Any] = {"ended_at": ended_at, "output": output, "error": error}
        fields["agent_id"] = agent_id
        self.write_batch([("end_session", {"session_id": session_id, "status": status, **fields})])

    def add_iteration(
        self,
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
    ) -> None:
        """Record one iteration of a session: a model turn, a tool call or an error
        (with ``agent_id``: only when the session is that agent's)."""
        fields: dict[str, Any] = {"name": name, "status": status, "input": input, "output": output}
        fields |= {"error": error, "started_at": started_at, "ended_at": ended_at, "usage": usage}
        fields["agent_id"] = agent_id
        self.write_batch([("add_iteration", {"session_id": session_id, "kind": kind, **fields})])

    # -- the sessions API's operations ---------------------------------------------------

    # -- reading ---------------------------------------------------------------------

    def session(self, session_id: str, *, include_iterations: bool = True) -> Session | None:
        """One session by id, or ``None``."""
        sa = _sqlalchemy()
        sessions = self._tables[2]
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(sessions).where(sessions.c.id == session_id)).first()
            if row is None:
                return None
            found = session_from_row(row)
            if include_iterations:
                found.iterations = self._iterations(conn, [found.id])[found.id]
        return found

    def iterations(self, session_id: str) -> list[dict[str, Any]]:
        """A session's iterations, in order (empty for an unknown session)."""
        with self.engine.connect() as conn:
            return self._iterations(conn, [session_id])[session_id]

    def sessions(
        self,
        agent_id: str,
        *,
        limit: int | None = None,
        include_failures: bool = True,
        include_iterations: bool = False,
    ) -> list[Session]:
        """An agent's sessions, newest first (``include_failures=False``: without the
        failed and terminated ones)."""
        statuses = None if include_failures else ("completed", "running")
        return self.list_sessions(
            agent_id=agent_id,
            status=statuses,
            limit=limit,
            include_iterations=include_iterations,
        )

    def _where(
        self, agent_id: str | None, task_id: str | None, status: str | Collection[str] | None
    ) -> Any:
        sa = _sqlalchemy()
        sessions = self._tables[2]
        where = sa.true()
        if agent_id is not None:
            where = where & (sessions.c.agent_id == agent_id)
        if task_id is not None:
            where = where & (sessions.c.task_id == task_id)
        if isinstance(status, str):
            where = where & (sessions.c.status == check_status(status))
        elif status is not None:
            where = where & sessions.c.status.in_([check_status(s) for s in status])
        return where

    def list_sessions(
        self,
        *,
        agent_id: str | None = None,
        task_id: str | None = None,
        status: str | Collection[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        include_iterations: bool = False,
    ) -> list[Session]:
        """Sessions, newest first, of one agent or all, filtered by task id and status."""
        sa = _sqlalchemy()
        sessions = self._tables[2]
        query = (
            sa.select(sessions)
            .where(self._where(agent_id, task_id, status))
            .order_by(sessions.c.started_at.desc(), sessions.c.id)
            .offset(offset)
        )
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            found = [session_from_row(row) for row in conn.execute(query)]
            if include_iterations and found:
                loaded = self._iterations(conn, [s.id for s in found])
                for s in found:
                    s.iterations = loaded[s.id]
        return found

    def count_sessions(
        self,
        *,
        agent_id: str | None = None,
        task_id: str | None = None,
        status: str | Collection[str] | None = None,
    ) -> int:
        """How many sessions `list_sessions` would list with no limit."""
        sa = _sqlalchemy()
        sessions = self._tables[2]
        query = sa.select(sa.func.count()).select_from(sessions)
        with self.engine.connect() as conn:
            return int(conn.execute(query.where(self._where(agent_id, task_id, status))).scalar())

    def relevant_sessions(
        self,
        agent_id: str,
        *,
        task_signature: str | None = None,
        limit: int = 10,
        min_relevance: float = 0.5,
        include_iterations: bool = False,
        include_failures: bool = True,
        include_running: bool = True,
        now: float | None = None,
        exclude: Sequence[str] = (),
    ) -> list[tuple[Session, float]]:
        """An agent's sessions scored by `relevance`, best first, at least ``min_relevance``.

        ``include_failures=False`` leaves out failed and terminated sessions,
        ``include_running=False`` the running ones; ``exclude`` leaves out
        sessions by id (say, the one running now).
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if not 0.0 <= min_relevance <= 1.0:
            raise ValueError(f"min_relevance must be between 0 and 1, got {min_relevance}")
        sa = _sqlalchemy()
        sessions = self._tables[2]
        now = time.time() if now is None else now
        # Score on the few columns relevance needs, then load whole rows only for
        # the winners: with thousands of sessions, parsing every row's metadata
        # and output would cost more than the scoring itself.
        columns = (
            sessions.c.id,
            sessions.c.status,
            sessions.c.started_at,
            sessions.c.task_signature,
            sessions.c.title,
            sessions.c.category,
            sessions.c.file_patterns,
        )
        wanted = ["completed"]
        wanted += ["failed", "terminated"] if include_failures else []
        wanted += ["running"] if include_running else []
        query = sa.select(*columns).where(self._where(agent_id, None, wanted))
        skip = set(exclude)
        score = scorer(task_signature, now)
        scored: list[tuple[float, float, str]] = []
        with self.engine.connect() as conn:
            for sid, status, started, signature, title, category, patterns in conn.execute(query):
                if sid in skip:
                    continue
                value = score(status, started, signature, title, category, patterns)
                if value >= min_relevance:
                    scored.append((value, started, sid))
            scored.sort(key=lambda item: (-item[0], -item[1]))
            best = scored[:limit]
            if not best:
                return []
            ids = [session_id for _, _, session_id in best]
            rows = {
                row.id: session_from_row(row)
                for row in conn.execute(sa.select(sessions).where(sessions.c.id.in_(ids)))
            }
            ranked = [(rows[sid], score) for score, _, sid in best if sid in rows]
            if include_iterations:
                loaded = self._iterations(conn, [s.id for s, _ in ranked])
                for s, _ in ranked:
                    s.iterations = loaded[s.id]
        return ranked

    def purge_sessions(self, older_than: float, *, agent_id: str | None = None) -> int:
        """Delete sessions (and their iterations) that started more than ``older_than``
        seconds ago, of one agent or of all; returns how many sessions."""
        if older_than < 0 or math.isnan(older_than):
            raise ValueError(f"older_than must be seconds >= 0, got {older_than}")
        sa = _sqlalchemy()
        sessions, iterations = self._tables[2], self._tables[3]
        where = sessions.c.started_at < time.time() - older_than
        if agent_id is not None:
            where = where & (sessions.c.agent_id == agent_id)
        with self.engine.begin() as conn:
            old = sa.select(sessions.c.id).where(where).scalar_subquery()
            conn.execute(iterations.delete().where(iterations.c.session_id.in_(old)))
            return int(conn.execute(sessions.delete().where(where)).rowcount)

    def _iterations(self, conn: Any, session_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        sa = _sqlalchemy()
        iterations = self._tables[3]
        found: dict[str, list[dict[str, Any]]] = {sid: [] for sid in session_ids}
        rows = conn.execute(
            sa.select(iterations)
            .where(iterations.c.session_id.in_(session_ids))
            .order_by(iterations.c.session_id, iterations.c.seq)
        )
        for row in rows:
            item = dict(row._mapping)
            item["usage"] = json.loads(item["usage"] or "{}")
            found[item.pop("session_id")].append(item)
        return found

    def __repr__(self) -> str:
        return f"HistoryStore({safe_url(self.url)!r})"

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
