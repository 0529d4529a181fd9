"""``run_sync``: run a coroutine to its end from code that is not async (scripts, notebooks' cells
without ``await``, a sync worker thread).

Each thread that calls it gets one event loop (an `asyncio.Runner`) that later calls in
that thread reuse, as pydantic-ai's ``run_sync`` does: SDK clients keep pooled connections
bound to the loop they were opened on, so a fresh loop per call (``asyncio.run``) would
break the second call of an agent whose client outlived the first. A thread's loop is
closed when the thread is gone (at the latest when the interpreter exits); it is never
made the thread's current event loop (``asyncio.get_event_loop()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..errors import ConfigurationError

__all__ = ["run_blocking"]

T = TypeVar("T")

_local = threading.local()


def run_blocking(start: Callable[[], Coroutine[Any, Any, T]], *, caller: str, instead: str) -> T:
    """``start()``'s coroutine run to its end on this thread's loop; its result or exception.

    ``caller`` names the sync call (``"agent 'judge': run_sync()"``) and ``instead`` the
    async one to use in a running event loop (``"await agent.run(...)"``), where this
    raises `ConfigurationError` without starting anything. The coroutine sees the
    caller's context variables (an ``agent.override`` block, say).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConfigurationError(
            f"{caller} cannot run inside a running event loop (an async function, a Jupyter "
            f"notebook, an async test); use `{instead}` there instead"
        )
    runner: asyncio.Runner | None = getattr(_local, "runner", None)
    if runner is None:
        runner = _local.runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
        weakref.finalize(threading.current_thread(), _close, runner)
    # The caller's context as it is now (the runner would otherwise use the one of its
    # first call), so an override or frame set since then is seen.
    return runner.run(start(), context=contextvars.copy_context())


def _close(runner: asyncio.Runner) -> None:
    # Called when the thread is collected, which may happen on another thread
    # that is running a loop of its own: the runner's close() would then make
    # a shutdown coroutine it cannot run (a "never awaited" warning), so only
    # the loop itself is closed there.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # RuntimeError: its loop still runs (a daemon thread at exit); nothing to do then.
        with contextlib.suppress(RuntimeError):
            runner.close()
        return
    with contextlib.suppress(RuntimeError):
        loop = runner.get_loop()
        if not loop.is_running():
            loop.close()
