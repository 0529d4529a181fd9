"""`Agent`: a model, instructions and tools on ``anthropic.AsyncAnthropic``, with typed results.

Each ``agent.prompt()`` is a ``prompt`` node under whatever runs now (a new
tree's root outside any run); each model round trip is a ``model_call`` child,
each tool call a ``tool_call`` (or ``mcp_call``) child. The loop itself is in
`groundswell.agent.loop`; everything around it is middleware.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar, overload

from ..budget.token_budget import TokenBudget, check_budget, check_retention
from ..cache.backends import Cache, ToolCachePolicy
from ..errors import ConfigurationError
from ..hooks.runner import check_hooks
from ..mcp.bridge import check_mcps
from ..mcp.client import Elicitation, check_elicitation_handler
from ..mcp.config import register_mcp_secrets
from ..model.settings_check import check_flag, check_settings
from ..plugins.manager import get_plugin_manager
from ..prompt.context_providers import check_context
from ..prompt.prompt import NO_OVERRIDES, Prompt, PromptOverrides
from ..reflection import ReflectionConfig, ReflectionEntry, note_agent, resolve_config
from ..runtime.blocking import run_blocking
from ..runtime.context import RunWatch, current_frame, current_watch, new_run_tree
from ..scrubbing.serialize import register_secret
from ..skills.local import check_skills
from ..tools.tool import DepsT, check_context_ttl, check_timeout, check_tools
from ..waits.approval import Approval, Policy, check_approval
from .checks import NO_LOOP, check_options, deps_check, deps_error, make_client, overrides_error
from .config import check_cache_choice, check_tool_cache, model_or_default, request_options
from .loop import run_prompt
from .middleware import (
    Layer,
    Layers,
    default_layers,
    layers_for,
    merge,
    plain_candidates,
    resolve,
)
from .overrides import Forced, check, check_client, forced_for, override_agent
from .overrides import merge as merge_overrides
from .run import PromptResult, PromptRun, StreamEvent, check_history

if TYPE_CHECKING:  # the SDK is imported when a client is made (`make_client`), not here
    import anthropic

__all__ = ["DEFAULT_MODEL", "Agent", "create_agent"]

T = TypeVar("T")
#: ``message_history``: Messages API message dicts, oldest first (e.g. ``result.messages``).
History: TypeAlias = Sequence[Mapping[str, Any]]
# claude-sonnet-4-5 reaches end-of-life on 2026-11-30 (the SDK warns); 4-6 is current.
DEFAULT_MODEL = os.environ.get("GROUNDSWELL_MODEL", "claude-sonnet-4-6")


class Agent(Generic[DepsT]):
    """An LLM agent: a model, instructions, tools and hooks, with typed results.

    ``name`` names its prompt nodes in a run's tree (and its answers in the
    cache); without one it is ``"agent"``, and a run in which two unnamed
    agents prompt logs a warning (``groundswell.agent``, once per workflow), since nothing in the
    tree then tells their nodes apart: name every agent a workflow uses.
    Every field of the installed SDK's ``MessageCreateParams`` (and its beta
    twin) is accepted by its API name and checked against the SDK's type
    (``model``, ``system``, ``tools``, ``tool_choice``, ``max_tokens``,
    ``thinking``, ``cache_control``, ``output_config``, ``service_tier``,
    ``inference_geo``, ``context_management``, ``speed``... and any field a
    newer SDK adds), with ``temperature``, ``top_p``, ``top_k``, ``effort``
    (``output_config.effort``), ``extra_headers`` and ``extra_body``; plus
    ``mcps``, ``skills``, ``hooks``, ``env`` and ``max_turns``.
    ``prompt_cache`` sets prompt caching (``False``, ``True``/``"5m"``,
    ``"1h"`` or breakpoint places, see docs/caching.md).
    ``continue_on_max_tokens=True`` asks for another turn when the reply is
    cut off inside a tool call; ``max_retry_wait`` (seconds, default 60) caps
    how long an API's ``Retry-After`` is honoured. ``batch=True`` sends the
    model calls through the Message Batches API, at half the price: calls that
    wait at the same time go in one batch (docs/batches.md); ``None`` leaves it
    to the workflow (``@workflow(batch=...)``). ``tool_timeout`` (seconds) bounds every tool call that sets
    no ``Tool(timeout=...)`` of its own. ``approval`` makes tool calls wait
    for a person's approval besides those of tools built with
    ``requires_approval=True``: ``True`` (every call), a function given the
    `ToolCall` returning ``True`` when that call needs it, or an `Approval`
    (which also sets a deadline). ``on_elicitation`` answers the
    requests for input of the agent's local MCP servers (a function taking an
    `Elicitation`; a server's own ``on_elicitation`` wins; without one a person
    answers them through a ``question`` wait, `groundswell.waits`).
    ``token_budget`` (a `TokenBudget`) caps
    the input of every model turn. ``context_ttl`` (model turns) replaces
    each tool result in the conversation with a short note once the model has
    seen it that many times (a `Tool`'s own ``context_ttl`` wins);
    ``context_retention="output_only"`` sends only the user turns and the
    model's answers of a ``message_history``. ``cache`` (a backend name or a `Cache`)
    or ``enable_cache=True`` (the default backend) caches whole answers;
    ``tool_cache`` maps tool names to a `ToolCachePolicy`.
    ``enable_reflection=True`` (or ``reflection=ReflectionConfig(...)``) feeds
    a failed prompt's error back to the model and lets it answer again.
    ``context`` lists context providers (by name, e.g. ``["history"]``, or
    callables taking a `ContextRequest`) whose text is added to the system
    prompt of every prompt. ``middleware`` adds agent middleware (registered
    names or `Middleware` instances) to the default ones.
    ``deps_type`` (a class) is the type of the ``deps`` object every call must
    pass (``agent.prompt(p, deps=shop)``), which tools get as ``ctx.deps``
    (``ToolContext[Shop]``); a call with deps of another type is refused.
    Options that plugins declare (``register_agent_options``) are accepted as
    keywords too, e.g. ``history=True`` (session history) or ``spawnable=``
    and ``prompt_templates=`` (introspection); they are in ``agent.options``.
    ``client`` is an ``anthropic.AsyncAnthropic`` (one is made from
    ``ANTHROPIC_API_KEY`` when omitted).
    """

    def __init__(
        self,
        *,
        name: str = "agent",
        model: str | None = None,
        system: str | Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Any] | None = None,
        mcps: Sequence[Any] | None = None,
        skills: Sequence[Any] | None = None,
        hooks: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        temperature: float | None = None,
        max_tokens: int = 4096,
        tool_choice: Mapping[str, Any] | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        stop_sequences: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        thinking: Mapping[str, Any] | None = None,
        betas: Sequence[str] | None = None,
        container: Any = None,
        service_tier: str | None = None,
        cache_control: Mapping[str, Any] | None = None,
        output_config: Mapping[str, Any] | None = None,
        effort: str | None = None,
        inference_geo: str | None = None,
        context_management: Mapping[str, Any] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        prompt_cache: bool | str | Sequence[str] | None = None,
        continue_on_max_tokens: bool = False,
        max_retry_wait: float = 60.0,
        batch: bool | None = None,
        max_turns: int = 20,
        tool_timeout: float | None = None,
        approval: bool | Policy | Approval | None = None,
        on_elicitation: Callable[[Elicitation], Any] | None = None,
        token_budget: TokenBudget | None = None,
        context_ttl: int | None = None,
        context_retention: str | None = None,
        cache: str | Cache | None = None,
        enable_cache: bool = False,
        tool_cache: Mapping[str, ToolCachePolicy] | None = None,
        enable_reflection: bool = False,
        reflection: ReflectionConfig | None = None,
        context: Sequence[Any] | None = None,
        middleware: Sequence[Any] | None = None,
        deps_type: type[DepsT] | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"Agent name must be a non-empty string, got {name!r}")
        owner = f"agent {name!r}"
        self.name = name
        model = model_or_default(model, DEFAULT_MODEL, owner)
        # The request fields by their API names, checked as the SDK's types take them.
        request_fields = {
            "model": model,
            "system": system,
            "tool_choice": tool_choice,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "stop_sequences": stop_sequences,
            "metadata": metadata,
            "thinking": thinking,
            "betas": betas,
            "container": container,
            "service_tier": service_tier,
            "cache_control": cache_control,
            "output_config": output_config,
            "effort": effort,
            "inference_geo": inference_geo,
            "context_management": context_management,
            "extra_headers": extra_headers,
            "extra_body": extra_body,
            # The SDK's other request fields, given by name (a newer SDK's too).
            **request_options(options),
        }
        own_settings = {
            "prompt_cache": prompt_cache,
            "continue_on_max_tokens": continue_on_max_tokens,
            "max_retry_wait": max_retry_wait,
            "batch": batch,
        }
        check_settings(
            owner, {**request_fields, **own_settings, "env": env, "max_turns": max_turns}
        )
        if max_tokens is None:
            raise ConfigurationError(f"{owner}: max_tokens must be an int >= 0, got None")
        if max_turns is None:
            raise ConfigurationError(f"{owner}: max_turns must be a positive int, got None")
        cache = check_cache_choice(cache, enable_cache, owner)
        check_flag("enable_reflection", enable_reflection, owner)
        policies = check_tool_cache(tool_cache, owner)
        if reflection is not None and not isinstance(reflection, ReflectionConfig):
            raise ConfigurationError(
                f"Agent reflection must be a ReflectionConfig, got {type(reflection).__name__}"
            )
        check_client(client, owner)
        check_elicitation_handler(on_elicitation, owner)
        #: The settings every prompt starts from, by API name (and Groundswell's own).
        #: Read-only: the agent works out once which middleware its settings need
        #: (`Middleware.per_agent`); change them per call (``PromptOverrides``) or
        #: for a scope (``agent.override(...)``).
        self.config: dict[str, Any] = {
            **request_fields,
            **own_settings,
            "tools": check_tools(tools, owner),
            "mcps": check_mcps(mcps, env or {}, owner),
            "skills": check_skills(skills, owner),
            "hooks": check_hooks(hooks, owner),
            "env": dict(env or {}),
            "max_turns": max_turns,
            "tool_timeout": check_timeout(tool_timeout, owner),
            "approval": check_approval(approval, owner),
            "on_elicitation": on_elicitation,
            "token_budget": check_budget(token_budget, owner),
            "context_ttl": check_context_ttl(context_ttl, owner),
            "context_retention": check_retention(context_retention, owner),
            # True means "the default backend" (the workflow's, else GROUNDSWELL_CACHE, else lru).
            "cache": cache,
            "tool_cache": policies,
            # As given: a prompt-level enable_reflection=True uses these settings
            # even when the agent itself does not reflect.
            "reflection": reflection,
            "context": check_context(context, owner),
        }
        if token_budget is not None and token_budget.input_limit(max_tokens) <= 0:
            raise token_budget.no_room(max_tokens, owner)
        for value in self.config["env"].values():
            register_secret(str(value))
        register_mcp_secrets(self.config["mcps"])
        #: The agent's own reflection settings, or ``None`` when it does not reflect.
        self.reflection: ReflectionConfig | None = resolve_config(
            reflection if reflection is not None else enable_reflection, owner=owner
        )
        #: Reflections on this agent's prompts, oldest first (the last 1,000).
        self.reflection_history: list[ReflectionEntry] = []
        #: Options declared by plugins (``register_agent_options``), by name: the
        #: value given, else the option's default.
        self.options: dict[str, Any] = check_options(options, owner, _OWN_PARAMETERS)
        self._middleware: tuple[Layer, ...] = resolve(middleware, owner)
        #: The type of the ``deps`` every call passes (``None``: any deps, or none).
        self.deps_type = deps_type
        self._deps_ok = deps_check(deps_type, owner) if deps_type is not None else None
        # (the default layers it was merged with, the merged and sorted candidates)
        self._layers: tuple[tuple[Layer, ...], tuple[Layer, ...]] | None = None
        self._plain: tuple[tuple[Layer, ...], tuple[Layer, ...]] | None = None
        self._client = client
        # Clients the agent made itself, one per event loop: an SDK client's
        # connection pool belongs to the loop it first ran in, so run_sync twice
        # (or run_sync, then asyncio.run) would otherwise share a dead pool.
        self._made: weakref.WeakKeyDictionary[Any, anthropic.AsyncAnthropic] = (
            weakref.WeakKeyDictionary()
        )
        api_key = getattr(client, "api_key", None)
        if isinstance(api_key, str):
            register_secret(api_key)

    def __getattr__(self, name: str) -> Any:
        # Plugin-declared options read as attributes too (agent.spawnable, agent.history).
        if name.startswith("_"):
            raise AttributeError(name)
        options = self.__dict__.get("options", {})
        if name in options:
            return options[name]
        declared = get_plugin_manager().agent_options()  # a plugin registered since
        if name in declared:
            return declared[name].default
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def tool_cache(self) -> dict[str, ToolCachePolicy]:
        """Tool-result cache policies by tool name (``Agent(tool_cache=...)``)."""
        policies: dict[str, ToolCachePolicy] = self.config["tool_cache"]
        return policies

    @property
    def context(self) -> list[Any]:
        """Context providers whose text joins the system prompt of each prompt."""
        providers: list[Any] = self.config["context"]
        return providers

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client prompts use now.

        An override's client (`override`, ``groundswell.testing.use_fake``)
        when one is in force; else the one given; else one created from the
        environment, once per event loop (a client's connections belong to
        the loop they were opened in).
        """
        forced = forced_for(self)
        if forced is not None and forced.client is not None:
            return forced.client
        if self._client is not None:
            return self._client
        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            loop = NO_LOOP
        made = self._made.get(loop)
        if made is None:
            made = make_client(self.name)
            self._made[loop] = made
        return made

    def override(
        self, *, client: anthropic.AsyncAnthropic | None = None, **settings: Any
    ) -> contextlib.AbstractContextManager[Agent]:
        """Swap this agent's client and settings inside a ``with`` block (for tests).

        ``client`` replaces the agent's client; ``settings`` are any field
        `PromptOverrides` takes (``model``, ``system``, ``tools``,
        ``max_tokens``, ``temperature``, ``cache``...), and win over the
        agent's, the prompt's and a call's own overrides. The override
        follows the current task (and the tasks it starts), so concurrent
        tests never see each other's; blocks nest, the innermost winning::

            with agent.override(client=FakeAnthropicAPI([text("hi")]).client()):
                assert await agent.prompt("Hello") == "hi"
        """
        return override_agent(self, check(f"agent {self.name!r}: override", client, settings))

    # -- public API -----------------------------------------------------------------

    @overload
    async def prompt(
        self,
        prompt: Prompt[T],
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> T: ...
    @overload
    async def prompt(
        self,
        prompt: str,
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> str: ...

    async def prompt(
        self,
        prompt: Prompt[Any] | str,
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> Any:
        """Run the prompt to completion and return its validated output.

        Returns a ``response_format`` instance, or the text when there is none.
        ``message_history`` (an earlier result's ``messages``) is the conversation
        this prompt continues: it is sent before the new user turn. ``deps`` is
        the object tools get as ``ctx.deps``.
        Raises `ModelAPIError`, `ResponseValidationError`,
        `MaxTurnsExceeded`, `ConfigurationError`.
        """
        if self.__class__.run is _AGENT_RUN and "run" not in self.__dict__:
            # `Agent.run` itself: its work without its coroutine, one fewer per prompt.
            result = await self._begin(prompt, overrides, message_history, deps)
        else:  # through `run`, so a subclass (or a patch) that overrides it sees every prompt
            result = await self.run(prompt, overrides, message_history=message_history, deps=deps)
        return result.output

    @overload
    async def run(
        self,
        prompt: Prompt[T],
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> PromptResult[T]: ...
    @overload
    async def run(
        self,
        prompt: str,
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> PromptResult[str]: ...

    async def run(
        self,
        prompt: Prompt[Any] | str,
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> PromptResult[Any]:
        """Like `prompt`, but returns a `PromptResult` with the tree, usage and messages."""
        return await self._begin(prompt, overrides, message_history, deps)

    def _begin(
        self, prompt: Prompt[Any] | str, overrides: Any, history: Any, deps: Any
    ) -> Awaitable[PromptResult[Any]]:
        """`run`'s work: the call's arguments checked, and what awaiting runs the prompt."""
        checked = self._check_call(history, deps)
        return self._execute(_as_prompt(prompt), self._overrides(overrides), None, checked, deps)

    @overload
    def run_sync(
        self,
        prompt: Prompt[T],
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> PromptResult[T]: ...
    @overload
    def run_sync(
        self,
        prompt: str,
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> PromptResult[str]: ...

    def run_sync(
        self,
        prompt: Prompt[Any] | str,
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> PromptResult[Any]:
        """`run` for code that is not async (scripts, notebook cells without ``await``).

        Blocks until the prompt ends and returns its `PromptResult` (``.output``
        is what `prompt` returns). Each thread runs these on one event loop of its
        own, reused by its later calls. Inside a running event loop it raises
        `ConfigurationError`: use ``await agent.run(...)`` there.
        """
        return run_blocking(
            lambda: self.run(prompt, overrides, message_history=message_history, deps=deps),
            caller=f"agent {self.name!r}: run_sync()",
            instead="await agent.run(...)",
        )

    async def stream(
        self,
        prompt: Prompt[Any] | str,
        overrides: PromptOverrides | None = None,
        *,
        message_history: History | None = None,
        deps: DepsT | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Run the prompt, yielding deltas and tool activity; the last event is ``result``.

        Leaving early (a ``break``, with or without ``contextlib.aclosing``, or an
        exception in the ``async for`` body) cancels the prompt when the stream is
        closed: its node and its history session end ``cancelled``. The prompt only
        ends ``completed`` while its consumer is still reading.
        """
        history = self._check_call(message_history, deps)
        checked = self._overrides(overrides)
        queue: asyncio.Queue[StreamEvent | BaseException | None] = asyncio.Queue()
        # Set while the consumer waits for an event with nothing queued.
        asking = asyncio.Event()

        async def caught_up() -> None:
            # Until the consumer has taken every event sent and asks for more; one that
            # left never does, so its prompt waits here until the stream is closed.
            while not (asking.is_set() and queue.empty()):
                if asking.is_set():
                    await asyncio.sleep(0)  # the consumer is due to take what is queued
                else:
                    await asking.wait()

        async def produce() -> None:
            try:
                result = await self._execute(
                    _as_prompt(prompt), checked, queue.put_nowait, history, deps, caught_up
                )
                queue.put_nowait(StreamEvent("result", result=result.output))
            except BaseException as exc:
                queue.put_nowait(exc)
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(produce())
        # Held here too: a stream dropped in a reference cycle is garbage together with
        # everything its prompt waits on, and its task must be cancelled, not destroyed.
        _STREAMING.add(task)
        task.add_done_callback(_STREAMING.discard)
        try:
            while True:
                if queue.empty():
                    asking.set()
                item = await queue.get()
                asking.clear()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # Closed before the end (aclose(), the generator's finalizer, the loop's
            # shutdown_asyncgens, or the consumer's own cancellation): the prompt is
            # cancelled, never left to finish as if its result had been taken.
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def reflect(
        self,
        prompt: Prompt[T] | str,
        overrides: PromptOverrides | None = None,
        *,
        deps: DepsT | None = None,
    ) -> T:
        """Answer, then critique and revise that answer; returns the revised output.

        Both passes are prompt nodes under one ``reflection`` node (and get ``deps``).
        """
        from .critique import answer_then_revise

        self._overrides(overrides)  # before the reflection node starts
        revised = await answer_then_revise(self, _as_prompt(prompt), overrides, deps)
        return revised  # type: ignore[no-any-return]

    # -- the pipeline -----------------------------------------------------------------

    def settings_for(self, prompt: Prompt[Any], overrides: PromptOverrides) -> dict[str, Any]:
        """The merged settings of one call: ``PromptOverrides`` > ``Prompt`` > ``Agent``."""
        settings = dict(self.config)
        if prompt.wins:  # the fields the prompt sets (`prompt.WINNING_FIELDS`), found once
            settings.update(prompt.wins)
            _effort_of(settings, prompt.wins)
        if overrides is not NO_OVERRIDES:
            given = overrides.set_fields()
            given.pop("middleware", None)
            settings.update(given)
            _effort_of(settings, given.items())
            for value in (given.get("env") or {}).values():
                register_secret(str(value))
            register_mcp_secrets(given.get("mcps") or [])
        return settings

    def _check_call(self, history: Any, deps: Any) -> tuple[dict[str, Any], ...]:
        """A call's ``message_history`` as checked messages; refuses deps of the wrong type."""
        ok = self._deps_ok
        if ok is not None and not ok(deps):
            raise deps_error(self.name, self.deps_type, deps)
        if history is None:
            return ()
        return check_history(history, f"agent {self.name!r}")

    def _overrides(self, overrides: Any) -> PromptOverrides:
        """A call's ``overrides`` argument, checked (a common slip passes history there)."""
        if overrides is None:
            return NO_OVERRIDES
        if isinstance(overrides, PromptOverrides):
            return overrides
        raise overrides_error(self.name, overrides)

    def _candidates(self, overrides: PromptOverrides) -> tuple[Layer, ...]:
        defaults = default_layers()
        known = self._layers
        if known is None or known[0] is not defaults:
            known = self._layers = (defaults, merge(self._middleware, defaults))
        if overrides is NO_OVERRIDES or overrides.middleware is None:
            return known[1]
        return merge(resolve(overrides.middleware, "PromptOverrides"), known[1])

    def _plain_candidates(self, run: PromptRun) -> tuple[Layer, ...]:
        """`_candidates` of a call that sets nothing of its own (its settings are the
        agent's): less the `Middleware.per_agent` ones idle for this agent, found once."""
        # The agent's own middleware is fixed, so the default layers alone can change
        # its candidates (a plugin registered since).
        defaults = default_layers()
        plain = self._plain
        if plain is None or plain[0] is not defaults:
            candidates = self._candidates(NO_OVERRIDES)
            plain = self._plain = (defaults, plain_candidates(run, candidates))
        return plain[1]

    def _execute(
        self,
        prompt: Prompt[Any],
        overrides: PromptOverrides,
        emit: Callable[[StreamEvent], None] | None,
        history: tuple[dict[str, Any], ...] = (),
        deps: Any = None,
        caught_up: Callable[[], Awaitable[None]] | None = None,
    ) -> Awaitable[PromptResult[Any]]:
        """What awaiting runs the prompt: without history, the pipeline's own coroutine.

        ``caught_up`` (a stream's) is awaited before the prompt ends ``completed``.
        """
        forced: Forced | None = forced_for(self)
        if forced is not None and forced.settings is not None:
            overrides = merge_overrides(overrides, forced.settings)
        settings = self.settings_for(prompt, overrides)
        client = forced.client if forced is not None and forced.client is not None else None
        if client is None:  # not `self.client` first: it would look the override up again
            client = self._client if self._client is not None else self.client
        outer = current_frame()
        workflow = None
        plain = overrides is NO_OVERRIDES and not prompt.wins
        if outer is not None and outer.workflow is not None:
            workflow = outer.workflow
            note_agent(outer.tree, self)  # step- and workflow-level reflection ask its model
            if workflow.batch is True and settings.get("batch") is None:
                # The workflow's default, for a prompt that says nothing: a setting of its
                # own, so the batch layer is chosen like any other (and once per agent).
                settings = {**settings, "batch": True}
                plain = False
        watch = current_watch() if emit is None else None
        if watch is not None:  # a relayed run (AG-UI): every prompt streams to the watch
            emit = _watched_emit(watch, lambda: run, settings)
        run = PromptRun(
            agent=self,
            prompt=prompt,
            overrides=overrides,
            settings=settings,
            tree=outer.tree if outer else new_run_tree(),
            client=client,
            workflow=workflow,
            emit=emit,
            history=history,
            deps=deps,
            caught_up=caught_up,
        )
        if not history:
            if plain:
                return run_prompt(run, layers_for(run, self._plain_candidates(run)))
            return run_prompt(run, layers_for(run, self._candidates(overrides)))
        # How many, never what: the messages themselves stay out of the tree (set
        # before the layers are chosen: a middleware's active() may read it).
        run.payload["message_history"] = len(history)
        return _with_history(run, layers_for(run, self._candidates(overrides)))

    async def __aenter__(self) -> Agent[DepsT]:
        """``async with agent:`` keeps its local MCP servers running for the prompts inside.

        Each server starts on the first prompt that needs it and stops when the
        block ends (`groundswell.mcp.session`); prompts outside start their own.
        """
        from ..mcp.session import enter_session

        enter_session(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        from ..mcp.session import exit_session

        await exit_session(self)

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.config['model']!r})"


async def _with_history(run: PromptRun, layers: Layers) -> PromptResult[Any]:
    result = await run_prompt(run, layers)
    # The conversation as last sent (a budget may have dropped some of it), then this prompt's.
    result.messages = [*run.history, *result.messages]
    return result


_AGENT_RUN = Agent.run
#: The tasks of the prompts ``agent.stream()`` runs, until they end.
_STREAMING: set[asyncio.Task[None]] = set()
_OWN_PARAMETERS = frozenset(inspect.signature(Agent.__init__).parameters) - {"self", "options"}


def _watched_emit(
    watch: RunWatch, run: Callable[[], PromptRun], settings: dict[str, Any]
) -> Callable[[StreamEvent], None] | None:
    """Where a prompt no ``agent.stream()`` reads sends its stream events under ``watch``
    (an AG-UI run relays every prompt's deltas): the watch, or nowhere."""
    if watch.on_stream is None:
        return None
    if settings.get("batch"):  # the Batches API does not stream: the answer comes whole
        return None
    on_stream = watch.on_stream
    return lambda event: on_stream(run(), event)


def _effort_of(settings: dict[str, Any], given: Any) -> None:
    """An ``output_config.effort`` set at a higher level wins over a lower level's ``effort``
    (the shorthand), as every setting does; the same level's ``effort`` wins over it."""
    fields = dict(given)
    config = fields.get("output_config")
    if isinstance(config, Mapping) and "effort" in config and "effort" not in fields:
        settings["effort"] = None


def _as_prompt(prompt: Prompt[Any] | str) -> Prompt[Any]:
    if type(prompt) is str:  # the usual call, agent.prompt("..."), first
        return Prompt.of_text(prompt)
    if isinstance(prompt, Prompt):
        return prompt
    if isinstance(prompt, str):
        return Prompt(user=prompt)
    raise ConfigurationError(f"expected a Prompt or a string, got {type(prompt).__name__}")


def create_agent(**settings: Any) -> Agent:
    """Build an `Agent` at run time (inside a tool or step it mounts where it runs)."""
    return Agent(**settings)
