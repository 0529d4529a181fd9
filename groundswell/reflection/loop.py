"""The one retry loop of every level, and a workflow step's use of it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigurationError
from ..scrubbing.serialize import error_record
from ..tree.tree import EventNode, EventTree
from .agents import agent_behind
from .records import ReflectionConfig, ReflectionContext, ReflectionEntry
from .recoverable import gave_up_on, is_recoverable, mark_given_up
from .strategies import (
    FALLS_BACK,
    feedback_entry,
    fell_back_from,
    pause,
    reflect_once,
    resolve,
    strategy_failed,
)

if TYPE_CHECKING:
    from ..workflow.workflow import WorkflowContext

__all__ = ["current_entry", "retry_step", "retry_with_reflection"]

T = TypeVar("T")

#: The reflection that led to the attempt now running, with the id of its
#: workflow: ctx.reflection.last means "mine" inside concurrent retried steps,
#: and never leaks into a child workflow or a sibling step.
current_entry: ContextVar[tuple[str, ReflectionEntry] | None] = ContextVar(
    "groundswell_reflection_entry", default=None
)


async def retry_with_reflection(
    attempt: Callable[[int, ReflectionEntry | None], Awaitable[T]],
    *,
    config: ReflectionConfig,
    name: str,
    workflow: WorkflowContext | None,
    catches: Callable[[Exception], bool],
    describe: Callable[[Exception, int, tuple[ReflectionEntry, ...]], ReflectionContext | None],
    record: Callable[[ReflectionEntry], None],
    replace: Callable[[ReflectionEntry, ReflectionEntry], None],
    prepare: Callable[[ReflectionContext, ReflectionEntry], Awaitable[None]] | None = None,
) -> T:
    """Run, reflect on a failure, run again.

    ``attempt(n, entry)`` runs attempt ``n`` (``entry`` is the reflection that
    led to it, ``None`` for the first). A failure ``catches`` accepts is told
    to the strategy as ``describe(failure, n, previous)`` (``None``: nothing to
    reflect on, give up) in a ``reflection`` node beside the failed one;
    ``record`` keeps each reflection, ``replace(old, new)`` swaps in the same
    entry with its outcome once known, ``prepare`` applies one before the retry
    (a `ConfigurationError` there gives up). At most ``config.max_attempts``
    attempts; giving up re-raises the last failure, marked so that no
    enclosing level starts over.
    """
    previous: list[ReflectionEntry] = []
    entry: ReflectionEntry | None = None
    tree: EventTree | None = None  # the tree of the latest reflection
    number = 1
    while True:
        try:
            value = await attempt(number, entry)
        except Exception as exc:
            if entry is not None and tree is not None:  # the retry failed as well
                settled = resolve(tree, entry, "retry", False)
                replace(entry, settled)
                previous[-1] = settled
            if not catches(exc):
                raise
            failure = exc
        else:
            if entry is not None and tree is not None:
                replace(entry, resolve(tree, entry, "retry", True))
            return value
        context = (
            describe(failure, number, tuple(previous)) if number < config.max_attempts else None
        )
        if context is None:
            mark_given_up(failure)
            raise failure
        tree, failed = context.tree, context.failed_node
        parent = tree.get_node(failed.parent_id) if failed.parent_id else None
        entry = await reflect_once(context, name=name, parent=parent, workflow=workflow)
        if entry is not None and entry.should_retry and prepare is not None:
            try:
                await prepare(context, entry)
            except ConfigurationError as exc:  # e.g. revised data that cannot be rendered
                node = tree.get_node(entry.node_id)
                if entry.strategy not in FALLS_BACK:
                    record(resolve(tree, entry, "abort", False))
                    strategy_failed(failure, node, tree, entry.strategy, exc)
                    mark_given_up(failure)
                    raise failure from None
                # The revision cannot be applied: retry without it, the error fed back.
                tree.add_event(node, "revision_rejected", error=error_record(exc))
                fell_back_from(node, tree, entry.strategy, exc)
                entry = feedback_entry(entry, context)
                await prepare(context, entry)
        if entry is None:
            mark_given_up(failure)
            raise failure
        if not entry.should_retry:
            record(resolve(tree, entry, "abort", False))
            mark_given_up(failure)
            raise failure
        record(entry)
        previous.append(entry)
        await pause(config)
        number += 1


async def retry_step(
    run_attempt: Callable[[int], Awaitable[Any]],
    *,
    name: str,
    config: ReflectionConfig,
    ctx: WorkflowContext,
    failed_nodes: list[EventNode],
) -> Any:
    """Run a step, reflecting on each recoverable failure and retrying, up to the limit.

    ``run_attempt(n)`` runs attempt ``n`` as its own step node and appends it
    to ``failed_nodes`` before raising. The retried step sees its reflection as
    ``ctx.reflection.last``. The ``llm`` strategy asks the workflow's
    ``reflection_agent``, else the model of the agent behind the failure.
    """

    async def attempt(number: int, entry: ReflectionEntry | None) -> Any:
        token = current_entry.set((ctx.workflow_id, entry)) if entry is not None else None
        try:
            return await run_attempt(number)
        finally:
            if token is not None:
                current_entry.reset(token)

    def describe(
        failure: Exception, number: int, previous: tuple[ReflectionEntry, ...]
    ) -> ReflectionContext | None:
        if not is_recoverable(failure) or gave_up_on(failure):
            return None
        failed = failed_nodes[-1]
        return ReflectionContext(
            level="workflow",
            failed_node=failed,
            error=failure,
            attempt=number,
            previous_attempts=previous,
            config=config,
            tree=ctx.event_tree,
            agent=agent_behind(ctx.event_tree, failed),
            reflection_agent=ctx.workflow.reflection_agent,
        )

    return await retry_with_reflection(
        attempt,
        config=config,
        name=name,
        workflow=ctx,
        catches=lambda exc: True,
        describe=describe,
        record=ctx.reflection.record,
        replace=ctx.reflection.replace,
    )
