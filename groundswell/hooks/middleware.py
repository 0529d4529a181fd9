"""Claude Agent SDK hooks as middleware: where each event of `groundswell.hooks.runner` fires.

- a prompt is a session: ``SessionStart`` before it (``source`` ``"resume"`` when
  it continues a ``message_history``), ``SessionEnd`` after it;
- ``SubagentStart`` / ``SubagentStop`` fire on the hooks of the agent whose tool
  call this prompt runs inside (``SubagentStop`` when the sub-agent is about to
  answer, so ``decision: "block"`` sends it back to work);
- ``UserPromptSubmit`` may block the prompt or add to the user turn;
- ``PreToolUse``, ``PermissionRequest``, ``PostToolUse``, ``PostToolUseFailure``
  around each tool call (`groundswell.hooks.tool_calls`), and
  ``PostToolBatch`` once a turn's calls are all answered;
- ``Stop`` when the model answers; ``Notification`` when the prompt waits to
  retry a model call or a tool call needs approval nobody can give;
- ``PreCompact`` before a token budget compacts (`groundswell.budget.middleware`).

``continue: False`` stops the run: the prompt raises `HookStopped` before its next
model turn (from ``Stop`` and ``SubagentStop`` the answer is kept instead).

After a cancellation (a Ctrl-C), the ``SubagentStop`` and ``SessionEnd`` hooks
that still fire get `CANCELLED_DEADLINE` seconds in all, not their timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from ..agent import (
    Middleware,
    ModelNext,
    PromptNext,
    PromptResult,
    PromptRun,
    StreamEvent,
    ToolCall,
    ToolNext,
)
from ..agent.loop import is_final
from ..runtime.context import current_frame
from ..tools.tool import ToolFailed
from ..tree.tree import EventNode, NodeType
from .runner import (
    HookConfig,
    HookRunner,
    HookStopped,
    Outcome,
    PromptBlocked,
    Transcripts,
    keep_runner,
)
from .tool_calls import HookState, run_tool_hooks, text_of, with_context

__all__ = ["CANCELLED_DEADLINE", "ClaudeHooks"]

#: Seconds the closing hooks (``SubagentStop``, ``SessionEnd``) get once the prompt
#: is being cancelled: a Ctrl-C must not wait out a hook's 60 s timeout.
CANCELLED_DEADLINE = 2.0

# The hooks of the prompt whose tool call runs now, with that call's node: a prompt
# started right inside that call is its sub-agent.
_calling: ContextVar[tuple[HookState, EventNode] | None] = ContextVar(
    "groundswell_calling_hooks", default=None
)
_STATE = "hooks.state"
_PARENT = "hooks.parent"
_TITLES = {
    "retry_wait": "Waiting to retry the model call",
    "permission_prompt": "Waiting for a person to approve a tool call",
    "batch_wait": "Waiting for a Message Batch to answer the model call",
}


class ClaudeHooks(Middleware):
    """Runs an agent's ``hooks={...}`` callbacks at the loop's seams."""

    name = "hooks"
    order = 210

    def active(self, run: PromptRun) -> bool:
        if _calling.get() is None:  # outside any hooked tool call (the usual case): no parent
            return bool(run.settings.get("hooks"))
        parent = run.scratch[_PARENT] = _parent_of_new_prompt()
        return bool(run.settings.get("hooks")) or parent is not None

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        node = run.node
        parent: tuple[HookState, EventNode] | None = run.scratch.get(_PARENT)
        agent = {"agent_type": run.agent.name}
        if _inside_a_tool_call(run):
            agent["agent_id"] = node.id  # a sub-agent: its tool events say so

        def show(text: str) -> None:
            run.emit(StreamEvent("system_message", text=text))

        runner = HookRunner(
            HookConfig(run.settings.get("hooks")),
            run.tree,
            node,
            agent=agent,
            effort=_effort(run.settings),
            emit=show,
        )
        state = HookState(runner, parent)
        run.scratch[_STATE] = state
        keep_runner(run.scratch, runner)
        unlisten = run.listen(lambda kind, text: _notice(state, kind, text))
        try:
            await _before_first_turn(run, state)
            result = await call_next()
            if parent is not None and not state.sub_stopped:  # e.g. an answer from the cache
                await _subagent_stop(run, state, _last_text(result.messages), final=False)
            return result
        finally:
            unlisten()
            for notice in state.notices:
                notice.cancel()
            current = asyncio.current_task()
            cut = CANCELLED_DEADLINE if current is not None and current.cancelling() else None
            with contextlib.suppress(Exception):
                async with asyncio.timeout(cut):
                    if parent is not None and not state.sub_stopped:  # the sub-agent failed
                        with contextlib.suppress(Exception):
                            await _subagent_stop(run, state, None, final=False)
                    if runner.has("SessionEnd"):
                        await runner.run("SessionEnd", {"reason": "other"})
            Transcripts.discard(node)

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        state: HookState = run.scratch[_STATE]
        state.check()
        if state.runner.has("PostToolBatch"):
            await _post_tool_batch(run, state, request)
        return request

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        message = await call_next(request)
        state: HookState = run.scratch[_STATE]
        await state.settle()
        state.check()
        if not is_final(message):
            return message
        text = text_of(message.content)
        more: list[str] = []
        runner = state.runner
        if runner.has("Stop"):
            stop = await runner.run(
                "Stop",
                {
                    "stop_hook_active": state.stop_active,
                    "last_assistant_message": text,
                    "background_tasks": [],
                    "session_crons": [],
                },
            )
            if stop.stop is not None:
                return message  # continue: False wins over any block: the answer stands
            if stop.block is not None:
                run.tree.add_event(run.node, "stop_blocked", reason=stop.block)
                more.append(stop.block or "Please continue.")
            more.extend(stop.context)
        if not more and state.parent is not None:
            more = await _subagent_stop(run, state, text, final=True)
        if more:
            state.stop_active = True
            run.continue_with("\n\n".join(more), reason="a Stop hook kept sending it back")
        return message

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        state: HookState = run.scratch[_STATE]
        # A prompt this tool starts is a sub-agent of this one (and of no agent above it).
        token = _calling.set((state, call.node) if state.runner else None)
        try:
            if state.stopped is not None:
                raise ToolFailed(state.not_run())
            if not state.runner:
                return await call_next(call)
            return await run_tool_hooks(run, state, call, call_next)
        finally:
            _calling.reset(token)


def _parent_of_new_prompt() -> tuple[HookState, EventNode] | None:
    """The hooks of the agent whose tool call a prompt starting now runs inside, if any."""
    calling = _calling.get()
    frame = current_frame()
    if calling is None or frame is None:
        return None
    node = frame.node
    # agent.reflect() puts its prompts under a reflection node; they are still sub-agents.
    while node.type is NodeType.REFLECTION and node.parent_id is not None:
        node = frame.tree.get_node(node.parent_id)
    return calling if node.id == calling[1].id else None


def _inside_a_tool_call(run: PromptRun) -> bool:
    """True when the prompt runs inside a tool call (of an agent hooked or not)."""
    tree, parent_id = run.tree, run.node.parent_id
    while parent_id is not None:
        node = tree.get_node(parent_id)
        if node.type is not NodeType.REFLECTION:
            return node.type in (NodeType.TOOL_CALL, NodeType.MCP_CALL)
        parent_id = node.parent_id
    return False


def _effort(settings: Mapping[str, Any]) -> str | None:
    effort = settings.get("effort")
    if effort is None:
        effort = (settings.get("output_config") or {}).get("effort")
    return str(effort) if effort is not None else None


async def _before_first_turn(run: PromptRun, state: HookState) -> None:
    """``SessionStart``, ``SubagentStart`` and ``UserPromptSubmit``: their context joins
    the user turn, in that order."""
    runner, node = state.runner, run.node
    context: list[str] = []
    if runner.has("SessionStart"):
        data = {
            "source": "resume" if run.history else "startup",
            "model": str(run.settings.get("model")),
            "agent_type": run.agent.name,
        }
        start = await runner.run("SessionStart", data)
        if start.stop is not None:
            raise HookStopped("SessionStart", start.stop)
        _title(run, start)
        context.extend(start.context)
    if state.parent is not None:
        above, call_node = state.parent
        if above.runner.has("SubagentStart"):
            data = {"agent_id": node.id, "agent_type": run.agent.name}
            sub = await above.runner.run("SubagentStart", data, node=call_node)
            if sub.stop is not None:
                above.stop_at("SubagentStart", sub.stop)  # the calling agent stops too
                raise HookStopped("SubagentStart", sub.stop)
            context.extend(sub.context)
    first = run.messages[0]
    if runner.has("UserPromptSubmit"):
        submit = await runner.run("UserPromptSubmit", {"prompt": text_of(first["content"])})
        if submit.stop is not None:
            raise HookStopped("UserPromptSubmit", submit.stop)
        if submit.block is not None:
            raise PromptBlocked(submit.block)
        _title(run, submit)
        context.extend(submit.context)
    if context:
        run.messages[0] = {**first, "content": with_context(first["content"], context)}


def _title(run: PromptRun, outcome: Outcome) -> None:
    title = outcome.last("sessionTitle")
    if title is not None:
        run.tree.add_event(run.node, "session_title", title=str(title))


async def _subagent_stop(
    run: PromptRun, state: HookState, text: str | None, *, final: bool
) -> list[str]:
    """Fire the calling agent's ``SubagentStop``; what to send the sub-agent back with.

    ``final`` is when the sub-agent is about to answer (it can still be sent back);
    otherwise it has already ended.
    """
    assert state.parent is not None
    above, call_node = state.parent
    state.sub_stopped = True
    if not above.runner.has("SubagentStop"):
        return []
    data: dict[str, Any] = {
        "stop_hook_active": state.sub_stop_active,
        "agent_id": run.node.id,
        "agent_type": run.agent.name,
        # A saved trace of the sub-agent: its subtree as a JSONL event log.
        "agent_transcript_path": await _agent_transcript(run, call_node),
        "background_tasks": [],
        "session_crons": [],
    }
    if text is not None:
        data["last_assistant_message"] = text
    outcome = await above.runner.run("SubagentStop", data, node=call_node)
    if outcome.stop is not None:
        above.stop_at("SubagentStop", outcome.stop)  # the sub-agent's answer stands
        return []
    more = [outcome.block or "Please continue."] if outcome.block is not None else []
    more.extend(outcome.context)
    if more and final:
        state.sub_stopped, state.sub_stop_active = False, True
        run.tree.add_event(run.node, "stop_blocked", reason="\n\n".join(more), hook="SubagentStop")
        return more
    return []


async def _post_tool_batch(run: PromptRun, state: HookState, request: dict[str, Any]) -> None:
    """``PostToolBatch`` once per answered turn of tool calls, before the next model turn."""
    messages = run.messages
    last = messages[-1] if len(messages) > 1 else None
    if last is None or last is state.batch_seen or last.get("role") != "user":
        return
    content = last.get("content")
    results = [
        b for b in (content if isinstance(content, list) else ())
        if isinstance(b, Mapping) and b.get("type") == "tool_result"
    ]  # fmt: skip
    if not results:
        return
    state.batch_seen = last
    asked = {
        b.get("id"): b
        for b in messages[-2].get("content") or ()
        if isinstance(b, Mapping) and b.get("type") == "tool_use"
    }
    calls = [
        {
            "tool_name": asked.get(r.get("tool_use_id"), {}).get("name"),
            "tool_input": asked.get(r.get("tool_use_id"), {}).get("input"),
            "tool_use_id": r.get("tool_use_id"),
            "tool_response": r.get("content"),
        }
        for r in results
    ]
    batch = await state.runner.run("PostToolBatch", {"tool_calls": calls})
    reason = batch.stop if batch.stop is not None else batch.block
    if reason is not None:
        state.stop_at("PostToolBatch", reason)
        state.check()
    if batch.context:
        assert isinstance(content, list)
        changed = {
            **last,
            "content": [*content, {"type": "text", "text": "\n\n".join(batch.context)}],
        }
        messages[-1] = state.batch_seen = changed
        sent = request["messages"]
        if sent and sent[-1] is last:  # the request's own list (it has a history before)
            sent[-1] = changed


async def _agent_transcript(run: PromptRun, call_node: EventNode) -> str:
    """``agent_transcript_path``: the sub-agent's subtree, written now (a failure is recorded)."""
    try:
        return await Transcripts.write(run.tree, run.node)
    except OSError as exc:
        run.tree.add_event(
            call_node, "hook_error", hook="SubagentStop", callback=None,
            error=f"could not write the sub-agent's transcript: {type(exc).__name__}: {exc}",
            on_failure="continue",
        )  # fmt: skip
        return Transcripts.path(run.node)


def _notice(state: HookState, kind: str, message: str) -> None:
    """`PromptRun.notify`: ``Notification`` hooks, run while the prompt waits."""
    if not state.runner.has("Notification"):
        return
    data = {"message": message, "title": _TITLES.get(kind, kind), "notification_type": kind}
    task = asyncio.ensure_future(state.runner.run("Notification", data))
    task.add_done_callback(_retrieve)
    state.notices.append(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A notice cancelled or failed with nobody awaiting it must not be logged as
    # "exception never retrieved"; settle() records what a failed one raised.
    if not task.cancelled():
        task.exception()


def _last_text(messages: list[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return text_of(message.get("content"))
    return None
