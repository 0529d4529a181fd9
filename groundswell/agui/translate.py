"""A run's tree changes and prompt deltas, translated into AG-UI events as they happen.

`Translator.feed` takes what a `groundswell.runtime.context.RunWatch` saw, in
order, and returns the AG-UI events for it:

- ``step`` nodes: STEP_STARTED / STEP_FINISHED, named by their path below the
  run's root (``"draft"``, ``"draft/child/fetch"``);
- each model turn of a prompt: one assistant message (TEXT_MESSAGE_START,
  CONTENT per delta, END), whose id the turn's tool calls name as their parent;
- ``tool_call`` and ``mcp_call`` nodes: TOOL_CALL_START, ARGS (the whole input
  as JSON), END when the call starts, TOOL_CALL_RESULT when it ends;
- a prompt inside a tool call, or a workflow inside the run: a subagent
  (SUBAGENT_STARTED / FINISHED / ERROR, its node id as ``subagentRunId``), and
  every event of its work carries that id;
- ``ctx.state`` of the run's workflow: STATE_DELTA (a JSON Patch) when it has
  changed as a step starts or ends, and when the workflow ends.

Every event is scrubbed (`groundswell.redact`) on its way out, like every
other output of a run.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from ..scrubbing.scrubber import scrub
from ..scrubbing.serialize import redact
from ..tree.events import Event
from .patch import diff

__all__ = ["Translator", "clean", "new_id"]

_TOOLS = ("tool_call", "mcp_call")


def new_id() -> str:
    """A fresh message id."""
    return str(uuid.uuid4())


def clean(event: BaseEvent) -> BaseEvent:
    """``event`` with every secret scrubbed from every field (validated again)."""
    data = redact(event.model_dump(mode="json", by_alias=True))
    return type(event).model_validate(data)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(redact(value), ensure_ascii=False)


@dataclass
class _Node:
    type: str
    name: str
    parent: str | None
    payload: dict[str, Any]


@dataclass
class _Prompt:
    """The message state of one prompt: its current turn's message, open or not."""

    subagent: str | None
    message: str | None = None
    open: bool = False
    streamed: bool = False
    started: set[str] = field(default_factory=set)


class Translator:
    """Turns one run's tree events and prompt deltas into AG-UI events, in order."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.root: str | None = None
        self.prompts: dict[str, _Prompt] = {}
        self.subagents: set[str] = set()
        self.ended: set[str] = set()
        self.state: Any = None  # the state the client has (as sent), None before a snapshot
        #: The message ids of the tool calls, by call id (their results' parent turn).
        self.tool_parents: dict[str, str] = {}

    # -- state ------------------------------------------------------------------------

    def snapshot(self, state: Any) -> list[BaseEvent]:
        """STATE_SNAPSHOT of ``state``: what the client's state starts from."""
        self.state = redact(state)
        return [StateSnapshotEvent(snapshot=self.state)]

    def _state(self, state: Any) -> list[BaseEvent]:
        if self.state is None:
            return []
        new = redact(state)
        ops = diff(self.state, new)
        self.state = new
        return [StateDeltaEvent(delta=ops)] if ops else []  # type: ignore[arg-type]

    # -- where a node belongs ---------------------------------------------------------

    def attribution(self, node_id: str | None) -> str | None:
        """The subagent whose work ``node_id`` is (nearest one up), or None: the run's own."""
        while node_id is not None and node_id != self.root:
            if node_id in self.subagents:
                return node_id
            node = self.nodes.get(node_id)
            node_id = node.parent if node is not None else None
        return None

    def _spawning_call(self, node_id: str | None) -> str | None:
        """The tool call node a prompt runs in, up to the nearest subagent or the root."""
        while node_id is not None and node_id != self.root and node_id not in self.subagents:
            node = self.nodes.get(node_id)
            if node is None:
                return None
            if node.type in _TOOLS:
                return node_id
            node_id = node.parent
        return None

    def path(self, node_id: str) -> str:
        """The node's names below the run's root, joined by ``/``."""
        names = []
        current: str | None = node_id
        while current is not None and current != self.root and current in self.nodes:
            node = self.nodes[current]
            names.append(node.name)
            current = node.parent
        return "/".join(reversed(names))

    # -- messages ---------------------------------------------------------------------

    def _close(self, prompt: _Prompt) -> list[BaseEvent]:
        if not prompt.open or prompt.message is None:
            return []
        prompt.open = False
        return [TextMessageEndEvent(message_id=prompt.message, subagent_run_id=prompt.subagent)]

    def _text(self, prompt: _Prompt, delta: str) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        message = prompt.message
        if not prompt.open or message is None:
            if message is None or message in prompt.started:
                message = prompt.message = new_id()
            prompt.started.add(message)
            prompt.open = True
            out.append(
                TextMessageStartEvent(
                    message_id=message, role="assistant", subagent_run_id=prompt.subagent
                )
            )
        out.append(
            TextMessageContentEvent(
                message_id=message, delta=delta, subagent_run_id=prompt.subagent
            )
        )
        return out

    def stream(self, prompt_id: str | None, event: Any) -> list[BaseEvent]:
        """The AG-UI events for one `groundswell.agent.StreamEvent` of the prompt ``prompt_id``."""
        prompt = self.prompts.get(prompt_id) if prompt_id is not None else None
        if prompt is None:
            return []
        if event.type == "text" and event.text:
            prompt.streamed = True
            return self._text(prompt, event.text)
        if event.type == "retry":  # the turn broke off and starts again: its text is void
            out = self._close(prompt)
            if prompt.message is not None and prompt.message in prompt.started:
                out.append(
                    CustomEvent(
                        name="groundswell.retry",
                        value={"messageId": prompt.message, "reason": scrub(event.text or "")},
                        subagent_run_id=prompt.subagent,
                    )
                )
            prompt.message = None
            return out
        return []

    # -- tree events ------------------------------------------------------------------

    def tree(self, event: Event, state: Any = None) -> list[BaseEvent]:
        """The AG-UI events for one change of the run's tree.

        ``state`` is the served workflow's ``ctx.state`` as a step starts (None otherwise).
        """
        data = event.data
        node_id = data["id"]
        if event.kind == "node_start":
            if node_id in self.nodes:  # a replayed start (`observe_run`): nothing new
                return []
            started = _Node(
                str(data["type"]),
                str(data["name"]),
                data.get("parent_id"),
                data.get("payload") or {},
            )
            self.nodes[node_id] = started
            if self.root is None:
                self.root = node_id
            changed = self._state(state) if state is not None else []
            return changed + self._started(node_id, started)
        node = self.nodes.get(node_id)
        if node is None:
            return []
        if event.kind == "node_event":
            record = data.get("event") or {}
            if record.get("type") == "state_snapshot" and record.get("workflow_id") == self.root:
                return self._state(record.get("state") or {})
            return []
        if node_id in self.ended:  # a status set again (a prompt later `revised`)
            return []
        self.ended.add(node_id)
        return self._ended(node_id, node, data)

    def _started(self, node_id: str, node: _Node) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if node_id == self.root:
            if node.type == "prompt":
                self.prompts[node_id] = _Prompt(None)
            return out
        if node.type == "step":
            step = StepStartedEvent(
                step_name=self.path(node_id), subagent_run_id=self.attribution(node.parent)
            )
            return [step]
        if node.type == "model_call":
            prompt = self.prompts.get(node.parent or "")
            if prompt is not None:  # a new turn: a new assistant message
                out.extend(self._close(prompt))
                prompt.message = None
            return out
        if node.type in _TOOLS:
            return self._tool_started(node_id, node)
        if node.type == "prompt":
            call = self._spawning_call(node.parent)
            if call is None:
                self.prompts[node_id] = _Prompt(self.attribution(node.parent))
                return out
            return self._subagent(node_id, node, call)
        if node.type == "workflow":
            return self._subagent(node_id, node, self._spawning_call(node.parent))
        return out

    def _subagent(self, node_id: str, node: _Node, call: str | None) -> list[BaseEvent]:
        parent = self.attribution(node.parent)
        self.subagents.add(node_id)
        if node.type == "prompt":
            self.prompts[node_id] = _Prompt(node_id)
        call_id = self.nodes[call].payload.get("tool_use_id") if call is not None else None
        started = SubagentStartedEvent(
            subagent_run_id=node_id,
            name=node.name,
            parent_subagent_run_id=parent,
            parent_tool_call_id=call_id,
            parent_message_id=self.tool_parents.get(call_id) if call_id else None,
        )
        return [started]

    def _tool_started(self, node_id: str, node: _Node) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        call_id = str(node.payload.get("tool_use_id") or node_id)
        prompt = self.prompts.get(node.parent or "")
        subagent = self.attribution(node.parent)
        parent_message = None
        if prompt is not None:
            out.extend(self._close(prompt))
            if prompt.message is None:  # a turn of tool calls only: its message has no text
                prompt.message = new_id()
            parent_message = prompt.message
            self.tool_parents[call_id] = parent_message
        out.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=node.name,
                parent_message_id=parent_message,
                subagent_run_id=subagent,
            )
        )
        args = _as_text(node.payload.get("input", {}))
        out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=args, subagent_run_id=subagent))
        out.append(ToolCallEndEvent(tool_call_id=call_id, subagent_run_id=subagent))
        return out

    def _ended(self, node_id: str, node: _Node, data: dict[str, Any]) -> list[BaseEvent]:
        payload = data.get("payload") or {}
        status = str(data.get("status"))
        out: list[BaseEvent] = []
        if node.type == "step":
            out.append(
                StepFinishedEvent(
                    step_name=self.path(node_id), subagent_run_id=self.attribution(node.parent)
                )
            )
        elif node.type == "model_call":
            prompt = self.prompts.get(node.parent or "")
            if prompt is not None:
                out.extend(self._close(prompt))
        elif node.type in _TOOLS:
            call_id = str(node.payload.get("tool_use_id") or node_id)
            content = payload.get("output")
            if content is None and data.get("error"):
                content = (data["error"] or {}).get("message", "")
            out.append(
                ToolCallResultEvent(
                    message_id=new_id(),
                    tool_call_id=call_id,
                    content=_as_text("" if content is None else content),
                    role="tool",
                    subagent_run_id=self.attribution(node.parent),
                )
            )
        elif node.type == "prompt":
            out.extend(self._prompt_ended(node_id, status, payload))
        if node_id == self.root and node.type == "workflow" and "state" in payload:
            out.extend(self._state(payload["state"]))
        if node_id in self.subagents:
            out.append(self._subagent_ended(node_id, status, payload, data.get("error")))
        return out

    def _prompt_ended(self, node_id: str, status: str, payload: dict[str, Any]) -> list[BaseEvent]:
        prompt = self.prompts.get(node_id)
        if prompt is None:
            return []
        out = self._close(prompt)
        # Not streamed (an answer from the cache, a batched call): the answer, whole.
        if status == "completed" and not prompt.streamed and payload.get("output") is not None:
            prompt.message = None
            out.extend(self._text(prompt, _as_text(payload["output"])))
            out.extend(self._close(prompt))
        return out

    def _subagent_ended(
        self, node_id: str, status: str, payload: dict[str, Any], error: Any
    ) -> BaseEvent:
        if status in ("completed", "revised"):
            return SubagentFinishedEvent(subagent_run_id=node_id, result=payload.get("output"))
        message = (error or {}).get("message") if isinstance(error, dict) else None
        kind = (error or {}).get("type") if isinstance(error, dict) else None
        return SubagentErrorEvent(
            subagent_run_id=node_id,
            message=scrub(str(message or status)),
            code=str(kind) if kind else status,
        )
