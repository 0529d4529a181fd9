"""Claude Agent SDK hooks as middleware (the events and shapes of `groundswell.claude_hooks`).

- ``SubagentStart`` / ``SubagentStop`` fire on the hooks of the agent whose
  tool call this prompt runs inside;
- ``UserPromptSubmit`` may block the prompt or add to the user turn;
- ``PreToolUse`` may deny a tool or rewrite its input, ``PostToolUse`` may
  replace or add to its result, ``PostToolUseFailure`` hears of failures;
- ``Stop`` may send the model back to work with a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from ..agent import Middleware, ModelNext, PromptNext, PromptResult, PromptRun, ToolCall, ToolNext
from ..agent.loop import is_final
from ..claude_hooks import HookRunner, PromptBlocked, blocked, specific
from ..run_context import current_frame
from ..tools import ToolFailed, is_interrupt, tool_error_text, tool_result_content
from ..tree import EventTree, NodeType

__all__ = ["ClaudeHooks"]

# The hooks of the prompt whose tool call runs now, with that call's node id: a
# prompt started right inside that call is its sub-agent.
_calling: ContextVar[tuple[HookRunner, str] | None] = ContextVar(
    "groundswell_calling_hooks", default=None
)
_RUNNER = "hooks.runner"
_PARENT = "hooks.parent"
_STOP_ACTIVE = "hooks.stop_active"


class ClaudeHooks(Middleware):
    """Runs an agent's ``hooks={...}`` callbacks at the loop's seams."""

    name = "hooks"
    order = 210

    def active(self, run: PromptRun) -> bool:
        # Outside any hooked tool call (the usual case) there is no parent to look for.
        parent = _parent_of_new_prompt() if _calling.get() is not None else None
        run.scratch[_PARENT] = parent
        return bool(run.settings.get("hooks")) or parent is not None

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        node = run.node
        runner = HookRunner(run.settings.get("hooks"), session_id=node.id)
        run.scratch[_RUNNER] = runner
        run.scratch[_STOP_ACTIVE] = False
        parent: HookRunner | None = run.scratch.get(_PARENT)
        subagent = {"agent_id": node.id, "agent_type": run.agent.name}
        if parent is not None:
            await parent.run("SubagentStart", subagent)
        try:
            if runner.has("UserPromptSubmit"):
                await _user_prompt_submit(run, runner)
            return await call_next()
        finally:
            if parent is not None:
                with contextlib.suppress(Exception):
                    await parent.run("SubagentStop", {**subagent, "stop_hook_active": False})

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        message = await call_next(request)
        runner: HookRunner = run.scratch[_RUNNER]
        if not runner.has("Stop") or not is_final(message):
            return message
        stop = await runner.run("Stop", {"stop_hook_active": run.scratch[_STOP_ACTIVE]})
        reason = next(
            (str(o.get("reason") or "") for o in stop if o.get("decision") == "block"), None
        )
        if reason is not None:
            run.scratch[_STOP_ACTIVE] = True
            run.tree.add_event(run.node, "stop_blocked", reason=reason)
            run.continue_with(
                reason or "Please continue.", reason="a Stop hook kept blocking the end"
            )
        return message

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        runner: HookRunner = run.scratch[_RUNNER]
        # A prompt this tool starts is a sub-agent of this one (and of no agent above it).
        token = _calling.set((runner, call.node.id) if runner else None)
        try:
            if not runner:
                return await call_next(call)
            return await _tool_call(run, runner, call, call_next)
        finally:
            _calling.reset(token)


def _parent_of_new_prompt() -> HookRunner | None:
    """The hooks of the agent whose tool call a prompt starting now runs inside, if any."""
    calling = _calling.get()
    frame = current_frame()
    if calling is None or frame is None:
        return None
    runner, call_id = calling
    node = frame.node
    # agent.reflect() puts its prompts under a reflection node; they are still sub-agents.
    while node.type is NodeType.REFLECTION and node.parent_id is not None:
        node = frame.tree.get_node(node.parent_id)
    return runner if node.id == call_id else None


async def _user_prompt_submit(run: PromptRun, runner: HookRunner) -> None:
    first = run.messages[0]
    outputs = await runner.run("UserPromptSubmit", {"prompt": first["content"]})
    reason = next(
        (str(o.get("reason") or "blocked") for o in outputs if o.get("decision") == "block"),
        None,
    )
    if reason is not None:
        raise PromptBlocked(f"a UserPromptSubmit hook blocked the prompt: {reason}")
    extra = [s["additionalContext"] for s in specific(outputs) if s.get("additionalContext")]
    if extra:
        run.messages[0] = {**first, "content": "\n\n".join([first["content"], *map(str, extra)])}


async def _tool_call(
    run: PromptRun, runner: HookRunner, call: ToolCall, call_next: ToolNext
) -> Any:
    tree: EventTree = run.tree
    name, call_id = call.name, call.id
    pre = await runner.run(
        "PreToolUse",
        {"tool_name": name, "tool_input": call.input, "tool_use_id": call_id},
        tool_name=name,
        tool_use_id=call_id,
    )
    denied = blocked(pre)
    if denied is not None:
        raise ToolFailed(f"Tool call blocked by a PreToolUse hook: {denied}")
    updates = [
        s["updatedInput"] for s in specific(pre) if isinstance(s.get("updatedInput"), Mapping)
    ]
    if updates:
        call = dataclasses.replace(call, input=dict(updates[-1]))
        tree.add_event(call.node, "input_rewritten", input=call.input)
    about = {"tool_name": name, "tool_input": call.input, "tool_use_id": call_id}
    try:
        content = tool_result_content(await call_next(call))
    except BaseException as exc:  # SystemExit or KeyboardInterrupt too: a failure like any other
        if isinstance(exc, asyncio.CancelledError) or is_interrupt(exc):
            raise  # the run is stopping (a real Ctrl-C), not the tool failing
        await runner.run(
            "PostToolUseFailure",
            {**about, "error": tool_error_text(exc)},
            tool_name=name,
            tool_use_id=call_id,
        )
        raise
    try:
        post = await runner.run(
            "PostToolUse",
            {**about, "tool_response": content},
            tool_name=name,
            tool_use_id=call_id,
        )
    except Exception as exc:  # a broken hook must not void a tool that worked
        post = []
        tree.add_event(
            call.node, "hook_error", hook="PostToolUse", error=f"{type(exc).__name__}: {exc}"
        )
    for spec in specific(post):
        replaced = spec.get("updatedToolOutput", spec.get("updatedMCPToolOutput"))
        if replaced is not None:
            content = tool_result_content(replaced)
            tree.add_event(call.node, "output_rewritten")
        if spec.get("additionalContext"):
            content = f"{_as_text(content)}\n\n{spec['additionalContext']}"
    return content


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, Mapping))
