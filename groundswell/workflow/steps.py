"""A workflow's steps: ``ctx.step``, each attempt as a ``step`` node, and state snapshots.

`Steps` is the part of `WorkflowContext` that runs steps; the context itself
(its run, spawning, questions, revision) is in ``workflow``.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ..budget.token_budget import (
    TokenBudget,
    check_budget,
    current_budget,
    enter_budget,
    leave_budget,
)
from ..errors import ConfigurationError, StepTimeout
from ..reflection import ReflectionAPI, ReflectionConfig, retry_step
from ..runtime.context import current_frame, enter_frame, reset_frame
from ..scrubbing.serialize import jsonable
from ..tree.tree import EventNode, EventTree, NodeStatus, NodeType
from .execution import ExecutionEngine, LocalEngine
from .outcomes import end_failed
from .step_body import call_body, start_body, within_timeout

if TYPE_CHECKING:
    from .workflow import Workflow

__all__ = ["LOCAL_ENGINE_CLASS", "Steps"]

R = TypeVar("R")

_MISSING = object()
# Engines are typed by their protocol, which LocalEngine meets without subclassing it.
LOCAL_ENGINE_CLASS: type[Any] = LocalEngine


class Steps:
    """Running steps, for `WorkflowContext` (which holds the attributes declared here)."""

    __slots__ = ()
    # Set by WorkflowContext.__init__ (its slots).
    workflow: Workflow[Any, Any]
    engine: ExecutionEngine
    node: EventNode
    state: dict[str, Any]
    reflection: ReflectionAPI
    _tree: EventTree
    _last_state: Any
    _unstarted: dict[int, Coroutine[Any, Any, Any]]
    _keys: Any

    @property
    def workflow_id(self) -> str:
        """The id of this run's workflow node."""
        return self.node.id

    @overload
    def step(
        self,
        name: str,
        fn: Callable[[], Awaitable[R]],
        *,
        timeout: float | None = None,
        reflection: ReflectionConfig | bool | None = None,
        token_budget: TokenBudget | None = None,
    ) -> Coroutine[Any, Any, R]: ...
    @overload
    def step(
        self,
        name: str,
        fn: Awaitable[R],
        *,
        timeout: float | None = None,
        reflection: ReflectionConfig | bool | None = None,
        token_budget: TokenBudget | None = None,
    ) -> Coroutine[Any, Any, R]: ...
    @overload
    def step(
        self,
        name: str,
        fn: Callable[[], R],
        *,
        timeout: float | None = None,
        reflection: ReflectionConfig | bool | None = None,
        token_budget: TokenBudget | None = None,
    ) -> Coroutine[Any, Any, R]: ...

    def step(
        self,
        name: str,
        fn: Any,
        *,
        timeout: float | None = None,
        reflection: ReflectionConfig | bool | None = None,
        token_budget: TokenBudget | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Run ``fn`` as a step named ``name`` and return its result: ``await ctx.step(...)``.

        ``fn`` is an async callable, an awaitable, or a sync callable (run in a
        worker thread; an awaitable it returns is then awaited). Everything it
        starts mounts under the step's node. With ``timeout`` (seconds) the step
        is cancelled when it runs over and `StepTimeout` is raised.
        Exceptions propagate unchanged; the node records them as ``failed``.

        When the workflow reflects (``Workflow(enable_reflection=True)``, or
        ``reflection=`` here, which wins for this step), a recoverable failure
        is reflected on and the step runs again as a new step node, up to
        ``max_attempts``; the retry sees the reflection as
        ``ctx.reflection.last``. Only a callable can run again: a bare
        awaitable runs once.

        ``token_budget`` applies to agent prompts inside the step (over the
        agent's own budget; see `TokenBudget`); without it,
        the enclosing budget's ``per_step`` entry for ``name`` does.

        Like an ``async def`` call, it returns a coroutine that runs the step when
        awaited (directly, or by a task or ``asyncio.gather``). A workflow that
        returns while a step it made has not started fails with `MissingAwait`.
        """
        key = next(self._keys)  # atomic: a step may be made in a worker thread too
        body = self._unstarted[key] = self._step(key, name, fn, timeout, reflection, token_budget)
        return body

    async def _step(
        self,
        key: int,
        name: str,
        fn: Any,
        timeout: float | None,
        reflection: ReflectionConfig | bool | None,
        token_budget: TokenBudget | None,
    ) -> Any:
        del self._unstarted[key]  # started: awaited, or run by a task
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"step name must be a non-empty string, got {name!r}")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ConfigurationError(f"step {name!r}: timeout must be seconds > 0, got {timeout!r}")
        if self.node.ended_at is not None:
            raise ConfigurationError(
                f"step {name!r}: workflow {self.workflow.name!r} has already ended; "
                "call ctx.step only while the workflow runs"
            )
        # The owner label is built only when a budget was given: steps are a hot path.
        budget = None if token_budget is None else check_budget(token_budget, f"step {name!r}")
        if budget is None:
            scope = current_budget()
            if scope is not None and scope[0].per_step and name in scope[0].per_step:
                budget = scope[0].per_step[name]
        token = enter_budget(budget, "step") if budget is not None else None
        try:
            tree = self._tree
            frame = current_frame()
            # Mount under what is running now (a step inside a step nests), unless the
            # context was carried somewhere foreign, in which case use the workflow node.
            parent = frame.node if frame is not None and frame.tree is tree else self.node
            config = self.reflection.for_step(reflection, name)
            if config is None or config.max_attempts == 1:
                return await self._attempt(name, fn, timeout, parent, None)
            if not callable(fn):
                return await self._attempt(name, fn, timeout, parent, None, retryable=False)
            failed: list[EventNode] = []
            context: Any = self  # the WorkflowContext these steps are a part of
            return await retry_step(
                lambda attempt: self._attempt(name, fn, timeout, parent, attempt, failed=failed),
                name=name,
                config=config,
                ctx=context,
                failed_nodes=failed,
            )
        finally:
            if token is not None:
                leave_budget(token)

    async def _attempt(
        self,
        name: str,
        fn: Any,
        timeout: float | None,
        parent: EventNode,
        attempt: int | None,
        *,
        failed: list[EventNode] | None = None,
        retryable: bool = True,
    ) -> Any:
        tree = self._tree
        context: Any = self  # the WorkflowContext these steps are a part of
        node = tree.start_node(NodeType.STEP, name, parent)
        if attempt is not None:
            node.metrics["attempt"] = attempt
        token = enter_frame(tree, node, context)
        try:
            engine = self.engine
            if engine.__class__ is LOCAL_ENGINE_CLASS:  # exactly: its run_step is `return call()`
                body = start_body(name, fn)
            else:  # a durable engine runs the body itself (or returns its checkpoint)
                body = engine.run_step(context, node, functools.partial(call_body, name, fn))
            if timeout is None:
                result = await body
            else:
                result = await within_timeout(body, timeout, tree, node)
        except StepTimeout as exc:
            if node.ended_at is None:  # a nested step's timeout: this step failed with it
                end_failed(tree, node, exc)
            if failed is not None:
                failed.append(node)
            raise
        except BaseException as exc:
            end_failed(tree, node, exc)
            if failed is not None:
                failed.append(node)
            if not retryable and isinstance(exc, Exception):
                tree.add_event(
                    node,
                    "reflection_skipped",
                    reason="the step was given an awaitable, which can run only once; "
                    "pass a callable (e.g. lambda: agent.prompt(...)) to make it retryable",
                )
            raise
        else:
            if self.state:
                self._snapshot_if_changed(node)
            tree.end_node(node, NodeStatus.COMPLETED, output=result, record_output=True)
            return result
        finally:
            reset_frame(token)

    def snapshot_state(self) -> dict[str, Any]:
        """A deep copy of ``state``, also recorded as a ``state_snapshot`` event.

        Secrets (``pydantic.SecretStr``/``SecretBytes``) are redacted in the event.
        Steps that change ``state`` record a snapshot on their node when they end.
        """
        snapshot = copy.deepcopy(self.state)
        frame = current_frame()
        node = frame.node if frame is not None and frame.tree is self._tree else self.node
        self._record_snapshot(node, jsonable(snapshot), reason="requested")
        return snapshot

    def _snapshot_if_changed(self, node: EventNode) -> None:
        # jsonable() copies and redacts; comparing copies catches in-place changes too.
        current = jsonable(self.state)
        if current != self._last_state:
            self._record_snapshot(node, current, reason="step_end")

    def _record_snapshot(self, node: EventNode, state: Any, *, reason: str) -> None:
        previous = self._last_state if isinstance(self._last_state, dict) else {}
        changed = sorted(
            k
            for k in set(previous) | set(state)
            if previous.get(k, _MISSING) != state.get(k, _MISSING)
        )
        self._last_state = state
        self._tree.add_event(
            node,
            "state_snapshot",
            workflow_id=self.workflow_id,
            state=state,
            changed=changed,
            reason=reason,
        )
