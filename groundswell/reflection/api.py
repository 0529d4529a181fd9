"""``ctx.reflection``: a run's reflection settings and history, and reflection on demand.

``GROUNDSWELL_WORKFLOW_REFLECTION=0`` switches workflow-level reflection off
for the whole process: failed steps are not reflected on, whatever the
workflow or step asks for. Reflection that code asks for itself
(`ReflectionAPI.reflect`, `ReflectionAPI.trigger_reflection`) still runs.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, PluginError
from ..runtime.context import current_frame
from ..scrubbing.serialize import error_record
from ..tree.tree import EventNode, NodeType
from .agents import agent_behind
from .loop import current_entry
from .records import (
    DEFAULT_CONFIG,
    ReflectionConfig,
    ReflectionContext,
    ReflectionEntry,
    ReflectionResult,
    replace_entry,
    resolve_config,
)
from .strategies import reflect_once, resolve

if TYPE_CHECKING:
    from ..workflow.workflow import WorkflowContext

__all__ = ["SWITCH", "ReflectionAPI", "ReflectionRequested", "workflow_reflection_on"]

#: The environment variable that switches workflow-level reflection off (``0``).
SWITCH = "GROUNDSWELL_WORKFLOW_REFLECTION"
_ON = frozenset({"1", "true", "yes", "on", ""})
_OFF = frozenset({"0", "false", "no", "off"})


def workflow_reflection_on() -> bool:
    """False when ``GROUNDSWELL_WORKFLOW_REFLECTION`` switches workflow-level reflection off.

    Unset, empty, ``1``, ``true``, ``yes`` or ``on`` (any case) leave it on;
    ``0``, ``false``, ``no`` or ``off`` switch it off; anything else is a
    `ConfigurationError` rather than a silent guess.
    """
    raw = os.environ.get(SWITCH)
    if raw is None:
        return True
    value = raw.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigurationError(
        f"{SWITCH}={raw!r:.40} means neither on nor off; set it to 0, false, no or off to "
        "switch workflow-level reflection off, or to 1 (or leave it unset) to keep it on"
    )


class ReflectionRequested(Exception):
    """What `ReflectionAPI.trigger_reflection` reflects on: the reason the code gave."""


class ReflectionAPI:
    """``ctx.reflection``: the workflow's reflection settings and history, and reflection on demand."""

    __slots__ = ("_context", "_history", "_off_noted", "_workflow_id", "config")

    def __init__(
        self,
        config: ReflectionConfig | None,
        workflow_id: str = "",
        context: WorkflowContext | None = None,
    ) -> None:
        #: The workflow's reflection settings (``None`` when reflection is off).
        self.config = config
        self._workflow_id = workflow_id
        self._context = context
        self._history: list[ReflectionEntry] = []
        self._off_noted = False

    @property
    def enabled(self) -> bool:
        """True when failed steps of this workflow are reflected on.

        False when the workflow does not reflect, or ``GROUNDSWELL_WORKFLOW_REFLECTION=0``.
        """
        return self.config is not None and workflow_reflection_on()

    @property
    def history(self) -> list[ReflectionEntry]:
        """Every reflection in this workflow run so far, at every level, oldest first (a copy).

        Agent- and prompt-level reflections on prompts run inside this
        workflow (not inside a child workflow) are included, and so are
        reflections the code asked for (`reflect`, `trigger_reflection`).
        """
        return list(self._history)

    def _mine(self) -> ReflectionEntry | None:
        current = current_entry.get()
        if current is not None and current[0] == self._workflow_id:
            return current[1]
        return None

    @property
    def last(self) -> ReflectionEntry | None:
        """The reflection that led to the step attempt running now; ``None`` on a first attempt.

        Each retried step sees its own reflection, even when steps retry
        concurrently; for the latest reflection anywhere, use ``history[-1]``.
        """
        return self._mine()

    @property
    def attempt(self) -> int:
        """The attempt number of the step running now (1 unless it is a retry)."""
        mine = self._mine()
        return mine.attempt + 1 if mine is not None else 1

    def record(self, entry: ReflectionEntry) -> None:
        """Add a reflection to this run's history (strategies and reflecting middleware do)."""
        self._history.append(entry)

    def replace(self, entry: ReflectionEntry, updated: ReflectionEntry) -> None:
        """Put ``updated`` where ``entry`` is in the history (an outcome became known)."""
        replace_entry(self._history, entry, updated)

    def for_step(
        self, reflection: ReflectionConfig | bool | None, name: str
    ) -> ReflectionConfig | None:
        """The settings a step named ``name`` reflects with (its own ``reflection=`` wins).

        ``None`` when it does not reflect, including when `SWITCH` is off (said
        once per run, by a ``reflection_off`` event on the workflow node).
        """
        config = (
            self.config
            if reflection is None
            else resolve_config(reflection, owner=f"step {name!r}")
        )
        if config is None or workflow_reflection_on():
            return config
        ctx = self._context
        if not self._off_noted and ctx is not None:
            self._off_noted = True
            ctx.event_tree.add_event(
                ctx.node, "reflection_off", reason=f"{SWITCH}={os.environ.get(SWITCH, '')!r:.20}"
            )
        return None

    async def reflect(
        self, context: ReflectionContext | BaseException | None = None
    ) -> ReflectionResult:
        """Reflect now, and return the analysis: whether a retry can succeed, why, and how.

        ``context`` is what to reflect on: an exception; or ``None`` for the one
        being handled (call it inside an ``except`` block); or a whole
        `ReflectionContext`. The reflection runs with this workflow's settings
        (``ReflectionConfig()`` when it does not reflect on failures), asks the
        workflow's ``reflection_agent`` or else the model of the agent behind
        the failure, and is a ``reflection`` node under the current step (its
        entry, with resolution ``skip``, goes to `history`). Nothing is retried:
        the code decides what to do with the answer.

        Raises `ConfigurationError` when there is nothing to reflect on, and
        `PluginError` when a strategy of your own fails.
        """
        ctx = self._require("reflect()")
        if isinstance(context, ReflectionContext):
            if context.tree is not ctx.event_tree:
                raise ConfigurationError(
                    "ctx.reflection.reflect(context): the ReflectionContext belongs to another "
                    "run's tree; build it with tree=ctx.event_tree and a node of this run"
                )
            return await self._run(ctx, context, context.failed_node.name)
        error = context if context is not None else sys.exception()
        if not isinstance(error, BaseException):
            raise ConfigurationError(
                f"ctx.reflection.reflect() needs something to reflect on, got {context!r:.60}: "
                "call it inside an `except` block, or pass the exception (or a "
                "ReflectionContext); to reflect on a concern of your own, use "
                "ctx.reflection.trigger_reflection(reason)"
            )
        # A failed child run arrives as a WorkflowError; its cause failed the node.
        failed = _failed_node_of(error, ctx.node) or (
            _failed_node_of(error.__cause__, ctx.node) if error.__cause__ is not None else None
        )
        failed = failed or self._here(ctx)
        return await self._run(ctx, self._context_for(ctx, error, failed), failed.name)

    async def trigger_reflection(self, reason: str) -> ReflectionResult:
        """Reflect now on ``reason``, a concern of the code's own (no exception needed).

        Like `reflect`, on the current step: the strategy is told the reason
        (as a `ReflectionRequested` error) and returns its analysis.
        """
        ctx = self._require("trigger_reflection()")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigurationError(
                "ctx.reflection.trigger_reflection(reason) needs the reason as a non-empty "
                f"string (what is wrong, in words), got {reason!r:.60}"
            )
        here = self._here(ctx)
        context = self._context_for(ctx, ReflectionRequested(reason), here)
        return await self._run(ctx, context, here.name)

    def _require(self, what: str) -> WorkflowContext:
        if self._context is None:
            raise ConfigurationError(
                f"ctx.reflection.{what} works only on the ctx of a running workflow"
            )
        if self._context.node.ended_at is not None:
            raise ConfigurationError(
                f"ctx.reflection.{what}: workflow {self._context.workflow.name!r} has already "
                "ended; call it while the workflow runs"
            )
        return self._context

    def _here(self, ctx: WorkflowContext) -> EventNode:
        frame = current_frame()
        return frame.node if frame is not None and frame.tree is ctx.event_tree else ctx.node

    def _context_for(
        self, ctx: WorkflowContext, error: BaseException, failed: EventNode
    ) -> ReflectionContext:
        tree = ctx.event_tree
        return ReflectionContext(
            level="workflow",
            failed_node=failed,
            error=error,
            attempt=self.attempt,
            previous_attempts=tuple(self._history),
            config=self.config or DEFAULT_CONFIG,
            tree=tree,
            agent=agent_behind(tree, failed, ctx.node),
            reflection_agent=ctx.workflow.reflection_agent,
        )

    async def _run(
        self, ctx: WorkflowContext, context: ReflectionContext, name: str
    ) -> ReflectionResult:
        tree = ctx.event_tree
        entry = await reflect_once(
            context, name=name, parent=self._here(ctx), workflow=ctx, on_demand=True
        )
        if entry is None:  # a strategy of the user's own failed: its node says how
            strategy = context.config.strategy
            raise PluginError(
                f"reflection strategy {strategy!r} failed; its reflection node records the error",
                plugin=strategy,
            )
        entry = resolve(tree, entry, "skip", None)
        self.record(entry)
        return entry.result

    def __repr__(self) -> str:
        return f"ReflectionAPI(enabled={self.enabled}, history={len(self._history)})"


def _failed_node_of(error: BaseException, scope: EventNode) -> EventNode | None:
    """The newest failed step or prompt under ``scope`` that failed with ``error``."""
    wanted = error_record(error)  # as the failed node recorded it (redacted, cut)
    found: EventNode | None = None
    stack = [scope]
    while stack:  # iterative: a deep tree must not hit the recursion limit
        node = stack.pop()
        stack.extend(node.children)
        failure = node.error
        if (
            failure is not None
            and node.type in (NodeType.STEP, NodeType.PROMPT)
            and failure.get("type") == wanted["type"]
            and failure.get("message") == wanted["message"]
            and (found is None or (node.ended_at or 0.0) >= (found.ended_at or 0.0))
        ):
            found = node
    return found
