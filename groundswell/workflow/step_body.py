"""Running a step's body: whatever ``ctx.step`` was given, under the step's timeout.

The body is an async callable, an awaitable, or a sync callable; sync ones run
in a worker thread, so blocking code never stalls the run's other branches.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Coroutine, Mapping
from types import CoroutineType, FunctionType
from typing import Any, TypeVar

from ..errors import ConfigurationError, MissingAwait, StepTimeout
from ..tree.tree import EventNode, EventTree, NodeStatus

__all__ = ["call_body", "check_awaited", "start_body", "within_timeout"]

T = TypeVar("T")
_COROUTINE = inspect.CO_COROUTINE
CORO_CREATED = inspect.CORO_CREATED


def start_body(name: str, fn: Any) -> Awaitable[Any]:
    """What awaiting runs the body ``fn`` of step ``name``: ``call_body(name, fn)``, or
    ``fn`` itself when it is a coroutine, or ``fn()`` when it is a plain ``async def``
    function (the usual cases)."""
    # The exact check is what inspect.iscoroutinefunction ends with, without its
    # unwrapping (0.3-0.8 us); anything else takes call_body's full checks.
    kind = fn.__class__
    if kind is CoroutineType:  # ctx.step("ask", agent.prompt(...)): awaited as it is
        return fn  # type: ignore[no-any-return]
    if kind is FunctionType and fn.__code__.co_flags & _COROUTINE:
        return fn()  # type: ignore[no-any-return]
    return call_body(name, fn)


async def call_body(name: str, fn: Any) -> Any:
    """Call or await ``fn``, the body of the step ``name``, and return its result."""
    if inspect.iscoroutinefunction(fn):
        return await fn()
    if inspect.isawaitable(fn):
        return await fn
    if not callable(fn):
        raise ConfigurationError(
            f"step {name!r}: expected a callable or an awaitable, got {type(fn).__name__}"
        )
    # to_thread copies the context, so anything a sync body starts still mounts here.
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


async def within_timeout(body: Awaitable[T], timeout: float, tree: EventTree, node: EventNode) -> T:
    """Await ``body``, the step ``node``'s; past ``timeout`` seconds, cancel it and raise.

    The step's node ends ``cancelled`` with the `StepTimeout` raised, which names
    the node's path.
    """
    timer = asyncio.timeout(timeout)
    try:
        async with timer:
            return await body
    except TimeoutError as exc:
        if not timer.expired():
            raise
        timed_out = StepTimeout(
            f"step {node.name!r} timed out after {timeout}s", node_path=tree.path(node.id)
        )
        tree.end_node(node, NodeStatus.CANCELLED, error=timed_out)
        raise timed_out from exc


def check_awaited(
    workflow: str, unstarted: Mapping[int, Coroutine[Any, Any, Any]], output: Any
) -> None:
    """Raise `MissingAwait` if workflow ``workflow`` returned ``output`` while a step it
    made never started (``unstarted``: its steps not started yet), or if ``output`` is a
    coroutine.

    A step whose task was cancelled before it could start (a ``TaskGroup`` whose
    sibling failed) was awaited, and does not count. The forgotten coroutines are
    closed (unless a task still holds one), so Python's "never awaited" warning
    does not repeat the error.
    """
    forgotten = [
        body for body in unstarted.values() if inspect.getcoroutinestate(body) == CORO_CREATED
    ]
    returned = output if isinstance(output, CoroutineType) else None
    if not forgotten and returned is None:
        return
    names = tuple(str(inspect.getcoroutinelocals(body).get("name")) for body in forgotten)
    held = {id(task.get_coro()) for task in asyncio.all_tasks()}
    dropped = forgotten if returned is None else [*forgotten, returned]
    for coro in dropped:
        if id(coro) not in held and inspect.getcoroutinestate(coro) == CORO_CREATED:
            coro.close()  # never started: closing runs none of it
    if returned is not None and not any(body is returned for body in forgotten):
        raise MissingAwait(
            f"workflow {workflow!r} returned a coroutine ({returned.__qualname__}) instead of "
            "its result: add `await` (`return await ...`)",
            steps=names,
        )
    listed = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
    steps = "a step" if len(names) == 1 else f"{len(names)} steps"
    raise MissingAwait(
        f"workflow {workflow!r} ended with {steps} it never awaited ({listed}): "
        "ctx.step(...) makes a coroutine that runs only when awaited; add `await` "
        "(`await ctx.step(...)`), or await the task or gather running it before the "
        "workflow returns",
        steps=names,
    )
