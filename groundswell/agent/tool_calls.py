"""One tool call of the agent loop: its node, its middleware layers, and the tool itself.

`tool_call` runs a tool the model asked for as a ``tool_call`` (or ``mcp_call``)
node, through the ``wrap_tool_call`` layers, and returns the ``tool_result``
sent back. In a durable run the tool itself goes through the execution
engine's ``once`` (`groundswell.workflow.execution.CheckpointingEngine`): its result is
checkpointed when it returns, and a recovery that reaches the same call gets
it back instead of calling the tool again.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from ..cache.canonical import canonical_bytes
from ..errors import ToolError
from ..runtime.context import enter_frame, reset_frame
from ..tools.tool import ToolContext, ToolFailed, is_interrupt, tool_error_text, tool_result_content
from ..tree.tree import NodeStatus, NodeType
from .middleware import Layer, Layers
from .replies import bad_tool_input
from .run import PromptRun, StreamEvent, ToolCall

__all__ = ["tool_call"]


async def tool_call(run: PromptRun, layers: Layers, block: dict[str, Any]) -> dict[str, Any]:
    """Run one tool call as a ``tool_call`` (or ``mcp_call``) node; returns its ``tool_result``."""
    tree = run.tree
    name, call_id, given = block["name"], block["id"], block.get("input")
    # Input that is not an object (the SDK does not check) reaches no tool: see below.
    tool_input = dict(given) if isinstance(given, dict) else {}
    handler = run.tools.get(name)
    kind = handler.node_type if handler is not None else NodeType.TOOL_CALL
    payload: dict[str, Any] = {"tool_use_id": call_id, "input": tool_input}
    refused: ToolFailed | None = None
    if given is not None and not isinstance(given, dict):
        payload["input"] = given
        refused = ToolFailed(bad_tool_input(name, given))
    toolset = getattr(handler, "toolset", None)
    if toolset is not None:
        payload["toolset"] = toolset
    mcp = getattr(handler, "mcp", None)  # an MCP tool's server, own name, transport (for sinks)
    if mcp:
        payload["mcp"] = mcp
    node = tree.start_node(kind, name, run.node, payload=payload)
    token = enter_frame(tree, node, run.workflow, run.agent)
    run.emit(StreamEvent("tool_call", tool_call={"id": call_id, "name": name, "input": tool_input}))
    call = ToolCall(name=name, input=tool_input, id=call_id, node=node, tool=handler)
    error: BaseException | None = None
    try:
        if refused is not None:  # an error result for the model; the tool never runs
            raise refused
        if layers.tool:
            content: Any = tool_result_content(await _tool_layers(layers.tool, 0, run, call))
        else:
            content = tool_result_content(await _run_tool(run, call))
    except asyncio.CancelledError as exc:
        if _run_cancelled():
            tree.end_node(node, NodeStatus.CANCELLED)
            raise
        # The tool's own cancellation (say, of something it awaited): a tool error.
        content, error = tool_error_text(exc), exc
    except BaseException as exc:  # the tool or a middleware around it; SystemExit too
        if is_interrupt(exc):  # a real Ctrl-C (not a tool's own KeyboardInterrupt): stop
            tree.end_node(node, NodeStatus.CANCELLED)
            raise
        content = tool_error_text(exc)
        error = ToolError(content) if isinstance(exc, ToolFailed) else exc
    finally:
        reset_frame(token)
    is_error = error is not None
    node.payload["is_error"] = is_error
    tree.end_node(
        node,
        NodeStatus.FAILED if is_error else NodeStatus.COMPLETED,
        error=error,
        output=content,
        record_output=True,
    )
    result = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        result["is_error"] = True
    run.emit(
        StreamEvent(
            "tool_result",
            tool_result={
                "tool_use_id": call_id,
                "name": name,
                "content": content,
                "is_error": is_error,
            },
        )
    )
    return result


def _run_cancelled() -> bool:
    """True when the task running the prompt is being cancelled (not just a tool's await)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


async def _tool_layers(chain: tuple[Layer, ...], i: int, run: PromptRun, call: ToolCall) -> Any:
    if i == len(chain):
        return await _run_tool(run, call)
    layer = chain[i]

    async def call_next(changed: ToolCall) -> Any:
        return await _tool_layers(chain, i + 1, run, changed)

    return await layer.middleware.wrap_tool_call(run, call, call_next)


async def _run_tool(run: PromptRun, call: ToolCall) -> Any:
    handler = call.tool if call.tool is not None else run.tools.get(call.name)
    if handler is None:
        raise ToolError(
            f"no local handler for tool {call.name!r} (available: {sorted(run.tools.handlers)})"
        )
    workflow = run.workflow
    once = getattr(workflow.engine, "once", None) if workflow is not None else None
    if once is None:
        return await handler.invoke(call.input, _tool_context(run, call, call.id))

    async def invoke(key: str | None) -> Any:
        context = _tool_context(run, call, key or call.id)
        # As the model will see it: what the checkpoint holds is plain content.
        return tool_result_content(await handler.invoke(call.input, context))

    # A durable engine checkpoints the call; a recovery that reaches the same call
    # (this tool, this input, at this place in the run) gets its result back.
    digest = hashlib.sha256(canonical_bytes(call.input)).hexdigest()[:12]
    name = f"tool {call.name} {digest}"
    checkpoint = getattr(handler, "checkpoint", True) is not False
    return await once(workflow, call.node, name, invoke, checkpoint=checkpoint)


def _tool_context(run: PromptRun, call: ToolCall, key: str) -> ToolContext:
    return ToolContext(
        agent=run.agent.name,
        tool_use_id=call.id,
        env=run.settings.get("env") or {},
        node_id=call.node.id,
        deps=run.deps,
        idempotency_key=key,
    )
