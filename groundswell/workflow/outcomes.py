"""How a workflow run ends: its `WorkflowResult`, or the `WorkflowError` naming where it failed.

A failure is recorded on the node it happened in, and the deepest such node is
remembered on the exception, so the `WorkflowError` raised at the top of the run
names the path to where it really happened and chains the original error.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import StepTimeout, WorkflowError
from ..scrubbing.serialize import error_record
from ..tree.node import metrics_of
from ..tree.tree import CANCELLATIONS, EventNode, EventTree, NodeStatus

__all__ = ["WorkflowResult"]

T = TypeVar("T")

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

    @property
    def cost_usd(self) -> float | None:
        """What the run's model calls cost in USD (its node's ``metrics["cost_usd"]``).

        ``0.0`` when it made none; ``None`` when a model it called has no known
        price (see `groundswell.set_prices`).
        """
        cost: float | None = metrics_of(self.node).get("cost_usd", 0.0)
        return cost

    def __gs_jsonable__(self) -> dict[str, Any]:
        return {"workflow_id": self.node.id, "status": self.status.value, "output": self.output}

    def __copy__(self) -> WorkflowResult[T]:
        return self  # immutable; a copy would share the same tree anyway

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a durable step's checkpoint) as data: the run's own subtree as
        # JSON, so the copy has a tree of its own. ``error`` is not kept; the
        # failed node in the tree records it.
        tree = self.tree.to_json(start=self.node.id)
        return (restore_result, (self.output, self.status.value, tree, self.duration, self.state))


# A frozen dataclass's __init__ sets each field through object.__setattr__; the
# slots' own setters do the same for a fraction of that (every run makes a result).
_new_result = object.__new__
(
    _set_output,
    _set_status,
    _set_tree,
    _set_node,
    _set_duration,
    _set_state,
    _set_error,
) = (
    vars(WorkflowResult)[name].__set__
    for name in ("output", "status", "tree", "node", "duration", "state", "error")
)


def completed_result(
    output: Any, tree: EventTree, node: EventNode, duration: float, state: dict[str, Any]
) -> WorkflowResult[Any]:
    """``WorkflowResult(output, NodeStatus.COMPLETED, tree, node, duration, state)``, for less."""
    result: WorkflowResult[Any] = _new_result(WorkflowResult)
    _set_output(result, output)
    _set_status(result, NodeStatus.COMPLETED)
    _set_tree(result, tree)
    _set_node(result, node)
    _set_duration(result, duration)
    _set_state(result, state)
    _set_error(result, None)
    return result


def restore_result(
    output: Any, status: str, tree: dict[str, Any], duration: float, state: dict[str, Any]
) -> WorkflowResult[Any]:
    """A `WorkflowResult` unpickled: its run's subtree rebuilt as a tree of its own."""
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


def end_failed(tree: EventTree, node: EventNode, exc: BaseException) -> None:
    """End ``node`` after ``exc``, remembering it as where ``exc`` failed (unless cancelled)."""
    if not isinstance(exc, CANCELLATIONS):
        _mark_failure(exc, tree, node)
    tree.end_node_after(node, exc)


def note_detached(tree: EventTree, node: EventNode) -> None:
    """Record a ``detached`` event on a failed run's ``node`` naming work still running."""
    # Work the run did not wait for (a gather sibling of a failed step, a sync step
    # that outlived its timeout in a thread) keeps running and may still change
    # the tree; say so on the workflow node instead of pretending it stopped.
    unfinished = (NodeStatus.RUNNING, NodeStatus.WAITING)
    running = [n for n in tree.walk(node.id) if n is not node and n.status in unfinished]
    if running:
        tree.add_event(
            node, "detached", nodes=[tree.path(n.id) for n in running[:20]], count=len(running)
        )


def root_cause(exc: BaseException) -> BaseException:
    """The error a run failed with: the first inside a group, the cause of a nested run's."""
    # A failed nested run arrives as a WorkflowError; its cause is the real error.
    leaf = _leaf(exc)
    if isinstance(leaf, WorkflowError) and leaf.result is not None and leaf.__cause__ is not None:
        return leaf.__cause__
    return leaf


def workflow_error(name: str, exc: BaseException, result: WorkflowResult[Any]) -> WorkflowError:
    """The error raised for run ``name`` failing with ``exc``, naming the node that failed."""
    cause = root_cause(exc)
    path = _failure_path(exc, result.tree) or result.tree.path(result.node.id)
    cls = StepTimeout if isinstance(_leaf(exc), StepTimeout) else WorkflowError
    reason = error_record(cause)["message"]  # never raises, and secrets are scrubbed
    message = f"workflow {name!r} failed at {path}: {type(cause).__name__}: {reason}"
    return cls(message, node_path=path, result=result)
