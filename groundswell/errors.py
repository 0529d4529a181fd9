"""Exceptions raised by Groundswell.

Every error a user can catch derives from `GroundswellError`::

    GroundswellError
    ├── ConfigurationError          bad arguments or settings; fix the call
    │   └── MissingAwait            a workflow ended with a step it never awaited
    ├── ModelAPIError               the Anthropic API answered with an error
    ├── ResponseValidationError     the model's reply did not fit the response_format
    ├── ToolError                   a tool could not be defined or run
    ├── MaxTurnsExceeded            the agent loop hit max_turns
    ├── WorkflowError               a workflow run failed (also carries the tree)
    │   └── StepTimeout             a step ran past its timeout (also a TimeoutError)
    ├── TokenBudgetExceeded         a request would not fit the token budget
    ├── ExtractionError             a required Extract rule found nothing
    └── PluginError                 a plugin failed to load, register or run
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .workflow import WorkflowResult

__all__ = [
    "ConfigurationError",
    "ExtractionError",
    "GroundswellError",
    "MaxTurnsExceeded",
    "MissingAwait",
    "ModelAPIError",
    "PluginError",
    "ResponseValidationError",
    "StepTimeout",
    "TokenBudgetExceeded",
    "ToolError",
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
    sent one.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, error_type: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type


class ResponseValidationError(GroundswellError):
    """The model's output could not be parsed or validated against ``response_format``."""

    def __init__(self, message: str, *, raw: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.raw = raw
        self.errors = errors


class ToolError(GroundswellError):
    """A tool could not be built from its definition, or could not be run."""


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
    plus ``total`` and ``limit``.
    """

    def __init__(self, message: str, *, breakdown: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.breakdown = breakdown or {}


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
