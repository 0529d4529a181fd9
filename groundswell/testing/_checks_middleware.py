"""The agent middleware checker: each seam it overrides, probed on real prompts."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..agent import Agent, Middleware, PromptResult, PromptRun, ToolCall
from ..cache.guard import shown
from ..errors import GroundswellError
from ..hookspecs import AgentMiddleware
from ..plugins.manager import get_plugin_manager
from ._checks import Findings, discard, error, object_to_check, subject, tool_then_answer, unique
from ._fake import FakeAnthropicAPI

__all__ = ["check_middleware"]


_SEAMS = ("wrap_prompt", "before_model", "wrap_model_call", "wrap_tool_call")


class _ProbeBase(Middleware):
    """Wraps the middleware under check with its own name, order and seams."""

    def __init__(self, target: Middleware, findings: Findings) -> None:
        self.target, self.findings = target, findings
        self.seen: set[str] = set()
        self.active_said: list[bool] = []

    def active(self, run: PromptRun) -> bool:
        try:
            said: Any = self.target.active(run)
        except Exception as exc:
            self.findings.add(f"active(run) raised {error(exc)}; it must return True or False")
            return False
        if not isinstance(said, bool):
            self.findings.add(f"active(run) returned {shown(said)}; it must return True or False")
        self.active_said.append(bool(said))
        return bool(said)

    async def seam(
        self, seam: str, made: Any, passed: Callable[[], Any], fallback: Callable[[], Any]
    ) -> Any:
        """What the target's ``seam`` returned, awaited; on a problem: noted, and passed through."""
        self.seen.add(seam)
        if not inspect.isawaitable(made):
            self.findings.add(f"{seam} is not async; define it as async def {seam}(...)")
            return await fallback()
        try:
            result = await made
        except Exception as exc:
            if exc is passed() or isinstance(exc, GroundswellError):
                raise  # from deeper layers, or deliberate: the kernel passes those on
            self.findings.add(
                f"{seam} raised {error(exc)} on a plain prompt (the kernel turns that into a "
                "PluginError naming the middleware)"
            )
            return await fallback()
        if inspect.isawaitable(result):
            discard(result)
            self.findings.add(
                f"{seam} returned an awaitable it never awaited; write `return await "
                f"call_next(...)`"
            )
            return await fallback()
        return result


async def _probe_wrap_prompt(
    self: _ProbeBase, run: PromptRun, call_next: Callable[[], Awaitable[PromptResult[Any]]]
) -> PromptResult[Any]:
    got: list[PromptResult[Any]] = []
    failed: list[BaseException] = []

    async def counted() -> PromptResult[Any]:
        try:
            got.append(await call_next())
        except BaseException as exc:
            failed.append(exc)
            raise
        return got[-1]

    async def fallback() -> PromptResult[Any]:
        return got[-1] if got else await call_next()

    made = self.target.wrap_prompt(run, counted)
    result = await self.seam("wrap_prompt", made, lambda: failed[-1] if failed else None, fallback)
    if not got and not failed:
        self.findings.add(
            "wrap_prompt returned without calling call_next(), so the agent never ran: "
            "`return await call_next()` (answer alone only when you really have the answer)"
        )
    if not isinstance(result, PromptResult):
        self.findings.add(
            f"wrap_prompt returned {shown(result)}; it must return a PromptResult (what "
            "`await call_next()` returned, or one made with dataclasses.replace)"
        )
        return await fallback()
    return result


async def _probe_before_model(
    self: _ProbeBase, run: PromptRun, request: dict[str, Any]
) -> dict[str, Any]:
    original = dict(request)

    async def fallback() -> dict[str, Any]:
        return original

    result = await self.seam(
        "before_model", self.target.before_model(run, request), lambda: None, fallback
    )
    if not isinstance(result, dict):
        self.findings.add(
            f"before_model returned {shown(result)}; it must return the request dict "
            "(the one it got, or a changed copy)"
        )
        return original
    lost = [k for k in ("model", "max_tokens", "messages") if k not in result]
    if lost:
        self.findings.add(f"before_model returned a request without {', '.join(lost)}")
        return original
    return result


async def _probe_wrap_model_call(
    self: _ProbeBase,
    run: PromptRun,
    request: dict[str, Any],
    call_next: Callable[[dict[str, Any]], Awaitable[Any]],
) -> Any:
    got: list[Any] = []
    failed: list[BaseException] = []

    async def counted(changed: Any) -> Any:
        if not isinstance(changed, dict):
            self.findings.add(
                f"wrap_model_call passed {shown(changed)} to call_next; pass the request dict"
            )
            changed = request
        try:
            got.append(await call_next(changed))
        except BaseException as exc:
            failed.append(exc)
            raise
        return got[-1]

    async def fallback() -> Any:
        return got[-1] if got else await call_next(request)

    made = self.target.wrap_model_call(run, request, counted)
    result = await self.seam(
        "wrap_model_call", made, lambda: failed[-1] if failed else None, fallback
    )
    if not hasattr(result, "content") or not hasattr(result, "stop_reason"):
        self.findings.add(
            f"wrap_model_call returned {shown(result)}; it must return the SDK's Message "
            "(what `await call_next(request)` returned)"
        )
        return await fallback()
    return result


async def _probe_wrap_tool_call(
    self: _ProbeBase,
    run: PromptRun,
    call: ToolCall,
    call_next: Callable[[ToolCall], Awaitable[Any]],
) -> Any:
    got: list[Any] = []
    failed: list[BaseException] = []

    async def counted(changed: ToolCall) -> Any:
        try:
            got.append(await call_next(changed))
        except BaseException as exc:
            failed.append(exc)
            raise
        return got[-1]

    async def fallback() -> Any:
        return got[-1] if got else await call_next(call)

    made = self.target.wrap_tool_call(run, call, counted)
    result = await self.seam(
        "wrap_tool_call", made, lambda: failed[-1] if failed else None, fallback
    )
    if not got and not failed:
        self.findings.add(
            "wrap_tool_call returned without calling call_next(call), so the tool never "
            "ran: `return await call_next(call)`"
        )
    return result


_PROBES: dict[str, Callable[..., Any]] = {
    "wrap_prompt": _probe_wrap_prompt,
    "before_model": _probe_before_model,
    "wrap_model_call": _probe_wrap_model_call,
    "wrap_tool_call": _probe_wrap_tool_call,
}


async def check_middleware(
    middleware: Any, *, agent_options: Mapping[str, Any] | None = None
) -> None:
    """Check agent middleware against the `groundswell.Middleware` seams; raise `ProtocolViolation`.

    ``middleware`` is an instance, its factory (a class or a function called
    with no arguments), its `AgentMiddleware` record (whose name and order
    win), or the name of a registered one. Real agents on `FakeAnthropicAPI`
    run prompts with one tool call through it, one at a time and then
    concurrently: each seam it overrides must be async, call through, and
    return what the seam must (a `PromptResult`, the request dict, the SDK's
    ``Message``, the tool's result), ``active`` must return a bool, and
    concurrent prompts must each get their own answer. ``agent_options`` are
    extra ``Agent(...)`` keywords, e.g. a plugin's option that makes it active.
    """
    findings = Findings(subject(middleware), "agent middleware")
    if isinstance(middleware, str):
        record = get_plugin_manager().lookup(AgentMiddleware, middleware)
        middleware = record
    made, record = object_to_check(
        middleware, AgentMiddleware, "middleware", "wrap_prompt", findings
    )
    if not isinstance(made, Middleware):
        raise findings.stop(
            f"it is {shown(made)}, not a groundswell.Middleware; subclass Middleware and "
            "override the seams you need"
        )
    kind = type(made)
    name = record.name if record else kind.name or kind.__name__
    findings.subject = f"middleware {name!r}"
    seams = [s for s in _SEAMS if getattr(kind, s) is not getattr(Middleware, s)]
    if not seams:
        findings.add(
            "it overrides none of the seams (wrap_prompt, before_model, "
            "wrap_model_call, wrap_tool_call), so it does nothing"
        )
    attrs: dict[str, Any] = {s: _PROBES[s] for s in seams}
    attrs["name"] = name
    attrs["order"] = record.order if record else kind.order
    attrs["retries"] = kind.retries
    probe = type(f"Checked{kind.__name__}", (_ProbeBase,), attrs)(made, findings)
    await _middleware_runs(probe, findings, dict(agent_options or {}))
    if probe.active_said and not any(probe.active_said):
        findings.add(
            "active(run) said False for every prompt, so nothing else was checked; pass "
            "agent_options= that make it take part"
        )
    else:
        for seam in seams:
            if seam not in probe.seen:
                findings.add(f"{seam} was never called on a prompt with a tool call")
    findings.raise_any()


async def _middleware_runs(probe: _ProbeBase, findings: Findings, options: dict[str, Any]) -> None:
    def lookup(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    fake = FakeAnthropicAPI(tool_then_answer("lookup"))
    agent = Agent(
        name=unique("middleware-check-"),
        client=fake.client(max_retries=0),
        tools=[lookup],
        middleware=[probe],
        **options,
    )
    cities = ("Oslo", "Rome", "Lima")
    try:
        alone = [await agent.prompt(f"Weather in {c}?") for c in cities]
        together = await asyncio.gather(*(agent.prompt(f"Weather in {c}?") for c in cities))
    except Exception as exc:
        raise findings.stop(f"a prompt through it failed: {error(exc)}") from exc
    if list(together) != alone:
        findings.add(
            "prompts run at once got answers other than the same prompts run one at a time; "
            "the instance serves every prompt at once, so keep per-prompt state in run.scratch"
        )
