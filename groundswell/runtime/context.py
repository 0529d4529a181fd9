"""Where am I in the run? The current tree and node, on contextvars.

Every workflow, step, agent call and tool call sets the current frame while it
runs, and whatever starts inside it mounts under that node. Because
``asyncio`` copies the context into every task (``gather``, ``TaskGroup``,
``create_task``) and ``asyncio.to_thread`` copies it into the worker thread,
concurrent branches mount correctly with no plumbing and no cross-talk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..plugins.manager import get_plugin_manager
from ..tree.events import Event, RunSinks
from ..tree.records import start_record
from ..tree.tree import EventNode, EventTree

if TYPE_CHECKING:
    from ..workflow.workflow import WorkflowContext

__all__ = [
    "LIVE_WATCHES",
    "Frame",
    "RunWatch",
    "current_agent",
    "current_frame",
    "current_node",
    "current_tree",
    "current_watch",
    "enter_frame",
    "new_run_tree",
    "observe_run",
    "record_event",
    "reset_frame",
    "set_frame",
    "unwatch_runs",
    "watch_runs",
]

logger = logging.getLogger("groundswell.sinks")


@dataclass(frozen=True, slots=True)
class Frame:
    """The current position in a run: its tree, the node code runs under, its workflow.

    ``agent`` is the `Agent` whose prompt (or tool call) runs now.
    """

    tree: EventTree
    node: EventNode
    workflow: WorkflowContext | None = None
    agent: Any = None


_frame: ContextVar[Frame | None] = ContextVar("groundswell_frame", default=None)


def set_frame(frame: Frame) -> Token[Frame | None]:
    """Make ``frame`` the current position; pass the token to `reset_frame` when done."""
    return _frame.set(frame)


# Frame is frozen, so its generated __init__ sets each field through
# object.__setattr__; the slots' own setters do the same in half the time, which
# counts for a step (a few microseconds in all).
_new_frame = object.__new__
_set_tree, _set_node, _set_workflow, _set_agent = (
    vars(Frame)[field].__set__ for field in ("tree", "node", "workflow", "agent")
)


def enter_frame(
    tree: EventTree, node: EventNode, workflow: WorkflowContext | None = None, agent: Any = None
) -> Token[Frame | None]:
    """``set_frame(Frame(tree, node, workflow, agent))``, faster: for every step."""
    frame = _new_frame(Frame)
    _set_tree(frame, tree)
    _set_node(frame, node)
    _set_workflow(frame, workflow)
    _set_agent(frame, agent)
    return _frame.set(frame)


def reset_frame(token: Token[Frame | None]) -> None:
    """Go back to the position before the `set_frame` that gave ``token``."""
    _frame.reset(token)


def current_frame() -> Frame | None:
    """The current `Frame`, or ``None`` outside any run."""
    return _frame.get()


def current_node() -> EventNode | None:
    """The node the calling code runs under, or ``None`` outside any run."""
    frame = _frame.get()
    return frame.node if frame is not None else None


def current_tree() -> EventTree | None:
    """The tree of the run the calling code belongs to, or ``None`` outside any run."""
    frame = _frame.get()
    return frame.tree if frame is not None else None


def current_agent() -> Any:
    """The agent whose prompt or tool call the calling code runs in, or ``None``."""
    frame = _frame.get()
    return frame.agent if frame is not None else None


def record_event(type: str, **data: Any) -> dict[str, Any] | None:
    """Record a point-in-time event on the current node; ``None`` outside any run."""
    frame = _frame.get()
    if frame is None:
        return None
    return frame.tree.add_event(frame.node, type, **data)


#: The ids of the `RunWatch` objects alive. With none, no context can hold one, and a
#: prompt or run skips reading the context variable. Set operations are atomic.
LIVE_WATCHES: set[int] = set()


@dataclass(slots=True)
class RunWatch:
    """A live observer of the runs started in one context (`watch_runs`), on the run's thread.

    ``on_event`` gets every change of their trees as it happens (sinks get them
    on their own threads, later); ``on_stream`` gets ``(PromptRun, StreamEvent)``
    for every prompt in them that no ``agent.stream()`` consumer reads: such a
    prompt streams its model calls so that its deltas reach the watch.
    ``state`` seeds ``ctx.state`` of the first workflow run at top level.
    Both callables must be quick and must not raise: they run inside the run.
    """

    on_event: Callable[[Event], None]
    on_stream: Callable[[Any, Any], None] | None = None
    state: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        LIVE_WATCHES.add(id(self))

    # The set is bound here: at interpreter exit the module's globals may be gone first.
    def __del__(self, _live: set[int] = LIVE_WATCHES) -> None:
        _live.discard(id(self))


_watch: ContextVar[RunWatch | None] = ContextVar("groundswell_watch", default=None)


def watch_runs(watch: RunWatch) -> Token[RunWatch | None]:
    """Send what the runs started from here on (in this context) do to ``watch``.

    For adapters that relay a run live (AG-UI); pass the token to `unwatch_runs`.
    """
    return _watch.set(watch)


def unwatch_runs(token: Token[RunWatch | None]) -> None:
    """Stop the `watch_runs` that gave ``token``."""
    _watch.reset(token)


#: ``current_watch()``: the `RunWatch` of the calling context, or ``None``. The context
#: variable's own ``get``: every prompt asks, and a function around it costs a frame.
current_watch: Callable[[], RunWatch | None] = _watch.get


class _Watched(RunSinks):
    """A watched run's delivery: its sinks (as a `RunSinks`, so `observe_run` still
    finds them), then the watch."""

    __slots__ = ("watch",)

    def __init__(self, base: Callable[[Event], None] | None, watch: RunWatch) -> None:
        super().__init__(base, ())
        self.watch = watch

    def __call__(self, event: Event) -> None:
        RunSinks.__call__(self, event)
        try:
            self.watch.on_event(event)
        except Exception:  # an observer never breaks the run it watches
            logger.exception("a run watcher failed on a %s event", event.kind)


def new_run_tree() -> EventTree:
    """A fresh tree for a top-level run, wired to the event sinks that take every run.

    When no sink takes every run, the tree is not observed at all (a run costs
    nothing for sinks) until code in the run asks for one with `observe_run`.
    A run started under `watch_runs` also sends its changes to the watch.
    """
    tree = EventTree()
    deliver = get_plugin_manager().sink_hub().run_delivery()
    watch = _watch.get() if LIVE_WATCHES else None
    if watch is not None:
        tree.dispatch_to(_Watched(deliver, watch))
    elif deliver is not None:
        tree.dispatch_to(deliver)
    return tree


def observe_run(sink: str | type[Any], tree: EventTree | None = None) -> bool:
    """Send the events of the current run (or of ``tree``'s) to the event sink ``sink`` too.

    ``sink`` is a sink's name, or a class: every running sink of that class.
    For a sink that takes only the runs that ask for it (``every_run = False``,
    such as the bundled ``history`` sink) this is how a run reaches it: the
    sink first gets a ``node_start`` for each node from the run's root down to
    the current node, as they are now (running, with the events recorded on
    them so far), then every later event of the run. Each call sends that path
    again, so such a sink takes a ``node_start`` of a node it has seen as
    nothing new. Returns ``False`` outside a run or when no such sink is
    running; a sink that takes every run has the run's events already.
    """
    frame = _frame.get()
    if tree is None:
        if frame is None:
            return False
        tree = frame.tree
    run_tree = tree

    def path() -> list[Event]:
        if frame is None or frame.tree is not run_tree or frame.node.id not in run_tree:
            return []
        nodes = run_tree.get_ancestors(frame.node.id)
        nodes.reverse()
        nodes.append(frame.node)
        root = run_tree.root
        run_id = root.id if root is not None else ""
        return [Event("node_start", node, start_record(node), run_id) for node in nodes]

    return get_plugin_manager().sink_hub().join(sink, tree, path)
