"""Running a step's body: whatever ``ctx.step`` was given, under the step's timeout.

The body is an async callable, an awaitable, or a sync callable; sync ones run
in a worker thread, so blocking code never stalls the run's other branches.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from types import CoroutineType, FunctionType
from typing import Any, TypeVar

from .errors import ConfigurationError, StepTimeout
from .tree import EventNode, EventTree, NodeStatus

__all__ = ["call_body", "start_body", "within_timeout"]

T = TypeVar("T")
_COROUTINE = inspect.CO_COROUTINE


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
