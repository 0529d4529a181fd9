"""Self-improvement and usage metrics, built on the sessions and memories in the store.

- Retry history: the sessions of one task (same ``task_id``, else the same
  task signature) are its attempts, in order, each with its outcome.
- Failure analysis: failed sessions grouped by error type (the exception's
  name, as the sink records errors: ``"TimeoutError: ..."``), each with a
  category, advice for that category, and the approaches that fixed it: a
  later attempt of the same task that completed, with the approaches learnt
  for that task (``learn_success``) and the fixes learnt for that error
  (``learn_error(..., fix=...)``).
- Usage: how often each agent queried its history (through the HTTP API or
  its history tool), how many sessions came back, and their average relevance.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from .memory import Memory, MemoryMethods
from .serialize import iso

__all__ = [
    "ADVICE",
    "AgentUsage",
    "Attempt",
    "FailureKind",
    "Fix",
    "ImprovementMethods",
    "TaskRetries",
    "error_category",
    "error_type",
]

#: Sessions read at most per analysis (the newest ones).
MAX_ROWS = 10_000
_MAX_FIXES = 5  # fixes shown per error type
_TYPE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*:")
_CATEGORIES = (
    ("timeout", r"Timeout|StepTimeout|timed out|deadline"),
    ("rate_limit", r"RateLimit|\b429\b|rate.?limit|overloaded|\b529\b"),
    ("authentication", r"Authentication|PermissionDenied|\b401\b|\b403\b|api.?key"),
    ("budget", r"TokenBudgetExceeded|budget"),
    ("context_window", r"ContextWindowExceeded|context window|too long"),
    ("max_turns", r"MaxTurnsExceeded|max_turns"),
    ("refusal", r"ModelRefused|refus"),
    ("truncated", r"OutputTruncated|max_tokens"),
    ("validation", r"Validation|JSONDecode|schema|invalid json|parse"),
    ("tool", r"ToolError|tool"),
    ("model_api", r"ModelAPIError|APIError|APIConnection|InternalServerError|\b5\d\d\b"),
)
#: What to try next, per error category.
ADVICE = {
    "timeout": "Split the work into smaller steps or calls, or raise the timeout.",
    "rate_limit": "Slow down: make fewer calls at once and retry after a pause.",
    "authentication": "Not fixable by retrying: check the credentials and permissions.",
    "budget": "Say more in fewer tokens: summarize earlier context or ask for shorter answers.",
    "context_window": "Send less context: drop or summarize old messages and large tool results.",
    "max_turns": "Plan before acting and combine tool calls; stop once the answer is known.",
    "refusal": "Rephrase the request so its legitimate purpose is clear.",
    "truncated": "Ask for shorter output or split it, or allow more output tokens.",
    "validation": "Answer exactly in the requested format: every required field, valid JSON.",
    "tool": "Check the tool's input against its schema and read its error before retrying.",
    "model_api": "A service error: retry later; it is rarely about the request itself.",
    "other": "Read the error message; compare with the attempts that succeeded.",
}


def error_type(error: str | None) -> str:
    """The exception name at the start of a recorded error (``"Error"`` when none)."""
    found = _TYPE.match(error or "")
    return found.group(1).rsplit(".", 1)[-1] if found else "Error"


def error_category(error: str | None) -> str:
    """The category of a recorded error: one of `ADVICE`'s keys.

    Decided by the exception's name when it says (``TimeoutError``), else by
    the message (``... 429 ...``).
    """
    for text in (error_type(error), error or ""):
        for name, pattern in _CATEGORIES:
            if re.search(pattern, text, re.IGNORECASE):
                return name
    return "other"


@dataclass
class Attempt:
    """One attempt at a task: a session."""

    attempt: int
    session_id: str
    status: str
    started_at: float
    ended_at: float | None
    error: str | None
    summary: str | None

    def to_dict(self) -> dict[str, Any]:
        """As JSON (ISO 8601 times, ``error_type`` for a failure)."""
        return {
            "attempt": self.attempt,
            "session_id": self.session_id,
            "status": self.status,
            "started_at": iso(self.started_at),
            "completed_at": iso(self.ended_at),
            "error_type": error_type(self.error) if self.status == "failed" else None,
            "error": self.error,
            "summary": self.summary,
        }


@dataclass
class TaskRetries:
    """The attempts an agent made at one task, oldest first."""

    agent_id: str
    task_id: str | None
    task_signature: str | None
    title: str | None
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def failures(self) -> int:
        """How many attempts failed."""
        return sum(a.status == "failed" for a in self.attempts)

    @property
    def resolved(self) -> bool:
        """Whether an attempt completed."""
        return any(a.status == "completed" for a in self.attempts)

    def to_dict(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "agent_id": self.agent_id,
            "task_id": self.task_id,
            "task_signature": self.task_signature,
            "title": self.title,
            "attempt_count": len(self.attempts),
            "failures": self.failures,
            "resolved": self.resolved,
            "attempts": [a.to_dict() for a in self.attempts],
        }


@dataclass
class Fix:
    """A task that failed with an error, then completed: what the completing attempt did."""

    task_id: str | None
    title: str | None
    failed_session_id: str
    fixed_session_id: str
    request: str | None
    summary: str | None
    approaches: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """As JSON."""
        return dict(self.__dict__)


@dataclass
class FailureKind:
    """An agent's failures of one error type."""

    error_type: str
    category: str
    count: int
    first_seen: float
    last_seen: float
    example: str | None
    session_ids: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)
    learned_fixes: list[str] = field(default_factory=list)

    @property
    def advice(self) -> str:
        """What to try next for this category of error."""
        return ADVICE[self.category]

    def to_dict(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "error_type": self.error_type,
            "category": self.category,
            "advice": self.advice,
            "count": self.count,
            "first_seen": iso(self.first_seen),
            "last_seen": iso(self.last_seen),
            "example": self.example,
            "session_ids": self.session_ids,
            "tasks": self.tasks,
            "fixes": [f.to_dict() for f in self.fixes],
            "learned_fixes": self.learned_fixes,
        }


@dataclass
class AgentUsage:
    """How an agent has queried its history."""

    agent_id: str
    queries: int
    by_source: dict[str, int]
    empty_queries: int
    sessions_returned: int
    relevance_sum: float
    last_query_at: float | None

    @property
    def average_relevance(self) -> float | None:
        """The mean relevance of the sessions its queries returned (``None``: none yet)."""
        if not self.sessions_returned:
            return None
        return round(self.relevance_sum / self.sessions_returned, 6)

    def to_dict(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "agent_id": self.agent_id,
            "queries": self.queries,
            "by_source": self.by_source,
            "empty_queries": self.empty_queries,
            "sessions_returned": self.sessions_returned,
            "average_relevance": self.average_relevance,
            "last_query_at": iso(self.last_query_at),
        }


class ImprovementMethods(MemoryMethods):
    """`HistoryStore`'s self-improvement and usage methods (on top of its memory)."""

    def _task_sessions(
        self, agent_id: str | None, task_id: str | None, since: float | None
    ) -> list[Any]:
        """The newest `MAX_ROWS` sessions with a task (or a failure), oldest first."""
        import sqlalchemy as sa

        sessions = self._tables[2]
        where = sessions.c.task_id.is_not(None) | sessions.c.task_signature.is_not(None)
        where = where | (sessions.c.status == "failed")
        if agent_id is not None:
            where = where & (sessions.c.agent_id == agent_id)
        if task_id is not None:
            where = where & (sessions.c.task_id == task_id)
        if since is not None:
            where = where & (sessions.c.started_at >= since)
        columns = [
            sessions.c[name]
            for name in (
                "id",
                "agent_id",
                "status",
                "started_at",
                "ended_at",
                "task_id",
                "task_signature",
                "title",
                "output_summary",
                "error",
                "metadata",
            )
        ]
        query = (
            sa.select(*columns)
            .where(where)
            .order_by(sessions.c.started_at.desc(), sessions.c.id)
            .limit(MAX_ROWS)
        )
        with self.engine.connect() as conn:
            rows = list(conn.execute(query))
        rows.reverse()
        return rows

    def _tasks(
        self, agent_id: str | None, task_id: str | None, since: float | None
    ) -> tuple[list[TaskRetries], list[Any]]:
        grouped: dict[tuple[str, str], TaskRetries] = {}
        rows = self._task_sessions(agent_id, task_id, since)
        for row in rows:
            key = row.task_id or row.task_signature
            if key is None:
                continue
            entry = grouped.setdefault(
                (row.agent_id, key),
                TaskRetries(row.agent_id, row.task_id, row.task_signature, row.title),
            )
            entry.title = entry.title or row.title
            entry.task_signature = entry.task_signature or row.task_signature
            entry.attempts.append(
                Attempt(
                    attempt=len(entry.attempts) + 1,
                    session_id=row.id,
                    status=row.status,
                    started_at=row.started_at,
                    ended_at=row.ended_at,
                    error=row.error,
                    summary=row.output_summary,
                )
            )
        return list(grouped.values()), rows

    def retry_history(
        self,
        agent_id: str | None = None,
        *,
        task_id: str | None = None,
        min_attempts: int = 1,
        limit: int = 20,
        since: float | None = None,
    ) -> list[TaskRetries]:
        """Each task's attempts (sessions), most recently tried task first.

        ``agent_id=None`` covers every agent; ``min_attempts=2`` keeps only the
        tasks tried more than once.
        """
        if limit < 1 or min_attempts < 1:
            raise ValueError(
                f"limit and min_attempts must be at least 1, got {limit} and {min_attempts}"
            )
        found, _ = self._tasks(agent_id, task_id, since)
        found = [t for t in found if len(t.attempts) >= min_attempts]
        found.sort(key=lambda t: -t.attempts[-1].started_at)
        return found[:limit]

    def failure_analysis(
        self,
        agent_id: str | None = None,
        *,
        task_id: str | None = None,
        since: float | None = None,
        limit: int = 20,
    ) -> list[FailureKind]:
        """Failed sessions grouped by error type, most frequent first, each with the
        attempts and approaches that fixed that error."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        tasks, rows = self._tasks(agent_id, task_id, since)
        kinds: dict[str, FailureKind] = {}
        for row in rows:
            if row.status != "failed":
                continue
            name = error_type(row.error)
            kind = kinds.get(name)
            if kind is None:
                kind = kinds[name] = FailureKind(
                    name, error_category(row.error), 0, row.started_at, row.started_at, None
                )
            kind.count += 1
            kind.last_seen, kind.example = row.started_at, row.error
            if len(kind.session_ids) < 10:
                kind.session_ids.append(row.id)
            label = row.task_id or row.title
            if label and label not in kind.tasks:
                kind.tasks.append(label)
        requests = {row.id: _request(row.metadata) for row in rows}
        patterns: dict[str, list[Memory]] = {}  # each agent's success patterns, loaded once
        for task in tasks:
            if all(len(kind.fixes) >= _MAX_FIXES for kind in kinds.values()):
                break  # every error type has its fixes: the rest would be dropped
            self._add_fixes(task, kinds, requests, patterns)
        for kind in kinds.values():
            kind.learned_fixes = self._learned_fixes(agent_id, kind.error_type)
        ranked = sorted(kinds.values(), key=lambda k: (-k.count, -k.last_seen))
        return ranked[:limit]

    def _add_fixes(
        self,
        task: TaskRetries,
        kinds: dict[str, FailureKind],
        requests: dict[str, str | None],
        patterns: dict[str, list[Memory]],
    ) -> None:
        failed: dict[str, Attempt] = {}
        for attempt in task.attempts:
            if attempt.status == "failed":
                failed.setdefault(error_type(attempt.error), attempt)
            elif attempt.status == "completed" and failed:
                wanted = [
                    (name, first)
                    for name, first in failed.items()
                    if name in kinds and len(kinds[name].fixes) < _MAX_FIXES
                ]
                approaches = (
                    self._approaches(task.agent_id, task.task_signature, patterns) if wanted else []
                )
                for name, first in wanted:
                    kinds[name].fixes.append(
                        Fix(
                            task.task_id,
                            task.title,
                            first.session_id,
                            attempt.session_id,
                            requests.get(attempt.session_id),
                            attempt.summary,
                            approaches,
                        )
                    )
                failed = {}

    def _approaches(
        self, agent_id: str, signature: str | None, patterns: dict[str, list[Memory]]
    ) -> list[str]:
        if not signature:
            return []
        if agent_id not in patterns:
            patterns[agent_id] = self.recall_all(agent_id, kind="success_pattern", limit=50)
        learnt = patterns[agent_id]
        return [m.content for m in learnt if m.metadata.get("task_signature") == signature][:3]

    def _learned_fixes(self, agent_id: str | None, name: str) -> list[str]:
        if agent_id is None:
            return []
        learnt = self.recall_all(agent_id, kind="error_pattern", limit=100)
        fixes = []
        for memory in learnt:
            error, _, fix = str(memory.content).partition("\nFix: ")
            if fix and error_type(error) == name:
                fixes.append(fix)
        return fixes[:5]

    # -- usage ---------------------------------------------------------------------------

    def record_query(
        self, agent_id: str, source: str, relevances: list[float], *, at: float | None = None
    ) -> None:
        """Count one query of ``agent_id``'s history from ``source`` (``"api"``, ``"tool"``)
        that returned sessions scoring ``relevances``."""
        import sqlalchemy as sa

        usage = self._tables[5]
        now = time.time() if at is None else at
        where = (usage.c.agent_id == agent_id) & (usage.c.source == source)
        changes = {
            "queries": usage.c.queries + 1,
            "empty": usage.c.empty + (0 if relevances else 1),
            "returned": usage.c.returned + len(relevances),
            "relevance_sum": usage.c.relevance_sum + float(sum(relevances)),
            "last_at": now,
        }
        first = {
            "agent_id": agent_id,
            "source": source,
            "queries": 1,
            "empty": 0 if relevances else 1,
            "returned": len(relevances),
            "relevance_sum": float(sum(relevances)),
            "first_at": now,
            "last_at": now,
        }
        with self.engine.begin() as conn:
            if conn.execute(usage.update().where(where).values(**changes)).rowcount:
                return
            try:
                with conn.begin_nested():
                    conn.execute(usage.insert().values(**first))
            except sa.exc.IntegrityError:  # another writer counted the first query: add to it
                conn.execute(usage.update().where(where).values(**changes))

    def usage(self, agent_id: str | None = None) -> list[AgentUsage]:
        """How each agent (or one) has queried its history, most queries first."""
        import sqlalchemy as sa

        usage = self._tables[5]
        query = sa.select(usage)
        if agent_id is not None:
            query = query.where(usage.c.agent_id == agent_id)
        found: dict[str, AgentUsage] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                entry = found.setdefault(
                    row.agent_id, AgentUsage(row.agent_id, 0, {}, 0, 0, 0.0, None)
                )
                entry.queries += row.queries
                entry.by_source[row.source] = row.queries
                entry.empty_queries += row.empty
                entry.sessions_returned += row.returned
                entry.relevance_sum += row.relevance_sum
                entry.last_query_at = max(entry.last_query_at or 0.0, row.last_at)
        return sorted(found.values(), key=lambda u: (-u.queries, u.agent_id))


def _request(metadata: str | None) -> str | None:
    """The user text a session was asked (kept in its metadata by the sink)."""
    try:
        value = json.loads(metadata or "{}").get("user")
    except (ValueError, AttributeError):
        return None
    return None if value is None else str(value)[:500]
