"""The answer cache (``cache=`` / ``enable_cache=True``) and tool-result caching (``tool_cache=``).

Both pick their backend the same way (`groundswell.cache.backends.choose_cache`): the
agent's or call's ``cache``, else the enclosing workflow's, else the process
default. A cache hit answers the prompt without a model call; an answer is
stored only once its attempt succeeded as a whole (so an answer extraction
refuses is never cached), and an answer that reflection corrected is stored
under the first attempt's key as well, so the same call never fails first again.
"""

from __future__ import annotations

import json
from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun, ToolCall, ToolNext
from ..tools.tool import tool_result_content
from .backends import (
    Cache,
    ToolCachePolicy,
    answer_scope,
    choose_cache,
    request_cache_key,
    store_entry,
    through_cache,
)
from .tool_results import cached_tool_call

__all__ = ["AnswerCache", "ToolResultCache"]

_FIRST = "cache.first_key"
_POLICIES = "tool_cache.policies"


def _backend(run: PromptRun) -> Cache:
    workflow = run.workflow
    return choose_cache(run.settings.get("cache"), workflow.cache if workflow else None)


class AnswerCache(Middleware):
    """Answer a prompt from the cache when the same request was answered before."""

    name = "cache"
    order = 300
    per_agent = True  # active() reads the agent's settings only

    def active(self, run: PromptRun) -> bool:
        settings = run.settings
        # A call's enable_cache is the other spelling of its disable_cache; True also
        # turns the cache on (the default backend) for an agent built without one.
        enable = settings.get("enable_cache")
        if settings.get("disable_cache") or enable is False:
            return False
        return enable is True or settings.get("cache") not in (None, False)

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        cache = _backend(run)
        # A fake's answers are cached apart from every other client's (`answer_scope`).
        key = request_cache_key(run.agent.name, run.request(), answer_scope(run.client))
        first = run.scratch.setdefault(_FIRST, (cache, key))
        fmt = run.prompt.output_type
        # Cached: a structured answer as JSON-ready data (validated again when read), text as is.
        encode = fmt.dump if fmt is not None else _as_is
        decode = fmt.load if fmt is not None else str

        def entry(result: Any) -> dict[str, Any]:
            # The model's own final turn is kept too, so a hit's messages are the
            # ones the miss had and a conversation goes on from either alike.
            last = result.messages[-1] if result.messages else None
            reply = last.get("content") if last and last.get("role") == "assistant" else None
            return {"answer": encode(result.output), "reply": reply}

        def read(value: Any) -> Any:
            return decode(value["answer"]), value.get("reply")

        # A miss gives call_next's PromptResult, a hit read()'s (answer, reply).
        result: Any
        result, hit = await through_cache(
            cache,
            key,
            call_next,
            encode=entry,
            decode=read,
            tree=run.tree,
            node=run.node,
            defer=run.defer,
        )
        if first != (cache, key):
            tree, node = run.tree, run.node
            encoded = (
                entry(result) if not hit else {"answer": encode(result[0]), "reply": result[1]}
            )

            async def remember() -> None:
                await store_entry(first[0], first[1], encoded, tree, node)

            run.defer(remember)
        if not hit:
            produced: PromptResult[Any] = result
            return produced
        output, reply = result
        if not reply:  # an answer stored without the model's turn: write one
            text = output if fmt is None else json.dumps(encode(output), ensure_ascii=False)
            reply = [{"type": "text", "text": str(text)}]
        messages = [*run.messages, {"role": "assistant", "content": reply}]
        return PromptResult(output=output, tree=run.tree, node=run.node, messages=messages)


def _as_is(output: Any) -> Any:
    return output


class ToolResultCache(Middleware):
    """Cache the results of tools that have a `ToolCachePolicy`."""

    name = "tool_cache"
    order = 310
    per_agent = True  # active() reads the agent's settings only

    def active(self, run: PromptRun) -> bool:
        settings = run.settings
        if settings.get("tool_cache"):
            return True
        tools = settings.get("tools")
        if not tools:  # no generator at all for a prompt without tools
            return False
        # Toolsets (names) may hold tools with a policy; plain tools say so themselves.
        return any(
            isinstance(item, str) or getattr(item, "cache", None) is not None for item in tools
        )

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        own: dict[str, ToolCachePolicy] = run.settings.get("tool_cache") or {}
        policies: dict[str, ToolCachePolicy] = {}
        for name, handler in run.tools.handlers.items():
            policy = own.get(name) or getattr(handler, "cache", None)
            if isinstance(policy, ToolCachePolicy) and policy.enabled:
                policies[name] = policy
        if policies:
            # Resolved now: a missing backend is the caller's configuration error,
            # not something to tell the model in a tool result.
            run.scratch[_POLICIES] = (policies, _backend(run))
        else:
            run.scratch[_POLICIES] = None
        return await call_next()

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        chosen: tuple[dict[str, ToolCachePolicy], Cache] | None = run.scratch.get(_POLICIES)
        if chosen is None or call.name not in chosen[0]:
            return await call_next(call)
        policies, cache = chosen

        async def content() -> Any:
            # Stored as the content the model gets: JSON-safe whatever the tool returned.
            return tool_result_content(await call_next(call))

        return await cached_tool_call(
            policies[call.name], call.name, call.input, content, cache, run.tree, call.node
        )
