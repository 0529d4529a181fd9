"""`WorkflowOptions`: the keyword options ``@workflow(...)`` and ``create_workflow`` pass on to
`groundswell.workflow.Workflow`, and the check that refuses an unknown one."""

from __future__ import annotations

from typing import Any, TypedDict

from .budget import TokenBudget
from .reflection import ReflectionConfig

__all__ = ["WorkflowOptions", "refuse_unknown"]


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


def refuse_unknown(caller: str, options: WorkflowOptions) -> None:
    """Raise the ``TypeError`` a parameter list would for a keyword `WorkflowOptions` lacks."""
    # **options takes any keyword at run time: refuse an unknown one as a parameter would.
    unknown = sorted(options.keys() - WorkflowOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
