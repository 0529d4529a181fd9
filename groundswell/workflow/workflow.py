"""Workflows and steps: ``@workflow``, ``Workflow.run``, ``WorkflowContext.step``.

A workflow is an async function taking a `WorkflowContext` first. Each
run is a ``workflow`` node; each ``ctx.step`` a ``step`` node under whatever is
current when it starts. A run inside another run mounts under the current node
of the outer one, so nesting needs no plumbing.

How a run ends (its `WorkflowResult`, or the `WorkflowError` of a failure) is
in ``outcomes``; how a step's body is called, in ``step_body``.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, Unpack, cast, overload

from ..budget.token_budget import (
    TokenBudget,
    check_budget,
    enter_budget,
    leave_budget,
)
from ..errors import ConfigurationError
from ..prompt.prompt import check_cache_name
from ..reflection import ReflectionAPI, ReflectionConfig, resolve_config
from ..runtime.blocking import run_blocking
from ..runtime.context import (
    Frame,
    current_frame,
    current_watch,
    enter_frame,
    new_run_tree,
    reset_frame,
    set_frame,
)
from ..scrubbing.serialize import jsonable
from ..tree.tree import EventNode, EventTree, NodeStatus, NodeType
from ..waits.questions import NO_DEFAULT, ask_question
from .execution import (
    LOCAL,
    ExecutionEngine,
    WorkflowCall,
    durable_backend_name,
    get_engine,
)
from .inputs import call_error, check_takes_ctx, input_model, validate_input
from .options import WorkflowOptions, check_batch, refuse_unknown
from .outcomes import (
    WorkflowResult,
    completed_result,
    end_failed,
    note_detached,
    restore_result,
    root_cause,
    workflow_error,
)
from .revision import replace_last_prompt
from .step_body import check_awaited
from .steps import LOCAL_ENGINE_CLASS, Steps

__all__ = [
    "Workflow",
    "WorkflowContext",
    "WorkflowOptions",
    "WorkflowResult",
    "create_workflow",
    "workflow",
]

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")

# Durable checkpoints pickled before WorkflowResult moved to ``outcomes`` name this.
_restore_result = restore_result


class WorkflowContext(Steps):
    """What a workflow function gets as ``ctx``: steps, state, spawning, its node and tree."""

    __slots__ = (
        "_keys",
        "_last_state",
        "_tree",
        "_unstarted",
        "batch",
        "cache",
        "engine",
        "node",
        "parent_workflow_id",
        "prompted",
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
        #: Whether agent prompts in this run send their model calls through the Message
        #: Batches API when they do not say (``@workflow(batch=...)``, else the outer run's).
        self.batch: bool | None = workflow.batch
        #: The agents that prompted in this run's tree, by name, which reflection asks
        #: (`groundswell.reflection.agents_of`); kept from the first prompt on.
        self.prompted: dict[str, Any] | None = None
        #: Reflection settings and history of this run (see `ReflectionAPI`).
        self.reflection = ReflectionAPI(workflow.reflection, node.id, self)
        # Steps made (``ctx.step(...)`` called) but not started yet, by a key of their
        # own: one still here when the workflow returns was never awaited.
        self._unstarted: dict[int, Coroutine[Any, Any, Any]] = {}
        self._keys = itertools.count()

    @property
    def event_tree(self) -> EventTree:
        """The tree this run is mounted in."""
        return self._tree

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
            end_failed(tree, node, exc)
            raise
        finally:
            reset_frame(token)
        tree.end_node(node, NodeStatus.COMPLETED, output=output, record_output=True)
        return cast("R", output)

    @overload
    async def ask(
        self,
        question: str,
        response_format: None = None,
        *,
        timeout: float | None = None,
        default: Any = NO_DEFAULT,
    ) -> str: ...
    @overload
    async def ask(
        self,
        question: str,
        response_format: type[R],
        *,
        timeout: float | None = None,
        default: Any = NO_DEFAULT,
    ) -> R: ...

    async def ask(
        self,
        question: str,
        response_format: Any = None,
        *,
        timeout: float | None = None,
        default: Any = NO_DEFAULT,
    ) -> Any:
        """Ask a person ``question`` and return the answer (`groundswell.waits`).

        Opens a ``wait`` node under the current node (the step running, else
        the workflow) until someone answers with ``groundswell.waits.answer``;
        the answer is text, or a value validated into ``response_format`` (an
        answer that does not fit is refused and the question stays open). After
        ``timeout`` seconds without one: ``default`` if given, else `WaitTimedOut`.
        """
        return await ask_question(self, question, response_format, timeout=timeout, default=default)

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
        frame = current_frame()
        scope = frame.node if frame is not None and frame.tree is self._tree else self.node
        return await replace_last_prompt(self, scope, prompt, agent, overrides)

    def __repr__(self) -> str:
        return f"WorkflowContext(workflow={self.workflow.name!r}, id={self.workflow_id})"


class Workflow(Generic[P, T]):
    """A named, reusable workflow around an async ``executor(ctx, *args, **kwargs)``.

    ``cache`` picks the cache backend for agents inside that enable caching
    without naming one. ``enable_reflection=True`` (or ``reflection=
    ReflectionConfig(...)``) reflects on failed steps and runs them again;
    the ``llm`` strategy asks ``reflection_agent`` when given, else the model of
    the agent behind the failure (``GROUNDSWELL_WORKFLOW_REFLECTION=0`` switches
    this off process-wide). ``token_budget`` (a
    `TokenBudget`) applies to agent prompts in the run that
    set no budget of their own; its ``per_step`` entries to those in named steps.
    ``durable=True`` runs it on the durable execution backend (``dbos``, from
    ``pip install "groundswell[durable]"``): each step's output is checkpointed,
    and a run that crashed is finished by a new process without repeating the
    completed steps. A backend name picks another backend. ``batch=True``
    sends the model calls of the agent prompts inside through the Message
    Batches API, unless an agent, prompt or override says otherwise.
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
        batch: bool | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(executor):
            raise ConfigurationError(
                f"a workflow needs an `async def` taking ctx first, got {executor!r}"
            )
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigurationError(
                f"Workflow name must be a non-empty string (or None for the function's name), "
                f"got {name!r:.60}"
            )
        self.executor = executor
        self.name: str = name or str(getattr(executor, "__name__", "workflow"))
        check_takes_ctx(self.name, executor, WorkflowContext)
        label = f"workflow {self.name!r}"
        check_cache_name(cache, label)
        #: Cache backend (a name or a Cache) for agents inside that enable caching
        #: without naming a backend; nested runs inherit it.
        self.cache = cache
        if not isinstance(enable_reflection, bool):
            raise ConfigurationError(
                f"{label}: enable_reflection must be True or False, got {enable_reflection!r:.60}"
            )
        #: Reflection settings for failed steps, or ``None`` when off (checked there).
        self.reflection: ReflectionConfig | None = resolve_config(
            reflection if reflection is not None else enable_reflection, owner=label
        )
        if reflection_agent is not None and not hasattr(reflection_agent, "prompt"):
            raise ConfigurationError(
                f"{label}: reflection_agent must be a groundswell.Agent, "
                f"got {type(reflection_agent).__name__}"
            )
        #: The agent the ``llm`` strategy asks about failed steps (else the failing agent's model).
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
        #: The ``batch`` default of the agent prompts inside (`check_batch`).
        self.batch = check_batch(batch, label)
        self.__doc__ = executor.__doc__

    async def run(self, *args: P.args, **kwargs: P.kwargs) -> WorkflowResult[T]:
        """Run the workflow and return its `WorkflowResult`.

        Mounts under the current node when called inside another run. On failure
        raises `WorkflowError` (``.node_path``, ``.result`` with the whole
        tree, the original exception as ``__cause__``); cancellation propagates.
        """
        engine = get_engine(self._backend)
        if engine.__class__ is LOCAL_ENGINE_CLASS:
            # Exactly the local engine, whose run_workflow is `await call.run_here()`:
            # run it here, two coroutine frames and a WorkflowCall fewer per run.
            return await self.execute(args, kwargs)
        result = await engine.run_workflow(WorkflowCall(self, args, kwargs))
        return cast("WorkflowResult[T]", result)

    async def run_with_id(
        self, workflow_id: str, /, *args: P.args, **kwargs: P.kwargs
    ) -> WorkflowResult[T]:
        """`run` as the durable run ``workflow_id``, an id the caller chooses (``"order-1234"``).

        Once a run has that id, running it again starts nothing: it returns the
        recorded result (or raises the recorded error), waiting for the run if it
        is still going. Needs ``durable=True``: the local engine refuses it.
        """
        engine = get_engine(self._backend)
        call = WorkflowCall(self, args, kwargs, workflow_id=workflow_id)
        return cast("WorkflowResult[T]", await engine.run_workflow(call))

    def run_sync(self, *args: P.args, **kwargs: P.kwargs) -> WorkflowResult[T]:
        """`run` for sync code (scripts, notebooks); `ConfigurationError` in a running loop."""
        return run_blocking(
            lambda: self.run(*args, **kwargs),
            caller=f"workflow {self.name!r}: run_sync()",
            instead="await wf.run(...)",
        )

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
        if outer is None:
            watch = current_watch()
            if watch is not None and watch.state is not None:  # an AG-UI client's state
                ctx.state.update(copy.deepcopy(watch.state))
                ctx._last_state = jsonable(ctx.state)
                watch.state = None  # for this run only, not for the next one started here
        if ctx.cache is None and outer is not None and outer.workflow is not None:
            ctx.cache = outer.workflow.cache
        if ctx.batch is None and outer is not None and outer.workflow is not None:
            ctx.batch = outer.workflow.batch
        token = enter_frame(tree, node, ctx)
        scoped = (
            enter_budget(self.token_budget, "workflow") if self.token_budget is not None else None
        )
        started = time.perf_counter()
        try:
            try:
                running = self.executor(ctx, *args, **kwargs)
            except TypeError:  # the arguments do not fit (Python's message counts ctx)
                wrong = call_error(self.name, self.executor, args, kwargs)
                if wrong is None:
                    raise
                raise ConfigurationError(wrong) from None
            output = await running
            if ctx._unstarted or output.__class__ is CoroutineType:  # a forgotten `await`
                check_awaited(self.name, ctx._unstarted, output)
        except BaseException as exc:
            self._record_state(node, ctx)
            note_detached(tree, node)
            end_failed(tree, node, exc)
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
            raise workflow_error(self.name, exc, result) from root_cause(exc)
        finally:
            reset_frame(token)
            if scoped is not None:
                leave_budget(scoped)
        self._record_state(node, ctx)
        tree.end_node(node, NodeStatus.COMPLETED, output=output, record_output=True)
        return completed_result(output, tree, node, time.perf_counter() - started, ctx.state)

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the workflow's arguments (after ``ctx``), from its signature."""
        return input_model(self.executor).model_json_schema()

    def validate_input(self, data: Any) -> dict[str, Any]:
        """Check ``data`` (a mapping of argument names) and return the keyword arguments.

        Raises `ConfigurationError` naming each invalid or missing argument.
        """
        return validate_input(self.name, self.executor, data)

    @staticmethod
    def _record_state(node: EventNode, ctx: WorkflowContext) -> None:
        if ctx.state:
            node.payload["state"] = jsonable(ctx.state)

    def __repr__(self) -> str:
        return f"Workflow({self.name!r})"


def create_workflow(
    executor: Callable[Concatenate[WorkflowContext, P], Awaitable[T]],
    name: str | None = None,
    **options: Unpack[WorkflowOptions],
) -> Workflow[P, T]:
    """Build a `Workflow` at run time; it mounts wherever it is run."""
    refuse_unknown("create_workflow", options)
    return Workflow(executor, name, **options)


@overload
def workflow(fn: Callable[Concatenate[WorkflowContext, P], Awaitable[T]], /) -> Workflow[P, T]: ...
@overload
def workflow(
    *, name: str | None = None, **options: Unpack[WorkflowOptions]
) -> Callable[[Callable[Concatenate[WorkflowContext, P], Awaitable[T]]], Workflow[P, T]]: ...


def workflow(
    fn: Any = None, /, *, name: str | None = None, **options: Unpack[WorkflowOptions]
) -> Any:
    """Make a `Workflow` from an async function: ``@workflow`` or ``@workflow(name=...)``.

    Keyword arguments are those of `Workflow`.
    """
    refuse_unknown("workflow", options)
    if fn is not None:
        return Workflow(fn, name, **options)

    def decorate(f: Callable[Concatenate[WorkflowContext, P], Awaitable[T]]) -> Workflow[P, T]:
        return Workflow(f, name, **options)

    return decorate
