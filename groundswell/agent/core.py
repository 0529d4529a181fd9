"""`Agent`: a model, instructions and tools on ``anthropic.AsyncAnthropic``, with typed results.

Each ``agent.prompt()`` is a ``prompt`` node under whatever runs now (a new
tree's root outside any run); each model round trip is a ``model_call`` child,
each tool call a ``tool_call`` (or ``mcp_call``) child. The loop itself is in
`groundswell.agent.loop`; everything around it is middleware.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, TypeVar, overload

from ..errors import ConfigurationError
from ..prompt.prompt import NO_OVERRIDES, Prompt, PromptOverrides
from ..reflection import agents_of
from ..runtime.blocking import run_blocking
from ..runtime.context import (
    LIVE_WATCHES,
    RunWatch,
    current_frame,
    current_watch,
    new_run_tree,
)
from ..tools.tool import DepsT
from .checks import NO_LOOP, deps_error, make_client, overrides_error
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
from .overrides import Forced, check, forced_for, override_agent
from .overrides import merge as merge_overrides
from .run import PromptResult, PromptRun, StreamEvent, check_history
from .settings import AgentSettings

if TYPE_CHECKING:  # the SDK is imported when a client is made (`make_client`), not here
    import anthropic

__all__ = ["Agent", "create_agent"]

T = TypeVar("T")
#: ``message_history``: Messages API message dicts, oldest first (e.g. ``result.messages``).
History: TypeAlias = Sequence[Mapping[str, Any]]


class Agent(AgentSettings[DepsT]):
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

    # Its settings (`__init__`, `settings_for`) are `AgentSettings`'; what `__init__`
    # sets there that the calls here read:
    _deps_ok: Callable[[Any], bool] | None
    _middleware: tuple[Layer, ...]
    _client: anthropic.AsyncAnthropic | None
    _made: weakref.WeakKeyDictionary[Any, anthropic.AsyncAnthropic]
    _config_view: Mapping[str, Any]
    #: False for a subclass that overrides `settings_for`: its plain calls go through it.
    _stock_settings_for: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._stock_settings_for = cls.settings_for is Agent.settings_for

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
        plain = overrides is NO_OVERRIDES and not prompt.wins
        if plain and self._stock_settings_for:
            # A call that sets nothing of its own runs on the agent's settings as they are
            # (`settings_for` would copy them): each attempt works on a copy of its own
            # when a middleware takes part (`PromptRun.begin_attempt`), and nothing else
            # writes to them (`active()` sees them read-only, below).
            settings = self.config
        else:  # through `settings_for`, so a subclass that overrides it counts
            settings = self.settings_for(prompt, overrides)
        client = forced.client if forced is not None and forced.client is not None else None
        if client is None:  # not `self.client` first: it would look the override up again
            client = self._client if self._client is not None else self.client
        outer = current_frame()
        workflow = None
        if outer is not None and outer.workflow is not None:
            workflow = outer.workflow
            # Step- and workflow-level reflection ask its model (`agents_of`).
            prompted = workflow.prompted
            if prompted is None:
                prompted = workflow.prompted = agents_of(workflow.event_tree)
            prompted[self.name] = self
            if workflow.batch is True and settings.get("batch") is None:
                # The workflow's default, for a prompt that says nothing: a setting of its
                # own, so the batch layer is chosen like any other (and once per agent).
                settings = {**settings, "batch": True}
                plain = False
        watch = current_watch() if emit is None and LIVE_WATCHES else None
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
        # A middleware's active() reads the settings, and may not change them (on a call that
        # sets nothing of its own they are the agent's): a read-only view until the prompt
        # runs (`run_prompt`, `PromptRun.begin_attempt`), where a write fails naming it.
        view = self._config_view if settings is self.config else MappingProxyType(settings)
        run.settings = view  # type: ignore[assignment]  # (a cast() would cost a call)
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
