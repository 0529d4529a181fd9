"""Exceptions raised by Groundswell.

Every error a user can catch derives from `GroundswellError`::

    GroundswellError
    ├── ConfigurationError          bad arguments or settings; fix the call
    │   ├── MissingAwait            a workflow ended with a step it never awaited
    │   └── ToolDefinitionError     a tool's function cannot be a tool (also a ToolError)
    ├── ModelAPIError               the Anthropic API answered with an error
    │   ├── ModelRefused            the model declined to answer (stop reason refusal)
    │   ├── ContextWindowExceeded   the reply filled the model's context window
    │   ├── OutputTruncated         max_tokens cut off a tool call
    │   └── BatchUnanswered         a batched call's batch expired or was canceled first
    ├── ResponseValidationError     the model's reply did not fit the response_format
    ├── ToolError                   a tool could not be defined or run
    ├── MaxTurnsExceeded            the agent loop hit max_turns
    ├── WorkflowError               a workflow run failed (also carries the tree)
    │   └── StepTimeout             a step ran past its timeout (also a TimeoutError)
    ├── TokenBudgetExceeded         a request would not fit the token budget
    ├── ExtractionError             a required Extract rule found nothing
    ├── PluginError                 a plugin failed to load, register or run
    ├── UnknownWait                 no open wait has that id (also a LookupError)
    │   └── WaitClosed              the wait was answered (or ended) already
    ├── InvalidAnswer               an answer does not fit its wait; the wait stays open
    └── WaitTimedOut                nobody answered a wait before its deadline
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .workflow.workflow import WorkflowResult

__all__ = [
    "BatchUnanswered",
    "ConfigurationError",
    "ContextWindowExceeded",
    "ExtractionError",
    "GroundswellError",
    "InvalidAnswer",
    "MaxTurnsExceeded",
    "MissingAwait",
    "ModelAPIError",
    "ModelRefused",
    "OutputTruncated",
    "PluginError",
    "ResponseValidationError",
    "StepTimeout",
    "TokenBudgetExceeded",
    "ToolDefinitionError",
    "ToolError",
    "UnknownWait",
    "WaitClosed",
    "WaitTimedOut",
    "WorkflowError",
]


class GroundswellError(Exception):
    """Root of every exception Groundswell raises on purpose."""


class ConfigurationError(GroundswellError, ValueError):
    """An argument or setting is invalid; the message says which and how to fix it."""


class MissingAwait(ConfigurationError):
    """A workflow ended with a step it never awaited, or returned a coroutine: add ``await``.

    ``ctx.step(...)`` (like ``agent.prompt(...)``) makes a coroutine that runs
    only when awaited; without ``await`` the step would be skipped without a
    word. ``steps`` names the steps that never started (empty when only the
    output was a coroutine). A workflow run raises it as the ``__cause__`` of
    its `WorkflowError`.
    """

    def __init__(self, message: str, *, steps: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.steps = steps


class ModelAPIError(GroundswellError):
    """The Anthropic API returned an error; the SDK's exception is ``__cause__``.

    ``status_code`` is the HTTP status (``None`` when the API was not reached);
    ``error_type`` is the API's error type (``"rate_limit_error"``, ...) when it
    sent one; ``retry_after`` the seconds its ``Retry-After`` asked to wait, if
    it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        error_type: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type
        self.retry_after = retry_after


class ModelRefused(ModelAPIError):
    """The model declined to answer: the reply's stop reason is ``refusal``.

    ``raw`` is the text it wrote before it stopped (often empty); ``category``
    and ``explanation`` are the API's ``stop_details``, when it sent them.
    Agent reflection acts on it (the prompt is tried again with the refusal as
    feedback); otherwise rephrase the prompt or try another model.
    """

    stop_reason = "refusal"

    def __init__(
        self,
        message: str,
        *,
        raw: str = "",
        category: str | None = None,
        explanation: str | None = None,
    ) -> None:
        super().__init__(message, status_code=200)
        self.raw = raw
        self.category = category
        self.explanation = explanation


class ContextWindowExceeded(ModelAPIError):
    """The reply filled the model's context window (``model_context_window_exceeded``).

    ``raw`` is the text written until then. Trying the same request again
    cannot help, so no reflection or retry starts over (``recoverable`` is
    ``False``): shorten the input (a `TokenBudget` trims the history) or ask
    for less at once.
    """

    stop_reason = "model_context_window_exceeded"
    recoverable = False

    def __init__(self, message: str, *, raw: str = "") -> None:
        super().__init__(message, status_code=200)
        self.raw = raw


class OutputTruncated(ModelAPIError):
    """``max_tokens`` cut the reply off inside a tool call, which therefore never ran.

    ``tool_name`` names the cut-off call, ``raw`` is the text before it and
    ``max_tokens`` the limit in force. Raise ``max_tokens``, or set
    ``continue_on_max_tokens=True`` to give the model another turn instead.
    """

    stop_reason = "max_tokens"

    def __init__(
        self, message: str, *, raw: str = "", tool_name: str = "", max_tokens: int | None = None
    ) -> None:
        super().__init__(message, status_code=200)
        self.raw = raw
        self.tool_name = tool_name
        self.max_tokens = max_tokens


class BatchUnanswered(ModelAPIError):
    """A model call sent through a Message Batch (``batch=True``) got no answer.

    ``outcome`` is what the batch's results say of it: ``"expired"`` (the
    batch's 24 hours ran out before the request was processed) or
    ``"canceled"`` (the batch was canceled first); ``batch_id`` and
    ``custom_id`` name the batch and the request in it.
    """

    def __init__(self, message: str, *, outcome: str, batch_id: str, custom_id: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.batch_id = batch_id
        self.custom_id = custom_id


class ResponseValidationError(GroundswellError):
    """The model's output could not be parsed or validated against ``response_format``."""

    def __init__(self, message: str, *, raw: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.raw = raw
        self.errors = errors


class ToolError(GroundswellError):
    """A tool could not be built from its definition, or could not be run."""


class ToolDefinitionError(ConfigurationError, ToolError):
    """A function cannot be made a tool (its name, a parameter's type...); fix the tool.

    Raised when the tool is built, as other bad settings are; a `ToolError`
    too, so code that caught that when tools were refused still catches it.
    """


class MaxTurnsExceeded(GroundswellError):
    """The agent loop used every allowed model turn without finishing."""


class WorkflowError(GroundswellError):
    """A workflow run failed.

    ``node_path`` names the failing node from the root (``"review/judge"``),
    ``result`` is the failed run's `WorkflowResult` with the
    full tree, and ``__cause__`` is the original exception.
    """

    def __init__(
        self,
        message: str,
        *,
        node_path: str = "",
        result: WorkflowResult[Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.node_path = node_path
        self.result = result


class StepTimeout(WorkflowError, TimeoutError):
    """A step ran longer than its ``timeout``; its node is marked ``cancelled``."""


class TokenBudgetExceeded(GroundswellError):
    """A request does not fit its token budget; ``breakdown`` counts tokens per part.

    ``breakdown`` has ``system``, ``tools``, ``instruction`` (the first user
    turn), ``assistant``, ``tool_results`` and ``user`` (other user turns),
    plus ``total`` and ``limit``. When the dollar limit stopped the run,
    ``spent_usd`` is what its scope had spent and ``max_usd`` the limit (both
    ``None`` otherwise), and ``breakdown`` has only ``total``.
    """

    def __init__(
        self,
        message: str,
        *,
        breakdown: dict[str, int] | None = None,
        spent_usd: float | None = None,
        max_usd: float | None = None,
    ) -> None:
        super().__init__(message)
        self.breakdown = breakdown or {}
        self.spent_usd = spent_usd
        self.max_usd = max_usd


class ExtractionError(GroundswellError):
    """A required `Extract` rule found nothing usable in the answer.

    ``store_as`` names the rule; ``raw`` is the answer text it searched.
    """

    def __init__(
        self, message: str, *, raw: str | None = None, store_as: str | None = None
    ) -> None:
        super().__init__(message)
        self.raw = raw
        self.store_as = store_as


class PluginError(GroundswellError):
    """A plugin failed to import, register, or run one of its hooks."""

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        super().__init__(message)
        self.plugin = plugin


class UnknownWait(GroundswellError, LookupError):
    """No open wait has this id (`groundswell.waits`); ``wait_id`` is the id asked for.

    ``groundswell.waits.pending()`` lists the open waits of this process.
    """

    def __init__(self, message: str, *, wait_id: str = "") -> None:
        super().__init__(message)
        self.wait_id = wait_id


class WaitClosed(UnknownWait):
    """The wait was answered, timed out or cancelled already; ``closed`` says how."""

    def __init__(self, message: str, *, wait_id: str = "", closed: str = "") -> None:
        super().__init__(message, wait_id=wait_id)
        self.closed = closed


class InvalidAnswer(GroundswellError, ValueError):
    """An answer does not fit its wait: the wrong verb for its kind, or a value that fails
    its ``response_format``. The wait stays open for a better answer.

    ``errors`` holds pydantic's validation errors (empty for a wrong verb).
    """

    def __init__(
        self, message: str, *, wait_id: str = "", errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.wait_id = wait_id
        self.errors = errors or []


class WaitTimedOut(GroundswellError, TimeoutError):
    """Nobody answered a wait before its deadline, and it declared no outcome (a default).

    ``wait_id`` names the wait, ``timeout`` the seconds it waited.
    """

    def __init__(self, message: str, *, wait_id: str = "", timeout: float = 0.0) -> None:
        super().__init__(message)
        self.wait_id = wait_id
        self.timeout = timeout
