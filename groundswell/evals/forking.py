"""Fork a saved run at one node, with a change, and rerun it from there.

"Would this fix have changed that run?", without paying for the whole run
again: ``await fork("bad.jsonl", "c9181c", target=flow, system="Be brief.")``
reruns ``flow`` with the inputs recorded at the trace's root. Everything before
the fork node comes from the recording; at the fork node the change applies,
and from it on the run is live (model requests go to ``client`` or the agents'
own clients, tools run).

"Before the fork node" is decided by time, then matched by order: the recorded
``model_call`` nodes and tool calls (``tool_call``, ``mcp_call``) that *started*
before the fork node are the replayed ones, ``n`` of each. In the rerun, the
first ``n`` model requests (in the order the agents make them) are answered
from the recording, matched to it by conversation exactly as
`groundswell.testing.FakeAnthropicAPI.from_trace` does, and the first ``n`` tool
calls get their recorded results without running. Prompts are counted the same
way, to find the one to change. In a workflow whose steps run one after
another this is exact. With concurrent branches, a branch that recorded its
calls before the fork node is replayed even if it ended after it, and a rerun
that interleaves the branches differently may ask for calls in another order:
each replayed call is checked against the recording (agent, tool name, the
request) and a rerun that does not follow it is refused with a
`ConfigurationError` saying where it left the recording.

The rerun runs without the answer cache, so every model call is either
replayed or live.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..agent import Middleware, PromptResult, PromptRun, ToolCall
from ..agent.overrides import override_agents_here
from ..errors import ConfigurationError, WorkflowError
from ..tools.tool import ToolFailed
from ..tree.tree import EventNode, EventTree, NodeStatus, NodeType
from .fork_diff import NodeChange, diff_trees
from .targets import Target, as_target

if TYPE_CHECKING:
    import anthropic

    from ..agent import ModelNext, PromptNext, ToolNext

__all__ = ["Fork", "NodeChange", "fork"]

_PROMPT_CHANGES = ("system", "model", "prompt")
_TOOL_CHANGES = ("tool_result",)
_TOOL_TYPES = (NodeType.TOOL_CALL, NodeType.MCP_CALL)


@dataclass
class Fork:
    """A saved run and its rerun from one node with a change.

    ``changed`` lists what differs between the two trees from the fork node on
    (matched by the path of node types and names); ``replayed`` and ``live``
    count the rerun's model calls answered from the recording and sent to a model.
    """

    original: EventTree
    forked: EventTree
    output: Any
    changed: list[NodeChange]
    replayed: int
    live: int
    node_id: str
    changes: dict[str, Any] = field(default_factory=dict)
    #: The rerun's error when it failed (its tree is still `forked`), else ``None``.
    error: BaseException | None = None

    def render(self, *, width: int = 120) -> str:
        """The two trees side by side, then the list of changes, as plain text."""
        from ._render import render_fork

        return render_fork(self, width=width)

    def print(self, *, file: Any = None) -> None:
        """`render` on the terminal."""
        from ._render import print_fork

        print_fork(self, file=file)


async def fork(
    trace: str | Path | EventTree,
    node_id: str,
    *,
    target: Any,
    client: anthropic.AsyncAnthropic | None = None,
    system: Any = None,
    model: str | None = None,
    prompt: str | None = None,
    tool_result: Any = None,
) -> Fork:
    """Rerun ``target`` as recorded in ``trace`` up to ``node_id``, with a change from there.

    At a ``prompt`` node the change is ``system=`` (a new system prompt),
    ``model=`` and/or ``prompt=`` (new user text); at a ``tool_call`` or
    ``mcp_call`` node it is ``tool_result=`` (what the model gets instead of the
    recorded result; the tool does not run). ``node_id`` may be a unique prefix
    of the id (as ``groundswell tree`` shows it). ``client``, when given, is
    forced on the target's agents for this rerun only. The recorded inputs are
    validated by the target's parameters (a model parameter gets its model
    again); inputs that no longer fit are a `ConfigurationError`.
    """
    original = _load(trace)
    node = _find_node(original, node_id)
    changes = _check_changes(
        node, system=system, model=model, prompt=prompt, tool_result=tool_result
    )
    chosen = as_target(target)
    workflow = chosen.workflow
    args, kwargs = _inputs(original, chosen)
    plan = _Plan.of(original, node, changes)
    layer = _ForkLayer(plan)
    settings: dict[str, Any] = {"middleware": [layer], "disable_cache": True}
    output: Any = None
    error: BaseException | None = None
    with override_agents_here(client, **settings):
        try:
            result = await workflow.run(*args, **kwargs)
            forked, output = result.tree, result.output
        except WorkflowError as exc:
            if exc.result is None:
                raise
            forked, error = exc.result.tree, exc.__cause__ or exc
    plan.check_followed()
    return Fork(
        original=original,
        forked=forked,
        output=output,
        changed=diff_trees(original, forked, node),
        replayed=layer.replayed,
        live=layer.live,
        node_id=node.id,
        changes=changes,
        error=error,
    )


def _load(trace: str | Path | EventTree) -> EventTree:
    if isinstance(trace, EventTree):
        tree = trace
    elif isinstance(trace, str | Path):
        path = Path(trace)
        if not path.is_file():
            raise ConfigurationError(
                f"fork: no trace file at {path}; save one with tree.save(path) or "
                "`groundswell run ... --save path`"
            )
        trees = EventTree.load_all(path)
        if len(trees) != 1:
            raise ConfigurationError(
                f"fork: {path} holds {len(trees)} runs; fork needs a trace of one workflow run"
            )
        tree = trees[0]
    else:
        raise ConfigurationError(
            f"fork: trace is a path to a saved trace (.jsonl) or an EventTree, "
            f"got {type(trace).__name__}"
        )
    if tree.root is None:
        raise ConfigurationError("fork: the trace is empty")
    return tree


def _find_node(tree: EventTree, node_id: str) -> EventNode:
    if node_id in tree:
        return tree.get_node(node_id)
    matches = [n for n in tree.walk() if n.id.startswith(node_id)] if node_id else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ConfigurationError(
            f"fork: no node with id (or id prefix) {node_id!r} in the trace; "
            "`groundswell tree TRACE` shows the ids"
        )
    shown = ", ".join(f"{n.id} ({n.type.value} {n.name})" for n in matches[:5])
    raise ConfigurationError(
        f"fork: {len(matches)} nodes start with {node_id!r} ({shown}); give more of the id"
    )


def _check_changes(node: EventNode, **given: Any) -> dict[str, Any]:
    changes = {name: value for name, value in given.items() if value is not None}
    where = f"node {node.id} ({node.type.value} {node.name!r})"
    if node.type == NodeType.PROMPT:
        allowed: tuple[str, ...] = _PROMPT_CHANGES
    elif node.type in _TOOL_TYPES:
        allowed = _TOOL_CHANGES
    else:
        raise ConfigurationError(
            f"fork: cannot fork at {where}: fork at a prompt node (change system=, model= "
            "or prompt=) or a tool_call node (change tool_result=)"
        )
    wrong = sorted(set(changes) - set(allowed))
    if wrong:
        raise ConfigurationError(
            f"fork: {', '.join(f'{w}=' for w in wrong)} does not apply to {where}; "
            f"a {node.type.value} node takes {', '.join(f'{a}=' for a in allowed)}"
        )
    if not changes:
        raise ConfigurationError(
            f"fork: no change given for {where}; pass {' and/or '.join(f'{a}=' for a in allowed)}"
        )
    if "model" in changes and not isinstance(changes["model"], str):
        raise ConfigurationError(f"fork: model= is a model name, got {changes['model']!r}")
    if "prompt" in changes and not isinstance(changes["prompt"], str):
        raise ConfigurationError(f"fork: prompt= is the new user text, got {changes['prompt']!r}")
    return changes


def _inputs(tree: EventTree, target: Target) -> tuple[list[Any], dict[str, Any]]:
    """The recorded inputs, checked and converted by ``target``'s parameters (JSON has no
    models or dates: a recorded ``Order`` is a dict until validated)."""
    args, kwargs = _recorded_inputs(tree)
    model = target.inputs_model
    if model is None:  # the target takes anything: nothing to convert by
        return args, kwargs
    names = list(model.model_fields)
    where = f"fork: the trace's recorded inputs do not fit the target {target.name!r}"
    if len(args) > len(names):
        raise ConfigurationError(
            f"{where}: {len(args)} positional arguments, but it takes {len(names)} "
            f"({', '.join(names) or 'none'}); is it the workflow that was run?"
        )
    named = dict(zip(names, args, strict=False))
    twice = sorted(set(named) & set(kwargs))
    if twice:
        raise ConfigurationError(
            f"{where}: {twice} given both positionally and by keyword; "
            "is it the workflow that was run?"
        )
    try:
        checked = model.model_validate(named | kwargs)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(inputs)'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        raise ConfigurationError(
            f"{where} ({problems}); it takes {names}. Is it the workflow that was run, "
            "and has its signature changed since?"
        ) from exc
    # Only what was given: defaults stay the workflow's own.
    return [], {name: getattr(checked, name) for name in checked.model_fields_set}


def _recorded_inputs(tree: EventTree) -> tuple[list[Any], dict[str, Any]]:
    root = tree.root
    assert root is not None
    recorded = root.payload.get("input")
    if root.type != NodeType.WORKFLOW or not isinstance(recorded, dict):
        raise ConfigurationError(
            f"fork: the trace's root ({root.type.value} {root.name!r}) is not a workflow run "
            "with recorded inputs; fork needs the trace of a workflow run"
        )
    args, kwargs = recorded.get("args") or [], recorded.get("kwargs") or {}
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ConfigurationError(
            f"fork: the trace's recorded input is malformed: {recorded!r:.200}"
        )
    return list(args), dict(kwargs)


def _by_start(tree: EventTree, *types: NodeType) -> list[EventNode]:
    # Stable on ties: walk order (a parent before its children, siblings in start order).
    return sorted((n for n in tree.walk() if n.type in types), key=lambda n: n.timestamp)


@dataclass
class _Plan:
    """What the rerun replays: the recorded calls before the fork node, and where it forks."""

    fork_node: EventNode
    changes: dict[str, Any]
    model_calls: list[EventNode]
    tool_calls: list[EventNode]
    prompt_index: int | None
    prompts: list[EventNode]
    #: How many prompts, counted by start, are checked against the recording's agents.
    prompts_checked: int
    replay_client: Any = None
    replay_fake: Any = None
    diverged: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, tree: EventTree, node: EventNode, changes: dict[str, Any]) -> _Plan:
        start = node.timestamp
        models = [n for n in _by_start(tree, NodeType.MODEL_CALL) if n.timestamp < start]
        tools = [n for n in _by_start(tree, *_TOOL_TYPES) if n.timestamp < start]
        prompts = _by_start(tree, NodeType.PROMPT)
        plan = cls(
            fork_node=node,
            changes=changes,
            model_calls=models,
            tool_calls=tools,
            prompt_index=prompts.index(node) if node.type == NodeType.PROMPT else None,
            prompts=prompts,
            prompts_checked=sum(1 for p in prompts if p.timestamp <= start),
        )
        if models:
            from ..testing import FakeAnthropicAPI

            # Only the calls before the fork node: a rerun asking for more gets no reply.
            plan.replay_fake = FakeAnthropicAPI.from_trace(_before(tree, {n.id for n in models}))
            plan.replay_client = plan.replay_fake.client(max_retries=0)
        return plan

    def check_followed(self) -> None:
        """Refuse a rerun that left the recording before the fork node."""
        problems = list(self.diverged)
        if self.replay_fake is not None:
            problems += [str(m) for m in self.replay_fake.mismatches]
        if problems:
            raise ConfigurationError(
                "fork: the rerun did not follow the recording before the fork node, so its "
                "result would not answer the question (has the workflow's code changed, or "
                "do concurrent branches run in another order?):\n" + "\n".join(problems)
            )


def _before(tree: EventTree, keep: set[str]) -> EventTree:
    """``tree`` without the model calls that are not in ``keep``."""
    data = tree.to_json()
    data["nodes"] = [
        n for n in data["nodes"] if n.get("type") != NodeType.MODEL_CALL.value or n["id"] in keep
    ]
    return EventTree.from_json(data)


class _ForkLayer(Middleware):
    """Replays the calls before the fork node, applies the change at it, counts calls."""

    name = "fork"
    # Inside the prompt node (200), outside hooks, approval and the tool layers, so a
    # replayed tool call is answered before anything would run it.
    order = 205

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        self.replayed = 0
        self.live = 0
        self._prompts = 0
        self._models = 0
        self._tools = 0
        self._lock = threading.Lock()

    def _next(self, counter: str) -> int:
        with self._lock:
            number: int = getattr(self, counter)
            setattr(self, counter, number + 1)
            return number

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        plan = self.plan
        index = self._next("_prompts")
        if index < plan.prompts_checked:
            recorded = plan.prompts[index]
            if recorded.name != run.agent.name:
                plan.diverged.append(
                    f"prompt {index + 1}: recorded by agent {recorded.name!r}, "
                    f"the rerun's is agent {run.agent.name!r}"
                )
        if index == plan.prompt_index:
            self._apply(run)
        return await call_next()

    def _apply(self, run: PromptRun) -> None:
        changes, node = self.plan.changes, run.node
        if "system" in changes:
            run.system = changes["system"]
        if "model" in changes:
            run.settings["model"] = changes["model"]
            node.payload["model"] = changes["model"]
        if "prompt" in changes:
            run.messages[0] = {"role": "user", "content": changes["prompt"]}
            node.payload["user"] = changes["prompt"]
        run.tree.add_event(
            node, "fork", changed=sorted(changes), recorded_id=self.plan.fork_node.id
        )

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        plan = self.plan
        index = self._next("_models")
        if index >= len(plan.model_calls):
            with self._lock:
                self.live += 1
            return await call_next(request)
        recorded = plan.model_calls[index]
        agent = _agent_of(plan, recorded)
        if agent and agent != run.agent.name:
            plan.diverged.append(
                f"model call {index + 1}: recorded for agent {agent!r}, "
                f"the rerun's is for agent {run.agent.name!r}"
            )
        own = run.client
        # The kernel makes the model_call node as for any call; its client is the recording.
        run.client = plan.replay_client
        mismatches = len(plan.replay_fake.mismatches)
        try:
            message = await call_next(request)
        except Exception as exc:
            # A recorded failure replays as one; a mismatch is reported as the fake words it.
            if recorded.status != NodeStatus.FAILED and mismatches == len(
                plan.replay_fake.mismatches
            ):
                plan.diverged.append(f"model call {index + 1} could not be replayed: {exc}")
            raise
        finally:
            run.client = own
        with self._lock:
            self.replayed += 1
        calls = [c for c in run.node.children if c.type == NodeType.MODEL_CALL]
        if calls:
            run.tree.add_event(calls[-1], "replayed", recorded_id=recorded.id)
        return message

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        plan = self.plan
        index = self._next("_tools")
        fork_node = plan.fork_node
        if index < len(plan.tool_calls):
            recorded = plan.tool_calls[index]
            if recorded.name != call.name:
                return _diverged(
                    plan,
                    f"tool call {index + 1}: recorded {recorded.name!r}, the rerun's is {call.name!r}",
                )
            run.tree.add_event(call.node, "replayed", recorded_id=recorded.id)
            return _recorded_result(recorded)
        if index == len(plan.tool_calls) and fork_node.type in _TOOL_TYPES:
            if fork_node.name != call.name:
                return _diverged(
                    plan,
                    f"tool call {index + 1} (the fork node): recorded {fork_node.name!r}, "
                    f"the rerun's is {call.name!r}",
                )
            run.tree.add_event(call.node, "fork", changed=["tool_result"], recorded_id=fork_node.id)
            return plan.changes["tool_result"]
        return await call_next(call)


def _diverged(plan: _Plan, problem: str) -> Any:
    # The tool does not run: a call the recording does not know could repeat a side effect.
    plan.diverged.append(problem)
    raise ToolFailed(f"fork: not run, the rerun left the recording ({problem})")


def _agent_of(plan: _Plan, recorded: EventNode) -> str | None:
    parents = [p for p in plan.prompts if p.id == recorded.parent_id]
    return parents[0].name if parents else None


def _recorded_result(node: EventNode) -> Any:
    payload = node.payload
    output = payload.get("output", (node.error or {}).get("message"))
    if payload.get("is_error") or node.error is not None:
        # Worded as recorded: the model reads the same error text.
        raise ToolFailed(output if isinstance(output, str) else str(output))
    return output
