"""What an eval runs: a workflow, an agent with a prompt template, or a plain function.

Every target runs as a workflow, so every case run has a tree to save and to
evaluate: a `Workflow` runs as it is; an agent's prompt or a function runs
inside a small workflow named for it.
"""

from __future__ import annotations

import asyncio
import inspect
import string
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..agent import Agent
from ..errors import ConfigurationError
from ..workflow.inputs import input_model
from ..workflow.workflow import Workflow, WorkflowContext

__all__ = ["AgentTarget", "Target", "as_target"]


@dataclass(frozen=True)
class AgentTarget:
    """An agent and a prompt template whose ``{placeholders}`` are the case's inputs.

    ``AgentTarget(support, "Customer says: {message}")`` prompts ``support``
    with each case's ``message``.
    """

    agent: Agent[Any]
    prompt: str

    def __post_init__(self) -> None:
        if not isinstance(self.agent, Agent):
            raise ConfigurationError(
                f"AgentTarget takes a groundswell.Agent first, got {type(self.agent).__name__}"
            )
        try:
            self.placeholders  # noqa: B018 - checks the template once, here
        except ValueError as exc:
            raise ConfigurationError(
                f"AgentTarget prompt {self.prompt!r:.60} is not a str.format template: {exc}"
            ) from exc

    @property
    def placeholders(self) -> list[str]:
        """The template's ``{names}``, in order, each once."""
        names: list[str] = []
        for _, field, _, _ in string.Formatter().parse(self.prompt):
            if field is not None:
                if not field.isidentifier():
                    raise ValueError(f"use plain names in {{}}, not {field!r}")
                if field not in names:
                    names.append(field)
        return names


@dataclass(frozen=True)
class Target:
    """A target, ready to run: its name, the model of its inputs, the workflow it runs as."""

    name: str
    workflow: Workflow[Any, Any]
    #: The case inputs it takes (extra ones refused), or None when it takes anything.
    inputs_model: type[BaseModel] | None

    def arguments(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """``inputs`` validated into the target's parameter types, as its keyword arguments.

        Only the inputs given are passed (a parameter left out keeps its default).
        """
        if self.inputs_model is None:
            return dict(inputs)
        try:
            checked = self.inputs_model.model_validate(inputs)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(inputs)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ConfigurationError(
                f"inputs that do not fit {self.name}'s parameters: {problems}"
            ) from None
        return {name: getattr(checked, name) for name in checked.model_fields_set}


def as_target(target: Any) -> Target:
    """``target`` as a `Target`: a `Workflow`, an `AgentTarget`, an async or plain function."""
    if isinstance(target, Target):
        return target
    if isinstance(target, Workflow):
        try:
            model: type[BaseModel] | None = input_model(target.executor)
        except Exception:  # annotations pydantic cannot model: inputs are not checked
            model = None
        return Target(target.name, target, model)
    if isinstance(target, AgentTarget):
        return _agent_target(target)
    if isinstance(target, Agent):
        raise ConfigurationError(
            f"an agent alone is not an eval target: give it a prompt template, "
            f"groundswell.evals.AgentTarget({target.name!r} agent, 'Answer: {{question}}') "
            "(on the command line: --target module:agent --prompt 'Answer: {question}')"
        )
    if callable(target):
        return _function_target(target)
    raise ConfigurationError(
        "an eval target is a groundswell Workflow, an AgentTarget(agent, prompt template) "
        f"or a function taking the case's inputs as keyword arguments; got "
        f"{type(target).__name__}"
    )


def _agent_target(target: AgentTarget) -> Target:
    agent, template = target.agent, target.prompt
    names = target.placeholders

    async def prompt_agent(ctx: WorkflowContext, /, **inputs: Any) -> Any:
        return await agent.prompt(template.format(**inputs))

    fields: dict[str, Any] = {name: (Any, ...) for name in names}
    model = create_model("PromptInputs", __config__=ConfigDict(extra="forbid"), **fields)
    return Target(agent.name, Workflow(prompt_agent, f"eval {agent.name}"), model)


def _function_target(fn: Callable[..., Any]) -> Target:
    name = str(getattr(fn, "__name__", type(fn).__name__))

    async def call(ctx: WorkflowContext, /, **inputs: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(**inputs)
        result = await asyncio.to_thread(fn, **inputs)
        return await result if inspect.isawaitable(result) else result

    return Target(name, Workflow(call, f"eval {name}"), _signature_model(fn))


def _signature_model(fn: Callable[..., Any]) -> type[BaseModel] | None:
    """A model of ``fn``'s keyword parameters, or None when it takes anything."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # a forward reference that does not resolve: those inputs unchecked
        hints = {}
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
            return None
        annotation = hints.get(param.name, Any)
        fields[param.name] = (annotation, ... if param.default is param.empty else param.default)
    try:
        model: type[BaseModel] = create_model(
            "CaseInputs", __config__=ConfigDict(extra="forbid"), **fields
        )
    except Exception:  # an annotation pydantic cannot model: inputs are not checked
        return None
    return model
