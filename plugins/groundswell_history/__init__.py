"""Session history and memory for Groundswell agents, in SQL.

Needs the ``history`` extra: ``pip install "groundswell[history]"`` (SQLite
works as is; PostgreSQL also needs a driver such as ``psycopg[binary]``).

- :class:`HistoryStore` keeps agents' sessions, their iterations and their
  memories (``remember``, ``recall``, ``recall_all``, ``forget``,
  ``learn_error``, ``learn_success``) in any SQLAlchemy database.
- :func:`task_signature` and :func:`relevance` score past sessions for a task.
"""

from __future__ import annotations

from .relevance import TaskSignature, relevance, task_signature
from .store import MEMORY_KINDS, HistoryStore, Memory, Session, default_url

__all__ = [
    "MEMORY_KINDS",
    "HistoryStore",
    "Memory",
    "Session",
    "TaskSignature",
    "default_url",
    "relevance",
    "task_signature",
]
