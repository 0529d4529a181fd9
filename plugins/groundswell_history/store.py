"""The history store: sessions, iterations and memory in SQL through SQLAlchemy 2.

``HistoryStore(url)`` takes any SQLAlchemy URL; the default is a SQLite file
at ``$GROUNDSWELL_HOME/history.db`` (``~/.groundswell/history.db``). The
schema is created, and migrated, by the store itself. SQLite runs in WAL mode
with a busy timeout, so several processes can write at once and a process
killed mid-write leaves a readable file.

Everything stored passes through `groundswell.redact`, the scrubber every
output uses, so credentials never reach the store.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import groundswell
from groundswell import ConfigurationError, GroundswellError

from .relevance import scorer

__all__ = [
    "MEMORY_KINDS",
    "HistoryStore",
    "Memory",
    "Session",
    "StoreUnavailable",
    "default_url",
    "groundswell_home",
    "safe_url",
]

SCHEMA_VERSION = 1
MEMORY_KINDS = ("context", "learning", "preference", "error_pattern", "success_pattern")
MemoryKind = Literal["context", "learning", "preference", "error_pattern", "success_pattern"]
SUMMARY_CHARS = 2_000


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


@dataclass
class Session:
    """One recorded agent session: a top-level ``agent.prompt`` call and its turns."""

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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``iterations`` only when loaded)."""
        data = {k: v for k, v in self.__dict__.items() if k != "iterations"}
        if self.iterations is not None:
            data["iterations"] = self.iterations
        return data


@dataclass
class Memory:
    """One thing an agent remembers."""

    agent_id: str
    key: str
    content: str
    kind: str
    importance: float
    access_count: int
    created_at: float
    last_accessed_at: float | None
    expires_at: float | None
    metadata: dict[str, Any] = field(default_factory=dict)


class HistoryStore:
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
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        self._tables = _tables(sa)
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
            # Version 1 is the first schema: there is nothing older to convert yet.
            if row is None:
                conn.execute(info.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
            elif found < SCHEMA_VERSION:
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

    # -- sessions ----------------------------------------------------------------------

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
        table, so a batch of thousands costs a few statements, not thousands.
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
                self._number(conn, rows["add_iteration"], {r["id"] for r in rows["start_session"]})
                conn.execute(iterations.insert(), rows["add_iteration"])
            if rows["end_session"]:
                # The SET clause comes from the rows' keys other than "session".
                ended = sessions.update().where(sessions.c.id == sa.bindparam("session"))
                conn.execute(ended, rows["end_session"])

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
        status: Literal["completed", "failed", "cancelled"],
        *,
        ended_at: float | None = None,
        output: Any = None,
        error: str | None = None,
    ) -> None:
        """Record how a session ended, with a secret-free summary of its output or error."""
        fields: dict[str, Any] = {"ended_at": ended_at, "output": output, "error": error}
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
    ) -> None:
        """Record one iteration of a session: a model turn, a tool call or an error."""
        fields: dict[str, Any] = {"name": name, "status": status, "input": input, "output": output}
        fields |= {"error": error, "started_at": started_at, "ended_at": ended_at, "usage": usage}
        self.write_batch([("add_iteration", {"session_id": session_id, "kind": kind, **fields})])

    def session(self, session_id: str, *, include_iterations: bool = True) -> Session | None:
        """One session by id, or ``None``."""
        sa = _sqlalchemy()
        sessions = self._tables[2]
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(sessions).where(sessions.c.id == session_id)).first()
            if row is None:
                return None
            found = _session(row)
            if include_iterations:
                found.iterations = self._iterations(conn, [found.id])[found.id]
        return found

    def sessions(
        self,
        agent_id: str,
        *,
        limit: int | None = None,
        include_failures: bool = True,
        include_iterations: bool = False,
    ) -> list[Session]:
        """An agent's sessions, newest first."""
        sa = _sqlalchemy()
        sessions = self._tables[2]
        query = sa.select(sessions).where(sessions.c.agent_id == agent_id)
        if not include_failures:
            query = query.where(sessions.c.status != "failed")
        query = query.order_by(sessions.c.started_at.desc())
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            found = [_session(row) for row in conn.execute(query)]
            if include_iterations and found:
                loaded = self._iterations(conn, [s.id for s in found])
                for s in found:
                    s.iterations = loaded[s.id]
        return found

    def relevant_sessions(
        self,
        agent_id: str,
        *,
        task_signature: str | None = None,
        limit: int = 10,
        min_relevance: float = 0.5,
        include_iterations: bool = False,
        include_failures: bool = True,
        now: float | None = None,
        exclude: Sequence[str] = (),
    ) -> list[tuple[Session, float]]:
        """An agent's sessions scored by `relevance`, best first, at least ``min_relevance``.

        ``exclude`` leaves out sessions by id (say, the one running now).
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
        query = sa.select(*columns).where(sessions.c.agent_id == agent_id)
        if not include_failures:
            query = query.where(sessions.c.status != "failed")
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
                row.id: _session(row)
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

    # -- memory ------------------------------------------------------------------------

    def remember(
        self,
        agent_id: str,
        key: str,
        content: str,
        *,
        kind: MemoryKind = "context",
        importance: float = 0.5,
        ttl: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Memory:
        """Store (or replace) what ``agent_id`` remembers under ``key``.

        ``importance`` is 0 to 1; ``ttl`` (seconds) makes the memory expire.
        """
        if kind not in MEMORY_KINDS:
            raise ValueError(f"memory kind must be one of {', '.join(MEMORY_KINDS)}; got {kind!r}")
        if not 0.0 <= importance <= 1.0 or math.isnan(importance):
            raise ValueError(f"importance must be between 0 and 1, got {importance}")
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl must be seconds > 0, got {ttl}")
        if not key or not isinstance(key, str):
            raise ValueError(f"memory key must be a non-empty string, got {key!r}")
        sa = _sqlalchemy()
        memories = self._tables[4]
        now = time.time()
        values: dict[str, Any] = {
            "content": summarize(content, limit=20_000),
            "kind": kind,
            "importance": float(importance),
            "created_at": now,
            "last_accessed_at": None,
            "access_count": 0,
            "expires_at": None if ttl is None else now + ttl,
            "metadata": json.dumps(clean(dict(metadata or {}))),
        }
        where = (memories.c.agent_id == agent_id) & (memories.c.key == key)
        with self.engine.begin() as conn:
            updated = conn.execute(memories.update().where(where).values(**values)).rowcount
            if not updated:
                try:
                    with conn.begin_nested():
                        conn.execute(memories.insert().values(agent_id=agent_id, key=key, **values))
                except sa.exc.IntegrityError:  # another writer inserted it first: replace theirs
                    conn.execute(memories.update().where(where).values(**values))
        return Memory(
            agent_id=agent_id,
            key=key,
            content=values["content"],
            kind=kind,
            importance=values["importance"],
            access_count=0,
            created_at=now,
            last_accessed_at=None,
            expires_at=values["expires_at"],
            metadata=json.loads(values["metadata"]),
        )

    def recall(self, agent_id: str, key: str) -> Memory | None:
        """What ``agent_id`` remembers under ``key`` (counted as an access), or ``None``."""
        sa = _sqlalchemy()
        memories = self._tables[4]
        now = time.time()
        where = (memories.c.agent_id == agent_id) & (memories.c.key == key)
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(memories).where(where)).first()
            if row is None:
                return None
            if row.expires_at is not None and row.expires_at <= now:
                conn.execute(memories.delete().where(where))
                return None
            conn.execute(
                memories.update()
                .where(where)
                .values(access_count=memories.c.access_count + 1, last_accessed_at=now)
            )
        memory = _memory(row)
        memory.access_count += 1
        memory.last_accessed_at = now
        return memory

    def recall_all(
        self,
        agent_id: str,
        *,
        kind: MemoryKind | None = None,
        min_importance: float = 0.0,
        limit: int | None = None,
    ) -> list[Memory]:
        """An agent's live memories, most important first (then most recent)."""
        sa = _sqlalchemy()
        memories = self._tables[4]
        now = time.time()
        query = sa.select(memories).where(
            (memories.c.agent_id == agent_id)
            & (memories.c.importance >= min_importance)
            & ((memories.c.expires_at.is_(None)) | (memories.c.expires_at > now))
        )
        if kind is not None:
            query = query.where(memories.c.kind == kind)
        query = query.order_by(memories.c.importance.desc(), memories.c.created_at.desc())
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return [_memory(row) for row in conn.execute(query)]

    def forget(self, agent_id: str, key: str | None = None) -> int:
        """Forget one memory (or, with no ``key``, all of an agent's); returns how many."""
        memories = self._tables[4]
        where = memories.c.agent_id == agent_id
        if key is not None:
            where = where & (memories.c.key == key)
        with self.engine.begin() as conn:
            return int(conn.execute(memories.delete().where(where)).rowcount)

    def learn_error(
        self, agent_id: str, error: str, *, fix: str | None = None, importance: float = 0.7
    ) -> Memory:
        """Remember an error pattern (and how it was fixed); the same error is one memory."""
        content = error if fix is None else f"{error}\nFix: {fix}"
        return self.remember(
            agent_id,
            f"error:{_digest(error)}",
            content,
            kind="error_pattern",
            importance=importance,
        )

    def learn_success(
        self,
        agent_id: str,
        approach: str,
        *,
        task_signature: str | None = None,
        importance: float = 0.6,
    ) -> Memory:
        """Remember an approach that worked (for a task signature, when given)."""
        return self.remember(
            agent_id,
            f"success:{_digest(approach)}",
            approach,
            kind="success_pattern",
            importance=importance,
            metadata={"task_signature": task_signature} if task_signature else None,
        )

    def purge_expired(self) -> int:
        """Delete expired memories; returns how many."""
        memories = self._tables[4]
        now = time.time()
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    memories.delete().where(
                        memories.c.expires_at.is_not(None) & (memories.c.expires_at <= now)
                    )
                ).rowcount
            )

    def __repr__(self) -> str:
        return f"HistoryStore({safe_url(self.url)!r})"

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _digest(text: str) -> str:
    return hashlib.sha256(text.strip().encode()).hexdigest()[:16]


def _session_row(
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
) -> dict[str, Any]:
    return {
        "id": session_id,
        "agent_id": agent_id,
        "status": "running",
        "started_at": time.time() if started_at is None else started_at,
        "ended_at": None,
        "task_id": task_id,
        "task_signature": str(task_signature) if task_signature else None,
        "title": clean(title) if title else None,
        "category": category,
        "file_patterns": json.dumps(sorted(set(file_patterns))),
        "metadata": json.dumps(clean(dict(metadata or {}))),
        "output_summary": None,
        "error": None,
        "run_id": run_id,
    }


def _end_row(
    session_id: str,
    status: str,
    *,
    ended_at: float | None = None,
    output: Any = None,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "session": session_id,
        "status": status,
        "ended_at": time.time() if ended_at is None else ended_at,
        "output_summary": None if output is None else summarize(output),
        "error": None if error is None else summarize(error),
    }


def _iteration_row(
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
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "kind": kind,
        "name": name,
        "status": status,
        "input_summary": None if input is None else summarize(input),
        "output_summary": None if output is None else summarize(output),
        "error": None if error is None else summarize(error),
        "started_at": started_at,
        "ended_at": ended_at,
        "usage": json.dumps(dict(usage or {})),
    }


# write_batch's operations: each builds the row its method writes.
_ROWS: dict[str, Any] = {
    "start_session": _session_row,
    "add_iteration": _iteration_row,
    "end_session": _end_row,
}


def safe_url(url: str) -> str:
    """The URL without its password (for messages and logs)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


_WAL_TRIES = 20
_MIGRATE_TRIES = 6  # schema creation raced by other stores (see HistoryStore.migrate)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
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


def _tables(sa: Any) -> tuple[Any, Any, Any, Any, Any]:
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
    return meta, info, sessions, iterations, memories


def _session(row: Any) -> Session:
    data = dict(row._mapping)
    data["file_patterns"] = json.loads(data["file_patterns"] or "[]")
    data["metadata"] = json.loads(data["metadata"] or "{}")
    return Session(**data)


def _memory(row: Any) -> Memory:
    data = dict(row._mapping)
    data["metadata"] = json.loads(data["metadata"] or "{}")
    return Memory(**data)
