"""Running a strategy: the kernel's ``feedback`` strategy, choosing one, and one reflection
in its ``reflection`` node (with the fall-backs that keep a run alive)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, PluginError
from ..hookspecs import ReflectionStrategy, hookimpl
from ..plugins.manager import get_plugin_manager
from ..runtime.context import Frame, reset_frame, set_frame
from ..scrubbing.serialize import error_record, jsonable
from ..tree.tree import EventNode, EventTree, NodeStatus, NodeType
from .records import (
    ReflectionConfig,
    ReflectionContext,
    ReflectionEntry,
    ReflectionResult,
    Reflector,
    Resolution,
)

if TYPE_CHECKING:
    from ..agent import Agent
    from ..workflow.workflow import WorkflowContext

__all__ = [
    "FALLBACK_STRATEGY",
    "FALLS_BACK",
    "FeedbackReflector",
    "choose_strategy",
    "feedback_entry",
    "fell_back_from",
    "pause",
    "reflect_once",
    "register_reflection_strategies",
    "resolve",
    "strategy_failed",
]

logger = logging.getLogger("groundswell.reflection")

#: Strategies whose own failure falls back to `FALLBACK_STRATEGY` for that attempt
#: instead of losing the run: a retry with the error fed back is never worse.
FALLS_BACK = frozenset({"llm"})
FALLBACK_STRATEGY = "feedback"
NO_AGENT = (
    "no agent to ask: nothing that failed prompted an agent, and the workflow has no "
    "reflection_agent"
)


class FeedbackReflector:
    """The kernel's strategy: always retry, with the error as the feedback.

    At agent and prompt level the error text goes back to the model; at
    workflow level the step simply runs again, with ``ctx.reflection.last``
    telling it what failed.
    """

    async def reflect(self, context: ReflectionContext) -> ReflectionResult:
        """Retry, saying what went wrong."""
        return ReflectionResult(should_retry=True, reason=context.error_text)


@hookimpl
def register_reflection_strategies() -> ReflectionStrategy:
    """The kernel's own ``feedback`` strategy."""
    return ReflectionStrategy(
        "feedback", FeedbackReflector, "retry with the error text as feedback (no model call)"
    )


def _strategy(name: str) -> Reflector:
    strategy = get_plugin_manager().lookup(ReflectionStrategy, name).factory()
    if not isinstance(strategy, Reflector):
        raise PluginError(
            f"reflection strategy {name!r}: its factory returned {type(strategy).__name__}, "
            "which has no async reflect(context) method"
        )
    return strategy


def choose_strategy(
    config: ReflectionConfig, analyst: Agent | None, records: Mapping[str, ReflectionStrategy]
) -> tuple[str, str | None]:
    """The strategy that will run, and why it is not the one configured (``None`` if it is).

    ``llm`` needs an agent to ask (``analyst``) and its plugin; without either,
    ``feedback`` runs instead.
    """
    name = config.strategy
    if name != "llm":
        return name, None
    if analyst is None:
        return FALLBACK_STRATEGY, NO_AGENT
    if "llm" not in records:
        # The bundled plugin is disabled (e.g. GROUNDSWELL_LOAD_PLUGINS): the
        # default must still work, so fall back and say so in the tree.
        return FALLBACK_STRATEGY, "the plugin providing it is not loaded"
    return name, None


async def reflect_once(
    context: ReflectionContext,
    *,
    name: str,
    parent: EventNode | None,
    workflow: WorkflowContext | None,
    on_demand: bool = False,
) -> ReflectionEntry | None:
    """Run the strategy for one failure inside its own ``reflection`` node.

    Returns the entry (resolution ``retry`` or ``abort``, as the strategy
    decided), or ``None`` if the strategy itself failed (recorded on the node;
    the caller re-raises the original error). A strategy in `FALLS_BACK`
    (``llm``) that fails, or cannot run, is replaced by `FALLBACK_STRATEGY` for
    this attempt instead, with a ``strategy_fallback`` event on the node.
    """
    tree = context.tree
    wanted = context.config.strategy
    records = get_plugin_manager().reflection_strategies()  # collected once per reflection
    chosen, why = choose_strategy(context.config, context.analyst, records)
    payload = {
        "level": context.level,
        "attempt": context.attempt,
        "strategy": chosen,
        "failed_node_id": context.failed_node.id,
        "failure": error_record(context.error),
    }
    if on_demand:
        payload["on_demand"] = True
    node = tree.start_node(NodeType.REFLECTION, name, parent, payload=payload, trusted=True)
    node.metrics["attempt"] = context.attempt
    if why is not None:
        tree.add_event(node, "strategy_fallback", wanted=wanted, used=chosen, reason=why)
        logger.info("reflection (%s) on %r uses %s instead: %s", wanted, name, chosen, why)
    try:
        strategy = _strategy(chosen)
    except (ConfigurationError, PluginError) as exc:
        # A strategy name nobody registered is the caller's configuration to fix.
        tree.end_node(node, NodeStatus.FAILED, error=exc)
        raise exc from context.error
    token = set_frame(Frame(tree, node, workflow))
    try:
        if workflow is None:
            result = await strategy.reflect(context)
        else:
            # In a durable run the reflection is checkpointed like a step, so a
            # recovered run does not ask the reflecting model again.
            result = await workflow.engine.run_step(
                workflow, node, lambda: strategy.reflect(context)
            )
        if not isinstance(result, ReflectionResult):
            raise PluginError(
                f"reflection strategy {chosen!r} returned {type(result).__name__}, "
                "not a ReflectionResult"
            )
    except asyncio.CancelledError:
        tree.end_node(node, NodeStatus.CANCELLED)
        raise
    except Exception as exc:
        if chosen not in FALLS_BACK:
            # Whatever went wrong in the strategy, the run keeps its original error.
            strategy_failed(context.error, node, tree, chosen, exc)
            return None
        # The analysis call failed (API error, timeout, an unusable answer): a plain
        # retry with the error fed back can still succeed, so that is what happens.
        fell_back_from(node, tree, chosen, exc)
        chosen = FALLBACK_STRATEGY
        result = await FeedbackReflector().reflect(context)
    finally:
        reset_frame(token)
    entry = ReflectionEntry(
        level=context.level,
        name=name,
        attempt=context.attempt,
        error=error_record(context.error),
        strategy=chosen,
        result=result,
        node_id=node.id,
        failed_node_id=context.failed_node.id,
        resolution="retry" if result.should_retry else "abort",
    )
    tree.end_node(node, NodeStatus.COMPLETED, output=jsonable(result), record_output=True)
    return entry


def resolve(
    tree: EventTree, entry: ReflectionEntry, resolution: Resolution, success: bool | None
) -> ReflectionEntry:
    """``entry`` with its outcome, also recorded as a ``resolved`` event on its node."""
    if entry.node_id in tree:
        tree.add_event(
            tree.get_node(entry.node_id), "resolved", resolution=resolution, success=success
        )
    return dataclasses.replace(entry, resolution=resolution, success=success)


def fell_back_from(node: EventNode, tree: EventTree, strategy: str, exc: BaseException) -> None:
    """Record that ``strategy`` failed and `FALLBACK_STRATEGY` answers for this attempt."""
    record = error_record(exc)  # secrets redacted
    tree.add_event(
        node,
        "strategy_fallback",
        wanted=strategy,
        used=FALLBACK_STRATEGY,
        reason=f"the {strategy} strategy failed",
        error=record,
    )
    logger.warning(
        "reflection (%s) failed, retrying with %s instead: %s: %s",
        strategy,
        FALLBACK_STRATEGY,
        record["type"],
        record["message"],
    )


def feedback_entry(entry: ReflectionEntry, context: ReflectionContext) -> ReflectionEntry:
    """``entry`` redone by the `FALLBACK_STRATEGY`: the error fed back, no revision."""
    return dataclasses.replace(
        entry,
        strategy=FALLBACK_STRATEGY,
        result=ReflectionResult(should_retry=True, reason=context.error_text),
        resolution="retry",
    )


def strategy_failed(
    error: BaseException, node: EventNode, tree: EventTree, strategy: str, exc: BaseException
) -> None:
    """Record that reflection could not help: on its node, in the log, on the original error."""
    if node.ended_at is None:
        tree.end_node(node, NodeStatus.FAILED, error=exc)
    else:
        tree.add_event(node, "revision_rejected", error=error_record(exc))
    record = error_record(exc)  # secrets redacted
    text = f"reflection ({strategy}) could not help: {record['type']}: {record['message']}"
    logger.warning("%s", text)
    with contextlib.suppress(Exception):
        error.add_note(text)


async def pause(config: ReflectionConfig) -> None:
    """Wait ``retry_delay`` before a retry (cancellation passes through)."""
    if config.retry_delay > 0:
        await asyncio.sleep(config.retry_delay)
