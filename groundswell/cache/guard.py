"""Deadlines and a circuit breaker for cache backends.

Every ``get``/``set`` on the hot path, and `groundswell.invalidate`'s
``bust_prefix``, goes through the `Guard` of its backend instance: a call
that fails or runs past its deadline is a miss (never the prompt's failure),
a backend that keeps failing is skipped for a while, and each outage is
logged once on ``groundswell.cache.backends``, naming the backend, and again when it
works again. A call that answers against the protocol (a method that is not
async, or a result its ``check`` refuses) is such a failure too. Settings
(environment, read when a backend is first used):
``GROUNDSWELL_CACHE_TIMEOUT_S``, ``GROUNDSWELL_CACHE_BUST_TIMEOUT_S``,
``GROUNDSWELL_CACHE_SKIP_AFTER``, ``GROUNDSWELL_CACHE_SKIP_FOR_S``, and
``GROUNDSWELL_CACHE_LOCK_S`` (the lease of a backend's lock, for backends that
offer one: see `groundswell.cache.backends.CacheLock`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigurationError
from ..scrubbing.serialize import redact

if TYPE_CHECKING:
    from ..tree.tree import EventNode, EventTree
    from .backends import Cache

__all__ = [
    "BUST_TIMEOUT_S",
    "LOCK_S",
    "SKIP_AFTER",
    "SKIP_FOR_S",
    "TIMEOUT_S",
    "Deadline",
    "Guard",
    "Unavailable",
    "guard_for",
    "shown",
    "within",
]

T = TypeVar("T")
logger = logging.getLogger("groundswell.cache")
#: Seconds a backend's ``get`` or ``set`` may take before the prompt goes on without it.
TIMEOUT_S = 1.0
#: Seconds `invalidate` waits for one backend's ``bust_prefix``.
BUST_TIMEOUT_S = 10.0
#: Failures in a row after which a backend is skipped.
SKIP_AFTER = 3
#: Seconds a failing backend is skipped before one call tries it again.
SKIP_FOR_S = 30.0
#: Seconds a backend lock (`groundswell.cache.backends.CacheLock`) lasts unless its holder renews
#: it: how soon another process takes over from a holder that died.
LOCK_S = 10.0


class Unavailable(Exception):
    """A backend call that failed, timed out or was skipped (already logged)."""

    def __init__(
        self,
        guard: Guard,
        operation: str,
        reason: str,
        retry_in_s: float | None = None,
        timed_out: bool = False,
        broken: bool = False,
    ) -> None:
        super().__init__(f"cache backend {guard.label}: {operation}: {reason}")
        self.backend = guard.label
        self.operation = operation
        self.reason = reason
        self.retry_in_s = retry_in_s  # None: the call failed; a number: it was skipped
        self.timed_out = timed_out
        #: The backend answered, but not as the protocol says: a bug in it, not an outage.
        self.broken = broken

    def record(self, tree: EventTree, node: EventNode, key: str) -> None:
        if self.retry_in_s is None:
            tree.add_event(
                node,
                "cache_error",
                key=key,
                operation=self.operation,
                backend=self.backend,
                error=self.reason,
            )
        else:
            tree.add_event(
                node,
                "cache_skipped",
                key=key,
                operation=self.operation,
                backend=self.backend,
                retry_in_s=round(self.retry_in_s, 1),
            )


class Guard:
    """The deadline and circuit breaker of one backend instance, for every loop and thread.

    Failures in a row are counted for the whole backend (any success ends the
    streak) and per operation (only that operation's success does), so a
    backend whose ``get`` hangs while its ``set`` works is skipped for ``get``.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.timeout_s = _setting("GROUNDSWELL_CACHE_TIMEOUT_S", TIMEOUT_S)
        self.bust_timeout_s = _setting("GROUNDSWELL_CACHE_BUST_TIMEOUT_S", BUST_TIMEOUT_S)
        self.skip_after = int(_setting("GROUNDSWELL_CACHE_SKIP_AFTER", SKIP_AFTER))
        self.skip_for_s = _setting("GROUNDSWELL_CACHE_SKIP_FOR_S", SKIP_FOR_S)
        self.lock_s = _setting("GROUNDSWELL_CACHE_LOCK_S", LOCK_S)
        # Failures in a row and skipped-until times (time.monotonic()), by
        # operation and "*" for the backend; empty while all is well.
        self.streaks: dict[str, int] = {}
        self.until: dict[str, float] = {}
        self.probing = False  # one call is trying a skipped backend again; the rest skip
        self.down = False  # this outage was logged

    async def call(
        self,
        operation: str,
        call: Callable[[], Awaitable[T]],
        timeout: float,
        skip: bool = True,
        check: Callable[[Any], str | None] | None = None,
    ) -> T:
        """``await call()`` within ``timeout``; raises `Unavailable` when it fails or is skipped.

        ``check(result)`` returns what is wrong with a result (``None``: nothing);
        a result it refuses is a failure like any other (``Unavailable.broken``).
        """
        probe = False
        if self.until and skip:
            tripped = [self.until[k] for k in ("*", operation) if k in self.until]
            if tripped:
                left = max(tripped) - time.monotonic()
                if left > 0 or self.probing:
                    raise Unavailable(self, operation, "skipped", max(0.0, left))
                self.probing = probe = True
        deadline = Deadline(timeout)
        try:
            result = await within(call, deadline)
        except _NotAwaitable as exc:
            problem: str | None = (
                f"{operation} returned {shown(exc.value)}, not an awaitable; it must be an "
                f"async method (async def {operation}(...))"
            )
        except Exception as exc:
            timed_out = deadline.expired()
            if timed_out:
                reason = f"no answer within {timeout:g} s"
            else:
                reason = f"{type(exc).__name__}: {redact(str(exc))}"[:300]
            self._failed(operation, reason)
            raise Unavailable(self, operation, reason, timed_out=timed_out) from exc
        else:
            problem = None if check is None else check(result)
        finally:
            if probe:
                self.probing = False
        if problem is not None:
            self._failed(operation, problem)
            raise Unavailable(self, operation, problem, broken=True)
        if self.streaks:
            self._succeeded(operation)
        return result

    def _failed(self, operation: str, reason: str) -> None:
        if not self.down:
            self.down = True
            logger.warning(
                "cache backend %s failed on %s (%s); prompts go on without it (as cache "
                "misses), and after %d failures in a row it is skipped for %g s at a time",
                self.label,
                operation,
                reason,
                self.skip_after,
                self.skip_for_s,
            )
        for scope in ("*", operation):
            self.streaks[scope] = self.streaks.get(scope, 0) + 1
            if self.streaks[scope] >= self.skip_after:
                self.until[scope] = time.monotonic() + self.skip_for_s

    def _succeeded(self, operation: str) -> None:
        if "*" in self.until:  # the whole backend was skipped, and answers again
            self.streaks.clear()
            self.until.clear()
        else:
            for scope in ("*", operation):
                self.streaks.pop(scope, None)
                self.until.pop(scope, None)
        if self.down and not self.streaks:
            self.down = False
            logger.warning("cache backend %s works again", self.label)


class Deadline:
    """A time limit, counted from when it is made, that is set on the loop only if needed.

    ``asyncio.timeout()`` itself costs an in-memory cache hit more than the lookup
    (a timer handle per call); most calls finish before they would need one.
    """

    __slots__ = ("_start", "_timer", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._start = time.monotonic()
        self._timer: asyncio.Timeout | None = None

    def arm(self) -> asyncio.Timeout:
        """The ``asyncio.Timeout`` to enter, due ``seconds`` after this deadline was made."""
        loop = asyncio.get_running_loop()
        # The loop's clock may not be time.monotonic(): carry over the time already spent.
        spent = time.monotonic() - self._start
        self._timer = asyncio.timeout_at(loop.time() + self.seconds - spent)
        return self._timer

    def expired(self) -> bool:
        """True when the call was stopped because the time was up."""
        return self._timer is not None and self._timer.expired()


async def within(call: Callable[[], Awaitable[T]], deadline: Deadline) -> T:
    """``await call()`` under ``deadline``, armed only if the call has to wait.

    An in-memory backend answers without ever suspending; arming a timer for it
    would cost a cache hit more than the lookup itself.
    """
    made = call()
    try:
        steps = made.__await__()
    except AttributeError:  # a plain method where the protocol asks for an async one
        raise _NotAwaitable(made) from None
    try:
        first = next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    async with deadline.arm():
        result: T = await _Resumed(steps, first)
    return result


class _NotAwaitable(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__(type(value).__name__)
        self.value = value


def shown(value: Any) -> str:
    """How a wrong return value is named in messages: scalars by value, the rest by type only.

    Containers and strings may hold cached answers, so their content is never shown.
    """
    if value is None or isinstance(value, bool | int | float):
        return f"{value!r} ({type(value).__name__})" if value is not None else "None"
    kind = type(value).__name__
    return f"an {kind}" if kind[:1].lower() in "aeiou" else f"a {kind}"


class _Resumed:
    """The rest of an awaitable whose first step has run and yielded ``first``.

    What ``yield from`` does (PEP 380), minus the first step: the task's
    wakeups and cancellations pass straight through to the awaitable.
    """

    __slots__ = ("_first", "_steps")

    def __init__(self, steps: Generator[Any, Any, Any], first: Any) -> None:
        self._steps = steps
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        steps, value = self._steps, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # a cancellation: the awaitable decides what it means
                try:
                    value = steps.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    value = steps.send(sent)
                except StopIteration as done:
                    return done.value


def _setting(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value > 0:
        return value
    raise ConfigurationError(f"{name} must be a number > 0, got {raw!r} (default {default:g})")


_guards: dict[int, Guard] = {}
_pinned: dict[int, Cache] = {}
_guards_lock = threading.Lock()


def guard_for(cache: Cache, label: Callable[[Cache], str]) -> Guard:
    """The `Guard` of ``cache``, made on first use with ``label(cache)`` as its name."""
    guard = _guards.get(id(cache))
    if guard is not None:
        return guard
    with _guards_lock:
        if id(cache) not in _guards:
            _guards[id(cache)] = Guard(label(cache))
            try:  # forget the guard with its backend, so a new one at that id starts afresh
                weakref.finalize(cache, _guards.pop, id(cache), None)
            except TypeError:  # no weak references: keep the backend, so its id stays its own
                _pinned[id(cache)] = cache
        return _guards[id(cache)]
