"""Caching: the backend protocol, canonical request keys, backend selection.

A response-cache key is ``"<namespace>:<sha256 hex>"``. The namespace is the
agent's name unless set; the hash covers a canonical JSON (orjson's encoding of
the canonical form, see ``groundswell.cache.canonical``) of everything that changes
the answer: the model, the user turn with its rendered data, the system
prompt, ``max_tokens``, sampling settings, stop sequences, full tool
definitions (local MCP tools included), remote MCP servers (their tokens left
out), skills and container, ``thinking``, ``tool_choice``, ``output_config``
(so the response schema), any other pass-through field, and a format version
so a change of key format never reads stale entries. Headers and ``env`` are never part of a key.
A client can carry a scope (`scope_answers`; each test fake has its own) that is hashed in
too, so prompts through clients of different scopes never read each other's answers.

Concurrent identical requests make one model call (in-flight dedupe): in the
process across every event loop and thread, and across processes through a
backend that offers a lock (`CacheLock`, e.g. Redis ``SET NX PX``); callers
elsewhere wait for the holder's answer, and take over if its lock ends without
one. The machinery is in `groundswell.cache.inflight`.

Every backend call the kernel makes has a deadline, and a backend that keeps
failing is skipped for a while (a circuit breaker per backend instance), so a
hung or unreachable cache costs a prompt at most one deadline per operation,
and nothing once it is skipped. Failures are ``cache_error`` events on the
node, skips ``cache_skipped`` events, and each outage is logged once on the
``groundswell.cache.backends`` logger, with "works again" when it ends. The settings
(environment, read when a backend is first used): ``GROUNDSWELL_CACHE_TIMEOUT_S``
(``get``/``set``), ``GROUNDSWELL_CACHE_BUST_TIMEOUT_S`` (`groundswell.invalidate`),
``GROUNDSWELL_CACHE_SKIP_AFTER`` (failures in a row),
``GROUNDSWELL_CACHE_SKIP_FOR_S`` and ``GROUNDSWELL_CACHE_LOCK_S`` (a backend
lock's lease).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..errors import ConfigurationError, GroundswellError, PluginError
from ..hookspecs import CacheBackend
from ..plugins.manager import get_plugin_manager
from ..scrubbing.scrubber import is_secret_field
from ..scrubbing.serialize import redact
from . import inflight
from .canonical import canonical_bytes
from .guard import Unavailable, guard_for, shown
from .inflight import POLL_FIRST_S as POLL_FIRST_S
from .inflight import POLL_MAX_S as POLL_MAX_S
from .inflight import CacheLock, lock_problem

if TYPE_CHECKING:
    from ..tree.tree import EventNode, EventTree

T = TypeVar("T")

__all__ = [
    "KEY_VERSION",
    "Cache",
    "CacheLock",
    "ToolCachePolicy",
    "answer_scope",
    "backend_label",
    "cache_entry",
    "choose_cache",
    "contain",
    "get_cache",
    "lock_problem",
    "plugin_of",
    "read_cache_entry",
    "request_cache_key",
    "schema_hash",
    "scope_answers",
    "store_entry",
    "through_cache",
]

# Part of every key: raised when what an entry holds changes, so entries an
# older version stored are never read as new ones (2: answers keep the reply).
KEY_VERSION = 2
logger = logging.getLogger("groundswell.cache")
# Sent to the API but never part of what the answer depends on; headers may hold secrets.
_NOT_IN_KEY = {"extra_headers", "stream"}
_SECRET_FIELDS = {"authorization_token"}


@runtime_checkable
class Cache(Protocol):
    """An async key-value cache: what a cache backend's factory returns.

    The kernel stores entries as ``{"value": <JSON-safe data>, "stored_at":
    <epoch seconds>}`` dicts (`cache_entry`) under ``"<namespace>:<sha256
    hex>"`` keys (``"tool.<name>:<sha256 hex>"`` for tool results), and never
    stores ``None``. ``get``, ``set``, ``bust`` and ``bust_prefix`` are
    ``async``; one instance serves every agent, task, event loop and thread of
    the process. Every ``get``/``set`` the kernel makes has a deadline and a
    circuit breaker (`groundswell.cache.guard`): a method that raises, hangs
    or returns the wrong thing is a cache miss recorded on the run's tree,
    never the run's failure; `groundswell.invalidate` raises instead. A shared backend may
    also offer a lock (`CacheLock`) so that processes answer each request
    once between them. See ``docs/plugin-hooks.md`` for the whole contract.
    """

    async def get(self, key: str) -> Any | None:
        """The value ``set`` stored under ``key`` (equal, not necessarily the same object),
        or ``None`` if absent or expired."""

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        """Store ``value`` (JSON-safe), replacing any value under ``key``; the return is ignored.

        ``ttl`` (passed positionally) is the entry's lifetime in seconds, a float;
        ``None`` means the backend's own default.
        """

    async def bust(self, key: str) -> bool:
        """Remove ``key``; ``True`` if it was present, else ``False``."""

    async def bust_prefix(self, prefix: str) -> int:
        """Remove every key starting with ``prefix`` (a plain string, no wildcards); returns
        how many were removed, an ``int`` (``0`` when none matched)."""

    def metrics(self) -> dict[str, Any]:
        """A plain (not async) dict of counters such as hits, misses, evictions and size;
        a ``"url"`` entry names the server in logs (its password is redacted)."""


_schema_hashes: dict[int, tuple[Any, str]] = {}


def schema_hash(schema: Any) -> str:
    """SHA-256 of a JSON schema's canonical text (keys sorted); stable across processes.

    What a response schema stands for in a `request_cache_key`: a change to a
    ``response_format`` model changes it, and with it every key. Remembered
    per schema object, since agents send the same schema dict again and again
    and encoding it is most of a key's cost.
    """
    known = _schema_hashes.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    digest = hashlib.sha256(canonical_bytes(schema)).hexdigest()
    if len(_schema_hashes) > 1024:
        _schema_hashes.clear()
    _schema_hashes[id(schema)] = (schema, digest)  # holding the schema keeps its id unique
    return digest


def _keyable(params: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(params)  # copied whole, then the few fields that need it are changed
    for name in _NOT_IN_KEY:
        out.pop(name, None)
    extra = out.pop("extra_body", None)
    if extra:
        out.update(extra)  # temperature & co. count, as the SDK sends them: over the rest
    for name in [k for k in out if is_secret_field(k)]:
        del out[name]  # a credential (fallback_credit_token): never key material
    servers = out.get("mcp_servers")
    if servers:
        out["mcp_servers"] = [
            {k: v for k, v in s.items() if k not in _SECRET_FIELDS} for s in servers
        ]
    config = out.get("output_config")
    if isinstance(config, Mapping):
        fmt = config.get("format")
        if isinstance(fmt, Mapping) and "schema" in fmt:
            fmt = {**fmt, "schema": {"sha256": schema_hash(fmt["schema"])}}
        out["output_config"] = {**config, "format": fmt}
    return out


def request_cache_key(namespace: str, params: Mapping[str, Any], scope: str | None = None) -> str:
    """The response-cache key for a Messages API request (``messages.create`` kwargs).

    An agent stores a prompt's answer under ``request_cache_key(agent.name,
    request)``, ``request`` being the first request it sends (its
    ``cache_miss`` and ``cache_hit`` events carry the key too); remove it with
    ``await groundswell.get_cache().bust(key)``. Equal requests give equal keys
    whatever their dict key order; a value that has no canonical JSON form
    raises ``TypeError``; a response schema counts as its `schema_hash`.
    ``scope`` (`answer_scope` of the client, e.g. one test fake's) is hashed in
    too: answers of another scope are never read; ``None`` (every real client)
    leaves the key as it is in every process.
    """
    if not namespace or ":" in namespace:
        raise ConfigurationError(
            f"cache namespace must be non-empty without ':', got {namespace!r}"
        )
    material = {"v": KEY_VERSION, "request": _keyable(params)}
    if scope is not None:
        material["scope"] = scope
    digest = hashlib.sha256(canonical_bytes(material)).hexdigest()
    return f"{namespace}:{digest}"


# Clients whose answers are cached apart (test fakes): id(client) -> their scope, or a
# function that tells it at each prompt. Empty in production: one truth test per prompt.
_scopes: dict[int, str | Callable[[], str | None]] = {}


def scope_answers(client: object, scope: str | Callable[[], str | None] | None) -> None:
    """Cache the answers of prompts sent through ``client`` apart, under ``scope``.

    ``scope`` is a string, or a function called at each prompt that returns
    one (or ``None``: no scope for that prompt); ``None`` removes the client's
    scope. The scope is hashed into the answer-cache key (the namespace stays
    the agent's name), so prompts through clients of different scopes never
    read each other's answers, in any backend. `groundswell.testing` gives
    each `FakeAnthropicAPI`'s clients the fake's own scope, so that a test
    never gets an answer another test's fake gave; real clients have none,
    and their keys are equal in every process. Forgotten with the client.
    """
    if scope is None:
        _scopes.pop(id(client), None)
        return
    fresh = id(client) not in _scopes
    _scopes[id(client)] = scope
    if fresh:
        try:  # forget it with the client, so another client at that id starts with none
            weakref.finalize(client, _scopes.pop, id(client), None)
        except TypeError as exc:
            del _scopes[id(client)]
            raise ConfigurationError(
                f"scope_answers: a {type(client).__name__} cannot be weakly referenced"
            ) from exc


def answer_scope(client: object) -> str | None:
    """The answer-cache scope of ``client`` (`scope_answers`), ``None`` for most clients."""
    if not _scopes:
        return None
    scope = _scopes.get(id(client))
    if scope is None or isinstance(scope, str):
        return scope
    return scope()


_instances: dict[str, Cache] = {}
_instances_lock = threading.Lock()


def get_cache(name: str | None = None) -> Cache:
    """The process-wide cache backend registered as ``name``.

    ``None`` means ``GROUNDSWELL_CACHE`` or else ``"lru"``. One instance per
    name per process, shared by every agent. Unknown names raise
    `ConfigurationError` listing the available backends.
    """
    chosen = name or os.environ.get("GROUNDSWELL_CACHE") or "lru"
    cache = _instances.get(chosen)
    if cache is not None:
        return cache
    with _instances_lock:
        if chosen not in _instances:
            manager = get_plugin_manager()
            record = manager.lookup(CacheBackend, chosen)
            owner = manager.owner("register_cache_backends", chosen)
            whose = f"cache backend {chosen!r}" + (f" of plugin {owner!r}" if owner else "")
            try:
                instance = record.factory()  # no arguments: settings come from the environment
            except GroundswellError:
                raise  # a deliberate error of the plugin's (a missing extra) says enough
            except Exception as exc:
                raise PluginError(
                    f"{whose} could not be made: {type(exc).__name__}: {exc}", plugin=owner
                ) from exc
            missing = [m for m in _METHODS if not callable(getattr(instance, m, None))]
            if missing:
                raise PluginError(
                    f"{whose}: its factory returned {shown(instance)}, which has no "
                    f"{', '.join(missing)}; it must return a groundswell.Cache (async get, set, "
                    "bust and bust_prefix, and metrics())",
                    plugin=owner,
                )
            _instances[chosen] = instance
        return _instances[chosen]


_METHODS = ("get", "set", "bust", "bust_prefix", "metrics")


def plugin_of(cache: Cache) -> str | None:
    """The plugin that registered the backend ``cache`` was made from (None: passed directly)."""
    name = next((n for n, c in _instances.items() if c is cache), None)
    if name is None:
        return None
    try:
        return get_plugin_manager().owner("register_cache_backends", name)
    except GroundswellError:  # a registry problem (reported on its own) must not hide this one
        return None


def contain(cache: Cache, exc: Unavailable, tree: EventTree, node: EventNode, key: str) -> None:
    """Record a failed backend call on the run's node; a broken one against its plugin too."""
    exc.record(tree, node, key)
    if exc.broken and (plugin := plugin_of(cache)) is not None:
        # Listed by `groundswell plugins`; never raised: the run goes on without the cache.
        get_plugin_manager().note(plugin, f"cache backend {exc.backend}: {exc.reason}")


def backend_label(cache: Cache) -> str:
    """How logs and events name a backend: its registered name, class and address."""
    name = next((n for n, c in _instances.items() if c is cache), None)
    kind = type(cache).__name__
    metrics: Any
    try:
        metrics = cache.metrics()
    except Exception:
        metrics = None
    if inspect.iscoroutine(metrics):  # an async metrics(): never awaited, so closed quietly
        metrics.close()
    where = metrics.get("url") if isinstance(metrics, Mapping) else None
    detail = f"{kind} at {redact(str(where))}" if where else kind
    return f"{name!r} ({detail})" if name else detail


async def read_cache_entry(
    cache: Cache, key: str, timeout: float | None = None
) -> tuple[Any, str | None]:
    """What ``cache`` holds under ``key`` (``None``: nothing) and, when the backend failed, why.

    The ``get`` goes through the backend's deadline and circuit breaker, as every read of
    a prompt does: a backend that fails, takes longer than ``timeout`` seconds (at most
    ``GROUNDSWELL_CACHE_TIMEOUT_S``) or is being skipped after failures answers
    ``(None, reason)``, and so does one whose answer breaks the `Cache` protocol. Never
    raises for the backend's sake. On an LRU backend the read also makes the entry the
    most recently used.
    """
    guard = guard_for(cache, backend_label)
    limit = guard.timeout_s if timeout is None else min(guard.timeout_s, timeout)

    def read() -> Awaitable[Any]:
        return cache.get(key)

    try:
        entry = await guard.call("get", read, limit, check=inflight.entry_problem)
    except Unavailable as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return entry, None


def cache_entry(encoded: Any) -> dict[str, Any]:
    """What `through_cache` stores for an answer: the value and when it was stored."""
    return {"value": encoded, "stored_at": time.time()}


async def through_cache(
    cache: Cache,
    key: str,
    produce: Callable[[], Awaitable[T]],
    *,
    encode: Callable[[T], Any],
    decode: Callable[[Any], T],
    tree: EventTree,
    node: EventNode,
    ttl: float | None = None,
    defer: Callable[[Callable[[], Awaitable[None]], Callable[[], Any]], None] | None = None,
) -> tuple[T, bool]:
    """Return ``(value, hit)``: the cached value for ``key``, or ``produce()``'s, stored.

    Concurrent calls with the same key share one ``produce()`` (in-flight
    dedupe): in this process across every event loop and thread, and across
    processes when the backend offers a lock (`CacheLock`). A failed
    ``produce()`` is never stored; with ``defer``, storing is handed to it (to
    happen only once the caller's whole work succeeded). A cache that raises or
    misses its deadline is treated as a miss and recorded as a ``cache_error``
    event, one being skipped as a ``cache_skipped`` event: it never fails the
    run. The node gets ``metrics["cache"]`` (``"hit"`` / ``"miss"``) and a
    ``cache_hit`` event with ``key`` and ``age_s`` on a hit.
    """
    slot = (id(cache), key)
    while True:
        fresh = inflight.Flight()
        flight = inflight.flights.setdefault(slot, fresh)  # atomic: one caller's flight wins
        if flight is fresh:
            break
        waiting = flight.join(asyncio.get_running_loop())
        if waiting is None:  # it landed just now: look again
            continue
        value = await waiting  # the same request is already being answered
        if value is not inflight.RETRY:
            node.metrics["cache"] = "hit"
            tree.add_event(node, "cache_hit", key=key, age_s=0.0, deduplicated=True)
            return decode(value), True
    # Registered before the lookup: callers that come while it runs wait for this
    # one instead of each asking the backend (a failing one would count every
    # failure toward skipping it).
    claim: inflight.Claim | None = None
    try:
        guard = guard_for(cache, backend_label)
        try:
            entry = await guard.call(
                "get",
                functools.partial(cache.get, key),
                guard.timeout_s,
                check=inflight.entry_problem,
            )
        except Unavailable as exc:
            contain(cache, exc, tree, node, key)
            entry = _DOWN
        if entry is not None and entry is not _DOWN:
            hit = inflight.decoded(entry, decode, key, tree, node)
            if hit is not None:
                inflight.land(slot, flight, entry["value"])
                return hit[0], True
        # A backend that is down is not asked again.
        if entry is not _DOWN and inflight.locking(cache):
            found = await inflight.lock_or_wait(cache, guard, key, decode, tree, node, contain)
            if type(found) is tuple:  # another process answered while this one waited
                inflight.land(slot, flight, found[1])
                return found[0], True
            claim = found  # type: ignore[assignment]
        node.metrics["cache"] = "miss"
        tree.add_event(node, "cache_miss", key=key)
        value = await produce()
        encoded = encode(value)
        held, claim = claim, None  # from here on, storing releases it
        if held is not None:
            held.stop()  # what is left of the lease covers storing

        async def store() -> None:
            await store_entry(cache, key, encoded, tree, node, ttl)
            if held is not None:
                await held.release()

        if defer is None:
            await store()
            inflight.land(slot, flight, encoded)
            return value, False
        if held is not None:
            # An attempt that fails later drops its deferred work, store with it:
            # then let go at once, so other processes need not wait for the lease.
            weakref.finalize(store, held.abandoned, asyncio.get_running_loop())

        async def store_and_land() -> None:
            try:
                await store()
            finally:
                inflight.land(slot, flight, encoded)

        # The flight lands once the answer is stored: a caller coming in between
        # would find neither the flight nor the entry, and ask the model again. If
        # the attempt fails instead, those waiting answer for themselves.
        defer(store_and_land, functools.partial(inflight.land, slot, flight, inflight.RETRY))
        return value, False
    except Exception as exc:
        inflight.land(slot, flight, error=exc)
        raise
    except BaseException:  # cancelled: a caller waiting answers instead
        inflight.land(slot, flight, inflight.RETRY)
        raise
    finally:
        if claim is not None:  # failed or cancelled: others may take over at once
            claim.let_go()


_DOWN: Any = object()  # what a failed lookup leaves: neither an entry nor a miss


async def store_entry(
    cache: Cache, key: str, encoded: Any, tree: EventTree, node: EventNode, ttl: float | None = None
) -> None:
    """Store an encoded value as a cache entry; a failing or skipped cache is recorded, never raised."""
    guard = guard_for(cache, backend_label)
    try:
        await guard.call(
            "set", functools.partial(cache.set, key, cache_entry(encoded), ttl), guard.timeout_s
        )
    except Unavailable as exc:
        contain(cache, exc, tree, node, key)


def choose_cache(choice: Any, workflow_choice: Any = None) -> Cache:
    """The backend a ``cache=`` setting means, for answers and tool results alike.

    A `Cache` is itself, a name is that registered backend, and ``True`` or
    ``None`` mean "the default": the enclosing workflow's ``cache`` when it set
    one, else ``GROUNDSWELL_CACHE``, else ``lru``.
    """
    if choice is None or choice is True:
        choice = workflow_choice
    if choice is None or choice is True:
        return get_cache(None)
    if isinstance(choice, str):
        return get_cache(choice)
    # Checked once when the agent or override was built: isinstance against a
    # runtime Protocol costs more than the rest of a cache hit.
    return choice  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ToolCachePolicy:
    """How to cache one tool's results (only tools given a policy are ever cached).

    ``key``: ``None`` keys on all arguments, a list of names on those
    arguments, a callable ``key(arguments)`` on whatever it returns. ``ttl`` in
    seconds (``None``: the backend's default). ``invalidate_on``: event names
    that clear this tool's entries through `groundswell.invalidate`. ``hit_message``
    is appended to a cached result (``{age_s}`` is filled in), e.g. to tell the
    model the data may be stale.
    """

    ttl: float | None = None
    key: Sequence[str] | Callable[[dict[str, Any]], Any] | None = None
    invalidate_on: Sequence[str] = ()
    hit_message: str | None = None
    enabled: bool = True
