"""Session history and memory for Groundswell agents, in SQL.

Needs the ``history`` extra: ``pip install "groundswell[history]"`` (SQLite
works as is; PostgreSQL also needs a driver such as ``psycopg[binary]``).

- `HistoryStore` keeps agents' sessions, their iterations and their
  memories (``remember``, ``recall``, ``recall_all``, ``forget``,
  ``learn_error``, ``learn_success``) in any SQLAlchemy database.
- `task_signature` and `relevance` score past sessions for a task.
- The ``history`` event sink records the sessions of ``Agent(history=True)``
  agents (of every agent when ``GROUNDSWELL_HISTORY_URL`` is set) into the
  store at `default_url`; `set_task` says which task a step
  works on.
- `HistoryStore.retry_history`, ``failure_analysis`` and ``usage``: the
  attempts at each task, failures by error type with what fixed them, and
  how agents query their history.
- ``Agent(tools=["history"])`` gives an agent ``query_past_sessions`` and
  ``review_past_failures``, which read only that agent's own history;
  `AGENT_GUIDE` tells it when and how.
- ``Agent(context=["history"])`` adds `build_agent_prompt`'s section
  (its most relevant past sessions, error patterns and successful
  approaches) to the agent's system prompt, unless
  ``GROUNDSWELL_HISTORY_INJECTION=0`` (`injection_enabled`).
- `create_app` is the HTTP API (``groundswell history serve``): the
  sessions API, introspection, retries, failures and usage; `session_record`
  is the JSON form of a session it answers with.
- `serve_app` is the app ``groundswell serve`` serves: the waits API
  (``/api/waits``: list, approve, reject, answer the open waits of its
  process) with the same tokens, the dev UI (``/ui``, ``/api/runs``;
  ``groundswell ui``), and the history API over a store;
  `serving` runs it on a background thread of the process that runs the
  workflows, which is where their waits are.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

from groundswell import (
    AgentMiddleware,
    AgentOption,
    CliCommand,
    ConfigurationError,
    ContextProvider,
    EventSink,
    ToolProvider,
    hookimpl,
)

from .improvement import AgentUsage, Attempt, FailureKind, Fix, TaskRetries
from .injection import build_agent_prompt, injection_enabled, provide
from .relevance import TaskSignature, relevance, task_signature
from .serialize import session_record
from .sink import HistorySink, set_task
from .store import (
    MEMORY_KINDS,
    HistoryStore,
    Memory,
    Session,
    SessionConflict,
    StoreUnavailable,
    default_url,
)
from .tools import AGENT_GUIDE, shared_store, toolset

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .serve import Serving

__all__ = [
    "AGENT_GUIDE",
    "MEMORY_KINDS",
    "AgentUsage",
    "Attempt",
    "FailureKind",
    "Fix",
    "HistorySink",
    "HistoryStore",
    "Memory",
    "Session",
    "SessionConflict",
    "StoreUnavailable",
    "TaskRetries",
    "TaskSignature",
    "build_agent_prompt",
    "create_app",
    "default_url",
    "injection_enabled",
    "relevance",
    "serve_app",
    "serving",
    "session_record",
    "set_task",
    "shared_store",
    "task_signature",
    "toolset",
]


def load_api() -> ModuleType:
    """`groundswell_history.api`, or a clear error when FastAPI is not installed."""
    try:
        from . import api
    except ImportError as exc:  # FastAPI and SQLAlchemy come with the extra, not with groundswell
        missing = exc.name or str(exc)
        raise ConfigurationError(
            f"the history API needs the [history] extra ({missing} is not installed): "
            'pip install "groundswell[history]"'
        ) from exc
    return api


def create_app(store: HistoryStore | str | None = None, *, secret: bytes | None = None) -> FastAPI:
    """The history HTTP API over ``store``; see `groundswell_history.api`."""
    made: FastAPI = load_api().create_app(store, secret=secret)
    return made


def load_serve() -> ModuleType:
    """`groundswell_history.serve`, or a clear error when FastAPI or uvicorn is not installed."""
    load_api()
    try:
        from . import serve
    except ImportError as exc:
        raise ConfigurationError(
            f"serving needs the [history] extra ({exc.name or exc} is not installed): "
            'pip install "groundswell[history]"'
        ) from exc
    return serve


def serve_app(
    history: HistoryStore | str | bool | None = None,
    *,
    secret: bytes | None = None,
    trace_dir: str | os.PathLike[str] | None = None,
    workflows: Any = None,
) -> FastAPI:
    """The app ``groundswell serve`` serves (waits, the dev UI, and history when asked);
    see `groundswell_history.serve.serve_app`."""
    made: FastAPI = load_serve().serve_app(
        history, secret=secret, trace_dir=trace_dir, workflows=workflows
    )
    return made


def serving(
    app: Any = None,
    *,
    history: HistoryStore | str | bool | None = None,
    secret: bytes | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    log_level: str = "warning",
) -> Serving:
    """Serve `serve_app` (or ``app``) on a background thread of this process, where the
    workflows' waits are: ``with serving() as server:`` or ``async with``;
    see `groundswell_history.serve.serving`."""
    made: Serving = load_serve().serving(
        app, history=history, secret=secret, host=host, port=port, log_level=log_level
    )
    return made


def _make_sink() -> HistorySink | None:
    if importlib.util.find_spec("sqlalchemy") is None:
        if os.environ.get("GROUNDSWELL_HISTORY_URL"):
            logging.getLogger("groundswell.history").warning(
                "GROUNDSWELL_HISTORY_URL is set, but session history needs SQLAlchemy: "
                'pip install "groundswell[history]"; sessions are not recorded'
            )
        return None
    return HistorySink()


@hookimpl
def register_event_sinks() -> Any:
    return EventSink(
        name="history",
        factory=_make_sink,
        description="records agent sessions (Agent(history=True) or GROUNDSWELL_HISTORY_URL)",
    )


def _check_history(value: Any, owner: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{owner}: history must be True or False, got {value!r}")
    return value


@hookimpl
def register_agent_options() -> AgentOption:
    return AgentOption(
        "history",
        check=_check_history,
        default=False,
        description="record this agent's sessions in the session history (Agent(history=True))",
    )


def _mark_sessions() -> Any:
    from .marker import MarkSessions  # the kernel's agent classes load only when agents run

    return MarkSessions()


@hookimpl
def register_agent_middleware() -> AgentMiddleware:
    # Below 200: the mark must be on the prompt node's payload when the node starts.
    return AgentMiddleware(
        "history", _mark_sessions, 150, True, "marks Agent(history=True) prompts for the sink"
    )


@hookimpl
def register_tool_providers() -> ToolProvider:
    return ToolProvider(
        name="history",
        factory=toolset,
        description="query_past_sessions and review_past_failures: an agent's own history",
    )


@hookimpl
def register_context_providers() -> ContextProvider:
    return ContextProvider(
        name="history",
        factory=lambda: provide,
        description="an agent's most relevant past sessions, error patterns and successes",
    )


@hookimpl
def register_cli_commands() -> list[CliCommand]:
    from .cli import configure, configure_serve, configure_ui

    return [
        CliCommand(
            name="history",
            factory=configure,
            description="session history: serve the history API, issue agents' and operators' "
            "tokens",
        ),
        CliCommand(
            name="serve",
            factory=configure_serve,
            description="serve the waits API, the dev UI and the history API on one app",
        ),
        CliCommand(
            name="ui",
            factory=configure_ui,
            description="the dev UI: browse runs and traces, follow live runs, answer waits, "
            "start workflows",
        ),
    ]
