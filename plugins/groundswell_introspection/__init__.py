"""The ``introspection`` toolset: tools an agent calls to see, and extend, its place in the run.

``Agent(tools=["introspection"])`` adds twelve tools. They read the run from
Groundswell's context (the tree, the current node, the workflow, the calling
agent), so they need no arguments to know where they are. "The current node"
is the step (or, outside steps, the workflow) the calling agent runs in.

Everything is bounded (result limits, depth caps, truncated payloads) and
read-only, except ``request_spawn_workflow`` (runs a workflow the developer
approved) and ``generate_dynamic_prompt`` with ``dry_run=false`` (runs a prompt
from an approved template). Values under secret-looking keys are redacted;
the tree itself never holds API keys or ``env`` values. Each call is a
``tool_call`` node like any other tool call, so it is audited in the tree.

`toolset` builds the tools with other `Limits`;
`approve_workflow` adds spawnable workflows for every agent.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from groundswell import (
    AgentOption,
    ConfigurationError,
    EventNode,
    EventTree,
    Frame,
    NodeStatus,
    NodeType,
    Prompt,
    PromptTemplate,
    Tool,
    ToolError,
    ToolProvider,
    Workflow,
    WorkflowError,
    current_agent,
    current_frame,
    get_cache,
    hookimpl,
    redact,
    tool_cache_stats,
)

__all__ = [
    "TOOL_NAMES",
    "Limits",
    "approve_workflow",
    "approved_workflows",
    "revoke_workflow",
    "toolset",
]

TOOL_NAMES = (
    "inspect_current_node",
    "read_ancestor_chain",
    "list_siblings_children",
    "inspect_prior_outputs",
    "read_ancestor_outputs",
    "inspect_hierarchy",
    "read_event_history",
    "inspect_state_snapshot",
    "inspect_cache_status",
    "list_mount_points",
    "request_spawn_workflow",
    "generate_dynamic_prompt",
)


@dataclass(frozen=True)
class Limits:
    """Bounds on what the tools return and start.

    ``max_chars`` caps each output or payload shown (longer ones are cut and
    marked ``truncated``); ``max_spawn_depth`` is how many spawned workflows
    may nest; ``max_spawns_per_run`` how many one run may start;
    ``spawn_timeout_s`` the default (and maximum) time a spawned workflow gets.
    """

    max_chars: int = 2_000
    max_spawn_depth: int = 3
    max_spawns_per_run: int = 10
    spawn_timeout_s: float = 300.0


_registry: dict[str, Workflow[..., Any]] = {}


def approve_workflow(name: str, wf: Workflow[..., Any]) -> None:
    """Let every agent's ``request_spawn_workflow`` start ``wf`` as template ``name``."""
    if not isinstance(wf, Workflow):
        raise ConfigurationError(f"approve_workflow({name!r}): expected a Workflow, got {wf!r:.60}")
    _registry[name] = wf


def revoke_workflow(name: str) -> None:
    """Withdraw a template approved with `approve_workflow` (no error if absent)."""
    _registry.pop(name, None)


def approved_workflows() -> dict[str, Workflow[..., Any]]:
    """The templates approved for every agent (a copy)."""
    return dict(_registry)


# -- shared helpers -------------------------------------------------------------------


def _where(tool: str) -> Frame:
    frame = current_frame()
    if frame is None:
        raise ToolError(
            f"{tool} can only be used by an agent during a Groundswell run; there is no current run"
        )
    return frame


def _anchor(frame: Frame) -> EventNode:
    """The step or workflow the calling agent runs in (else the run's root)."""
    tree = frame.tree
    node: EventNode | None = frame.node
    while node is not None:
        if node.type in (NodeType.STEP, NodeType.WORKFLOW):
            return node
        node = tree.get_node(node.parent_id) if node.parent_id else None
    assert tree.root is not None
    return tree.root


def _clip(value: Any, limit: int) -> Any:
    """``value`` redacted, or a truncated JSON preview of it when it is too long."""
    value = redact(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) <= limit:
        return value
    return {"truncated": True, "chars": len(text), "preview": text[:limit]}


def _summary(
    tree: EventTree, node: EventNode, limits: Limits, *, output: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": node.id,
        "type": node.type.value,
        "name": node.name,
        "status": node.status.value,
        "path": tree.path(node.id),
        "parent_id": node.parent_id,
        "started_at": node.timestamp,
        "ended_at": node.ended_at,
        "children": len(node.children),
    }
    duration = node.metrics.get("duration")
    if isinstance(duration, float):
        out["duration_ms"] = round(duration * 1000, 3)
    for key in ("attempt", "usage", "cache", "turns"):
        if key in node.metrics:
            out[key] = node.metrics[key]
    if node.error:
        out["error"] = _clip(node.error, limits.max_chars)
    if output and "output" in node.payload:
        out["output"] = _clip(node.payload["output"], limits.max_chars)
    return out


def _workflow_node(tree: EventTree, node: EventNode) -> EventNode | None:
    for candidate in [node, *tree.get_ancestors(node.id)]:
        if candidate.type is NodeType.WORKFLOW:
            return candidate
    return None


def _node_in_tree(tree: EventTree, node_id: str, tool: str) -> EventNode:
    try:
        return tree.get_node(node_id)
    except KeyError:
        raise ToolError(f"{tool}: no node with id {node_id!r} in this run") from None


class _PerRun:
    """Spawn counts and background tasks per run, keyed by the run's root node id."""

    def __init__(self, keep: int = 10_000) -> None:
        self.keep = keep
        self.spawned: OrderedDict[str, int] = OrderedDict()
        self.tasks: dict[str, set[asyncio.Task[Any]]] = {}

    def count(self, tree: EventTree) -> int:
        return self.spawned.get(_run_key(tree), 0)

    def add(self, tree: EventTree) -> None:
        key = _run_key(tree)
        self.spawned[key] = self.spawned.get(key, 0) + 1
        self.spawned.move_to_end(key)
        while len(self.spawned) > self.keep:  # old runs' counts go; a long process stays small
            self.spawned.popitem(last=False)

    def hold(self, tree: EventTree, task: asyncio.Task[Any]) -> None:
        # A reference until it finishes: asyncio keeps only weak ones to running tasks.
        key = _run_key(tree)
        self.tasks.setdefault(key, set()).add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            held = self.tasks.get(key, set())
            held.discard(finished)
            if not held:
                self.tasks.pop(key, None)
            if not finished.cancelled():
                finished.exception()  # retrieved: the failure is in the tree already

        task.add_done_callback(done)


def _run_key(tree: EventTree) -> str:
    return tree.root.id if tree.root is not None else ""


_runs = _PerRun()


# -- the tools ------------------------------------------------------------------------


def _build(limits: Limits) -> list[Tool]:
    max_chars = limits.max_chars

    async def inspect_current_node(include_output: bool = True) -> dict[str, Any]:
        """Describe the step (or workflow) you are running in: id, name, status, timing, metrics.

        Args:
            include_output: Include the node's output if it has finished.
        """
        frame = _where("inspect_current_node")
        tree, node = frame.tree, _anchor(frame)
        workflow = _workflow_node(tree, node)
        agent = current_agent()
        return {
            "node": _summary(tree, node, limits, output=include_output),
            "depth": len(tree.get_ancestors(node.id)),
            "workflow": {"id": workflow.id, "name": workflow.name} if workflow else None,
            "agent": getattr(agent, "name", None),
            "tool_call_node_id": frame.node.id,
        }

    async def read_ancestor_chain(
        max_depth: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> dict[str, Any]:
        """List the ancestors of the current node, nearest first, up to the root.

        Args:
            max_depth: How many ancestors to return at most (1-50).
        """
        frame = _where("read_ancestor_chain")
        tree, node = frame.tree, _anchor(frame)
        chain = tree.get_ancestors(node.id)
        return {
            "node_id": node.id,
            "ancestors": [_summary(tree, a, limits) for a in chain[:max_depth]],
            "total": len(chain),
            "truncated": len(chain) > max_depth,
        }

    async def list_siblings_children(
        relation: Literal["siblings", "children"] = "children",
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
        include_output: bool = False,
    ) -> dict[str, Any]:
        """List the current node's children, or its siblings (same parent, itself excluded).

        Args:
            relation: "children" or "siblings".
            limit: How many nodes to return at most (1-200), in start order.
            include_output: Include each finished node's output (truncated).
        """
        frame = _where("list_siblings_children")
        tree, node = frame.tree, _anchor(frame)
        if relation == "children":
            items = list(node.children)
        else:
            parent = tree.get_node(node.parent_id) if node.parent_id else None
            items = [c for c in (parent.children if parent else []) if c is not node]
        return {
            "node_id": node.id,
            "relation": relation,
            "total": len(items),
            "truncated": len(items) > limit,
            "nodes": [_summary(tree, n, limits, output=include_output) for n in items[:limit]],
        }

    async def inspect_prior_outputs(
        node_id: str | None = None,
        count: Annotated[int, Field(ge=1, le=50)] = 5,
    ) -> dict[str, Any]:
        """Read outputs of earlier work: one node by id, or the latest finished steps before yours.

        Args:
            node_id: A node id (for example a spawned workflow's id) to read.
            count: Without node_id, how many earlier finished siblings to return (1-50).
        """
        frame = _where("inspect_prior_outputs")
        tree, node = frame.tree, _anchor(frame)
        if node_id is not None:
            target = _node_in_tree(tree, node_id, "inspect_prior_outputs")
            return {"nodes": [_summary(tree, target, limits, output=True)]}
        parent = tree.get_node(node.parent_id) if node.parent_id else None
        earlier = [
            c
            for c in (parent.children if parent else [])
            if c is not node and c.ended_at is not None and c.timestamp <= node.timestamp
        ]
        chosen = earlier[-count:]
        return {
            "node_id": node.id,
            "total": len(earlier),
            "nodes": [_summary(tree, n, limits, output=True) for n in reversed(chosen)],
        }

    async def read_ancestor_outputs(
        ancestor_id: str | None = None,
        ancestor_name: str | None = None,
        max_ancestry_depth: Annotated[int, Field(ge=1, le=50)] = 3,
        include_metadata: bool = False,
        include_error_details: bool = True,
    ) -> dict[str, Any]:
        """Read the inputs and outputs of ancestors: one by id or name, or the nearest few.

        Args:
            ancestor_id: The id of one ancestor to read.
            ancestor_name: The name of an ancestor to read (the nearest with that name).
            max_ancestry_depth: Without id or name, how many ancestors to read (1-50).
            include_metadata: Include each node's metrics and events count.
            include_error_details: Include the error of a failed ancestor.
        """
        frame = _where("read_ancestor_outputs")
        tree, node = frame.tree, _anchor(frame)
        chain = tree.get_ancestors(node.id)
        if ancestor_id is not None:
            chosen = [a for a in chain if a.id == ancestor_id]
            if not chosen:
                raise ToolError(
                    f"read_ancestor_outputs: {ancestor_id!r} is not an ancestor of {node.id!r}"
                )
        elif ancestor_name is not None:
            chosen = [a for a in chain if a.name == ancestor_name][:1]
            if not chosen:
                names = [a.name for a in chain]
                raise ToolError(
                    f"read_ancestor_outputs: no ancestor named {ancestor_name!r} (ancestors: {names})"
                )
        else:
            chosen = chain[:max_ancestry_depth]
        out = []
        for ancestor in chosen:
            item = _summary(tree, ancestor, limits, output=True)
            if not include_error_details:
                item.pop("error", None)
            if "input" in ancestor.payload:
                item["input"] = _clip(ancestor.payload["input"], max_chars)
            if include_metadata:
                item["metrics"] = _clip(ancestor.metrics, max_chars)
                item["events"] = len(ancestor.events)
            out.append(item)
        return {"node_id": node.id, "ancestors": out}

    async def inspect_hierarchy(
        depth_mode: Literal["current_only", "parent_only", "ancestors_only", "full_tree"] = (
            "current_only"
        ),
        max_nodes: Annotated[int, Field(ge=1, le=500)] = 200,
    ) -> dict[str, Any]:
        """Show part of the run's tree with tree metrics (size, depth, counts, tokens).

        Args:
            depth_mode: current_only (your node and its children), parent_only (its
                parent and the parent's children), ancestors_only (root down to you),
                or full_tree (the whole run, depth-first).
            max_nodes: How many nodes to list at most (1-500).
        """
        frame = _where("inspect_hierarchy")
        tree, node = frame.tree, _anchor(frame)
        # One walk gives the depths (for full_tree) and the run's metrics.
        every = list(tree.walk())
        depths: dict[str, int] = {}
        tokens = Counter[str]()
        for n in every:
            depths[n.id] = depths[n.parent_id] + 1 if n.parent_id in depths else 0
            usage = n.metrics.get("usage") if n.type is NodeType.MODEL_CALL else None
            if isinstance(usage, dict):
                tokens.update({k: v for k, v in usage.items() if isinstance(v, int)})
        rows: list[tuple[EventNode, int]]
        if depth_mode == "current_only":
            rows = [(node, 0), *((c, 1) for c in node.children)]
        elif depth_mode == "parent_only":
            parent = tree.get_node(node.parent_id) if node.parent_id else node
            rows = [(parent, 0), *((c, 1) for c in parent.children)]
        elif depth_mode == "ancestors_only":
            chain = list(reversed([node, *tree.get_ancestors(node.id)]))
            rows = [(n, i) for i, n in enumerate(chain)]
        else:
            rows = [(n, depths[n.id]) for n in every]
        listed = [
            {**_summary(tree, n, limits), "depth": d, "current": n is node}
            for n, d in rows[:max_nodes]
        ]
        return {
            "depth_mode": depth_mode,
            "current_node_id": node.id,
            "nodes": listed,
            "truncated": len(rows) > max_nodes,
            "metrics": {
                "total_nodes": len(every),
                "max_depth": max(depths.values(), default=0),
                "by_type": dict(Counter(n.type.value for n in every)),
                "by_status": dict(Counter(n.status.value for n in every)),
                "tokens": dict(tokens),
            },
        }

    async def read_event_history(
        event_types: list[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        order: Literal["asc", "desc"] = "desc",
        scope: Literal["run", "current"] = "run",
    ) -> dict[str, Any]:
        """Read the run's events: node starts and ends plus events recorded on nodes.

        Args:
            event_types: Only these types (e.g. node_start, node_end, cache_hit, state_snapshot).
            since: Only events at or after this Unix time.
            until: Only events at or before this Unix time.
            limit: How many events to return at most (1-1000).
            order: "desc" (newest first) or "asc".
            scope: "run" (the whole run) or "current" (your node and below).
        """
        frame = _where("read_event_history")
        tree = frame.tree
        start = _anchor(frame) if scope == "current" else tree.root
        assert start is not None
        wanted = set(event_types) if event_types else None
        found: list[dict[str, Any]] = []
        for n in tree.walk(start.id):
            happenings: list[tuple[str, float, Any]] = [("node_start", n.timestamp, None)]
            if n.ended_at is not None:
                happenings.append(("node_end", n.ended_at, {"status": n.status.value}))
            for event in n.events:
                data = {k: v for k, v in event.items() if k not in ("type", "timestamp")}
                happenings.append((str(event.get("type")), float(event.get("timestamp", 0)), data))
            for kind, at, data in happenings:
                if wanted is not None and kind not in wanted:
                    continue
                if (since is not None and at < since) or (until is not None and at > until):
                    continue
                item: dict[str, Any] = {
                    "type": kind,
                    "timestamp": at,
                    "node_id": n.id,
                    "node_type": n.type.value,
                    "node_name": n.name,
                }
                if data:
                    item["data"] = _clip(data, 300)
                found.append(item)
        found.sort(key=lambda e: e["timestamp"], reverse=order == "desc")
        return {"total": len(found), "truncated": len(found) > limit, "events": found[:limit]}

    async def inspect_state_snapshot(
        workflow_id: str | None = None,
        properties: list[str] | None = None,
        include_history: bool = False,
        history_limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        """Read a workflow's state (ctx.state), optionally only some keys, and how it changed.

        Args:
            workflow_id: The workflow to read (default: the one you run in).
            properties: Only these top-level keys; shell wildcards allowed (e.g. "draft_*").
            include_history: Include earlier snapshots with the keys each one changed.
            history_limit: How many snapshots of history to return at most (1-100).
        """
        frame = _where("inspect_state_snapshot")
        tree = frame.tree
        if workflow_id is None:
            wf_node = _workflow_node(tree, _anchor(frame))
            if wf_node is None:
                raise ToolError("inspect_state_snapshot: this agent is not running in a workflow")
        else:
            wf_node = _node_in_tree(tree, workflow_id, "inspect_state_snapshot")
            if wf_node.type is not NodeType.WORKFLOW:
                raise ToolError(f"inspect_state_snapshot: {workflow_id!r} is not a workflow node")
        live = frame.workflow if frame.workflow and frame.workflow.node is wf_node else None
        snapshots = [
            (n, e)
            for n in tree.walk(wf_node.id)
            for e in n.events
            if e.get("type") == "state_snapshot" and e.get("workflow_id") == wf_node.id
        ]
        snapshots.sort(key=lambda pair: float(pair[1].get("timestamp", 0)))
        if live is not None:
            # A copy through JSON: the model must never get live references.
            state: Any = json.loads(json.dumps(live.state, default=str))
        elif "state" in wf_node.payload:
            state = wf_node.payload["state"]
        else:
            state = snapshots[-1][1].get("state", {}) if snapshots else {}

        def pick(values: Any) -> Any:
            if not properties or not isinstance(values, dict):
                return values
            return {
                k: v
                for k, v in values.items()
                if any(fnmatch.fnmatchcase(k, p) for p in properties)
            }

        out: dict[str, Any] = {
            "workflow_id": wf_node.id,
            "workflow": wf_node.name,
            "state": _clip(pick(state), max_chars),
            "snapshots": len(snapshots),
        }
        if include_history:
            out["history"] = [
                {
                    "timestamp": e.get("timestamp"),
                    "node_id": n.id,
                    "node_name": n.name,
                    "reason": e.get("reason"),
                    "changed": [
                        k
                        for k in e.get("changed", [])
                        if not properties or any(fnmatch.fnmatchcase(k, p) for p in properties)
                    ],
                    "state": _clip(pick(e.get("state", {})), max_chars // 2),
                }
                for n, e in snapshots[-history_limit:]
            ]
        return out

    async def inspect_cache_status(
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
    ) -> dict[str, Any]:
        """Show cache statistics and which prompts in this run were cache hits or misses.

        Args:
            limit: How many cached prompts of this run to list at most (1-200).
        """
        frame = _where("inspect_cache_status")
        tree = frame.tree
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
        agent = current_agent()
        choice = getattr(agent, "config", {}).get("cache") if agent is not None else None
        backend: dict[str, Any] = {"enabled": choice not in (None, False)}
        if choice not in (None, False):
            try:
                if choice is True or isinstance(choice, str):
                    cache = get_cache(choice if isinstance(choice, str) else None)
                else:
                    cache = choice
                backend["type"] = type(cache).__name__
                backend["stats"] = _clip(cache.metrics(), max_chars)
            except Exception as exc:
                backend["error"] = f"{type(exc).__name__}: {exc}"
        return {
            "agent_cache": backend,
            "run": {"hits": counts["hit"], "misses": counts["miss"], "entries": entries[:limit]},
            "tool_cache": _clip(tool_cache_stats(), max_chars),
        }

    def _templates() -> dict[str, Workflow[..., Any]]:
        agent = current_agent()
        own = dict(getattr(agent, "spawnable", {}) or {})
        return {**_registry, **own}

    def _spawn_depth(tree: EventTree, node: EventNode) -> int:
        """How many ``request_spawn_workflow`` calls ``node`` is, or runs inside."""
        chain = [node, *tree.get_ancestors(node.id)]
        return sum(
            1 for n in chain if n.type is NodeType.TOOL_CALL and n.name == "request_spawn_workflow"
        )

    async def list_mount_points() -> dict[str, Any]:
        """Show where a new workflow would mount, the templates you may start, and the limits."""
        frame = _where("list_mount_points")
        tree, call = frame.tree, frame.node
        chain = [call, *tree.get_ancestors(call.id)]
        points = [
            {
                "node_id": n.id,
                "type": n.type.value,
                "name": n.name,
                "path": tree.path(n.id),
                "used_by_spawn": n is call,
            }
            for n in chain
            if n.status is NodeStatus.RUNNING
        ]
        templates = _templates()
        return {
            "mount_points": points,
            "note": "request_spawn_workflow mounts the new workflow under its own tool call node",
            "templates": [
                {
                    "name": name,
                    "description": (wf.__doc__ or "").strip()[:300],
                    "input_schema": wf.input_schema(),
                }
                for name, wf in sorted(templates.items())
            ],
            "limits": {
                "max_spawn_depth": limits.max_spawn_depth,
                # Spawned workflows around this call; a spawn from here is one deeper.
                "spawn_depth_here": _spawn_depth(tree, call),
                "max_spawns_per_run": limits.max_spawns_per_run,
                "spawned_in_run": _runs.count(tree),
                "timeout_s": limits.spawn_timeout_s,
            },
        }

    async def request_spawn_workflow(
        template: str,
        input: dict[str, Any] | None = None,
        wait: bool = True,
        timeout_s: Annotated[float, Field(gt=0)] | None = None,
    ) -> dict[str, Any]:
        """Start an approved workflow template as a child of this call and return its result.

        Args:
            template: The name of an approved workflow template (see list_mount_points).
            input: The template's arguments, matching its input schema.
            wait: Wait for it to finish (true), or start it in the background and get
                its id to check later with inspect_prior_outputs (false).
            timeout_s: Seconds it may run (at most the configured limit).
        """
        frame = _where("request_spawn_workflow")
        tree, call = frame.tree, frame.node
        templates = _templates()
        wf = templates.get(template)
        if wf is None:
            raise ToolError(
                f"template {template!r} is not approved; approved templates: {sorted(templates)}"
            )
        try:
            kwargs = wf.validate_input(input or {})
        except ConfigurationError as exc:
            raise ToolError(str(exc)) from None
        depth = _spawn_depth(tree, call)
        if depth > limits.max_spawn_depth:
            raise ToolError(
                f"spawn depth limit reached ({limits.max_spawn_depth} nested spawned workflows)"
            )
        if _runs.count(tree) >= limits.max_spawns_per_run:
            raise ToolError(
                f"spawn limit reached: this run has started {limits.max_spawns_per_run} workflows"
            )
        _runs.add(tree)
        timeout = min(timeout_s or limits.spawn_timeout_s, limits.spawn_timeout_s)

        async def run() -> Any:
            async with asyncio.timeout(timeout):
                return await wf.run(**kwargs)

        if not wait:
            known = {c.id for c in call.children}
            task = asyncio.create_task(run())
            _runs.hold(tree, task)
            child = None
            for _ in range(20):  # the child's node appears once the task has started
                await asyncio.sleep(0)
                child = next((c for c in call.children if c.id not in known), None)
                if child is not None:
                    break
            return {
                "template": template,
                "workflow_id": child.id if child else None,
                "status": "running",
                "note": "check it later with inspect_prior_outputs(node_id=workflow_id)",
            }
        try:
            result = await run()
        except WorkflowError as exc:
            failed = exc.result
            return {
                "template": template,
                "workflow_id": failed.node.id if failed else None,
                "status": "failed",
                "error": _clip(str(exc), max_chars),
            }
        except TimeoutError:
            child = next((c for c in reversed(call.children) if c.type is NodeType.WORKFLOW), None)
            return {
                "template": template,
                "workflow_id": child.id if child else None,
                "status": "cancelled",
                "error": f"timed out after {timeout}s",
            }
        return {
            "template": template,
            "workflow_id": result.node.id,
            "status": result.status.value,
            "output": _clip(result.node.payload.get("output"), max_chars),
            "duration_ms": round(result.duration * 1000, 3),
        }

    async def generate_dynamic_prompt(
        template: str,
        variables: dict[str, Any] | None = None,
        dry_run: bool = True,
    ) -> dict[str, Any]:
        """Build a prompt from an approved template; with dry_run=false also run it and return the answer.

        Args:
            template: The name of an approved prompt template.
            variables: Values for the template's placeholders (strings, numbers, booleans).
            dry_run: Only build and validate the prompt (true), or also run it (false).
        """
        frame = _where("generate_dynamic_prompt")
        agent = current_agent()
        templates = dict(getattr(agent, "prompt_templates", {}) or {})
        chosen = templates.get(template)
        if chosen is None:
            raise ToolError(
                f"prompt template {template!r} is not approved; approved templates: {sorted(templates)}"
            )
        try:
            prompt: Prompt[Any] = chosen.render(variables or {})
        except ConfigurationError as exc:
            raise ToolError(str(exc)) from None
        built = {
            "user": _clip(prompt.user, max_chars),
            "system": _clip(prompt.system, max_chars) if prompt.system else None,
            "response_format": prompt.output_type.name if prompt.output_type else None,
        }
        if dry_run:
            return {"template": template, "valid": True, "dry_run": True, "prompt": built}
        assert agent is not None
        result = await agent.run(prompt)
        return {
            "template": template,
            "dry_run": False,
            "prompt": built,
            "node_id": result.node.id,
            "output": _clip(result.node.payload.get("output"), max_chars),
            "tool_call_node_id": frame.node.id,
        }

    functions: list[Callable[..., Any]] = [
        inspect_current_node,
        read_ancestor_chain,
        list_siblings_children,
        inspect_prior_outputs,
        read_ancestor_outputs,
        inspect_hierarchy,
        read_event_history,
        inspect_state_snapshot,
        inspect_cache_status,
        list_mount_points,
        request_spawn_workflow,
        generate_dynamic_prompt,
    ]
    return [Tool(fn, toolset="introspection") for fn in functions]


_default: list[Tool] | None = None


def toolset(limits: Limits | None = None) -> list[Tool]:
    """The twelve tools; pass them in ``Agent(tools=[...])`` to use other `Limits`."""
    global _default
    if limits is not None:
        return _build(limits)
    if _default is None:  # building twelve tool schemas costs milliseconds: do it once
        _default = _build(Limits())
    return list(_default)


def _check_spawnable(value: Any, owner: str) -> dict[str, Workflow[..., Any]]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{owner}: spawnable must map template names to workflows, got {type(value).__name__}"
        )
    for key, wf in value.items():
        if not isinstance(wf, Workflow):
            raise ConfigurationError(
                f"spawnable[{key!r}] must be a groundswell.Workflow, got {type(wf).__name__}"
            )
    return dict(value)


def _check_templates(value: Any, owner: str) -> dict[str, PromptTemplate]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{owner}: prompt_templates must map names to PromptTemplate, "
            f"got {type(value).__name__}"
        )
    for key, template in value.items():
        if not isinstance(template, PromptTemplate):
            raise ConfigurationError(
                f"prompt_templates[{key!r}] must be a groundswell.PromptTemplate, "
                f"got {type(template).__name__}"
            )
    return dict(value)


@hookimpl
def register_agent_options() -> list[AgentOption]:
    """``Agent(spawnable={...})`` and ``Agent(prompt_templates={...})``."""
    return [
        AgentOption(
            "spawnable",
            check=_check_spawnable,
            default={},
            description="workflows request_spawn_workflow may start for this agent, by name",
        ),
        AgentOption(
            "prompt_templates",
            check=_check_templates,
            default={},
            description="prompt templates generate_dynamic_prompt may fill in, by name",
        ),
    ]


@hookimpl
def register_tool_providers() -> ToolProvider:
    """The ``introspection`` toolset."""
    return ToolProvider(
        "introspection", toolset, "tools to inspect the run's tree and spawn approved workflows"
    )
