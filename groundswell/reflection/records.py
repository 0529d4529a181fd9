"""The records of reflection: its settings, a strategy's answer, the history entry, and
what a strategy is told about a failure."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..errors import ConfigurationError
from ..scrubbing.serialize import error_record
from ..tree.tree import EventNode, EventTree

if TYPE_CHECKING:
    from ..agent import Agent
    from ..prompt.prompt import Prompt

__all__ = [
    "DEFAULT_CONFIG",
    "MAX_ATTEMPTS_CAP",
    "Level",
    "ReflectionConfig",
    "ReflectionContext",
    "ReflectionEntry",
    "ReflectionResult",
    "Reflector",
    "Resolution",
    "replace_entry",
    "resolve_config",
]

#: No configuration may ask for more attempts than this (the first one included).
MAX_ATTEMPTS_CAP = 10
Level = Literal["workflow", "agent", "prompt"]
#: What followed a reflection: the failed step or prompt ran again (``retry``), the
#: original error was raised (``abort``), or nothing, because code asked for the
#: reflection itself and decides what to do with it (``skip``).
Resolution = Literal["retry", "skip", "abort"]


@dataclass(frozen=True, slots=True)
class ReflectionConfig:
    """How reflection runs: on ``Workflow``, ``Agent`` or ``PromptOverrides`` (``reflection=``).

    ``max_attempts`` counts every attempt, the first included (``3`` means at
    most two retries; at most `MAX_ATTEMPTS_CAP`). ``strategy`` names a
    registered strategy (``"llm"`` or ``"feedback"``); ``model`` is the model
    the ``llm`` strategy asks (default: the failing agent's own); ``retry_delay``
    is the pause in seconds before each retry.
    """

    enabled: bool = True
    max_attempts: int = 3
    strategy: str = "llm"
    model: str | None = None
    retry_delay: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigurationError(
                f"ReflectionConfig.enabled must be True or False, got {self.enabled!r}"
            )
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= MAX_ATTEMPTS_CAP
        ):
            raise ConfigurationError(
                f"ReflectionConfig.max_attempts must be an int from 1 to {MAX_ATTEMPTS_CAP} "
                f"(it counts the first attempt), got {self.max_attempts!r}"
            )
        if not isinstance(self.strategy, str) or not self.strategy.strip():
            raise ConfigurationError(
                f"ReflectionConfig.strategy must name a strategy such as 'llm' or 'feedback', "
                f"got {self.strategy!r}"
            )
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigurationError(
                f"ReflectionConfig.model must be a model name or None, got {self.model!r}"
            )
        delay = self.retry_delay
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not math.isfinite(delay)
            or delay < 0
        ):
            raise ConfigurationError(
                f"ReflectionConfig.retry_delay must be seconds >= 0, got {delay!r}"
            )


@dataclass(frozen=True, slots=True)
class ReflectionResult:
    """A strategy's decision.

    ``should_retry`` says whether to try again; ``reason`` is the analysis (it
    reaches the model on an agent-level retry); ``revised_data`` replaces the
    prompt's ``data`` on an agent-level retry and is what a workflow-level
    retry reads from ``ctx.reflection.last``; ``revised_system`` replaces the
    system prompt on an agent-level retry.
    """

    should_retry: bool
    reason: str = ""
    revised_data: Any = None
    revised_system: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.should_retry, bool):
            raise ConfigurationError(
                f"ReflectionResult.should_retry must be True or False, got {self.should_retry!r}"
            )
        if not isinstance(self.reason, str):
            raise ConfigurationError(
                f"ReflectionResult.reason must be a string, got {type(self.reason).__name__}"
            )
        if self.revised_system is not None and (
            not isinstance(self.revised_system, str) or not self.revised_system.strip()
        ):
            raise ConfigurationError(
                "ReflectionResult.revised_system must be a non-empty string or None, "
                f"got {self.revised_system!r:.60}"
            )


@dataclass(frozen=True, slots=True)
class ReflectionEntry:
    """One reflection, as kept in ``ctx.reflection.history`` and ``agent.reflection_history``.

    ``resolution`` is what followed it (see `Resolution`); ``success`` whether
    the attempt after it succeeded: ``None`` while that attempt runs and for a
    ``skip``, ``False`` for an ``abort``.
    """

    level: Level
    name: str
    attempt: int
    error: dict[str, Any]
    strategy: str
    result: ReflectionResult
    node_id: str
    failed_node_id: str
    timestamp: float = field(default_factory=time.time)
    resolution: Resolution = "retry"
    success: bool | None = None

    @property
    def should_retry(self) -> bool:
        """Whether the strategy asked for another attempt."""
        return self.result.should_retry

    @property
    def reason(self) -> str:
        """The strategy's analysis."""
        return self.result.reason

    @property
    def revised_data(self) -> Any:
        """The strategy's revised data, or ``None``."""
        return self.result.revised_data

    @property
    def revised_system(self) -> str | None:
        """The strategy's revised system prompt, or ``None``."""
        return self.result.revised_system


@dataclass(frozen=True, slots=True)
class ReflectionContext:
    """What a strategy is told about a failure.

    ``level`` is ``workflow``, ``agent`` or ``prompt``; ``failed_node`` is the
    failed step or prompt node; ``attempt`` the number of the attempt that
    failed (1 for the first); ``previous_attempts`` the earlier reflections on
    the same step or prompt. ``agent`` is the agent whose prompt failed: at
    workflow level, the agent of the failed step's last prompt (``None`` when
    the step ran none); ``reflection_agent`` is the workflow's
    ``reflection_agent``, which the ``llm`` strategy asks as it is. ``prompt``
    and ``messages`` are the failed prompt and its conversation (agent and
    prompt level), ``system`` the system prompt that was sent; ``output`` is
    the reply that could not be used, when there was one.
    """

    level: Level
    failed_node: EventNode
    error: BaseException
    attempt: int
    previous_attempts: tuple[ReflectionEntry, ...]
    config: ReflectionConfig
    tree: EventTree
    agent: Agent | None = None
    prompt: Prompt[Any] | None = None
    messages: tuple[dict[str, Any], ...] = ()
    output: str | None = None
    system: Any = None
    reflection_agent: Agent | None = None

    @property
    def analyst(self) -> Agent | None:
        """Who a model-backed strategy turns to: ``reflection_agent`` (asked as it is),
        else ``agent`` (whose model and client it uses); ``None`` when neither is known."""
        return self.reflection_agent if self.reflection_agent is not None else self.agent

    @property
    def max_attempts(self) -> int:
        """The attempt limit in force."""
        return self.config.max_attempts

    @property
    def error_text(self) -> str:
        """``"Type: message"`` for the error, with secrets redacted."""
        record = error_record(self.error)
        return f"{record['type']}: {record['message']}"


@runtime_checkable
class Reflector(Protocol):
    """What a reflection strategy's factory returns."""

    async def reflect(self, context: ReflectionContext) -> ReflectionResult:
        """Look at the failure and decide whether (and how) to retry."""
        ...


def resolve_config(value: ReflectionConfig | bool | None, *, owner: str) -> ReflectionConfig | None:
    """A ``reflection=`` / ``enable_reflection=`` argument as a config, or ``None`` when off."""
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT_CONFIG
    if isinstance(value, ReflectionConfig):
        return value if value.enabled else None
    raise ConfigurationError(
        f"{owner}: reflection must be a ReflectionConfig, True or False, got {type(value).__name__}"
    )


DEFAULT_CONFIG = ReflectionConfig()


def replace_entry(
    entries: list[ReflectionEntry], entry: ReflectionEntry, updated: ReflectionEntry
) -> None:
    """Put ``updated`` where ``entry`` is in ``entries`` (looked for from the newest end)."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i] is entry:
            entries[i] = updated
            return
