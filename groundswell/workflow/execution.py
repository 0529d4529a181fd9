"""The execution seam: where workflows and steps run.

Running a workflow (`Workflow.run`), running a step (`WorkflowContext.step`)
and spawning a workflow on a queue (``ctx.spawn_workflow(..., queue=)``) go
through an `ExecutionEngine` chosen by name, always: the kernel's ``local``
engine runs them in-process and costs one call. Durable engines come from plugins through the
``register_execution_backends`` hook (the bundled ``dbos`` engine checkpoints
steps in Postgres or SQLite and runs queued workflows on workers). A wait for a
person (`groundswell.waits`) goes through an engine's optional ``wait`` method
(`WaitingEngine`), so that a durable engine can keep it across processes, and a
decision on a wait of another process through its ``decide`` (`RemoteWaits`).
A tool call goes through its optional ``once`` (`CheckpointingEngine`), so that
a durable engine checkpoints it and a recovery does not run it again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import ConfigurationError, PluginError
from ..hookspecs import ExecutionBackend, hookimpl

if TYPE_CHECKING:
    from ..tree.tree import EventNode
    from ..waits.core import Answered, Decision, Wait
    from .workflow import Workflow, WorkflowContext, WorkflowResult

__all__ = [
    "LOCAL",
    "CheckpointingEngine",
    "ExecutionEngine",
    "RemoteWaits",
    "WaitingEngine",
    "WorkflowCall",
    "created_engines",
    "durable_backend_name",
    "get_engine",
]

LOCAL = "local"
#: The backend ``durable=True`` means, unless ``GROUNDSWELL_DURABLE_BACKEND`` names another.
DEFAULT_DURABLE = "dbos"


class WorkflowCall:
    """One run of a workflow, as an engine receives it: the workflow and its arguments.

    ``run_here()`` runs it in this process with the kernel's own machinery
    (mounting under the current node, statuses, reflection); an engine calls it
    from inside whatever durable context it sets up. ``run_id`` makes the run's
    workflow node take that id (an engine's own run id, so a recovered run keeps
    the same id). ``workflow_id`` is the id the caller chose for the run
    (`Workflow.run_with_id`), else ``None``: an engine runs the call under it
    idempotently, or refuses it with `ConfigurationError`.
    """

    __slots__ = ("args", "kwargs", "outcome", "workflow", "workflow_id")

    def __init__(
        self,
        workflow: Workflow[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        workflow_id: str | None = None,
    ) -> None:
        self.workflow = workflow
        self.args = args
        self.kwargs = kwargs
        if workflow_id is not None and (
            not isinstance(workflow_id, str) or not workflow_id.strip() or "/" in workflow_id
        ):
            raise ConfigurationError(
                f"workflow {workflow.name!r}: a run's id must be a non-empty string without '/' "
                f"(e.g. 'order-1234'), got {workflow_id!r:.60}"
            )
        #: The id the caller chose for this run (`Workflow.run_with_id`), or ``None``.
        self.workflow_id = workflow_id
        #: What ``run_here`` produced in this process: a `WorkflowResult`, or the
        #: `WorkflowError` it raised; ``None`` if it never ran here.
        self.outcome: WorkflowResult[Any] | BaseException | None = None

    async def run_here(
        self, *, run_id: str | None = None, engine: ExecutionEngine | None = None
    ) -> WorkflowResult[Any]:
        """Run the workflow in this process and return its result (raises `WorkflowError`).

        ``engine`` runs the steps of this run (and of plain workflows inside it);
        by default the workflow's own backend does.
        """
        try:
            result = await self.workflow.execute(
                self.args, self.kwargs, run_id=run_id, engine=engine
            )
        except BaseException as exc:
            self.outcome = exc
            raise
        self.outcome = result
        return result

    def __repr__(self) -> str:
        return f"WorkflowCall({self.workflow.name!r}, {len(self.args)} args)"


@runtime_checkable
class ExecutionEngine(Protocol):
    """What an execution backend's factory returns: one instance per name per process.

    It serves every run at once, on any event loop. Exceptions pass through
    unchanged: a step's failure must reach the kernel as raised (it marks the
    node failed and reflects on it), and so must cancellation.

    An engine may also take over waits for people: see `WaitingEngine`.
    """

    async def run_workflow(self, call: WorkflowCall) -> WorkflowResult[Any]:
        """Run ``call`` and return the `WorkflowResult` ``await call.run_here()`` gave (usually
        inside a durable context); its `WorkflowError` propagates.

        When ``call.workflow_id`` is set (`Workflow.run_with_id`), run it under that
        id, once: a call with an id already used returns that run's recorded result
        (or raises its recorded error) without running anything. An engine that
        cannot raises `ConfigurationError`."""
        ...

    async def run_step(
        self, ctx: WorkflowContext, node: EventNode, call: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Run one step's body, ``await call()``, for the step ``node``; return its output
        (or a checkpointed one), and let its exception propagate."""
        ...

    async def spawn(
        self, ctx: WorkflowContext, node: EventNode, call: WorkflowCall, queue: str
    ) -> Any:
        """Run ``call`` on ``queue`` (elsewhere), mount its tree under ``node``, return its output.

        An engine without queues raises `ConfigurationError` saying so.
        """
        ...


@runtime_checkable
class WaitingEngine(Protocol):
    """An `ExecutionEngine` that also takes over waits for people (optional).

    The kernel opens a wait (`groundswell.waits`: its ``wait`` node, the
    registry `pending()` reads, its deadline) and then awaits the engine's
    ``wait`` instead of the in-process decision itself; an engine without this
    method gets that plain await.

    An engine may also have ``opening(ctx, kind, name, opening) ->
    Awaitable[WaitOpening]``, called before the wait opens with the kernel's
    `WaitOpening` (a fresh id, now, and the deadline ``timeout`` gives); it
    returns the one to use. A durable engine returns the id, opening time and
    deadline the wait had before a recovery, so that a person's answer to the id
    they saw still lands and the deadline does not move. ``name`` is the wait
    node's name (``"approval"``, ``"question"``...).
    """

    def wait(
        self, ctx: WorkflowContext, node: EventNode, wait: Wait, decision: Awaitable[Decision]
    ) -> Awaitable[Decision]:
        """Await the `Decision` on ``wait`` (its ``node`` is in ``ctx``'s tree) and return it.

        ``decision`` resolves when a person answers in this process
        (``groundswell.waits.approve`` and the rest), an ``auto_answer`` does, or
        the deadline passes (`WaitTimedOut` when it declared no outcome). A
        durable engine may return a decision it recorded before (a recovered
        run) or one delivered from another process. Cancellation and errors pass
        through unchanged.
        """
        ...


@runtime_checkable
class RemoteWaits(Protocol):
    """An engine that reaches waits held by other processes (optional): a durable one.

    ``groundswell.waits.approve``, ``reject`` and ``answer`` give it a decision
    on a wait this process does not hold.
    """

    def decide(self, wait_id: str, decision: Decision) -> Awaitable[Answered | None]:
        """Send ``decision`` to the wait ``wait_id`` wherever it waits; ``None`` if this
        engine knows no such wait.

        Raises `InvalidAnswer` when the decision does not fit the wait (the wait stays
        open) and `WaitClosed` when the engine knows it was decided already.
        """
        ...


@runtime_checkable
class CheckpointingEngine(Protocol):
    """An engine that checkpoints single operations of a run, such as tool calls (optional)."""

    def once(
        self,
        ctx: WorkflowContext,
        node: EventNode,
        name: str,
        fn: Callable[[str | None], Awaitable[Any]],
        *,
        checkpoint: bool = True,
    ) -> Awaitable[Any]:
        """Run ``await fn(key)`` for the operation ``name`` at ``node`` and return its result.

        ``key`` is the operation's idempotency key, the same on every recovery of
        the run (``None``: the kernel uses its own). In a durable run the result (or
        the exception) is checkpointed with the nodes ``fn`` added under ``node``,
        and a recovery that reaches the same operation gets them back without
        calling ``fn``. Operations of one ``name`` in one branch of the run are told
        apart by their order. ``checkpoint=False`` calls ``fn`` every time.
        """
        ...


class LocalEngine:
    """The in-process engine: runs workflows and steps right here, at the cost of a call."""

    async def run_workflow(self, call: WorkflowCall) -> WorkflowResult[Any]:
        if call.workflow_id is not None:
            # Refused, not ignored: a retried request would silently run everything again.
            raise ConfigurationError(
                f"workflow {call.workflow.name!r}: run_with_id({call.workflow_id!r}, ...) needs a "
                "durable workflow (durable=True), which records the run under that id so that "
                "running it again returns the recorded result; a local run records nothing. "
                "Use run(...) for a local run"
            )
        return await call.run_here()

    def run_step(
        self, ctx: WorkflowContext, node: EventNode, call: Callable[[], Awaitable[Any]]
    ) -> Awaitable[Any]:
        # The body's own awaitable, handed straight back: a step pays no extra frame.
        return call()

    def wait(
        self, ctx: WorkflowContext, node: EventNode, wait: Wait, decision: Awaitable[Decision]
    ) -> Awaitable[Decision]:
        # In-process: the decision comes from this process's registry, as it is.
        return decision

    async def spawn(
        self, ctx: WorkflowContext, node: EventNode, call: WorkflowCall, queue: str
    ) -> Any:
        # The local engine has no queues: the durable backend the child names (or the
        # default one) takes the hand-off.
        engine = get_engine(durable_backend_name(call.workflow.durable or True))
        if isinstance(engine, LocalEngine):
            raise ConfigurationError(
                f"spawn_workflow(queue={queue!r}) needs a distributed execution backend; the "
                'local one has no queues. Install one (pip install "groundswell[durable]") or '
                "leave queue= out to run the workflow here"
            )
        return await engine.spawn(ctx, node, call, queue)


@hookimpl
def register_execution_backends() -> ExecutionBackend:
    """The kernel's ``local`` backend."""
    return ExecutionBackend(name=LOCAL, factory=LocalEngine, description="in-process (the default)")


_engines: dict[str, ExecutionEngine] = {}
_lock = threading.Lock()


def durable_backend_name(durable: bool | str) -> str:
    """The backend name a ``durable=`` setting means (``True``: the default durable one)."""
    if durable is True:
        return os.environ.get("GROUNDSWELL_DURABLE_BACKEND") or DEFAULT_DURABLE
    if durable is False:
        return LOCAL
    return durable


def get_engine(name: str) -> ExecutionEngine:
    """The process-wide engine of the backend named ``name`` (created on first use).

    Raises `ConfigurationError` naming the installed backends when none has that name
    (`PluginManager.lookup`).
    """
    engine = _engines.get(name)
    if engine is not None:
        return engine
    from ..plugins.manager import get_plugin_manager

    with _lock:
        engine = _engines.get(name)
        if engine is not None:
            return engine
        record = get_plugin_manager().lookup(ExecutionBackend, name)
        try:
            made = record.factory()
        except (ConfigurationError, PluginError):
            raise
        except Exception as exc:
            raise ConfigurationError(
                f"execution backend {name!r} could not start: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(made, ExecutionEngine):
            raise PluginError(
                f"execution backend {name!r}: factory returned {type(made).__name__}, which "
                "lacks run_workflow/run_step/spawn",
                plugin=name,
            )
        _engines[name] = made
        return made


def created_engines() -> list[ExecutionEngine]:
    """The engines this process has created so far (`get_engine`), in no particular order."""
    with _lock:
        return list(_engines.values())


def _reset_engines() -> None:
    """Forget created engines (tests that swap plugins)."""
    with _lock:
        _engines.clear()
