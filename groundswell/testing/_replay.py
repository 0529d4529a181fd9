"""Replaying a saved run: the fake answers each model request with the reply recorded for it.

A run's trace (``tree.save``, ``groundswell run --save``,
``GROUNDSWELL_TRACE_DIR``) holds every model call's request summary and the
whole answer. `ReplayModel` turns it back into answers: each request is
matched to the recorded conversation it continues (by the prompt's user text
and the turn), compared with what was recorded, and answered with the
recorded reply. A request that differs gets a readable list of what changed.
"""

from __future__ import annotations

import difflib
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._replies import Answer, MessagesRequest, Reply, error

__all__ = ["Mismatch", "RecordedTurn", "ReplayModel", "load_trees"]

# Request fields compared as they were recorded (model_call payload "request").
_SAMPLING = ("temperature", "top_p", "top_k")


@dataclass
class RecordedTurn:
    """One recorded model call: what was asked (in summary) and the whole answer."""

    request: dict[str, Any]
    reply: Answer
    # The tool results the model saw next: (output, is_error) of each call, in order.
    tool_results: list[tuple[Any, bool]] = field(default_factory=list)


@dataclass
class Conversation:
    """One recorded prompt attempt: its agent, user text, system prompt and turns."""

    agent: str
    user: str
    system: Any
    turns: list[RecordedTurn]
    source: str
    next_turn: int = 0

    def describe(self) -> str:
        return f"prompt of agent {self.agent!r} ({_short(self.user)}) in {self.source}"


@dataclass(frozen=True)
class Mismatch:
    """A request that differs from the recorded one: where, and each difference in words."""

    request_number: int
    recorded: str
    differences: tuple[str, ...]

    def __str__(self) -> str:
        lines = "\n".join(f"  - {d}" for d in self.differences)
        return (
            f"groundswell.testing: model request {self.request_number} differs from the "
            f"recorded run ({self.recorded}):\n{lines}\n"
            "Record the run again if the change is intended."
        )


class ReplayModel:
    """Answers requests with the replies a saved run recorded (see `FakeAnthropicAPI.from_trace`).

    With ``strict`` (the default) a request that differs from the recorded
    one is answered with a 400 listing the differences, which the agent raises
    as a ``ModelAPIError``; otherwise the recorded reply is sent anyway.
    Either way each difference is kept in `mismatches`.
    """

    def __init__(self, conversations: list[Conversation], *, strict: bool = True) -> None:
        self.conversations = conversations
        self.strict = strict
        self.mismatches: list[Mismatch] = []
        self._count = 0
        self._lock = threading.Lock()

    @classmethod
    def from_trace(cls, source: Any, *, strict: bool = True) -> ReplayModel:
        """Read the conversations of every run in ``source``.

        ``source`` is a trace file (a JSONL event log; several runs are read in
        order), a directory of them (``GROUNDSWELL_TRACE_DIR``, read in name
        order), an ``EventTree`` (``result.tree``) or its ``to_json()`` dict.
        """
        trees = load_trees(source, "from_trace()")
        conversations = [c for tree, name in trees for c in _conversations(tree, name)]
        if not conversations:
            raise ValueError(
                f"{trees[0][1] if trees else source} holds no model calls to replay; was it saved from a run that "
                "called a model (and not answered from the cache)?"
            )
        return cls(conversations, strict=strict)

    @property
    def remaining(self) -> int:
        """Recorded model calls not replayed yet."""
        return sum(len(c.turns) - c.next_turn for c in self.conversations)

    def respond(self, request: MessagesRequest) -> Answer:
        with self._lock:
            self._count += 1
            number = self._count
            user, turn = request.last_user_text(), _turn(request)
            waiting = [c for c in self.conversations if c.next_turn == turn < len(c.turns)]
            same = [c for c in waiting if c.user and c.user in user]
            if not waiting:
                recorded = sum(len(c.turns) for c in self.conversations)
                reply = error(
                    400,
                    f"groundswell.testing: model request {number} (turn {turn + 1} of a prompt "
                    f"whose user text is {_short(user)}) has no recorded reply: the recorded "
                    f"run made {recorded} model request(s) and none is left for this turn. "
                    "Record the run again if the change is intended.",
                )
                reply.headers["x-should-retry"] = "false"
                return reply
            # Agents asked the same thing tell apart by their system prompts.
            now = _text(request.system)
            best = [c for c in same if c.system is None or _text(c.system) == now]
            conversation = (best or same or waiting)[0]
            conversation.next_turn += 1
            recorded_turn = conversation.turns[turn]
            differences = _differences(conversation, turn, request)
            if not differences:
                return recorded_turn.reply
            where = f"turn {turn + 1} of the {conversation.describe()}"
            mismatch = Mismatch(number, where, tuple(differences))
            self.mismatches.append(mismatch)
            if not self.strict:
                return recorded_turn.reply
            reply = error(400, str(mismatch))
            reply.headers["x-should-retry"] = "false"
            return reply


def load_trees(source: Any, caller: str = "load_trees()") -> list[tuple[Any, str]]:
    """The runs' trees in ``source``, each with where it came from, in run order.

    ``source`` is an ``EventTree``, its `EventTree.to_json` dict, a trace file
    (a JSONL event log, or a ``.json`` file holding ``to_json`` output) or a
    directory of trace files (read in name order). ``caller`` names the API in errors.
    """
    from ..tree.tree import EventTree

    if isinstance(source, EventTree):
        return [(source, "the given tree")]
    if isinstance(source, dict):
        return [(EventTree.from_json(source), "the given tree JSON")]
    if not isinstance(source, str | os.PathLike):
        raise TypeError(
            f"{caller} takes a trace file, a directory of traces, an EventTree or its "
            f"to_json() dict, got {type(source).__name__}"
        )
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json"))
        if not files:
            raise ValueError(f"{path} holds no trace files (*.jsonl)")
    elif path.exists():
        files = [path]
    else:
        raise FileNotFoundError(
            f"no trace at {path}; save one with tree.save(path), "
            "`groundswell run ... --save path` or GROUNDSWELL_TRACE_DIR"
        )
    return [(tree, f.name) for f in files for tree in _load(f)]


def _load(path: Path) -> list[Any]:
    from ..tree.tree import EventTree

    if path.suffix == ".json":
        # A whole tree written with json.dump(tree.to_json()), rather than an event log.
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and "nodes" in data:
            return [EventTree.from_json(data)]
    return EventTree.load_all(path)


def _conversations(tree: Any, source: str) -> Iterable[Conversation]:
    for node in tree.walk():
        turns: list[RecordedTurn] = []
        for child in node.children:
            kind = child.type.value
            if kind == "model_call":
                reply = _reply(child)
                if reply is not None:
                    turns.append(RecordedTurn(dict(child.payload.get("request") or {}), reply))
            elif kind in ("tool_call", "mcp_call") and turns:
                payload = child.payload
                failed = bool(payload.get("is_error")) or child.error is not None
                output = payload.get("output", (child.error or {}).get("message"))
                turns[-1].tool_results.append((output, failed))
        if turns:
            payload = node.payload
            yield Conversation(
                agent=str(payload.get("agent", node.name)),
                user=str(payload.get("user") or ""),
                system=payload.get("system"),
                turns=turns,
                source=source,
            )


def _reply(node: Any) -> Answer | None:
    response = node.payload.get("response")
    if isinstance(response, dict) and isinstance(response.get("content"), list):
        usage = node.metrics.get("usage")
        return Reply(
            [_block(b) for b in response["content"] if isinstance(b, dict)],
            stop_reason=str(response.get("stop_reason") or "end_turn"),
            usage={k: v for k, v in usage.items() if isinstance(v, int)}
            if isinstance(usage, dict)
            else None,
            model=response.get("model"),
        )
    if node.error is not None and node.status.value == "failed":
        reply = error(500, f"(replayed) {node.error.get('message', 'the model call failed')}")
        reply.headers["x-should-retry"] = "false"  # the SDK's own retries were in the recording
        return reply
    # A model call recorded before traces kept whole answers: nothing to replay.
    return None


def _block(block: dict[str, Any]) -> dict[str, Any]:
    # Traces keep the SDK's unset fields as null; the wire format leaves them out.
    return {k: v for k, v in block.items() if v is not None}


def _turn(request: MessagesRequest) -> int:
    """How many model turns came before this request since the last user text."""
    turns = 0
    for message in reversed(request.messages):
        content = message.get("content")
        if message.get("role") == "assistant":
            turns += 1
        elif isinstance(content, str) or any(
            b.get("type") != "tool_result" for b in content or [] if isinstance(b, dict)
        ):
            break
    return turns


def _differences(conversation: Conversation, turn: int, request: MessagesRequest) -> list[str]:
    recorded = conversation.turns[turn].request
    body = request.body
    found: list[str] = []
    if conversation.user and conversation.user not in request.last_user_text():
        found.append(_text_change("user text", conversation.user, request.last_user_text()))
    if recorded.get("model") not in (None, request.model):
        found.append(f"model: recorded {recorded['model']!r}, now {request.model!r}")
    if "max_tokens" in recorded and recorded["max_tokens"] != body.get("max_tokens"):
        found.append(f"max_tokens: recorded {recorded['max_tokens']}, now {body.get('max_tokens')}")
    tools = [t.get("name") for t in request.tools]
    if "tools" in recorded and recorded["tools"] != tools:
        added = [t for t in tools if t not in recorded["tools"]]
        gone = [t for t in recorded["tools"] if t not in tools]
        detail = (
            ", ".join([*(f"added {t!r}" for t in added), *(f"removed {t!r}" for t in gone)])
            or "reordered"
        )
        found.append(f"tools: recorded {recorded['tools']}, now {tools} ({detail})")
    for name in _SAMPLING:
        if recorded.get(name) != body.get(name):
            found.append(f"{name}: recorded {recorded.get(name)}, now {body.get(name)}")
    if recorded.get("stop_sequences") != body.get("stop_sequences") and (
        recorded.get("stop_sequences") or body.get("stop_sequences")
    ):
        found.append(
            f"stop_sequences: recorded {recorded.get('stop_sequences')}, "
            f"now {body.get('stop_sequences')}"
        )
    if conversation.system is not None and _text(conversation.system) != _text(request.system):
        found.append(
            _text_change("system prompt", _text(conversation.system), _text(request.system))
        )
    if turn:
        found += _tool_result_changes(conversation.turns[turn - 1].tool_results, request)
    return found


def _tool_result_changes(recorded: list[tuple[Any, bool]], request: MessagesRequest) -> list[str]:
    sent = request.latest_tool_results()
    if len(sent) != len(recorded):
        return [f"tool results: recorded {len(recorded)}, now {len(sent)}"]
    found = []
    for index, ((output, failed), block) in enumerate(zip(recorded, sent, strict=True), 1):
        now = _text(block.get("content"))
        if failed != bool(block.get("is_error")):
            state = "an error" if block.get("is_error") else "a success"
            found.append(
                f"tool result {index}: recorded {'an error' if failed else 'a success'}, now {state}"
            )
        elif not failed and _text(output) != now and "…[truncated" not in _text(output):
            # (A result longer than a trace keeps cannot be compared in full.)
            found.append(_text_change(f"tool result {index}", _text(output), now))
    return found


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in value)
    return str(value)


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else f"{text[: limit - 1]}…")


def _text_change(what: str, before: str, after: str) -> str:
    if len(before) <= 80 and len(after) <= 80 and "\n" not in before + after:
        return f"{what}: recorded {before!r}, now {after!r}"
    diff = difflib.unified_diff(
        before.splitlines(), after.splitlines(), "recorded", "now", lineterm="", n=1
    )
    lines = list(diff)[2:]
    shown = "\n      ".join(lines[:20]) + ("\n      …" if len(lines) > 20 else "")
    return f"{what} changed:\n      {shown}"
