"""The ``timing`` agent middleware: where a prompt spent its time."""

from __future__ import annotations

import time
from typing import Any

from groundswell import (
    Middleware,
    ModelNext,
    PromptNext,
    PromptResult,
    PromptRun,
    ToolCall,
    ToolNext,
)

__all__ = ["Timing"]


class Timing(Middleware):
    """Records a ``timing`` event on each prompt node: milliseconds in the model and in tools.

    Opt in with ``Agent(middleware=["timing"])``. Order 500 is above the prompt
    node's (200), so ``wrap_prompt`` runs once per attempt, inside its node.
    """

    name = "timing"
    order = 500

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        spent = run.scratch["timing"] = {"model": 0.0, "tools": 0.0}
        start = time.perf_counter()
        try:
            return await call_next()
        finally:
            run.tree.add_event(
                run.node,
                "timing",
                total_ms=round((time.perf_counter() - start) * 1000, 1),
                model_ms=round(spent["model"] * 1000, 1),
                tools_ms=round(spent["tools"] * 1000, 1),
            )

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        start = time.perf_counter()
        try:
            return await call_next(request)
        finally:
            run.scratch["timing"]["model"] += time.perf_counter() - start

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        start = time.perf_counter()
        try:
            return await call_next(call)
        finally:
            # Tools of one turn run concurrently: this is the sum of their times.
            run.scratch["timing"]["tools"] += time.perf_counter() - start
