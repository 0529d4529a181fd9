"""Protocol checkers for plugin authors: does a cache backend, sink, middleware, counter or
execution engine do what the kernel expects of it?

Each checker is an ``async`` function that drives the object through the kernel's own
paths (real agents on `FakeAnthropicAPI`, real workflow runs, `groundswell.invalidate`)
and raises `ProtocolViolation` listing every problem it found, each with how to fix it::

    await check_cache_backend(MyCache())
    await check_sink(MySink())
    await check_middleware(MyMiddleware())

They change nothing they did not make: the entries, plugins and agents they create use
names of their own and are removed afterwards (best effort for a backend that fails).

This module holds what the checkers share (`ProtocolViolation`, the findings, the
factory handling); each protocol's checker is in a module of its own: ``_checks_cache``,
``_checks_sink``, ``_checks_middleware``, ``_checks_counter``, ``_checks_engine``.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections.abc import Callable
from typing import Any

from ._replies import MessagesRequest, Reply, text, tool_use

#: Seconds one call of the checked object may take before the checker calls it hung.
CALL_TIMEOUT_S = 5.0


class ProtocolViolation(AssertionError):
    """An object breaks its plugin protocol; ``violations`` says how, each with its fix.

    An `AssertionError`, so a test that calls a checker fails with the list as its message.
    """

    def __init__(self, subject: str, protocol: str, violations: list[str]) -> None:
        self.subject = subject
        self.protocol = protocol
        self.violations = list(violations)
        count = len(violations)
        lines = "\n".join(f"  - {v}" for v in violations)
        super().__init__(
            f"{subject} breaks the {protocol} protocol ({count} problem"
            f"{'s' if count != 1 else ''}):\n{lines}"
        )


class Findings:
    """The violations found so far, each once, in the order found."""

    def __init__(self, subject: str, protocol: str) -> None:
        self.subject, self.protocol = subject, protocol
        self.found: list[str] = []
        self._lock = threading.Lock()  # sinks report from their worker thread

    def add(self, problem: str) -> None:
        with self._lock:
            if problem not in self.found:
                self.found.append(problem)

    def stop(self, problem: str) -> ProtocolViolation:
        """A problem that leaves nothing more to check: everything found so far, raised."""
        self.add(problem)
        return ProtocolViolation(self.subject, self.protocol, self.found)

    def raise_any(self) -> None:
        if self.found:
            raise ProtocolViolation(self.subject, self.protocol, self.found)


def error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def discard(awaitable: Any) -> None:
    """Close a coroutine nobody will await, so Python does not warn about it later."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def object_to_check(
    obj: Any, record_type: type[Any], kind: str, marker: str, findings: Findings
) -> tuple[Any, Any]:
    """``obj`` as the object to check, and the record it came from (or None).

    ``obj`` may be the object itself, its record, or a factory (a class, or a
    function without the protocol's ``marker`` method), called with no
    arguments as the kernel calls factories.
    """
    record = obj if isinstance(obj, record_type) else None
    if record is not None:
        factory = record.factory
    elif isinstance(obj, type) or (callable(obj) and not hasattr(obj, marker)):
        factory = obj
    else:
        return obj, None
    try:
        made = factory()
    except Exception as exc:
        raise findings.stop(
            f"its factory raised {error(exc)}; a {kind} factory is called with "
            "no arguments and reads any settings from the environment"
        ) from exc
    return made, record


async def settle(made: Any, timeout: float) -> Any:
    """Await ``made`` within ``timeout`` (raises TimeoutError)."""
    async with asyncio.timeout(timeout):
        return await made


def subject(obj: Any) -> str:
    if isinstance(obj, str):
        return repr(obj)
    name = getattr(obj, "name", None)
    if isinstance(obj, type):
        return obj.__qualname__
    if isinstance(name, str) and not callable(obj):
        return f"{type(obj).__qualname__} {name!r}"
    if inspect.isfunction(obj):
        return f"the factory {obj.__qualname__}()"
    return type(obj).__qualname__


def tool_then_answer(tool: str) -> Callable[[MessagesRequest], Reply]:
    def respond(request: MessagesRequest) -> Reply:
        results = request.latest_tool_results()
        if results:
            return text(f"{results[0]['content']}.")
        city = request.last_user_text().removeprefix("Weather in ").rstrip("?")
        return tool_use(tool, {"city": city})

    return respond


def fail() -> None:
    raise ValueError("a step failing on purpose")
