"""People in the loop: a run waits for a person's decision, and a person gives it.

This package is public: ``groundswell.waits.pending()``, ``approve``, ``reject``,
``answer``, and the records `Wait`, `Decision`, `Answered`, `WaitOpening`; for
plugins that hold waits elsewhere, `check_approval_input` (and
`groundswell.waits.client.register_scheme`, with the client).

- `core`: opening, listing and deciding waits (in this process, or through the
  execution engine for a durable run);
- `client`: answering waits from another process (the ``groundswell serve`` API);
- `approval`, `approval_middleware`: which tool calls wait for a person's approval;
- `questions`: ``ctx.ask`` and the ``ask_user`` tool.
"""

from .approval import check_approval_input
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
    "check_approval_input",
    "deliver",
    "pending",
    "reject",
    "verbs",
]
