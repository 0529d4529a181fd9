"""In-flight deduplication: flights, the optional backend lock (`CacheLock`), entry reading.

Identical requests made at the same time are answered by one call. Within an
event loop, and across the event loops and threads of the process, callers that
find a key being answered (its `Flight`) wait for that answer instead of asking
the backend and the model again. Across processes, a backend that offers a lock
(`CacheLock`, e.g. Redis ``SET NX PX``) lets one caller answer while the others
poll for the entry it stores, and take over if its lock ends without one.
`groundswell.cache.backends.through_cache` puts these together; it reads entries through
`entry_problem` and `decoded` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from .guard import Guard, Unavailable, shown

if TYPE_CHECKING:
    from ..tree.tree import EventNode, EventTree
    from .backends import Cache

    # Records a failed backend call on the run's node (`groundswell.cache.backends`'s, which
    # also notes a broken backend against its plugin).
    Contain = Callable[[Cache, Unavailable, EventTree, EventNode, str], None]

__all__ = [
    "POLL_FIRST_S",
    "POLL_MAX_S",
    "RETRY",
    "CacheLock",
    "Claim",
    "Flight",
    "decoded",
    "entry_problem",
    "flights",
    "land",
    "lock_or_wait",
    "lock_problem",
    "locking",
]

T = TypeVar("T")


class Flight:
    """A key being answered by one caller, and the callers waiting for it, on any event loop.

    A waiter is a future on its own caller's loop; the answer reaches waiters on
    other loops (other threads) through ``call_soon_threadsafe``. Most lookups
    have nobody waiting: no future is made for them, and a cache hit costs one
    atomic ``dict.setdefault`` and one uncontended lock round trip here.
    """

    __slots__ = ("landed", "waiters")

    def __init__(self) -> None:
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] | None = None
        self.landed = False

    def join(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any] | None:
        """A future on ``loop`` for the answer; ``None`` when it has landed (look again)."""
        with _inflight_lock:
            if self.landed:
                return None
            future = loop.create_future()
            # The caller waiting may be cancelled: mark an exception as seen so
            # asyncio does not warn about it.
            future.add_done_callback(_seen)
            if self.waiters is None:
                self.waiters = []
            self.waiters.append((loop, future))
            return future


# Keys being answered in this process, whatever loop or thread answers them:
# (id of the backend, key) -> its flight. Flights are added with one atomic
# setdefault; landing one, and joining it, take _inflight_lock.
flights: dict[tuple[int, str], Flight] = {}
_inflight_lock = threading.Lock()
# What waiters get when the caller answering was cancelled: one of them answers instead.
RETRY: Any = object()


def land(
    slot: tuple[int, str], flight: Flight, value: Any = None, error: BaseException | None = None
) -> None:
    """End ``flight``: later callers look ``slot`` up afresh; its waiters get the outcome."""
    with _inflight_lock:
        if flight.landed:
            return
        flight.landed = True
        if flights.get(slot) is flight:
            del flights[slot]
        waiters, flight.waiters = flight.waiters, None
    if not waiters:
        return
    here: asyncio.AbstractEventLoop | None
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    for loop, future in waiters:
        if loop is here:
            _deliver(future, value, error)
            continue
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there any more
            loop.call_soon_threadsafe(_deliver, future, value, error)


def _deliver(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # its caller was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _seen(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def entry_problem(entry: Any) -> str | None:
    """What is wrong with what ``get`` returned, or ``None`` when it is a miss or an entry."""
    # The hot path (a miss, or a dict with its value) costs one identity and one type check.
    if entry is None or (type(entry) is dict and "value" in entry):
        return None
    if isinstance(entry, Mapping) and "value" in entry:
        return None
    what = "a dict without a 'value' key" if isinstance(entry, Mapping) else shown(entry)
    return (
        f"get returned {what}; it must return None on a miss, or the dict set() "
        "stored under that key (with its 'value' and 'stored_at' keys)"
    )


def decoded(
    entry: Any, decode: Callable[[Any], T], key: str, tree: EventTree, node: EventNode,
    extra: dict[str, Any] | None = None,
) -> tuple[T, Any] | None:  # fmt: skip
    """(decoded value, stored value) of an entry, recorded as a hit; ``None`` when it
    does not decode (a stale or foreign entry: recorded, and a miss)."""
    try:
        result = decode(entry["value"])
        now = time.time()
        age = max(0.0, now - float(entry.get("stored_at", now)))
    except Exception as exc:
        tree.add_event(node, "cache_error", key=key, operation="decode", error=str(exc)[:200])
        return None
    node.metrics["cache"] = "hit"
    if extra:
        tree.add_event(node, "cache_hit", key=key, age_s=round(age, 3), **extra)
    else:
        tree.add_event(node, "cache_hit", key=key, age_s=round(age, 3))
    return result, entry["value"]


@runtime_checkable
class CacheLock(Protocol):
    """What a shared backend may offer so that processes answer each key once between them.

    Optional: a `Cache` with both methods gets in-flight deduplication across
    processes (the bundled ``redis`` backend has them); without them, callers
    are deduplicated within the process only (across all its event loops and
    threads, by the kernel). The lock on a key is apart from the entry under
    it: ``get``, ``set`` and ``bust`` never see it.

    When a prompt misses, the kernel calls ``try_lock(key, owner, ttl)``. The
    owner that gets ``True`` calls the model, renews the lock every ``ttl / 3``
    seconds while it does (``try_lock`` again with the same owner), stores the
    answer and then calls ``unlock``. The others poll ``get`` for the entry,
    and ``try_lock`` to take over when the holder's lock ends without one (it
    failed, or its process died and the lock ran out). A lock call that fails
    or misses its deadline never loses an answer: the caller calls the model.
    """

    async def try_lock(self, key: str, owner: str, ttl: float) -> bool:
        """Lock ``key`` for ``owner`` (a unique string) for ``ttl`` seconds if nobody holds it
        or its holder's time ran out, or renew it for ``ttl`` seconds if ``owner`` holds it;
        ``True`` if ``owner`` holds the lock now, ``False`` if another owner does."""

    async def unlock(self, key: str, owner: str) -> bool:
        """Release the lock on ``key`` if ``owner`` holds it (never another owner's);
        ``True`` if it did. The kernel ignores the return value."""


def locking(cache: Cache) -> bool:
    """True when ``cache`` offers the optional `CacheLock` methods."""
    return callable(getattr(cache, "try_lock", None)) and callable(getattr(cache, "unlock", None))


def lock_problem(held: Any) -> str | None:
    """What is wrong with ``held``, a `CacheLock.try_lock` answer (``None``: nothing)."""
    if held is True or held is False:
        return None
    return (
        f"try_lock returned {shown(held)}; it must return True (the owner holds the lock "
        "now) or False (another owner does)"
    )


#: How long a caller waiting for another process's answer first waits, and at most,
#: between looks at the backend (seconds).
POLL_FIRST_S = 0.005
POLL_MAX_S = 0.1
_HOST = socket.gethostname()
# Background unlocks (on failure paths), kept referenced until they finish.
_unlocking: set[asyncio.Task[None]] = set()


class Claim:
    """A backend lock this caller holds on a key, renewed while it calls the model."""

    __slots__ = ("cache", "contain", "guard", "keeper", "key", "node", "owner", "released", "tree")

    def __init__(
        self, cache: Cache, guard: Guard, key: str, owner: str, tree: EventTree, node: EventNode,
        contain: Contain,
    ) -> None:  # fmt: skip
        self.cache, self.guard, self.key, self.owner = cache, guard, key, owner
        self.tree, self.node, self.contain = tree, node, contain
        self.keeper: asyncio.Task[None] | None = None
        self.released = False

    def renew(self) -> Callable[[], Awaitable[Any]]:
        lock: CacheLock = self.cache  # type: ignore[assignment]
        return functools.partial(lock.try_lock, self.key, self.owner, self.guard.lock_s)

    def keep(self) -> None:
        """Renew the lock every third of its lease until `stop`."""
        self.keeper = asyncio.get_running_loop().create_task(self._keep())

    async def _keep(self) -> None:
        guard = self.guard
        while True:
            await asyncio.sleep(guard.lock_s / 3)
            try:
                held = await guard.call(
                    "try_lock", self.renew(), guard.timeout_s, check=lock_problem
                )
            except Unavailable:
                continue  # logged by the guard; the lease may still hold until the next try
            if not held:  # it ran out and another owner took it: they answer too
                return

    def stop(self) -> None:
        """Stop renewing: what is left of the lease covers storing the answer."""
        if self.keeper is not None:
            self.keeper.cancel()
            self.keeper = None

    async def release(self, record: bool = True) -> None:
        self.stop()
        if self.released:
            return
        self.released = True
        lock: CacheLock = self.cache  # type: ignore[assignment]
        guard = self.guard
        try:
            await guard.call(
                "unlock", functools.partial(lock.unlock, self.key, self.owner), guard.timeout_s
            )
        except Unavailable as exc:  # the lease runs out by itself
            if record:
                self.contain(self.cache, exc, self.tree, self.node, self.key)

    def let_go(self) -> None:
        """Release the lock in the background (on a path that must not wait for it)."""
        self.stop()
        try:
            task = asyncio.get_running_loop().create_task(self.release(record=False))
        except RuntimeError:  # no loop any more: the lease runs out by itself
            return
        _unlocking.add(task)
        task.add_done_callback(_unlocking.discard)

    def abandoned(self, loop: asyncio.AbstractEventLoop) -> None:
        """The deferred store was dropped (its attempt failed): let go now, from any thread."""
        if not self.released:
            with contextlib.suppress(RuntimeError):  # a closed loop: the lease runs out
                loop.call_soon_threadsafe(self.let_go)


async def lock_or_wait(
    cache: Cache, guard: Guard, key: str, decode: Callable[[Any], T], tree: EventTree,
    node: EventNode, contain: Contain,
) -> tuple[T, Any] | Claim | None:  # fmt: skip
    """Take the backend's lock on ``key``, or wait for the process holding it to answer.

    Returns the answer (decoded, stored) when it was stored meanwhile, a held
    `Claim` when this caller is to call the model, or ``None`` when the lock
    failed (recorded with ``contain``): then the caller calls the model without it.
    """
    lock: CacheLock = cache  # type: ignore[assignment]
    owner = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex}"
    take = functools.partial(lock.try_lock, key, owner, guard.lock_s)
    read = functools.partial(cache.get, key)
    since: float | None = None
    pause = POLL_FIRST_S
    while True:
        try:
            held = await guard.call("try_lock", take, guard.timeout_s, check=lock_problem)
        except Unavailable as exc:
            contain(cache, exc, tree, node, key)
            return None
        if held:
            claim = Claim(cache, guard, key, owner, tree, node, contain)
            try:
                # The holder before may have stored the answer just before it let go.
                entry = await guard.call("get", read, guard.timeout_s, check=entry_problem)
            except Unavailable as exc:
                contain(cache, exc, tree, node, key)
                entry = None
            except BaseException:
                claim.let_go()
                raise
            if entry is not None:
                hit = decoded(entry, decode, key, tree, node, _waited(since))
                if hit is not None:
                    claim.let_go()
                    return hit
            claim.keep()
            return claim
        if since is None:  # another process is answering this very request
            since = time.monotonic()
            tree.add_event(node, "cache_wait", key=key)
        await asyncio.sleep(pause)
        pause = min(pause * 2, POLL_MAX_S)
        try:
            entry = await guard.call("get", read, guard.timeout_s, check=entry_problem)
        except Unavailable as exc:
            contain(cache, exc, tree, node, key)
            return None
        if entry is not None:
            hit = decoded(entry, decode, key, tree, node, _waited(since))
            if hit is not None:
                return hit


def _waited(since: float | None) -> dict[str, Any]:
    if since is None:
        return {}
    return {"deduplicated": True, "waited_s": round(time.monotonic() - since, 3)}
