"""Workflows and steps: ``@workflow``, ``Workflow.run``, ``WorkflowContext.step``.

A workflow is an async function taking a `WorkflowContext` first. Each
run is a ``workflow`` node; each ``ctx.step`` a ``step`` node under whatever is
current when it starts. A run inside another run mounts under the current node
of the outer one, so nesting needs no plumbing.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import math
import time
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

import pydantic

from ._serialize import error_record, jsonable
from .budget import TokenBudget, check_budget, current_budget, enter_budget, leave_budget
from .errors import ConfigurationError, StepTimeout, WorkflowError
from .execution import LOCAL, ExecutionEngine, WorkflowCall, durable_backend_name, get_engine
from .reflection import ReflectionAPI, ReflectionConfig, resolve_config, retry_step
from .run_context import Frame, current_frame, new_run_tree, reset_frame, set_frame
from .tree import EventNode, EventTree, NodeStatus, NodeType

__all__ = ["Workflow", "WorkflowContext", "WorkflowResult", "create_workflow", "workflow"]

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")

_PATH_ATTR = "_groundswell_node_path"


@dataclass(frozen=True, slots=True)
class WorkflowResult(Generic[T]):
    """The outcome of `Workflow.run`.

    ``tree`` is the tree the run is mounted in (for a nested run, the outer
    run's tree) and ``node`` is the run's own workflow node. ``duration`` is in
    seconds.
    """

    output: T | None
    status: NodeStatus
    tree: EventTree
    node: EventNode
    duration: float
    state: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None

    @property
    def workflow_id(self) -> str:
        """The id of the run's workflow node."""
        return self.node.id

    def __gs_jsonable__(self) -> dict[str, Any]:
        return {"workflow_id": self.node.id, "status": self.status.value, "output": self.output}

    def __copy__(self) -> WorkflowResult[T]:
        return self  # immutable; a copy would share the same tree anyway

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a durable step's checkpoint) as data: the run's own subtree as
        # JSON, so the copy has a tree of its own. ``error`` is not kept; the
        # failed node in the tree records it.
        tree = self.tree.to_json(start=self.node.id)
        return (_restore_result, (self.output, self.status.value, tree, self.duration, self.state))


def _restore_result(
    output: Any, status: str, tree: dict[str, Any], duration: float, state: dict[str, Any]
) -> WorkflowResult[Any]:
    restored = EventTree.from_json(tree)
    assert restored.root is not None
    return WorkflowResult(output, NodeStatus(status), restored, restored.root, duration, state)


def _leaf(exc: BaseException) -> BaseException:
    # A TaskGroup raises an ExceptionGroup; the first real error inside is what failed.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _mark_failure(exc: BaseException, tree: EventTree, node: EventNode) -> None:
    # Remember the deepest node an exception failed, so the WorkflowError raised
    # at the top names where it really happened. The tree's id is kept too: the
    # same exception object raised again in another run must not reuse the path.
    leaf = _leaf(exc)
    if isinstance(leaf, WorkflowError) and leaf.node_path:
        return
    mark = getattr(leaf, _PATH_ATTR, None)
    if mark is None or mark[0] != id(tree):
        with contextlib.suppress(AttributeError, TypeError):  # exceptions without a __dict__
            setattr(leaf, _PATH_ATTR, (id(tree), tree.path(node.id)))


def _failure_path(exc: BaseException, tree: EventTree) -> str | None:
    leaf = _leaf(exc)
    if isinstance(leaf, WorkflowError) and leaf.node_path:
        return leaf.node_path
    mark = getattr(leaf, _PATH_ATTR, None)
    if isinstance(mark, tuple) and mark[0] == id(tree):
        return str(mark[1])
    return None


def _end_failed(tree: EventTree, node: EventNode, exc: BaseException) -> None:
    if not isinstance(exc, asyncio.CancelledError):
        _mark_failure(exc, tree, node)
    tree.end_node_after(node, exc)


async def _call(name: str, fn: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn()
    if inspect.isawaitable(fn):
        return await fn
    if not callable(fn):
        raise ConfigurationError(
            f"step {name!r}: expected a callable or an awaitable, got {type(fn).__name__}"
        )
    # Sync callables run in a worker thread so blocking code never stalls other
    # branches; to_thread copies the context, so anything they start still mounts here.
    try:
        result = await asyncio.to_thread(fn)
    except RuntimeError as exc:
        if "event loop" in str(exc):
            raise ConfigurationError(
                f"step {name!r}: its callable needs the running event loop ({exc}), but sync "
                "callables run in a worker thread; make it an `async def` instead"
            ) from exc
        raise
    if inspect.isawaitable(result):
        return await result
    return result


class WorkflowContext:
    """What a workflow function gets as ``ctx``: steps, state, spawning, its node and tree."""

    __slots__ = (
        "_last_state",
        "_tree",
        "cache",
        "engine",
        "node",
        "parent_workflow_id",
        "reflection",
        "state",
        "workflow",
    )

    def __init__(
        self,
        workflow: Workflow[Any, Any],
        tree: EventTree,
        node: EventNode,
        parent_workflow_id: str | None,
        engine: ExecutionEngine,
    ) -> None:
        self.workflow = workflow
        #: The execution engine this run's steps and queued spawns go through.
        self.engine = engine
        self._tree = tree
        self.node = node
        self.parent_workflow_id = parent_workflow_id
        self.state: dict[str, Any] = {}
        self._last_state: Any = {}
        self.cache: Any = workflow.cache
        #: Reflection settings and history of this run (see `ReflectionAPI`).
        self.reflection = ReflectionAPI(workflow.reflection, node.id)

    @property
    def workflow_id(self) -> str:
        """The id of this run's workflow node."""
        return self.node.id

    @property
    def event_tree(self) -> EventTree:
        """The tree this run is mounted in."""
        return self._tree

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[[], Awaitable[R]],
        *,
        timeout: float | None = None,
        reflection: ReflectionConfig | bool | None = None,
        token_budget: TokenBudget | None = None,
    ) -> R: ...
    @overload
    async def step(
        self,
        name: str,
        fn: Awaitable[R],
        *,
        timeout: float | None = None,
        reflection: ReflectionConfig | bool | None = None,
        token_budget: TokenBudget | None = None,
    ) -> R: ...
    @overload
    async def step(
        self,
        name: str,
        fn: Callable[[], R],
        *,
        timeout: float | None = None,
        reflection: ReflectionConfig | bool | None = None,
        token_budget: TokenBudget | None = None,
    ) -> R: ...

    async def step(
        self,
        name: str,
        fn: Any,
        *,
        timeout: float | None = None,
        reflection: ReflectionConfig | bool | None = None,
        token_budget: TokenBudget | None = None,
    ) -> Any:
        """Run ``fn`` as a step named ``name`` and return its result.

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
        """
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
        budget = check_budget(token_budget, f"step {name!r}")
        if budget is None:
            scope = current_budget()
            if scope is not None and scope[0].per_step and name in scope[0].per_step:
                budget = scope[0].per_step[name]
        if budget is not None:
            token = enter_budget(budget, "step")
            try:
                return await self._step(name, fn, timeout, reflection)
            finally:
                leave_budget(token)
        return await self._step(name, fn, timeout, reflection)

    async def _step(
        self, name: str, fn: Any, timeout: float | None, reflection: ReflectionConfig | bool | None
    ) -> Any:
        tree = self._tree
        frame = current_frame()
        # Mount under what is running now (a step inside a step nests), unless the
        # context was carried somewhere foreign, in which case use the workflow node.
        parent = frame.node if frame is not None and frame.tree is tree else self.node
        config = (
            self.reflection.config
            if reflection is None
            else resolve_config(reflection, owner=f"step {name!r}")
        )
        if config is None or config.max_attempts == 1:
            return await self._attempt(name, fn, timeout, parent, None)
        if not callable(fn):
            return await self._attempt(name, fn, timeout, parent, None, retryable=False)
        failed: list[EventNode] = []
        return await retry_step(
            lambda attempt: self._attempt(name, fn, timeout, parent, attempt, failed=failed),
            name=name,
            config=config,
            ctx=self,
            failed_nodes=failed,
            agent=self.workflow.reflection_agent,
        )

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
        node = tree.start_node(NodeType.STEP, name, parent)
        if attempt is not None:
            node.metrics["attempt"] = attempt
        token = set_frame(Frame(tree, node, self))
        try:
            # A durable engine runs the body itself (or returns its checkpoint).
            body = self.engine.run_step(self, node, functools.partial(_call, name, fn))
            if timeout is None:
                result = await body
            else:
                timer = asyncio.timeout(timeout)
                try:
                    async with timer:
                        result = await body
                except TimeoutError as exc:
                    if not timer.expired():
                        raise
                    timed_out = StepTimeout(
                        f"step {name!r} timed out after {timeout}s", node_path=tree.path(node.id)
                    )
                    tree.end_node(node, NodeStatus.CANCELLED, error=timed_out)
                    raise timed_out from exc
        except StepTimeout as exc:
            if node.ended_at is None:  # a nested step's timeout: this step failed with it
                _end_failed(tree, node, exc)
            if failed is not None:
                failed.append(node)
            raise
        except BaseException as exc:
            _end_failed(tree, node, exc)
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

    async def spawn_workflow(
        self, wf: Workflow[..., R], *args: Any, queue: str | None = None, **kwargs: Any
    ) -> R:
        """Run ``wf`` as a child of the current node and return its output.

        With ``queue``, the child is handed to the durable execution backend,
        which runs it on a worker listening to that queue (``groundswell worker
        --queue NAME``), possibly on another machine; a ``spawn`` node marks the
        hand-off and the child's tree mounts under it when it completes.
        Raises `WorkflowError` (naming the failing node) if the child fails.
        """
        if not isinstance(wf, Workflow):
            raise ConfigurationError(
                f"spawn_workflow() needs a Workflow, got {type(wf).__name__}; "
                "decorate the function with @workflow or wrap it in Workflow(fn)"
            )
        if queue is None:
            result = await wf.run(*args, **kwargs)
            return cast("R", result.output)
        if not isinstance(queue, str) or not queue.strip():
            raise ConfigurationError(
                f"spawn_workflow(queue=...) must be a non-empty queue name, got {queue!r}"
            )
        tree = self._tree
        frame = current_frame()
        parent = frame.node if frame is not None and frame.tree is tree else self.node
        payload: dict[str, Any] = {"queue": queue}
        if args or kwargs:
            payload["input"] = {"args": args, "kwargs": kwargs}
        node = tree.start_node(NodeType.SPAWN, wf.name, parent, payload=payload)
        token = set_frame(Frame(tree, node, self))
        try:
            output = await self.engine.spawn(self, node, WorkflowCall(wf, args, kwargs), queue)
        except BaseException as exc:
            _end_failed(tree, node, exc)
            raise
        finally:
            reset_frame(token)
        tree.end_node(node, NodeStatus.COMPLETED, output=output, record_output=True)
        return cast("R", output)

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

    async def replace_last_prompt_result(
        self, prompt: Any, agent: Any, overrides: Any = None
    ) -> Any:
        """Run ``prompt`` on ``agent`` in place of the last prompt, and return its output.

        The last prompt started under the current node (a step, or the
        workflow) gets the status ``revised`` once the new one has succeeded
        and keeps its output for inspection; the new prompt runs as its
        sibling. Replacing again replaces the newest, so a chain of revisions
        stays one row of siblings, all ``revised`` but the last.
        """
        tree = self._tree
        frame = current_frame()
        scope = frame.node if frame is not None and frame.tree is tree else self.node
        last = _last_prompt(tree, scope)
        if last is None:
            raise ConfigurationError(
                f"replace_last_prompt_result: no prompt has run under {tree.path(scope.id)!r} "
                "yet; run one with agent.prompt(...) first"
            )
        if last.ended_at is None:
            raise ConfigurationError(
                f"replace_last_prompt_result: the last prompt ({tree.path(last.id)!r}) is "
                "still running; await it first"
            )
        parent = tree.get_node(last.parent_id) if last.parent_id else scope
        token = set_frame(Frame(tree, parent, self))
        try:
            result = await agent.run(prompt, overrides)
        finally:
            reset_frame(token)
        result.node.payload["revises"] = last.id
        tree.add_event(last, "revised", by=result.node.id)
        tree.set_status(last, NodeStatus.REVISED)
        return result.output

    def __repr__(self) -> str:
        return f"WorkflowContext(workflow={self.workflow.name!r}, id={self.workflow_id})"


class Workflow(Generic[P, T]):
    """A named, reusable workflow around an async ``executor(ctx, *args, **kwargs)``.

    ``cache`` picks the cache backend for agents inside that enable caching
    without naming one. ``enable_reflection=True`` (or ``reflection=
    ReflectionConfig(...)``) reflects on failed steps and runs them again;
    ``reflection_agent`` is the agent the ``llm`` strategy asks (without one,
    the ``feedback`` strategy is used). ``token_budget`` (a
    `TokenBudget`) applies to agent prompts in the run that
    set no budget of their own; its ``per_step`` entries to those in named steps.
    ``durable=True`` runs it on the durable execution backend (``dbos``, from
    ``pip install "groundswell[durable]"``): each step's output is checkpointed,
    and a run that crashed is finished by a new process without repeating the
    completed steps. A backend name picks another backend.
    """

    def __init__(
        self,
        executor: Callable[Concatenate[WorkflowContext, P], Awaitable[T]],
        name: str | None = None,
        *,
        cache: Any = None,
        enable_reflection: bool = False,
        reflection: ReflectionConfig | None = None,
        reflection_agent: Any = None,
        token_budget: TokenBudget | None = None,
        durable: bool | str = False,
    ) -> None:
        if not inspect.iscoroutinefunction(executor):
            raise ConfigurationError(
                f"a workflow needs an `async def` taking ctx first, got {executor!r}"
            )
        self.executor = executor
        self.name: str = name or str(getattr(executor, "__name__", "workflow"))
        #: Cache backend (a name or a Cache) for agents inside that enable caching
        #: without naming a backend; nested runs inherit it.
        self.cache = cache
        label = f"workflow {self.name!r}"
        if reflection is not None and not isinstance(reflection, ReflectionConfig):
            raise ConfigurationError(
                f"{label}: reflection must be a ReflectionConfig, got {type(reflection).__name__}"
            )
        #: Reflection settings for failed steps, or ``None`` when off.
        self.reflection: ReflectionConfig | None = resolve_config(
            reflection if reflection is not None else enable_reflection, owner=label
        )
        if reflection_agent is not None and not hasattr(reflection_agent, "prompt"):
            raise ConfigurationError(
                f"{label}: reflection_agent must be a groundswell.Agent, "
                f"got {type(reflection_agent).__name__}"
            )
        #: The agent the ``llm`` strategy asks about failed steps (else ``feedback`` is used).
        self.reflection_agent = reflection_agent
        #: The token budget for agent prompts in this run that set none of their own.
        self.token_budget = check_budget(token_budget, label)
        if not isinstance(durable, bool | str) or (isinstance(durable, str) and not durable):
            raise ConfigurationError(
                f"{label}: durable must be True, False or an execution backend name, "
                f"got {durable!r}"
            )
        #: ``True`` (or a backend name) runs this workflow on a durable execution
        #: backend: steps are checkpointed and a crashed run can be recovered.
        self.durable: bool | str = durable
        self._backend = durable_backend_name(durable)
        self.__doc__ = executor.__doc__

    async def run(self, *args: P.args, **kwargs: P.kwargs) -> WorkflowResult[T]:
        """Run the workflow and return its `WorkflowResult`.

        Mounts under the current node when called inside another run. On failure
        raises `WorkflowError` (``.node_path``, ``.result`` with the whole
        tree, the original exception as ``__cause__``); cancellation propagates.
        """
        engine = get_engine(self._backend)
        result = await engine.run_workflow(WorkflowCall(self, args, kwargs))
        return cast("WorkflowResult[T]", result)

    async def execute(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        run_id: str | None = None,
        engine: ExecutionEngine | None = None,
    ) -> WorkflowResult[T]:
        """Run the workflow in this process, mounted where it is called.

        What `WorkflowCall.run_here` does for an execution engine; call `run`
        instead, which goes through the workflow's engine.
        """
        outer = current_frame()
        if outer is None:
            tree, parent, parent_wf = new_run_tree(), None, None
        else:
            tree, parent = outer.tree, outer.node
            parent_wf = outer.workflow.workflow_id if outer.workflow is not None else None
        payload: dict[str, Any] = {}
        if args or kwargs:
            payload["input"] = {"args": args, "kwargs": kwargs}
        node = tree.start_node(NodeType.WORKFLOW, self.name, parent, payload=payload, id=run_id)
        if engine is None:
            # A plain workflow run inside a durable one shares its engine, so its steps
            # are checkpointed with the outer run's.
            inherited = self._backend == LOCAL and outer is not None and outer.workflow is not None
            engine = outer.workflow.engine if inherited else get_engine(self._backend)  # type: ignore[union-attr]
        ctx = WorkflowContext(self, tree, node, parent_wf, engine)
        if ctx.cache is None and outer is not None and outer.workflow is not None:
            ctx.cache = outer.workflow.cache
        token = set_frame(Frame(tree, node, ctx))
        scoped = (
            enter_budget(self.token_budget, "workflow") if self.token_budget is not None else None
        )
        started = time.perf_counter()
        try:
            output = await self.executor(ctx, *args, **kwargs)
        except BaseException as exc:
            self._record_state(node, ctx)
            _note_detached(tree, node)
            _end_failed(tree, node, exc)
            if not isinstance(exc, Exception):  # cancellation, KeyboardInterrupt, SystemExit
                raise
            result: WorkflowResult[T] = WorkflowResult(
                output=None,
                status=NodeStatus.FAILED,
                tree=tree,
                node=node,
                duration=time.perf_counter() - started,
                state=ctx.state,
                error=exc,
            )
            raise _workflow_error(self.name, exc, result) from _root_cause(exc)
        finally:
            reset_frame(token)
            if scoped is not None:
                leave_budget(scoped)
        self._record_state(node, ctx)
        tree.end_node(node, NodeStatus.COMPLETED, output=output, record_output=True)
        return WorkflowResult(
            output=output,
            status=NodeStatus.COMPLETED,
            tree=tree,
            node=node,
            duration=time.perf_counter() - started,
            state=ctx.state,
        )

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the workflow's arguments (after ``ctx``), from its signature."""
        return _input_model(self.executor).model_json_schema()

    def validate_input(self, data: Any) -> dict[str, Any]:
        """Check ``data`` (a mapping of argument names) and return the keyword arguments.

        Raises `ConfigurationError` naming each invalid or missing argument.
        """
        if not isinstance(data, dict):
            raise ConfigurationError(
                f"workflow {self.name!r}: input must be an object of arguments, "
                f"got {type(data).__name__}"
            )
        model = _input_model(self.executor)
        try:
            checked = model.model_validate(data)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(input)'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
            raise ConfigurationError(
                f"workflow {self.name!r}: invalid input ({problems}); "
                f"expected {sorted(model.model_fields)}"
            ) from exc
        return {name: getattr(checked, name) for name in model.model_fields}

    @staticmethod
    def _record_state(node: EventNode, ctx: WorkflowContext) -> None:
        if ctx.state:
            node.payload["state"] = jsonable(ctx.state)

    def __repr__(self) -> str:
        return f"Workflow({self.name!r})"


_MISSING = object()


def _last_prompt(tree: EventTree, scope: EventNode) -> EventNode | None:
    """The most recently started prompt under ``scope`` that no other prompt contains."""
    best: EventNode | None = None
    stack = list(scope.children)
    while stack:
        node = stack.pop()
        if node.type is NodeType.PROMPT:
            if best is None or node.timestamp > best.timestamp:
                best = node
            continue  # a prompt inside a tool of this prompt is not a separate result
        stack.extend(node.children)
    return best


@functools.lru_cache(maxsize=256)
def _input_model(executor: Callable[..., Any]) -> type[pydantic.BaseModel]:
    """A pydantic model of an executor's parameters after ``ctx`` (extra fields refused)."""
    try:
        hints = typing.get_type_hints(executor)
    except Exception:
        hints = {}
    fields: dict[str, Any] = {}
    params = list(inspect.signature(executor).parameters.values())[1:]
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    name = f"{getattr(executor, '__name__', 'workflow')}_input"
    model: type[pydantic.BaseModel] = pydantic.create_model(
        name, __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    return model


def _note_detached(tree: EventTree, node: EventNode) -> None:
    # Work the run did not wait for (a gather sibling of a failed step, a sync step
    # that outlived its timeout in a thread) keeps running and may still change
    # the tree; say so on the workflow node instead of pretending it stopped.
    running = [n for n in tree.walk(node.id) if n is not node and n.status is NodeStatus.RUNNING]
    if running:
        tree.add_event(
            node, "detached", nodes=[tree.path(n.id) for n in running[:20]], count=len(running)
        )


def _root_cause(exc: BaseException) -> BaseException:
    # A failed nested run arrives as a WorkflowError; its cause is the real error.
    leaf = _leaf(exc)
    if isinstance(leaf, WorkflowError) and leaf.result is not None and leaf.__cause__ is not None:
        return leaf.__cause__
    return leaf


def _workflow_error(name: str, exc: BaseException, result: WorkflowResult[Any]) -> WorkflowError:
    cause = _root_cause(exc)
    path = _failure_path(exc, result.tree) or result.tree.path(result.node.id)
    cls = StepTimeout if isinstance(_leaf(exc), StepTimeout) else WorkflowError
    reason = error_record(cause)["message"]  # never raises, and secrets are scrubbed
    message = f"workflow {name!r} failed at {path}: {type(cause).__name__}: {reason}"
    return cls(message, node_path=path, result=result)


def create_workflow(
    executor: Callable[Concatenate[WorkflowContext, P], Awaitable[T]],
    name: str | None = None,
    *,
    cache: Any = None,
    enable_reflection: bool = False,
    reflection: ReflectionConfig | None = None,
    reflection_agent: Any = None,
    token_budget: TokenBudget | None = None,
    durable: bool | str = False,
) -> Workflow[P, T]:
    """Build a `Workflow` at run time; it mounts wherever it is run."""
    return Workflow(
        executor,
        name=name,
        cache=cache,
        enable_reflection=enable_reflection,
        reflection=reflection,
        reflection_agent=reflection_agent,
        token_budget=token_budget,
        durable=durable,
    )


@overload
def workflow(fn: Callable[Concatenate[WorkflowContext, P], Awaitable[T]], /) -> Workflow[P, T]: ...
@overload
def workflow(
    *,
    name: str | None = None,
    cache: Any = None,
    enable_reflection: bool = False,
    reflection: ReflectionConfig | None = None,
    reflection_agent: Any = None,
    token_budget: TokenBudget | None = None,
    durable: bool | str = False,
) -> Callable[[Callable[Concatenate[WorkflowContext, P], Awaitable[T]]], Workflow[P, T]]: ...


def workflow(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    cache: Any = None,
    enable_reflection: bool = False,
    reflection: ReflectionConfig | None = None,
    reflection_agent: Any = None,
    token_budget: TokenBudget | None = None,
    durable: bool | str = False,
) -> Any:
    """Make a `Workflow` from an async function: ``@workflow`` or ``@workflow(name=...)``.

    Keyword arguments are those of `Workflow`.
    """
    options: dict[str, Any] = {
        "name": name,
        "cache": cache,
        "enable_reflection": enable_reflection,
        "reflection": reflection,
        "reflection_agent": reflection_agent,
        "token_budget": token_budget,
        "durable": durable,
    }
    if fn is not None:
        return Workflow(fn, **options)

    def decorate(f: Callable[Concatenate[WorkflowContext, P], Awaitable[T]]) -> Workflow[P, T]:
        return Workflow(f, **options)

    return decorate
