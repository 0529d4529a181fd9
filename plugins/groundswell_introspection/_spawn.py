"""Starting approved workflows: the template registry, ``list_mount_points`` and
``request_spawn_workflow`` with its limits and resource allocation."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from groundswell import (
    ConfigurationError,
    EventNode,
    EventTree,
    NodeStatus,
    NodeType,
    TokenBudget,
    ToolError,
    Workflow,
    WorkflowError,
    current_agent,
    use_budget,
)

from ._common import Limits, clip, where, workflow_node

__all__ = ["approve_workflow", "approved_workflows", "build", "revoke_workflow"]

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


# Other keys are kept so that they can be refused by name, saying why (`_allocation`).
@with_config(ConfigDict(extra="allow"))
class ResourceAllocation(TypedDict, total=False):
    """Limits for the spawned workflow that Groundswell enforces."""

    timeout_seconds: Annotated[float, Field(gt=0, description="Seconds it may run.")]
    token_budget: Annotated[
        int,
        Field(
            ge=1,
            description="Tokens each model turn inside it may use, input plus the answer's "
            "max_tokens (a TokenBudget's max_total; longer conversations are trimmed).",
        ),
    ]
    max_usd: Annotated[
        float, Field(gt=0, description="USD its model calls may cost in all (else it fails).")
    ]


_SUPPORTED = ("timeout_seconds", "token_budget", "max_usd")
_WHY_NOT = {
    "memory_mb": "its memory",
    "cpu_shares": "its CPU share",
}
# What the answer suggests to follow a spawned workflow.
_INSPECT_WITH = (
    ("inspect_prior_outputs", "node_id"),
    ("inspect_hierarchy", "node_id"),
    ("read_event_history", "workflow_id"),
    ("inspect_state_snapshot", "workflow_id"),
)


# How often a run with background children is checked for having ended.
_WATCH_S = 0.05


class _PerRun:
    """Spawn counts and background tasks per run, keyed by the run's root node id.

    A background child (``wait=false``) belongs to the run that started it: when that
    run's root node ends, the children still running are cancelled (their nodes end
    ``cancelled``), so none outlives its run.
    """

    def __init__(self, keep: int = 10_000) -> None:
        self.keep = keep
        self.spawned: OrderedDict[str, int] = OrderedDict()
        self.tasks: dict[str, set[asyncio.Task[Any]]] = {}
        self.watchers: set[asyncio.Future[None]] = set()

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
        held = self.tasks.get(key)
        if held is None:
            held = self.tasks[key] = set()
            if tree.root is not None:
                watcher = asyncio.ensure_future(self._watch(key, tree.root))
                self.watchers.add(watcher)
                watcher.add_done_callback(self.watchers.discard)
        held.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            held = self.tasks.get(key, set())
            held.discard(finished)
            if not held:
                self.tasks.pop(key, None)
            if not finished.cancelled():
                finished.exception()  # retrieved: the failure is in the tree already

        task.add_done_callback(done)

    async def _watch(self, key: str, root: EventNode) -> None:
        """Cancel the run's background children once its root node has ended."""
        # No hook tells a plugin that a run ended; one check per interval, and only
        # while the run has background children, costs nothing to other runs.
        while held := self.tasks.get(key):
            if root.ended_at is not None:
                for task in list(held):
                    task.cancel("its parent run ended")
                return
            await asyncio.wait(list(held), timeout=_WATCH_S)


def _run_key(tree: EventTree) -> str:
    return tree.root.id if tree.root is not None else ""


_runs = _PerRun()


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


def _allocation(
    asked: dict[str, Any] | None, timeout_s: float | None, limits: Limits
) -> tuple[float, TokenBudget | None, dict[str, Any]]:
    """The timeout and token budget to run under, and the limits to report; refuses what
    cannot be enforced."""
    given = dict(asked or {})
    refused = sorted(set(given) - set(_SUPPORTED))
    if refused:
        what = ", ".join(_WHY_NOT.get(k, k) for k in refused)
        raise ToolError(
            f"request_spawn_workflow: resource_allocation {refused} cannot be enforced: a "
            f"spawned workflow runs in this process, as tasks on its event loop, so {what} "
            f"cannot be capped apart from the caller's; resource_allocation takes "
            f"{list(_SUPPORTED)}"
        )
    asked_timeouts = [t for t in (timeout_s, given.get("timeout_seconds")) if t is not None]
    timeout = min([*asked_timeouts, limits.spawn_timeout_s])
    tokens, usd = given.get("token_budget"), given.get("max_usd")
    budget = None
    if tokens is not None or usd is not None:
        try:
            budget = TokenBudget(max_total=tokens, max_usd=usd)
        except ConfigurationError as exc:
            raise ToolError(f"request_spawn_workflow: resource_allocation: {exc}") from None
    return timeout, budget, {"timeout_seconds": timeout, "token_budget": tokens, "max_usd": usd}


def _named(wf: Workflow[..., Any], name: str | None) -> Workflow[..., Any]:
    """``wf`` under the instance name the agent chose (its node in the tree takes that name)."""
    if name is None or name == wf.name:
        return wf
    if wf.durable:
        raise ToolError(
            f"request_spawn_workflow: template runs durably as workflow {wf.name!r}; a durable "
            "run keeps its workflow's name so that a recovered run matches it. Leave "
            "child_workflow_name out"
        )
    renamed = copy.copy(wf)
    renamed.name = name
    return renamed


def build(limits: Limits) -> list[Callable[..., Any]]:
    """``list_mount_points`` and ``request_spawn_workflow``."""
    max_chars = limits.max_chars

    async def list_mount_points() -> dict[str, Any]:
        """Show where a new workflow would mount, the templates you may start, and the limits."""
        frame = where("list_mount_points")
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
                "resource_allocation": list(_SUPPORTED),
            },
        }

    async def request_spawn_workflow(
        template: str,
        input: dict[str, Any] | None = None,
        wait: bool = True,
        timeout_s: Annotated[float, Field(gt=0)] | None = None,
        child_workflow_name: Annotated[
            str, Field(min_length=1, max_length=100, pattern=r"^[^/\x00-\x1f]+$")
        ]
        | None = None,
        resource_allocation: ResourceAllocation | None = None,
    ) -> dict[str, Any]:
        """Start an approved workflow template as a child of this call and return its result.

        Args:
            template: The name of an approved workflow template (see list_mount_points).
            input: The template's arguments, matching its input schema.
            wait: Wait for it to finish (true), or start it in the background and get
                its id to check later with inspect_prior_outputs (false).
            timeout_s: Seconds it may run (at most the configured limit).
            child_workflow_name: A name for this run of the template (its node's name in
                the tree; no "/").
            resource_allocation: Limits Groundswell enforces on it: timeout_seconds,
                token_budget, max_usd. Memory and CPU cannot be capped and are refused.
        """
        frame = where("request_spawn_workflow")
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
        timeout, budget, granted = _allocation(
            dict(resource_allocation) if resource_allocation else None, timeout_s, limits
        )
        child_wf = _named(wf, child_workflow_name)
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
        parent = workflow_node(tree, call)

        def answer(child_id: str | None, status: str, **more: Any) -> dict[str, Any]:
            out: dict[str, Any] = {
                "template": template,
                "workflow_id": child_id,
                "status": status,
                "child_workflow_name": child_wf.name,
                "parent_workflow_id": parent.id if parent else None,
                "parent_node_id": call.id,
                "execution_mode": "sequential" if wait else "parallel",
                "resource_limits": granted,
                **more,
            }
            if child_id is not None:
                out["can_be_inspected_via"] = [
                    {"tool": name, "input": {arg: child_id}} for name, arg in _INSPECT_WITH
                ]
            return out

        async def run() -> Any:
            with use_budget(budget) if budget is not None else contextlib.nullcontext():
                async with asyncio.timeout(timeout):
                    return await child_wf.run(**kwargs)

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
            note = "check it later with inspect_prior_outputs(node_id=workflow_id)"
            return answer(child.id if child else None, "running", note=note)
        try:
            result = await run()
        except WorkflowError as exc:
            failed = exc.result
            error = clip(str(exc), max_chars)
            return answer(failed.node.id if failed else None, "failed", error=error)
        except TimeoutError:
            child = next((c for c in reversed(call.children) if c.type is NodeType.WORKFLOW), None)
            error = f"timed out after {timeout}s"
            return answer(child.id if child else None, "cancelled", error=error)
        return answer(
            result.node.id,
            result.status.value,
            output=clip(result.node.payload.get("output"), max_chars),
            duration_ms=round(result.duration * 1000, 3),
        )

    return [list_mount_points, request_spawn_workflow]
