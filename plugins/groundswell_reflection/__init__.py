"""Groundswell's ``llm`` reflection strategy: a model analyses the failure and revises.

Registered through the ``groundswell`` entry-point group. On a failure the
strategy asks a model for a structured `ReflectionAnalysis` (what went
wrong, whether another attempt can succeed, guidance for it, and optionally a
revised system prompt or revised input data) and returns it as a
`groundswell.ReflectionResult`, which the kernel applies on the retry.

Which model answers:

- agent and prompt level: ``ReflectionConfig(model=...)`` if set, else the
  failing agent's own model, through the failing agent's own client;
- workflow level: ``Workflow(reflection_agent=...)``, asked as it is (with
  ``ReflectionConfig.model`` as a model override when set); without one, the
  model and client of the agent behind the failure (the agent of the failed
  step's last prompt), as at agent level. When the step ran no agent prompt
  either, the kernel uses ``feedback`` and records a ``strategy_fallback``
  event saying so.

The analysis call is a ``prompt`` node (with its ``model_call``) inside the
``reflection`` node. When it fails (an API error, a timeout, an answer that
does not validate, or one asking for a retry with nothing to apply), the kernel
retries with ``feedback`` instead and records a ``strategy_fallback`` event on
the ``reflection`` node: reflection never loses a run a plain retry could win.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from groundswell import (
    Prompt,
    PromptOverrides,
    ReflectionContext,
    ReflectionResult,
    ReflectionStrategy,
    hookimpl,
    record_event,
)

__all__ = ["SYSTEM_PROMPT", "LLMReflector", "ReflectionAnalysis"]

_LIMIT = 4_000

SYSTEM_PROMPT = """\
You review a failed attempt of an automated task and decide how the next attempt
can succeed. Be specific and brief. Say should_retry=false only when no change
to the instructions or input can fix the failure (for example, the task is
impossible or the input is missing). Give revised_system only when the
instructions themselves caused the failure, and then give the complete
replacement. Give revised_data_json only when the input data must change, as a
JSON document that replaces it whole."""


class ReflectionAnalysis(BaseModel):
    """What the reflecting model returns."""

    analysis: str = Field(description="What went wrong and why, in one to three sentences.")
    should_retry: bool = Field(description="Whether another attempt can succeed.")
    guidance: str = Field(description="Concrete instructions for the next attempt.")
    revised_system: str | None = Field(
        default=None, description="A complete replacement system prompt, or null."
    )
    revised_data_json: str | None = Field(
        default=None, description="Replacement input data as a JSON document, or null."
    )


def _clip(text: str, limit: int = _LIMIT) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…[{len(text) - limit} more chars]"


def _describe(context: ReflectionContext) -> dict[str, Any]:
    """The facts about the failure the reflecting model sees."""
    facts: dict[str, Any] = {
        "level": context.level,
        "failed": f"{context.failed_node.type.value} {context.failed_node.name!r}",
        "attempt": context.attempt,
        "max_attempts": context.max_attempts,
        "error": _clip(context.error_text),
    }
    prompt = context.prompt
    if prompt is not None:
        facts["request"] = _clip(prompt.render())
        system = context.system  # what was sent: overrides > prompt > agent
        if isinstance(system, str):
            facts["system"] = _clip(system)
        elif isinstance(system, list):
            texts = [b.get("text", "") for b in system if isinstance(b, dict)]
            facts["system"] = _clip("\n".join(texts))
        if prompt.output_type is not None:
            facts["required_output_schema"] = _clip(json.dumps(prompt.output_type.json_schema))
    if context.output is not None:
        facts["unusable_reply"] = _clip(context.output)
    if context.level == "workflow":
        tree = context.tree
        facts["step_input"] = _clip(json.dumps(context.failed_node.payload, default=str))
        workflow = next(
            (n for n in tree.get_ancestors(context.failed_node.id) if n.type.value == "workflow"),
            None,
        )
        if workflow is not None:
            facts["workflow"] = workflow.name
            if "input" in workflow.payload:
                facts["workflow_input"] = _clip(json.dumps(workflow.payload["input"], default=str))
    if context.previous_attempts:
        facts["earlier_reflections"] = [
            {"attempt": e.attempt, "error": e.error.get("message", ""), "analysis": e.reason}
            for e in context.previous_attempts
        ]
    return facts


class LLMReflector:
    """Asks a model to analyse a failure; see the module docstring for which model."""

    def __init__(self, *, max_tokens: int = 2048) -> None:
        self.max_tokens = max_tokens

    async def reflect(self, context: ReflectionContext) -> ReflectionResult:
        """Ask for a `ReflectionAnalysis` and turn it into a ``ReflectionResult``."""
        asked, failing = context.reflection_agent, context.agent
        if asked is None and failing is None:
            # The kernel switches to ``feedback`` when there is no agent; be safe anyway.
            return ReflectionResult(should_retry=True, reason=context.error_text)
        prompt = Prompt(
            user=(
                "An attempt failed. Analyse the failure described in the data and say how "
                "the next attempt can succeed."
            ),
            data=_describe(context),
            response_format=ReflectionAnalysis,
        )
        # The analysis must never reflect on itself, nor come from a cache.
        overrides = PromptOverrides(
            enable_reflection=False, disable_cache=True, model=context.config.model
        )
        if asked is not None:  # the workflow's reflection_agent, asked as it is
            if asked.config.get("system") is None:
                overrides = PromptOverrides(
                    enable_reflection=False,
                    disable_cache=True,
                    model=context.config.model,
                    system=SYSTEM_PROMPT,
                )
            answer = await asked.prompt(prompt, overrides)
        elif failing is not None:  # the failing agent's model and client, our instructions
            # Imported here: anthropic takes a second to import, and loading the
            # plugin must stay cheap for every host (the CLI above all).
            from groundswell import Agent

            reflector = Agent(
                name=f"{failing.name}.reflection",
                model=context.config.model or failing.config["model"],
                system=SYSTEM_PROMPT,
                max_tokens=self.max_tokens,
                client=failing.client,
            )
            answer = await reflector.prompt(prompt, overrides)
        revised_data: Any = None
        if answer.revised_data_json:
            try:
                revised_data = json.loads(answer.revised_data_json)
            except ValueError as exc:
                record_event("revision_ignored", field="revised_data_json", error=str(exc))
        reason = answer.analysis.strip()
        if answer.guidance.strip():
            reason = f"{reason} Next attempt: {answer.guidance.strip()}".strip()
        revised_system = (answer.revised_system or "").strip() or None
        if answer.should_retry and not reason and revised_data is None and revised_system is None:
            # Nothing to apply: the kernel falls back to ``feedback`` for this attempt.
            raise ValueError(
                "the analysis asked for another attempt but gave no analysis, guidance or revision"
            )
        return ReflectionResult(
            should_retry=answer.should_retry,
            reason=reason,
            revised_data=revised_data,
            revised_system=revised_system and answer.revised_system,
        )


@hookimpl
def register_reflection_strategies() -> ReflectionStrategy:
    """The ``llm`` strategy."""
    return ReflectionStrategy(
        "llm", LLMReflector, "a model analyses the failure and revises the system prompt or data"
    )
