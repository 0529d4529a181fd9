"""``context_ttl=`` and ``context_retention=``: what of a conversation later requests still carry.

``context_ttl`` (model turns, on `Tool` or `Agent`, the tool's winning): a
tool result is sent with that many model requests (the first being the one
right after the call), then it is replaced by a short note saying that it
expired and how to get it again (call the tool again). Only the prompt's own turns
expire, never a ``message_history``; a failed call's result is kept (it is
short, and the rest of the run depends on it most). Each expiry is a
``tool_result_expired`` event on the prompt node; the tool call's node keeps
the whole result.

Rewriting an earlier message has two costs that this middleware keeps in
view. Anthropic's prompt cache is keyed on the prefix: the turn's request is
marked rewritten (`groundswell.cache.prompt_cache.REWRITTEN`), so no
cache write is paid for that turn. And thinking blocks are bound to what came
before them (`groundswell.model.thinking_blocks`): while the model's latest turn
holds thinking and its tool calls are being answered, nothing before it may
change, so expiry waits (a ``context_ttl_deferred`` event says so once); at
other times the thinking blocks after the first change are dropped, as the
API's documentation advises.

``context_retention="output_only"``: a prompt continuing a
``message_history`` sends only its user turns and the model's answers in
words (tool calls, their results and thinking left out). Between workflow
steps this is already so: a step's prompts start a conversation of their own,
and only what the step returns reaches the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun
from ..cache.prompt_cache import REWRITTEN
from ..model.thinking_blocks import drop_stale_thinking, pinned_thinking

__all__ = ["ContextTTL", "expired_note", "output_only"]

_KEY = "context_ttl.state"
_UNSET: Any = object()  # before_model without wrap_prompt (e.g. a middleware's own request)


def expired_note(tool: str, ttl: int) -> str:
    """What the model reads in place of a result of ``tool`` that expired after ``ttl`` turns."""
    turns = "turn" if ttl == 1 else "turns"
    return (
        f"[This {tool} result expired after {ttl} {turns} and was removed to keep the "
        f"context small. Call {tool} again with the same input if you need it.]"
    )


class _State:
    """One attempt's view: its model turn, and when each tool result was first sent."""

    __slots__ = ("deferred", "expired", "node", "seen", "ttls", "turn")

    def __init__(self, node: Any) -> None:
        self.node = node
        self.turn = 0
        self.seen: dict[str, int] = {}  # tool_use_id -> the turn that first sent its result
        self.expired: set[str] = set()
        self.ttls: dict[str, int | None] = {}  # tool name -> its context_ttl
        self.deferred = False


class ContextTTL(Middleware):
    """Expire old tool results (``context_ttl``); keep a history's answers only
    (``context_retention="output_only"``)."""

    name = "context_ttl"
    order = 255  # before the budget (260), which then counts what is left
    per_agent = True  # active() reads the agent's settings only

    def active(self, run: PromptRun) -> bool:
        settings = run.settings
        if settings.get("context_ttl") is not None:
            return True
        if run.history and settings.get("context_retention") == "output_only":
            return True
        # Toolsets (names) may hold tools with a TTL, known once resolved (`wrap_prompt`
        # decides then); plain tools say so themselves.
        return any(
            isinstance(item, str) or getattr(item, "context_ttl", None) is not None
            for item in settings.get("tools") or ()
        )

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        # Per attempt (this runs inside the attempt's node): each starts from the whole history.
        if run.history and run.settings.get("context_retention") == "output_only":
            before = len(run.history)
            run.history[:] = output_only(run.history)
            run.tree.add_event(
                run.node,
                "context_retention",
                mode="output_only",
                messages_before=before,
                messages_after=len(run.history),
            )
        # The run's tools are resolved by now: when none of them, and not the prompt,
        # has a TTL, nothing can expire and each turn costs one check.
        expires = run.settings.get("context_ttl") is not None or any(
            getattr(h, "context_ttl", None) is not None for h in run.tools.handlers.values()
        )
        run.scratch[_KEY] = _State(run.node) if expires else None
        return await call_next()

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        state: _State | None = run.scratch.get(_KEY, _UNSET)
        if state is None:  # this attempt's tools have no TTL
            return request
        if state is _UNSET or state.node is not run.node:
            state = run.scratch[_KEY] = _State(run.node)
        state.turn += 1
        messages = run.messages
        due = self._due(run, state, messages)
        if not due:
            return request
        pinned = pinned_thinking(request["messages"])
        if pinned is not None:
            if not state.deferred:
                state.deferred = True
                run.tree.add_event(
                    run.node,
                    "context_ttl_deferred",
                    tool_use_ids=sorted(due),
                    reason="the model's latest turn holds thinking blocks and its tool calls "
                    "are being answered: nothing before it may change until the tool loop ends",
                )
            return request
        before = list(messages)
        for i, message in enumerate(before):
            content = message.get("content")
            if message.get("role") != "user" or isinstance(content, str) or not content:
                continue
            blocks = [_expire(b, due) for b in content]
            if any(new is not old for new, old in zip(blocks, content, strict=True)):
                messages[i] = {**message, "content": blocks}
        for use_id, (tool, ttl) in due.items():
            state.expired.add(use_id)
            run.tree.add_event(
                run.node,
                "tool_result_expired",
                tool=tool,
                tool_use_id=use_id,
                context_ttl=ttl,
                turn=state.turn,
            )
        # The thinking after the first change is void now: it goes (thinking_blocks).
        kept, _ = drop_stale_thinking(before, messages)
        if kept is not messages:
            messages[:] = kept
        sent = request["messages"]
        if sent is not messages:  # a history before them: the request holds its own list
            start = len(sent) - len(before)
            if start >= 0 and all(a is b for a, b in zip(sent[start:], before, strict=True)):
                request["messages"] = [*sent[:start], *messages]
            else:
                request["messages"] = [*run.history, *messages]
        run.scratch[REWRITTEN] = True
        return request

    def _due(
        self, run: PromptRun, state: _State, messages: Sequence[Mapping[str, Any]]
    ) -> dict[str, tuple[str, int]]:
        """The tool results due to expire this turn: tool_use_id -> (tool name, its TTL)."""
        names: dict[str, str] = {}
        due: dict[str, tuple[str, int]] = {}
        for message in messages:
            content = message.get("content")
            if isinstance(content, str) or not content:
                continue
            assistant = message.get("role") == "assistant"
            for block in content:
                if not isinstance(block, Mapping):
                    continue
                kind = block.get("type")
                if assistant:
                    if kind == "tool_use":
                        names[str(block.get("id"))] = str(block.get("name"))
                    continue
                if kind != "tool_result" or block.get("is_error"):
                    continue
                use_id = str(block.get("tool_use_id"))
                if use_id in state.expired:
                    continue
                first = state.seen.setdefault(use_id, state.turn)
                tool = names.get(use_id)
                ttl = self._ttl(run, state, tool)
                if ttl is not None and state.turn - first >= ttl:
                    due[use_id] = (tool or "tool", ttl)
        return due

    @staticmethod
    def _ttl(run: PromptRun, state: _State, tool: str | None) -> int | None:
        """The TTL of ``tool``'s results: its own ``context_ttl``, else the prompt's."""
        key = tool or ""
        if key not in state.ttls:
            handler = run.tools.get(tool) if tool else None
            own = getattr(handler, "context_ttl", None)
            state.ttls[key] = own if own is not None else run.settings.get("context_ttl")
        return state.ttls[key]


def _expire(block: Any, due: Mapping[str, tuple[str, int]]) -> Any:
    if not isinstance(block, Mapping) or block.get("type") != "tool_result":
        return block
    found = due.get(str(block.get("tool_use_id")))
    if found is None:
        return block
    return {
        "type": "tool_result",
        "tool_use_id": block["tool_use_id"],
        "content": expired_note(*found),
    }


def output_only(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A conversation's user turns and the model's answers to them, in words only.

    Each user turn that answers no tool call is kept as it is; the model's answer
    to it is the text of its last reply (the assistant messages after the last
    tool results), as one assistant message. Tool calls, their results and
    thinking are left out.
    """
    kept: list[dict[str, Any]] = []
    words: list[dict[str, Any]] = []

    def answer() -> None:
        if kept:  # a conversation ends with an answer: each user turn gets one
            text = words or [{"type": "text", "text": "(answered without words)"}]
            kept.append({"role": "assistant", "content": text})

    for message in history:
        content = message.get("content")
        blocks = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
        )
        if message.get("role") == "assistant":
            words.extend(
                {"type": "text", "text": b["text"]}
                for b in blocks
                if isinstance(b, Mapping) and b.get("type") == "text" and b.get("text")
            )
            continue
        if any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in blocks):
            words = []  # what the model said before calling tools was not its answer
            continue
        answer()
        words = []
        kept.append(dict(message))
    answer()
    return kept
