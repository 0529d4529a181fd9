"""`WorkflowOptions`: the keyword options ``@workflow(...)`` and ``create_workflow`` pass on to
`groundswell.workflow.workflow.Workflow`, and the check that refuses an unknown one."""

from __future__ import annotations

from typing import Any, TypedDict

from ..budget.token_budget import TokenBudget
from ..errors import ConfigurationError
from ..reflection import ReflectionConfig

__all__ = ["WorkflowOptions", "check_batch", "refuse_unknown"]


class WorkflowOptions(TypedDict, total=False):
    """The keyword options of `Workflow`, which `workflow` and `create_workflow` pass on."""

    #: Cache backend (a name or a Cache) for agents inside that enable caching without one.
    cache: Any
    #: Reflect on failed steps and run them again, with the default `ReflectionConfig`.
    enable_reflection: bool
    #: Reflection settings for failed steps; wins over ``enable_reflection``.
    reflection: ReflectionConfig | None
    #: The agent the ``llm`` reflection strategy asks (else the failing agent's model).
    reflection_agent: Any
    #: The budget for agent prompts in the run that set none of their own.
    token_budget: TokenBudget | None
    #: ``True`` or an execution backend name: checkpoint steps, recover crashed runs.
    durable: bool | str
    #: Send the model calls of agent prompts in the run through the Message Batches API
    #: (a default: an agent, prompt or override that sets ``batch`` wins).
    batch: bool | None


def refuse_unknown(caller: str, options: WorkflowOptions) -> None:
    """Raise the ``TypeError`` a parameter list would for a keyword `WorkflowOptions` lacks."""
    # **options takes any keyword at run time: refuse an unknown one as a parameter would.
    unknown = sorted(options.keys() - WorkflowOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")


def check_batch(batch: object, owner: str) -> bool | None:
    """``@workflow(batch=...)``: ``True``, ``False`` or ``None`` (nested runs inherit the outer's)."""
    if batch is not None and not isinstance(batch, bool):
        raise ConfigurationError(
            f"{owner}: batch must be True (model calls of the prompts inside go through the "
            f"Message Batches API), False or None, got {batch!r:.60}"
        )
    return batch
