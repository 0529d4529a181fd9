"""Tool-result caching: keys, statistics, invalidation and clearing.

A tool with a `groundswell.ToolCachePolicy` has its results stored in the
agent's cache backend under ``"tool.<name>:<sha256 hex>"`` keys (the hash
covers the arguments the policy keys on). The ``tool_cache`` middleware
(`groundswell.cache.middleware`) sends each call through `cached_tool_call`.

Statistics are kept per tool for the process (`tool_cache_stats`) and per
run: every workflow node above a cached call gets ``metrics["tool_cache"]``
with the run's hits, misses, hit rate and evictions, per tool and in all,
the tools' sizes and the backends' own figures, as they stand at the run's
last cached call. Sizes and evictions are what this process saw: ``size``
counts the entries it stored that are still within their ``ttl`` and were
not cleared, ``evictions`` those the backend no longer had before their
``ttl`` ran out (for a policy without a ``ttl``: at all).

`invalidate` clears the tools whose policy lists an event; `clear_tool_cache`
clears one tool, or all, in the backends this process used for it and the
process default (or in the backend given).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ConfigurationError, PluginError
from ..tree.tree import EventNode, EventTree, NodeType
from .backends import (
    KEY_VERSION,
    Cache,
    ToolCachePolicy,
    backend_label,
    choose_cache,
    plugin_of,
    through_cache,
)
from .canonical import canonical_bytes
from .guard import Unavailable, guard_for, shown

__all__ = [
    "cached_tool_call",
    "clear_tool_cache",
    "forget_backend",
    "invalidate",
    "tool_cache_key",
    "tool_cache_stats",
    "used_backends",
]

#: Entries remembered per tool for ``size`` and ``evictions`` (the oldest are forgotten).
TRACKED = 10_000
_COUNTS = ("hits", "misses", "evictions", "invalidations")
_tool_stats: dict[str, dict[str, int]] = {}
# The keys this process stored per tool, with when each runs out (inf: no ttl).
_live: dict[str, dict[str, float]] = {}
_invalidation: dict[str, set[tuple[int, str]]] = {}
# The backends each tool's results went to (ids), and the backends by id.
_backends: dict[str, set[int]] = {}
_caches_by_id: dict[int, Cache] = {}
_lock = threading.Lock()  # the counters and the run reports: any thread may add to them


def _counts(tool: str) -> dict[str, int]:
    found = _tool_stats.get(tool)
    if found is None:
        found = _tool_stats[tool] = dict.fromkeys(_COUNTS, 0)
    return found


def tool_cache_key(policy: ToolCachePolicy, tool: str, arguments: dict[str, Any]) -> str:
    """The key a call of ``tool`` with ``arguments`` is cached under, by ``policy``."""
    if policy.key is None:
        material: Any = arguments
    elif callable(policy.key):
        material = policy.key(arguments)
    else:
        missing = [name for name in policy.key if name not in arguments]
        material = {name: arguments.get(name) for name in policy.key}
        if missing:
            material["$missing"] = sorted(missing)
    digest = hashlib.sha256(
        canonical_bytes({"v": KEY_VERSION, "tool": tool, "args": material})
    ).hexdigest()
    return f"{_prefix(tool)}{digest}"


def _prefix(tool: str) -> str:
    return f"tool.{tool}:"


async def cached_tool_call(
    policy: ToolCachePolicy,
    tool: str,
    arguments: dict[str, Any],
    run: Callable[[], Awaitable[Any]],
    cache: Cache,
    tree: EventTree,
    node: EventNode,
) -> Any:
    """Run a tool through the cache under its policy; errors are never cached."""
    with _lock:
        for event in policy.invalidate_on:
            _invalidation.setdefault(event, set()).add((id(cache), _prefix(tool)))
        _backends.setdefault(tool, set()).add(id(cache))
        _caches_by_id[id(cache)] = cache
    key = tool_cache_key(policy, tool, arguments)
    seen = len(node.events)
    content, hit = await through_cache(
        cache,
        key,
        run,
        encode=lambda v: v,
        decode=lambda v: v,
        tree=tree,
        node=node,
        ttl=policy.ttl,
    )
    # A backend that failed tells nothing of its entries: no eviction, nothing stored.
    failed = {e.get("operation") for e in node.events[seen:] if e["type"] in _FAILURES}
    evicted = _count(tool, key, hit, failed, policy.ttl)
    _report(tree, node, tool, hit, evicted, cache)
    if hit and policy.hit_message:
        age = next(
            (e.get("age_s", 0.0) for e in reversed(node.events) if e["type"] == "cache_hit"), 0.0
        )
        try:
            note = policy.hit_message.format(age_s=age)
        except (KeyError, IndexError, ValueError):
            note = policy.hit_message
        content = f"{content}\n\n{note}" if isinstance(content, str) else content
    return content


_FAILURES = frozenset({"cache_error", "cache_skipped"})


def _count(tool: str, key: str, hit: bool, failed: set[Any], ttl: float | None) -> bool:
    """Count a lookup of ``key``; True when it found an entry this process stored gone."""
    now = time.time()
    with _lock:
        counts = _counts(tool)
        live = _live.setdefault(tool, {})
        if hit:
            counts["hits"] += 1
            return False
        counts["misses"] += 1
        ends = live.pop(key, None)
        evicted = ends is not None and now < ends and "get" not in failed
        if evicted:
            counts["evictions"] += 1
        if "set" not in failed:
            live[key] = now + ttl if ttl is not None else math.inf
            if len(live) > TRACKED:
                del live[next(iter(live))]
        return evicted


def _size(tool: str, now: float) -> int:
    """Entries of ``tool`` this process stored that are still within their ``ttl``."""
    live = _live.get(tool)
    if not live:
        return 0
    for key in [k for k, ends in live.items() if ends <= now]:
        del live[key]
    return len(live)


def _rate(hits: int, misses: int) -> float:
    return round(hits / (hits + misses), 4) if hits + misses else 0.0


def _figures(cache: Cache) -> dict[str, Any]:
    """A backend's own counters (its ``metrics()``), numbers only; nothing if it fails."""
    metrics: Any
    try:
        metrics = cache.metrics()
    except Exception:  # a backend's report must never fail a tool call
        return {}
    if not isinstance(metrics, dict):  # a plugin's broken metrics(): nothing to report
        if inspect.iscoroutine(metrics):  # an async one: never awaited, so closed quietly
            metrics.close()
        return {}
    return {
        k: v
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and isinstance(k, str)
    }


def _report(
    tree: EventTree, node: EventNode, tool: str, hit: bool, evicted: bool, cache: Cache
) -> None:
    """Add a cached call to ``metrics["tool_cache"]`` of every workflow node above it."""
    runs: list[EventNode] = []
    parent_id = node.parent_id
    while parent_id is not None:
        above = tree.get_node(parent_id)
        parent_id = above.parent_id
        if above.type is NodeType.WORKFLOW:
            runs.append(above)
    if not runs:  # a prompt outside any workflow: the process figures are all there is
        return
    label, figures = backend_label(cache), _figures(cache)
    with _lock:
        size = _size(tool, time.time())
        for run in runs:
            report = run.metrics.get("tool_cache")
            if type(report) is not dict:
                report = run.metrics["tool_cache"] = {
                    "hits": 0,
                    "misses": 0,
                    "hit_rate": 0.0,
                    "evictions": 0,
                    "tools": {},
                    "backends": {},
                }
            mine = report["tools"].setdefault(
                tool, {"hits": 0, "misses": 0, "hit_rate": 0.0, "evictions": 0, "size": 0}
            )
            for counts in (report, mine):
                counts["hits" if hit else "misses"] += 1
                counts["evictions"] += int(evicted)
                counts["hit_rate"] = _rate(counts["hits"], counts["misses"])
            mine["size"] = size
            report["backends"][label] = dict(figures)


def tool_cache_stats() -> dict[str, dict[str, Any]]:
    """Per tool, in this process: cache ``hits``, ``misses``, ``hit_rate``, ``evictions``,
    ``size`` (entries stored and still live) and ``invalidations`` (clearings by
    `invalidate` or `clear_tool_cache`)."""
    now = time.time()
    with _lock:
        return {
            tool: {
                "hits": counts["hits"],
                "misses": counts["misses"],
                "hit_rate": _rate(counts["hits"], counts["misses"]),
                "evictions": counts["evictions"],
                "size": _size(tool, now),
                "invalidations": counts["invalidations"],
            }
            for tool, counts in _tool_stats.items()
        }


def used_backends() -> list[Cache]:
    """The backends this process's tool results went to (what `clear_tool_cache` reaches)."""
    with _lock:
        return list(_caches_by_id.values())


def forget_backend(cache: Cache) -> None:
    """Take ``cache`` out of what `invalidate` and `clear_tool_cache` reach: for a backend
    the process no longer uses (one `groundswell.testing.check_cache_backend` checked)."""
    with _lock:
        _caches_by_id.pop(id(cache), None)
        for used in _backends.values():
            used.discard(id(cache))
        for targets in _invalidation.values():
            targets.difference_update({t for t in targets if t[0] == id(cache)})


async def invalidate(event: str) -> int:
    """Clear the cached results of every tool whose policy lists ``event``; returns how many.

    Each backend gets ``GROUNDSWELL_CACHE_BUST_TIMEOUT_S`` seconds (default 10),
    and is tried even while prompts skip it. When one fails, the others are
    still cleared and then its error is raised (`TimeoutError` for a backend
    that did not answer), naming the backend; a backend that answers against
    the protocol (``bust_prefix`` not returning an int) is a `PluginError`
    naming it, its plugin and what the method must return.
    """
    with _lock:
        targets = [
            (_caches_by_id[cache_id], prefix)
            for cache_id, prefix in sorted(_invalidation.get(event, set()))
            if cache_id in _caches_by_id
        ]
    return await _clear(targets)


async def clear_tool_cache(tool_name: str | None = None, *, cache: Any = None) -> int:
    """Clear the cached results of ``tool_name`` (``None``: of every tool); returns how many.

    Cleared in ``cache`` (a backend name or a `groundswell.Cache`) when given,
    else in every backend this process cached the tool's results in and the
    process default (``GROUNDSWELL_CACHE``, else ``lru``), so a fresh process
    clears a shared backend too. Raises as `invalidate` does when a backend
    fails; `ConfigurationError` for a bad ``tool_name`` or ``cache``.
    """
    if tool_name is not None and (not isinstance(tool_name, str) or not tool_name):
        raise ConfigurationError(
            f"clear_tool_cache: tool_name must be a tool's name (or None for every tool), "
            f"got {tool_name!r:.40}"
        )
    if (
        cache is not None
        and not isinstance(cache, str)
        and not callable(getattr(cache, "bust_prefix", None))
    ):
        raise ConfigurationError(
            "clear_tool_cache: cache must be a backend name (e.g. 'lru', 'sqlite') or a "
            f"groundswell.Cache, got {type(cache).__name__}"
        )
    prefix = _prefix(tool_name) if tool_name is not None else "tool."
    if cache is not None:
        caches = [choose_cache(cache)]
    else:
        with _lock:
            used = (
                _backends.get(tool_name, set()) if tool_name else set().union(*_backends.values())
            )
            caches = [_caches_by_id[i] for i in sorted(used) if i in _caches_by_id]
        default = choose_cache(None)
        if all(c is not default for c in caches):
            caches.append(default)
    return await _clear([(c, prefix) for c in caches])


async def _clear(targets: list[tuple[Cache, str]]) -> int:
    """``bust_prefix`` on each (backend, prefix); the first failure raised after all were tried."""
    removed = 0
    failed: BaseException | None = None
    counted: set[str] = set()  # a tool cleared in two backends was cleared once
    for cache, prefix in targets:
        guard = guard_for(cache, backend_label)
        try:
            removed += await guard.call(
                "bust_prefix",
                functools.partial(cache.bust_prefix, prefix),
                guard.bust_timeout_s,
                skip=False,  # a rare call that matters: stale entries would outlive the outage
                check=_count_problem,
            )
        except Unavailable as exc:
            cause = exc.__cause__
            if failed is not None:
                pass  # the first is raised; every backend's outage is logged anyway
            elif exc.broken:
                plugin = plugin_of(cache)
                whose = f" of plugin {plugin!r}" if plugin else ""
                failed = PluginError(
                    f"cache backend {exc.backend}{whose} breaks the groundswell.Cache protocol: "
                    f"{exc.reason}",
                    plugin=plugin,
                )
            elif exc.timed_out or cause is None:
                failed = TimeoutError(str(exc))
            else:
                cause.add_note(f"from cache backend {exc.backend}, clearing {prefix!r}")
                failed = cause  # the backend's own error, as before deadlines
            continue
        if prefix not in counted:
            counted.add(prefix)
            _cleared(prefix)
    if failed is not None:
        raise failed
    return removed


def _cleared(prefix: str) -> None:
    """Count a clearing of ``prefix`` (one tool's, or ``"tool."``: every tool's)."""
    with _lock:
        tools = list(_tool_stats) if prefix == "tool." else [prefix[len("tool.") : -1]]
        for tool in tools:
            _counts(tool)["invalidations"] += 1
            _live.pop(tool, None)


def _count_problem(removed: Any) -> str | None:
    if isinstance(removed, int) and not isinstance(removed, bool) and removed >= 0:
        return None
    return (
        f"bust_prefix returned {shown(removed)}; it must return how many keys it removed, "
        "as an int (0 when none matched)"
    )
