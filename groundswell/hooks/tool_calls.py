"""The tool-call events of Claude Agent SDK hooks, and the per-prompt state of the hooks.

Around one tool call: ``PreToolUse`` (deny, ask, rewrite the input, add context
or stop the run); for ``ask`` (and ``defer``) ``PermissionRequest``, and when no
hook answers it a ``permission_prompt`` ``Notification`` before the call is
denied (nobody is there to approve it); then the tool, and ``PostToolUse`` or
``PostToolUseFailure``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..agent import PromptRun, ToolCall, ToolNext
from ..tools.tool import ToolFailed, is_interrupt, tool_error_text, tool_result_content
from ..tree.tree import EventNode, NodeType
from .runner import HookRunner, HookStopped, Outcome

__all__ = ["HookState", "run_tool_hooks", "text_of", "with_context"]


@dataclass(eq=False)
class HookState:
    """The hooks of one prompt attempt: its runner and what they have said so far."""

    runner: HookRunner
    #: The calling agent's state and the tool-call node this (sub-agent's) prompt runs in.
    parent: tuple[HookState, EventNode] | None = None
    #: ``stop_hook_active`` of ``Stop`` and of the calling agent's ``SubagentStop``.
    stop_active: bool = False
    sub_stop_active: bool = False
    #: True once ``SubagentStop`` has fired for good.
    sub_stopped: bool = False
    #: The event and ``stopReason`` of a ``continue: False``: the run stops.
    stopped: tuple[str, str] | None = None
    notices: list[asyncio.Future[Outcome]] = field(default_factory=list)
    #: The last tool-result turn ``PostToolBatch`` has seen.
    batch_seen: Any = None
    #: ``PreToolUse`` runs in the order the model asked for the calls, so a call after
    #: one that stops the run never starts.
    pre_tool: asyncio.Lock = field(default_factory=asyncio.Lock)

    def stop_at(self, event: str, reason: str) -> None:
        """A hook of ``event`` said ``continue: False``: stop before the next model turn."""
        if self.stopped is None:
            self.stopped = (event, reason)

    def check(self) -> None:
        """Raise `HookStopped` when a hook has stopped the run."""
        if self.stopped is not None:
            raise HookStopped(*self.stopped)

    def not_run(self) -> str:
        assert self.stopped is not None
        return f"Not run: a {self.stopped[0]} hook stopped the run: {self.stopped[1]}"

    async def settle(self) -> None:
        """Wait for the ``Notification`` hooks started while the prompt waited."""
        if not self.notices:
            return
        notices, self.notices = self.notices, []
        for outcome in await asyncio.gather(*notices, return_exceptions=True):
            if isinstance(outcome, Outcome):
                if outcome.stop is not None:
                    self.stop_at("Notification", outcome.stop)
            elif not isinstance(outcome, asyncio.CancelledError):
                # A notice runs beside the prompt: its failure is recorded, never raised.
                error = f"{type(outcome).__name__}: {outcome}"
                runner = self.runner
                runner.tree.add_event(
                    runner.node, "hook_error", hook="Notification", callback=None, error=error,
                    on_failure="continue",
                )  # fmt: skip


async def run_tool_hooks(run: PromptRun, state: HookState, call: ToolCall, next_: ToolNext) -> Any:
    """One tool call with its hooks; what the model sees (or `ToolFailed`)."""
    runner, tree, node = state.runner, run.tree, call.node
    async with state.pre_tool:
        if state.stopped is not None:
            raise ToolFailed(state.not_run())
        pre = await runner.run(
            "PreToolUse",
            {"tool_name": call.name, "tool_input": call.input, "tool_use_id": call.id},
            node=node,
            tool_use_id=call.id,
        )
        if pre.stop is not None:  # not run: its result says why, and the run stops
            state.stop_at("PreToolUse", pre.stop)
            raise ToolFailed(pre.stop)
        updated = pre.last("updatedInput")
        if isinstance(updated, Mapping):
            call = dataclasses.replace(call, input=dict(updated))
            tree.add_event(node, "input_rewritten", input=call.input)
        decision, reason = pre.permission
        if decision == "deny":
            raise ToolFailed(f"Tool call blocked by a PreToolUse hook: {reason or 'denied'}")
        if decision in ("ask", "defer"):
            call = await _ask(state, call, reason)
    context = list(pre.context)
    about = {"tool_name": call.name, "tool_input": call.input, "tool_use_id": call.id}
    started = time.monotonic()
    try:
        content = tool_result_content(await next_(call))
    except BaseException as exc:  # SystemExit or KeyboardInterrupt too: a failure like any other
        if isinstance(exc, asyncio.CancelledError) or is_interrupt(exc):
            raise  # the run is stopping (a real Ctrl-C), not the tool failing
        error = tool_error_text(exc)
        failure = await runner.run(
            "PostToolUseFailure",
            {**about, "error": error, "is_interrupt": False, "duration_ms": _ms(started)},
            node=node,
            tool_use_id=call.id,
        )
        if failure.stop is not None:
            state.stop_at("PostToolUseFailure", failure.stop)
        context.extend(failure.context)
        if context:
            raise ToolFailed(str(with_context(error, context))) from exc
        raise
    post = await runner.run(
        "PostToolUse",
        {**about, "tool_response": content, "duration_ms": _ms(started)},
        node=node,
        tool_use_id=call.id,
    )
    replaced = post.last("updatedToolOutput")
    mcp_output = post.last("updatedMCPToolOutput")
    if replaced is None and mcp_output is not None:
        if node.type is NodeType.MCP_CALL:
            replaced = mcp_output
        else:  # as in the SDK: for MCP tools only
            tree.add_event(
                node, "hook_ignored", hook="PostToolUse", fields=["updatedMCPToolOutput"]
            )
    if replaced is not None:
        content = tool_result_content(replaced)
        tree.add_event(node, "output_rewritten")
    context.extend(post.context)
    if post.block is not None:  # the tool ran: its reason goes to the model with the result
        tree.add_event(node, "tool_result_blocked", reason=post.block)
        context.append(post.block)
    if post.stop is not None:
        state.stop_at("PostToolUse", post.stop)
    return with_context(content, context) if context else content


async def _ask(state: HookState, call: ToolCall, reason: str) -> ToolCall:
    """A ``PreToolUse`` ``ask``: ``PermissionRequest`` decides, or nobody can and it is denied."""
    runner, node = state.runner, call.node
    asked = await runner.run(
        "PermissionRequest",
        {"tool_name": call.name, "tool_input": call.input, "permission_suggestions": []},
        node=node,
        tool_use_id=call.id,
    )
    if asked.stop is not None:
        state.stop_at("PermissionRequest", asked.stop)
        raise ToolFailed(asked.stop)
    answer = _permission(asked)
    if answer is not None and answer.get("behavior") == "deny":
        message = str(answer.get("message") or "denied")
        node_event = {"hook": "PermissionRequest", "behavior": "deny", "message": message}
        state.runner.tree.add_event(node, "permission_decision", **node_event)
        if answer.get("interrupt") is True:
            state.stop_at("PermissionRequest", message)
        raise ToolFailed(f"Tool call denied by a PermissionRequest hook: {message}")
    if answer is not None and answer.get("behavior") == "allow":
        tree = state.runner.tree
        tree.add_event(node, "permission_decision", hook="PermissionRequest", behavior="allow")
        updated = answer.get("updatedInput")
        if isinstance(updated, Mapping):
            call = dataclasses.replace(call, input=dict(updated))
            tree.add_event(node, "input_rewritten", input=call.input)
        if answer.get("updatedPermissions"):  # Groundswell keeps no permission rules
            tree.add_event(
                node,
                "hook_ignored",
                hook="PermissionRequest",
                fields=["decision.updatedPermissions"],
            )
        return call
    notice = await runner.run(
        "Notification",
        {
            "message": f"Claude needs your permission to use {call.name}",
            "title": "Permission needed",
            "notification_type": "permission_prompt",
        },
        node=node,
    )
    if notice.stop is not None:
        state.stop_at("Notification", notice.stop)
    why = f" ({reason})" if reason else ""
    raise ToolFailed(
        f"Tool call not run: a PreToolUse hook asked for approval{why}, no PermissionRequest "
        "hook gave it, and nobody else is there to"
    )


def _permission(outcome: Outcome) -> Mapping[str, Any] | None:
    """The ``PermissionRequest`` answer: any deny wins, else the last allow, else ``None``."""
    if outcome.block is not None:
        return {"behavior": "deny", "message": outcome.block}
    answers = [s["decision"] for s in outcome.specific if isinstance(s.get("decision"), Mapping)]
    denied = [a for a in answers if a.get("behavior") == "deny"]
    allowed = [a for a in answers if a.get("behavior") == "allow"]
    return denied[0] if denied else allowed[-1] if allowed else None


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def with_context(content: Any, texts: list[str]) -> Any:
    """``content`` (text or content blocks) with ``texts`` after it, for the model."""
    extra = "\n\n".join(texts)
    if isinstance(content, str):
        return f"{content}\n\n{extra}" if content else extra
    return [*content, {"type": "text", "text": extra}]


def text_of(content: Any) -> str:
    """The text of a message's content (a string, or its text blocks joined)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or ():
        if isinstance(block, Mapping):
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        elif getattr(block, "type", None) == "text":  # an SDK content block
            parts.append(str(getattr(block, "text", "")))
    return "".join(parts)
