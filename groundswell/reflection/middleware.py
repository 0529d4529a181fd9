"""Agent- and prompt-level reflection: a failed prompt is reflected on and tried again.

Outside the prompt node (order 100), so every attempt is a ``prompt`` node of
its own, with a ``reflection`` node between a failed attempt and the next.
Only a reply the model can fix is reflected on (`AGENT_REFLECTABLE`). A retry
continues the conversation: the unusable reply as the assistant turn, then the
feedback as a user turn; without a reply (the tool loop ran out of turns) the
feedback follows the user text.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun, StreamEvent
from ..model.output_types import RESULT_KEY, OutputType
from ..prompt.prompt import Prompt, PromptOverrides
from ..runtime.context import current_frame
from . import (
    AGENT_REFLECTABLE,
    Level,
    ReflectionConfig,
    ReflectionContext,
    ReflectionEntry,
    replace_entry,
    resolve_config,
    retry_with_reflection,
)

__all__ = ["Reflection"]

_HISTORY_LIMIT = 1_000
_KEY = "reflection"


class Reflection(Middleware):
    """Reflect on a failed prompt and run it again, up to ``max_attempts``."""

    name = "reflection"
    order = 100
    retries = True

    # For a call that sets nothing of its own, the agent's settings decide (the
    # kernel notes the agent for workflow-level reflection: `Agent._execute`).
    per_agent = True

    def active(self, run: PromptRun) -> bool:
        config, level = _chosen(run)
        if config is None or config.max_attempts == 1:
            return False
        run.scratch[_KEY] = (config, level)
        return True

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        # A call whose layers were chosen once for its agent (`per_agent`) skipped active().
        config, level = run.scratch.get(_KEY) or _chosen(run)
        assert config is not None  # only a call with reflection on gets this layer
        return await _attempts(run, call_next, config, level)


def _chosen(run: PromptRun) -> tuple[ReflectionConfig | None, Level]:
    overrides = run.overrides
    if (  # nothing but the agent says: its own settings (`_config_for`'s last case)
        overrides.reflection is None
        and overrides.enable_reflection is None
        and run.prompt.enable_reflection is None
    ):
        return run.agent.reflection, "agent"
    return _config_for(run)


def _config_for(run: PromptRun) -> tuple[ReflectionConfig | None, Level]:
    """The reflection settings in force for one call (overrides > prompt > agent)."""
    agent, overrides = run.agent, run.overrides
    config = overrides.reflection
    if config is not None:  # the override's own settings beat anything the prompt says
        on = config.enabled and overrides.enable_reflection is not False
        return (config if on else None), "prompt"
    enabled = overrides.enable_reflection
    if enabled is None:
        enabled = run.prompt.enable_reflection
    if enabled is None:
        return agent.reflection, "agent"
    if not enabled:
        return None, "prompt"
    base: ReflectionConfig | None = agent.config.get("reflection")
    if base is None:
        return resolve_config(True, owner=agent.name), "prompt"
    return (base if base.enabled else dataclasses.replace(base, enabled=True)), "prompt"


async def _attempts(
    run: PromptRun, call_next: PromptNext, config: ReflectionConfig, level: Level
) -> PromptResult[Any]:
    """Attempts of one prompt, with a reflection between a failure and the next try."""
    agent = run.agent
    outer = current_frame()
    workflow = outer.workflow if outer else None

    async def attempt(number: int, entry: ReflectionEntry | None) -> PromptResult[Any]:
        run.attempt = number
        return await call_next()

    def describe(
        failure: Exception, number: int, previous: tuple[ReflectionEntry, ...]
    ) -> ReflectionContext | None:
        if not run.has_node:  # it failed before its prompt node started: nothing to show
            return None
        raw = getattr(failure, "raw", None)
        return ReflectionContext(
            level=level,
            failed_node=run.node,
            error=failure,
            attempt=number,
            previous_attempts=previous,
            config=config,
            tree=run.tree,
            agent=agent,
            prompt=run.prompt,
            messages=tuple(run.messages),
            output=raw if isinstance(raw, str) else None,
            system=run.system,
        )

    def record(entry: ReflectionEntry) -> None:
        agent.reflection_history.append(entry)
        del agent.reflection_history[:-_HISTORY_LIMIT]
        if workflow is not None:
            workflow.reflection.record(entry)

    def replace(entry: ReflectionEntry, updated: ReflectionEntry) -> None:
        replace_entry(agent.reflection_history, entry, updated)
        if workflow is not None:
            workflow.reflection.replace(entry, updated)

    async def prepare(context: ReflectionContext, entry: ReflectionEntry) -> None:
        run.revise(*_revised(run.prompt, run.overrides, entry))
        run.emit(
            StreamEvent("retry", text=f"attempt {context.attempt} failed: {context.error_text}")
        )
        retry = _Retry.after(context, entry)
        run.retry_note, run.retry_messages = retry.note, retry.messages
        # On the retry's prompt node: what it was told (OTel chat spans show it too).
        run.payload["retry"] = (
            {"note": retry.note} if retry.note is not None else {"messages": list(retry.messages)}
        )

    return await retry_with_reflection(
        attempt,
        config=config,
        name=agent.name,
        workflow=workflow,
        catches=lambda exc: isinstance(exc, AGENT_REFLECTABLE),
        describe=describe,
        record=record,
        replace=replace,
        prepare=prepare,
    )


@dataclass(frozen=True)
class _Retry:
    """How the next attempt hears about the failure (see the module docstring)."""

    messages: tuple[dict[str, Any], ...] = ()
    note: str | None = None

    @classmethod
    def after(cls, context: ReflectionContext, entry: ReflectionEntry) -> _Retry:
        lines = [
            "Your previous reply could not be used.",
            f"Error: {context.error_text}",
        ]
        if entry.reason and entry.reason != context.error_text:
            lines.append(f"Reflection: {entry.reason}")
        wanted = context.prompt.output_type if context.prompt is not None else None
        lines.append("Answer again, completely, fixing this" + (_fits(wanted) if wanted else "."))
        feedback = "\n".join(lines)
        if context.output and context.output.strip():
            return cls(
                messages=(
                    {"role": "assistant", "content": context.output},
                    {"role": "user", "content": feedback},
                )
            )
        return cls(note=feedback)


def _fits(wanted: OutputType) -> str:
    if wanted.wrapped:
        return (
            f' (reply with JSON that fits the schema: an object whose "{RESULT_KEY}" is '
            f"{wanted.name})."
        )
    return f" (reply with JSON that fits the {wanted.name} schema)."


def _revised(
    prompt: Prompt[Any], overrides: PromptOverrides, entry: ReflectionEntry
) -> tuple[Prompt[Any], PromptOverrides]:
    """The prompt and overrides for a retry, with the reflection's revisions applied."""
    if entry.revised_data is not None:
        prompt = prompt.with_(data=entry.revised_data)
    if entry.revised_system is not None:
        prompt = prompt.with_(system=entry.revised_system)
        if overrides.system is not None:  # overrides win, so the revision must go there too
            overrides = dataclasses.replace(overrides, system=entry.revised_system)
    return prompt, overrides
