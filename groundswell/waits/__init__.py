"""People in the loop: a run waits for a person's decision, and a person gives it.

This package is public: ``groundswell.waits.pending()``, ``approve``, ``reject``,
``answer``, and the records `Wait`, `Decision`, `Answered`, `WaitOpening`.

- `core`: opening, listing and deciding waits (in this process, or through the
  execution engine for a durable run);
- `client`: answering waits from another process (the ``groundswell serve`` API);
- `approval`, `approval_middleware`: which tool calls wait for a person's approval;
- `questions`: ``ctx.ask`` and the ``ask_user`` tool.
"""

from .core import (
    VERBS,
    Answered,
    Decision,
    Wait,
    WaitOpening,
    answer,
    approve,
    deliver,
    pending,
    reject,
    verbs,
)

__all__ = [
    "VERBS",
    "Answered",
    "Decision",
    "Wait",
    "WaitOpening",
    "answer",
    "approve",
    "deliver",
    "pending",
    "reject",
    "verbs",
]
