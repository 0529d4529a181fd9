"""The middleware classes of groundswell-mw-demo (imported only when a prompt needs one)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from groundswell import Middleware, PromptRun, ResponseValidationError, ToolCall
from groundswell.agent import ModelNext, PromptNext, PromptResult, ToolNext

HOUSE_STYLE = "House style: answer in one sentence."


class Stamp(Middleware):
    """Adds the house style to the system prompt and a user id to every request."""

    def __init__(self) -> None:
        # Read once, when the plugin's factory makes the middleware.
        self.user = os.environ.get("MWDEMO_USER", "mwdemo")

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        system = request.get("system")
        return {
            **request,
            "system": f"{system}\n\n{HOUSE_STYLE}" if system else HOUSE_STYLE,
            "metadata": {"user_id": self.user},
        }


class Canned(Middleware):
    """Answers every model turn itself, with an SDK Message built by hand."""

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        from anthropic.types import Message, TextBlock, Usage

        asked = request["messages"][-1]["content"]
        return Message(
            id="msg_canned_0001",
            type="message",
            role="assistant",
            model=request["model"],
            content=[TextBlock(type="text", text=f"canned answer to: {asked}")],
            stop_reason="end_turn",
            stop_sequence=None,
            usage=Usage(input_tokens=0, output_tokens=0),
        )


class ToolRewrite(Middleware):
    """Normalizes the ``city`` a tool is given and marks the result as checked."""

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        if "city" in call.input:
            call = dataclasses.replace(
                call, input={**call.input, "city": str(call.input["city"]).strip().title()}
            )
        result = await call_next(call)
        return f"{result} (checked by mwdemo)"


class ToolGuard(Middleware):
    """Refuses every tool whose name starts with ``danger_``; the tool never runs."""

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        if call.name.startswith("danger_"):
            run.tree.add_event(call.node, "mwdemo.refused", tool=call.name)
            return f"refused: mwdemo policy forbids {call.name}"
        return await call_next(call)


class RetryOnce(Middleware):
    """Outside the prompt node: a reply that fails validation gets one more attempt."""

    retries = True  # outside any run, the kernel gives both attempts one node to share

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        run.attempt = 1
        try:
            return await call_next()
        except ResponseValidationError as exc:
            run.attempt = 2
            run.retry_note = f"Your last reply was unusable ({exc.errors[0]['msg']}); reply again."
            return await call_next()


class Shout(Middleware):
    """Upper-cases a text answer after the model is done."""

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        result = await call_next()
        if isinstance(result.output, str):
            result.output = result.output.upper()
        return result


class _Audit(Middleware):
    """Records each seam it passes, in and out, as ``trace`` events on the prompt node."""

    def _mark(self, run: PromptRun, at: str) -> None:
        run.tree.add_event(run.node, "trace", layer=self.label, at=at)

    label = ""

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        self._mark(run, "prompt>")
        result = await call_next()
        self._mark(run, "prompt<")
        return result

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        self._mark(run, "before_model")
        return request

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        self._mark(run, "model>")
        message = await call_next(request)
        self._mark(run, "model<")
        return message

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        self._mark(run, "tool>")
        result = await call_next(call)
        self._mark(run, "tool<")
        return result


class AuditA(_Audit):
    label = "audit_a"


class AuditB(_Audit):
    label = "audit_b"


class Licensed(Middleware):
    """Sends the licence header with every request (made only when a licence is set)."""

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        headers = dict(request.get("extra_headers") or {})
        headers["x-mwdemo-licensed"] = "yes"
        return {**request, "extra_headers": headers}


class RetryUndeclared(RetryOnce):
    """The same, without saying that it retries."""

    retries = False
