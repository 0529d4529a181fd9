"""``inspect_cache_status``: which answers and tool results are cached, how fresh, how used.

The run's tree says which keys were used (``cache_hit`` / ``cache_miss`` events on
prompt and tool nodes); the backend says whether it still holds them. Every figure
shown is the calling run's own: backends and tool names are shared by every run of
the process, so process-wide counters are never shown. Lookups go through the
backend's guard (`groundswell.read_cache_entry`), run concurrently, and share one deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from groundswell import (
    Cache,
    EventNode,
    EventTree,
    Frame,
    NodeStatus,
    NodeType,
    ToolCachePolicy,
    ToolError,
    choose_cache,
    current_agent,
    read_cache_entry,
    redact,
)

from ._common import Limits, anchor, clip, matches, node_in_tree, where, workflow_node

__all__ = ["build"]

#: Seconds all the lookups of one call may take together (each also within the guard's own).
_LOOKUPS_S = 5.0


@dataclass
class _Key:
    """What the run's tree says about one cache key: the nodes that used it, and how."""

    key: str
    first: EventNode | None = None
    uses: list[tuple[EventNode, str]] = field(default_factory=list)

    @property
    def hits(self) -> int:
        return sum(kind == "cache_hit" for _, kind in self.uses)

    @property
    def misses(self) -> int:
        return sum(kind == "cache_miss" for _, kind in self.uses)

    @property
    def stored(self) -> bool:
        """A miss on a node that completed: its result was stored."""
        return any(k == "cache_miss" and n.status is NodeStatus.COMPLETED for n, k in self.uses)


def _keys(tree: EventTree) -> dict[str, _Key]:
    found: dict[str, _Key] = {}
    for node in tree.walk():
        for event in node.events:
            kind, key = event.get("type"), event.get("key")
            if kind in ("cache_hit", "cache_miss") and isinstance(key, str):
                found.setdefault(key, _Key(key, node)).uses.append((node, kind))
    return found


def _problem(failure: Exception | str) -> str:
    """A backend's failure as the model may see it: short, secrets (a URL's password) removed."""
    said = failure if isinstance(failure, str) else f"{type(failure).__name__}: {failure}"
    text: str = redact(said)
    return text[:300]


class _Lookups:
    """The backend's entries for keys, read through its guard under one shared deadline.

    A read is a ``get``: on an LRU backend it also makes the entry the most recently used.
    """

    def __init__(self, cache: Cache | None, problem: str | None) -> None:
        self.cache, self.problem = cache, problem
        self.deadline = time.monotonic() + _LOOKUPS_S
        self.done: dict[str, tuple[Any, str | None]] = {}

    async def get(self, key: str) -> tuple[Any, str | None]:
        """The entry under ``key`` (or ``None``) and, if the backend failed, why."""
        if key not in self.done:
            self.done[key] = await self._read(key)
        return self.done[key]

    async def _read(self, key: str) -> tuple[Any, str | None]:
        cache = self.cache
        if cache is None:
            return None, self.problem
        left = self.deadline - time.monotonic()
        if left <= 0:
            return None, f"not looked up: this call's {_LOOKUPS_S:g} s for lookups ran out"
        entry, failed = await read_cache_entry(cache, key, left)
        return entry, None if failed is None else _problem(failed)


def _policies(agent: Any) -> dict[str, ToolCachePolicy]:
    """The calling agent's tool-cache policies by tool name (``Agent(tool_cache=...)`` over a
    tool's own, as the kernel picks them)."""
    if agent is None:
        return {}
    found = {
        getattr(t, "name", ""): t.cache
        for t in agent.config.get("tools") or []
        if isinstance(getattr(t, "cache", None), ToolCachePolicy)
    }
    found.update(getattr(agent, "tool_cache", None) or {})
    return found


def _backend(agent: Any, frame: Frame) -> tuple[Cache | None, str | None, bool]:
    """The backend that holds this agent's entries (or why there is none), and whether its
    answers are cached. Tool results use it even when answers are not."""
    choice = agent.config.get("cache") if agent is not None else None
    enabled = choice not in (None, False)
    wf_cache = frame.workflow.cache if frame.workflow is not None else None
    try:
        return choose_cache(choice if enabled else None, wf_cache), None, enabled
    except Exception as exc:
        return None, _problem(exc), enabled


def build(limits: Limits) -> list[Callable[..., Any]]:
    """The ``inspect_cache_status`` tool."""
    max_chars = limits.max_chars

    async def inspect_cache_status(
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
        node_id: str | None = None,
        check_ancestors: bool = True,
        cache_key_pattern: str | None = None,
        include_statistics: bool = True,
        cache_key: str | None = None,
        prompt: str | None = None,
    ) -> dict[str, Any]:
        """Show which answers and tool results are cached, how old, big, used and fresh they
        are, hit rates, TTL and the cache's configuration; check one key or prompt.

        Args:
            limit: How many cache entries to list at most (1-200).
            node_id: List the entries used under this node of the run (default: the
                step or workflow you run in).
            check_ancestors: Also summarize cache use under each ancestor step and
                workflow of that node.
            cache_key_pattern: Only entries whose key matches this shell pattern (e.g.
                "tool.search:*" for one tool's results, "writer:*" for an agent's answers).
            include_statistics: Include this run's hit rates.
            cache_key: Check whether this exact key is cached now (a key this run used).
            prompt: Check whether the answer to a prompt of this run (its user text; shell
                wildcards allowed) is cached now.
        """
        tool = "inspect_cache_status"
        frame = where(tool)
        tree = frame.tree
        target = node_in_tree(tree, node_id, tool) if node_id else anchor(frame)
        agent = current_agent()
        cache, problem, enabled = _backend(agent, frame)
        policies = _policies(agent)
        default_ttl = getattr(cache, "default_ttl", None)
        keys = _keys(tree)
        lookups = _Lookups(cache, problem)
        now = time.time()

        async def describe(record: _Key) -> dict[str, Any]:
            first = record.first
            source = workflow_node(tree, first) if first is not None else None
            namespace = record.key.partition(":")[0]
            is_tool = namespace.startswith("tool.")
            item: dict[str, Any] = {
                "cache_key": record.key,
                "kind": "tool_result" if is_tool else "answer",
                "name": namespace.removeprefix("tool."),
                "node_id": first.id if first is not None else None,
                "source_workflow_id": source.id if source else None,
                "hit_count": record.hits,
                "miss_count": record.misses,
            }
            policy = policies.get(item["name"]) if is_tool else None
            ttl = policy.ttl if policy is not None and policy.ttl is not None else default_ttl
            item["ttl_seconds"] = ttl
            entry, failure = await lookups.get(record.key)
            if failure is not None:
                item.update(is_cached=None, error=failure)
                return item
            item["is_cached"] = isinstance(entry, Mapping)
            if isinstance(entry, Mapping):
                stored_at = entry.get("stored_at")
                age = round(now - stored_at, 3) if isinstance(stored_at, int | float) else None
                item.update(cached_at=stored_at, age_seconds=age)
                item["size_bytes"] = len(json.dumps(entry, default=str).encode())
                if ttl is not None and age is not None:
                    item["expires_in_seconds"] = round(max(0.0, ttl - age), 3)
                item["stale"] = ttl is not None and age is not None and age >= ttl
            else:
                # Stored in this run but gone now: expired, evicted or cleared.
                item["stale"] = True if record.stored else None
            return item

        under = {n.id for n in tree.walk(target.id)}
        pattern = [cache_key_pattern] if cache_key_pattern else None
        listed = [
            r
            for r in keys.values()
            if any(n.id in under for n, _ in r.uses) and matches(r.key, pattern)
        ]
        entries = list(await asyncio.gather(*(describe(r) for r in listed[:limit])))
        wf = workflow_node(tree, target)
        out: dict[str, Any] = {
            "workflow_id": wf.id if wf else None,
            "node_id": target.id,
            "cache_configuration": _configuration(agent, cache, problem, enabled, policies),
            "cache_entries": entries,
            "entries_total": len(listed),
            "truncated": len(listed) > limit,
        }
        checks: list[dict[str, Any]] = []
        if cache_key is not None:
            _check_own(cache_key, keys, tool)
            item = await describe(keys[cache_key])
            item["found_in_run"] = True
            checks.append(item)
        if prompt is not None:
            checks.extend(await _prompt_checks(tree, keys, prompt, describe))
        if checks:
            out["checks"] = checks
        if include_statistics:
            hits = sum(r.hits for r in listed)
            misses = sum(r.misses for r in listed)
            held = [e for e in entries if e.get("is_cached")]
            out["cache_statistics"] = {
                "total_entries": len(held),
                "total_size_bytes": sum(e.get("size_bytes", 0) for e in held),
                "hits": hits,
                "misses": misses,
                "cache_hit_rate": round(hits / (hits + misses), 3) if hits + misses else None,
                "average_hit_count": round(hits / len(listed), 3) if listed else 0.0,
                # The kernel's per-run tool-cache report, kept on the workflow's node.
                "tool_results": clip(_own_report(wf), max_chars) if wf else None,
            }
        if check_ancestors:
            out["ancestor_cache_summary"] = _ancestors(tree, target, keys)
        # The answer as it was before the grouped view, kept for callers that read it.
        out["agent_cache"] = _agent_cache(cache, problem, enabled)
        out["run"] = _run(tree, limit)
        out["tool_cache"] = clip(_run_tools(tree, keys), max_chars)
        return out

    return [inspect_cache_status]


def _check_own(key: str, keys: dict[str, _Key], tool: str) -> None:
    """Refuse a key this run did not use: neither answer nor tool keys name the run that
    stored them (agents of one name, and tools of one name, share them), so a key from
    outside the run could be another run's."""
    if key in keys:
        return
    raise ToolError(
        f"{tool}: cache_key {key!r} is not used in this run; only keys this run used can be "
        "checked (list them with cache_key_pattern, or check a prompt of this run with prompt)"
    )


def _own_report(wf: EventNode) -> dict[str, Any] | None:
    """The workflow node's tool-cache report without its process-wide parts: the backends'
    own counters and each tool's live entry count cover every run of the process."""
    report = wf.metrics.get("tool_cache")
    if not isinstance(report, Mapping):
        return None
    tools = {
        name: {k: v for k, v in figures.items() if k != "size"}
        for name, figures in (report.get("tools") or {}).items()
    }
    return {**{k: v for k, v in report.items() if k != "backends"}, "tools": tools}


def _run_tools(tree: EventTree, keys: dict[str, _Key]) -> dict[str, dict[str, Any]]:
    """Per tool, this run's cached calls: ``hits``, ``misses`` and ``hit_rate``."""
    counts: dict[str, Counter[str]] = {}
    for record in keys.values():
        namespace = record.key.partition(":")[0]
        if namespace.startswith("tool."):
            mine = counts.setdefault(namespace[5:], Counter())
            mine.update(hits=record.hits, misses=record.misses)
    return {
        name: {
            "hits": c["hits"],
            "misses": c["misses"],
            "hit_rate": round(c["hits"] / (c["hits"] + c["misses"]), 3)
            if c["hits"] + c["misses"]
            else None,
        }
        for name, c in sorted(counts.items())
    }


async def _prompt_checks(
    tree: EventTree, keys: dict[str, _Key], text: str, describe: Callable[[_Key], Any]
) -> list[dict[str, Any]]:
    """Whether the answers of the run's prompts with this user text are cached."""
    prompts = [
        n
        for n in tree.walk()
        if n.type is NodeType.PROMPT and isinstance(n.payload.get("user"), str)
    ]
    chosen = [n for n in prompts if n.payload["user"] == text] or [
        n for n in prompts if matches(n.payload["user"], [text])
    ]
    if not chosen:
        note = "no prompt of this run has this user text; give its cache_key instead"
        return [{"prompt": text, "found_in_run": False, "is_cached": None, "note": note}]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for node in chosen:
        used = [e["key"] for e in node.events if e.get("type") in ("cache_hit", "cache_miss")]
        if not used:
            item = {"prompt": text, "node_id": node.id, "found_in_run": True, "is_cached": False}
            out.append({**item, "note": "this prompt ran without the answer cache"})
        for key in used:
            if key not in seen:
                seen.add(key)
                # A key first used since `_keys` walked the tree (a background task's) too.
                item = await describe(keys.get(key) or _Key(key, node))
                item.update(prompt=text, found_in_run=True)
                out.append(item)
    return out


def _ancestors(tree: EventTree, target: EventNode, keys: dict[str, _Key]) -> list[dict[str, Any]]:
    """Cache use under each step and workflow above ``target``, nearest first."""
    chain = [
        a for a in tree.get_ancestors(target.id) if a.type in (NodeType.STEP, NodeType.WORKFLOW)
    ]
    counts: dict[str, Counter[str]] = {a.id: Counter() for a in chain}
    used: dict[str, set[str]] = {a.id: set() for a in chain}
    for record in keys.values():
        for node, kind in record.uses:
            for above in tree.get_ancestors(node.id):
                if above.id in counts:
                    counts[above.id][kind] += 1
                    used[above.id].add(record.key)
    out = []
    for ancestor in chain:
        hits, misses = counts[ancestor.id]["cache_hit"], counts[ancestor.id]["cache_miss"]
        total = hits + misses
        out.append(
            {
                "ancestor_id": ancestor.id,
                "name": ancestor.name,
                "type": ancestor.type.value,
                "entries": len(used[ancestor.id]),
                "hits": hits,
                "misses": misses,
                "cache_hit_rate": round(hits / total, 3) if total else None,
            }
        )
    return out


def _configuration(
    agent: Any,
    cache: Cache | None,
    problem: str | None,
    enabled: bool,
    policies: dict[str, ToolCachePolicy],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "enabled": enabled,
        "backend": type(cache).__name__ if cache is not None else None,
        "default_backend": os.environ.get("GROUNDSWELL_CACHE") or "lru",
        "ttl_seconds": getattr(cache, "default_ttl", None),
        "namespace": getattr(agent, "name", None),
        "key_format": "<namespace>:<sha256> for answers, tool.<tool name>:<sha256> for tool results",
        "tool_policies": {
            name: {"ttl_seconds": p.ttl, "invalidate_on": list(p.invalidate_on)}
            for name, p in sorted(policies.items())
        },
    }
    if cache is not None:
        try:
            metrics = cache.metrics()
        except Exception:
            metrics = {}
        for name in ("max_items", "max_bytes"):
            if isinstance(metrics, Mapping) and name in metrics:
                out[name] = metrics[name]
    if problem is not None:
        out["error"] = problem
    return out


def _agent_cache(cache: Cache | None, problem: str | None, enabled: bool) -> dict[str, Any]:
    backend: dict[str, Any] = {"enabled": enabled}
    if not enabled:
        return backend
    if cache is None:
        backend["error"] = problem
        return backend
    backend["type"] = type(cache).__name__
    return backend


def _run(tree: EventTree, limit: int) -> dict[str, Any]:
    """Every prompt and tool call of the run that was a cache hit or miss."""
    entries = []
    counts: Counter[str] = Counter()
    for n in tree.walk():
        state = n.metrics.get("cache")
        if state not in ("hit", "miss"):
            continue
        counts[str(state)] += 1
        key = next(
            (e.get("key") for e in n.events if e.get("type") in ("cache_hit", "cache_miss")),
            None,
        )
        entry = {"node_id": n.id, "name": n.name, "cache": state, "key": key}
        age = next((e.get("age_s") for e in n.events if e.get("type") == "cache_hit"), None)
        if age is not None:
            entry["age_s"] = age
        entries.append(entry)
    return {"hits": counts["hit"], "misses": counts["miss"], "entries": entries[:limit]}
