"""``Tool(requires_approval=True)`` and ``Agent(approval=...)``: tool calls wait for a person.

A call that needs approval opens a wait of kind ``"approval"`` under its
``tool_call`` node (`groundswell.waits`), with the tool's name and input, the
agent and the tool-use id as its request. Approved, the tool runs, with the
input the person gave instead when they edited it (the node keeps the model's
``input`` and records ``approved_input``). Rejected, or not decided before the
agent's ``Approval.timeout`` when its outcome is ``"reject"``, the tool does
not run and the model gets an error result saying why. The calls of one model
turn run side by side, so their waits are open together and may be decided in
any order.

Order 280: inside the Claude SDK hooks (210), so a ``PreToolUse`` hook that
denies a call never bothers a person and one that rewrites the input has the
person approve what will really run; outside the tool-result cache (310) and
the tool timeout (320), so a cached result is never served for a call nobody
approved, and the time a person takes does not count against the tool's own
deadline.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..agent import Middleware, PromptRun, ToolCall, ToolNext
from ..scrubbing.serialize import redact
from ..tools.tool import ToolFailed
from .approval import Approval, needs_approval
from .core import Decision, open_wait

__all__ = ["ToolApproval"]


class ToolApproval(Middleware):
    """Hold each tool call that needs approval until a person approves or rejects it."""

    name = "approval"
    order = 280
    per_agent = True  # active() reads the agent's settings only

    def active(self, run: PromptRun) -> bool:
        settings = run.settings
        if settings.get("approval") is not None:
            return True
        tools = settings.get("tools")
        if not tools:  # no generator at all for a prompt without tools
            return False
        # Toolsets (names) may hold tools that require approval; plain tools say so themselves.
        return any(
            isinstance(item, str) or getattr(item, "requires_approval", False) is True
            for item in tools
        )

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        policy: Approval | None = run.settings.get("approval")
        if not await needs_approval(policy, call):
            return await call_next(call)
        timeout = policy.timeout if policy is not None else None
        on_timeout = None
        if policy is not None and timeout is not None:
            on_timeout = (
                Decision.approve(by="deadline")
                if policy.on_timeout == "approve"
                else Decision.reject(f"nobody approved it within {timeout:g} s", by="deadline")
            )
        agent = run.agent.name
        # Claude SDK Notification hooks hear of it (their "permission_prompt").
        run.notify("permission_prompt", f"{agent} needs your approval to use {call.name}")
        request = {"tool": call.name, "input": call.input, "agent": agent, "tool_use_id": call.id}
        decision = await open_wait(
            "approval",
            request,
            tree=run.tree,
            parent=call.node,
            name="approval",
            timeout=timeout,
            on_timeout=on_timeout,
            workflow=run.workflow,
        )
        payload = call.node.payload
        if decision.kind != "approve":
            payload["approval"] = "rejected"
            raise ToolFailed(_rejected(call.name, decision))
        payload["approval"] = "approved"
        if decision.input is not None:
            # The model's input stays as "input": the tree shows what was asked and what ran.
            edited = _unmasked(decision.input, redact(call.input), call.input)
            payload["approved_input"] = redact(edited)
            call = dataclasses.replace(call, input=dict(edited))
        return await call_next(call)


def _unmasked(edited: Any, shown: Any, original: Any) -> Any:
    """``edited`` (the input a person approved) with each value they left as shown to
    them (a secret masked, a long string cut) put back as the model gave it.

    A person edits the input as `pending` listed it, secrets masked; a value they did
    not change must reach the tool as it was, not as ``**********``.
    """
    if edited == shown and shown != original:
        return original
    if isinstance(edited, dict) and isinstance(shown, dict) and isinstance(original, dict):
        return {
            key: _unmasked(value, shown[key], original[key])
            if key in shown and key in original
            else value
            for key, value in edited.items()
        }
    if (
        isinstance(edited, list)
        and isinstance(shown, list)
        and isinstance(original, list)
        and len(edited) == len(shown) == len(original)
    ):
        return [_unmasked(e, s, o) for e, s, o in zip(edited, shown, original, strict=True)]
    return edited


def _rejected(tool: str, decision: Decision) -> str:
    """What the model is told about a call that was not approved."""
    if decision.timed_out:
        return (
            f"Tool call not run: it needs a person's approval, and {decision.reason}. Do not "
            f"retry it unasked; go on without it, or tell the user it is waiting for approval."
        )
    # Who rejected it stays on the wait node: the model needs the reason, not the person.
    return (
        f"Tool call not run: the person reviewing tool calls rejected this call of {tool!r}. "
        f"Their reason: {decision.reason}"
    )
