"""The history API's request and response bodies (its OpenAPI schema comes from them)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .schema import check_metadata

__all__ = [
    "AGENT_ID_PATTERN",
    "SESSION_ID_PATTERN",
    "TEXT_PATTERN",
    "FailuresResponse",
    "IntrospectionResponse",
    "IterationOut",
    "IterationsResponse",
    "Problem",
    "QueryEcho",
    "RetriesResponse",
    "SessionCreate",
    "SessionOut",
    "SessionPage",
    "SessionUpdate",
    "TerminateRequest",
    "UsageResponse",
    "unix_time",
]

# Agent ids are names: any text but NUL, which PostgreSQL cannot store or compare.
AGENT_ID_PATTERN = r"^[^\x00]+$"
TEXT_PATTERN = r"^[^\x00]*$"
# Ids a client gives new sessions: URL-safe, so they work as a path segment as they are.
NEW_SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
# Recorded sessions' ids (prompt node ids): 16 hex digits. A client may not take one,
# or it could make the session another agent's run is about to record.
_NODE_ID = re.compile(r"[0-9a-fA-F]{16}")
SESSION_ID_PATTERN = r"^[^\x00/.][^\x00/]*$"
Status = Literal["running", "completed", "failed", "terminated"]
FinalStatus = Literal["completed", "failed", "terminated"]
_FIRST = datetime(1970, 1, 1, tzinfo=UTC)
_LAST = datetime(9999, 12, 31, tzinfo=UTC)
ShortText = Annotated[str, Field(max_length=1_000, pattern=TEXT_PATTERN)]
LongText = Annotated[str, Field(max_length=20_000, pattern=TEXT_PATTERN)]


def unix_time(moment: datetime | None) -> float | None:
    """A request's time as a Unix time (a time without a zone is UTC)."""
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


class Problem(BaseModel):
    """Why a request was refused."""

    detail: Any
    message: str | None = None


class IterationOut(BaseModel):
    """One model turn or tool call of a session."""

    seq: int
    kind: str = Field(description="model_turn or tool_call")
    name: str
    status: Status
    input_summary: str | None = None
    output_summary: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    usage: dict[str, Any] = Field(default_factory=dict)


class SessionOut(BaseModel):
    """A session, with the session-history harness's field names and ISO 8601 times."""

    session_id: str
    agent_id: str
    task_id: str | None = None
    status: Status
    started_at: datetime
    completed_at: datetime | None = None
    relevance_score: float | None = Field(
        None, ge=0, le=1, description="relevance to the query's task (introspection only)"
    )
    summary: str | None = Field(None, description="a summary of the session's output")
    error: str | None = None
    title: str | None = None
    category: str | None = None
    file_patterns: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    task_signature: str | None = None
    run_id: str | None = None
    iterations: list[IterationOut] | None = Field(
        None, description="present when asked for, and on GET /api/sessions/{session_id}"
    )


class QueryEcho(BaseModel):
    """The query as the server understood it."""

    task_signature: str | None
    title: str | None
    category: str | None
    file_patterns: list[str]
    limit: int
    min_relevance: float
    include_iterations: bool
    include_failures: bool
    include_running: bool


class IntrospectionResponse(BaseModel):
    """An agent's past sessions, most relevant first."""

    agent_id: str
    query: QueryEcho
    count: int
    sessions: list[SessionOut]


class SessionPage(BaseModel):
    """One page of sessions, newest first."""

    count: int = Field(description="sessions on this page")
    total: int = Field(description="sessions matching the filters")
    limit: int
    offset: int
    sessions: list[SessionOut]


class IterationsResponse(BaseModel):
    """A session's iterations, in order."""

    session_id: str
    count: int
    iterations: list[IterationOut]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("started_at", "completed_at", check_fields=False)
    @classmethod
    def _in_range(cls, value: datetime | None) -> datetime | None:
        if value is not None:
            aware = value if value.tzinfo else value.replace(tzinfo=UTC)
            if not _FIRST <= aware <= _LAST:
                raise ValueError("must be between 1970-01-01 and 9999-12-31")
        return value

    @field_validator("metadata", check_fields=False)
    @classmethod
    def _plain_json(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            json.dumps(value, allow_nan=False).encode()
        except ValueError as exc:  # NaN or Infinity, or text that is not Unicode
            raise ValueError(
                f"must be plain JSON (no NaN, Infinity or lone surrogates): {exc}"
            ) from None
        if value is not None:
            check_metadata(value)
        return value


class SessionCreate(_Body):
    """A session to create (``POST /api/sessions``)."""

    agent_id: str | None = Field(
        None,
        min_length=1,
        max_length=1_000,
        pattern=AGENT_ID_PATTERN,
        description="defaults to the token's agent; required with an operator token",
    )
    session_id: str | None = Field(
        None,
        pattern=NEW_SESSION_ID_PATTERN,
        description="a new id (api-...) is made when none is given; 16 hex digits, the "
        "shape of a recorded session's id, is refused",
    )
    task_id: ShortText | None = None
    status: Status = "running"
    started_at: datetime | None = Field(None, description="default: now")
    completed_at: datetime | None = Field(None, description="default for an ended one: now")
    title: ShortText | None = Field(None, description="the task's title (for relevance)")
    category: ShortText | None = None
    file_patterns: list[ShortText] = Field(default_factory=list, max_length=100)
    summary: LongText | None = None
    error: LongText | None = None
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="at most 64 keys and 16 KB as JSON"
    )

    @field_validator("session_id")
    @classmethod
    def _not_a_node_id(cls, value: str | None) -> str | None:
        if value is not None and _NODE_ID.fullmatch(value):
            raise ValueError(
                "16 hex digits is the shape of a recorded session's id; choose another id "
                "(e.g. one starting with 'api-'), or leave session_id out to get one"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SessionCreate:
        if self.completed_at is not None and self.status == "running":
            raise ValueError("a running session has no completed_at")
        start, end = unix_time(self.started_at), unix_time(self.completed_at)
        if start is not None and end is not None and end < start:
            raise ValueError("completed_at is before started_at")
        if (self.category or self.file_patterns) and not self.title:
            raise ValueError("category and file_patterns describe a task: give its title too")
        return self


class SessionUpdate(_Body):
    """What to change in a session (``PATCH``); what is left out stays as it is."""

    status: FinalStatus | None = Field(None, description="end it (an ended one stays ended)")
    summary: LongText | None = None
    error: LongText | None = None
    completed_at: datetime | None = None
    task_id: ShortText | None = None
    metadata: dict[str, Any] | None = Field(
        None, description="merged into its metadata (at most 64 keys and 16 KB as JSON)"
    )


class TerminateRequest(_Body):
    """Why a session is terminated (optional)."""

    reason: LongText | None = None


class AttemptOut(BaseModel):
    """One attempt at a task."""

    attempt: int
    session_id: str
    status: Status
    started_at: datetime
    completed_at: datetime | None
    error_type: str | None
    error: str | None
    summary: str | None


class TaskRetriesOut(BaseModel):
    """Every attempt an agent made at one task, oldest first."""

    agent_id: str
    task_id: str | None
    task_signature: str | None
    title: str | None
    attempt_count: int
    failures: int
    resolved: bool
    attempts: list[AttemptOut]


class RetriesResponse(BaseModel):
    """Retry history per task, the most recently tried first."""

    agent_id: str | None
    count: int
    tasks: list[TaskRetriesOut]


class FixOut(BaseModel):
    """A later attempt that completed the task an error had failed."""

    task_id: str | None
    title: str | None
    failed_session_id: str
    fixed_session_id: str
    request: str | None
    summary: str | None
    approaches: list[str]


class FailureKindOut(BaseModel):
    """Failures of one error type, with what fixed them."""

    error_type: str
    category: str
    advice: str
    count: int
    first_seen: datetime
    last_seen: datetime
    example: str | None
    session_ids: list[str]
    tasks: list[str]
    fixes: list[FixOut]
    learned_fixes: list[str]


class FailuresResponse(BaseModel):
    """Failure analysis by error type, the most frequent first."""

    agent_id: str | None
    count: int
    failures: list[FailureKindOut]


class UsageOut(BaseModel):
    """How an agent has queried its history."""

    agent_id: str
    queries: int
    by_source: dict[str, int]
    empty_queries: int
    sessions_returned: int
    average_relevance: float | None
    last_query_at: datetime | None


class UsageResponse(BaseModel):
    """Usage metrics per agent, the most queries first."""

    count: int
    agents: list[UsageOut]
