"""Agents: the loop of model turns, tool calls and hooks, on ``anthropic.AsyncAnthropic``.

Each ``agent.prompt()`` is a ``prompt`` node under whatever runs now (a new
tree's root outside any run); each model round trip is a ``model_call`` child,
each tool call a ``tool_call`` (or ``mcp_call``) child.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, overload

import anthropic
from pydantic import BaseModel

from ._serialize import jsonable, register_secret
from .budget import Enforcer, TokenBudget, check_budget, resolve_budget
from .cache import (
    Cache,
    ToolCachePolicy,
    cache_entry,
    cached_tool_call,
    get_cache,
    request_cache_key,
    through_cache,
)
from .context import Frame, _frame, new_run_tree
from .errors import (
    ConfigurationError,
    ExtractionError,
    MaxTurnsExceeded,
    ResponseValidationError,
    ToolError,
)
from .extraction import Extract, extract_all
from .hooks import HookRunner, PromptBlocked, blocked, specific
from .model import api_error, build_request, call_model, is_retryable_stream_error, parse_output
from .plugins import get_plugin_manager
from .prompt import NO_OVERRIDES, Prompt, PromptOverrides, PromptTemplate
from .prompt_context import ContextRequest, check_context, gather_context
from .reflection import (
    AGENT_REFLECTABLE,
    Level,
    ReflectionConfig,
    ReflectionContext,
    ReflectionEntry,
    mark_given_up,
    pause,
    reflect_once,
    resolve_config,
    strategy_failed,
)
from .tools import (
    MCPBridge,
    Skill,
    Tool,
    ToolContext,
    _MCPTool,
    call_mcp_tool,
    register_mcp_secrets,
    skills_system_text,
    skills_tool,
    tool_for,
    tool_result_content,
)
from .tree import EventNode, EventTree, NodeStatus, NodeType
from .workflow import Workflow

__all__ = ["DEFAULT_MODEL", "Agent", "PromptResult", "StreamEvent", "create_agent"]

T = TypeVar("T")
# claude-sonnet-4-5 reaches end-of-life on 2026-11-30 (the SDK warns); 4-6 is current.
DEFAULT_MODEL = os.environ.get("GROUNDSWELL_MODEL", "claude-sonnet-4-6")
MID_STREAM_RETRIES = 2
_PREVIEW = 2_000
_HISTORY_LIMIT = 1_000


@dataclass(frozen=True)
class StreamEvent:
    """One item of ``agent.stream()``.

    ``type`` is ``text`` (``text`` holds a delta), ``tool_input`` (``tool_input``
    holds a partial-JSON delta), ``tool_call`` (``tool_call``: id, name, input),
    ``tool_result`` (``tool_result``: tool_use_id, name, content, is_error),
    ``retry`` (the model turn broke off mid-stream and starts again: discard the
    deltas received since the turn began; ``text`` says why) or, last,
    ``result`` (``result`` is the validated output).
    """

    type: Literal["text", "tool_input", "tool_call", "tool_result", "retry", "result"]
    text: str | None = None
    tool_input: str | None = None
    tool_call: dict[str, Any] | None = None
    tool_result: dict[str, Any] | None = None
    result: Any = None


@dataclass
class PromptResult(Generic[T]):
    """What `Agent.run` returns: the output plus where it sits in the tree."""

    output: T
    tree: EventTree
    node: EventNode
    usage: dict[str, int] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    #: Values of the prompt's `Extract` rules, by ``store_as``.
    extracted: dict[str, Any] = field(default_factory=dict)


class _Tools:
    """The tools of one prompt: handlers by name and the definitions sent to the API."""

    def __init__(self) -> None:
        self.handlers: dict[str, Tool | _MCPTool] = {}
        self.definitions: list[dict[str, Any]] = []
        # Tool name -> the registered toolset it came from (e.g. "introspection"),
        # recorded on tool nodes so sinks can treat a toolset's results specially.
        self.toolsets: dict[str, str] = {}

    def add(self, item: Any, toolset: str | None = None) -> None:
        if isinstance(item, Tool | _MCPTool):
            definition = item.definition()
            self.handlers[item.name] = item
            toolset = toolset or getattr(item, "toolset", None)
            if toolset is not None:
                self.toolsets[item.name] = toolset
        elif isinstance(item, Mapping):
            definition = dict(item)  # an Anthropic tool dict: passed through unchanged
        elif callable(item):
            self.add(tool_for(item))
            return
        else:
            raise ConfigurationError(
                f"tools items must be callables, groundswell.Tool, Anthropic tool dicts or "
                f"toolset names; got {type(item).__name__}"
            )
        name = definition.get("name")
        if any(d.get("name") == name for d in self.definitions):
            raise ConfigurationError(f"two tools are named {name!r}; tool names must be unique")
        self.definitions.append(definition)


class Agent:
    """An LLM agent: a model, instructions, tools and hooks, with typed results.

    Every Messages API request field is accepted by its API name (``model``,
    ``system``, ``tools``, ``tool_choice``, ``max_tokens``, ``temperature``,
    ``top_p``, ``top_k``, ``stop_sequences``, ``metadata``, ``thinking``,
    ``betas``, ``container``, ``service_tier``, ``extra_headers``,
    ``extra_body``), plus ``mcps``, ``skills``, ``hooks``, ``env`` and
    ``max_turns``. ``token_budget`` (a `TokenBudget`) caps
    the input of every model turn. ``cache`` (a backend name or a `Cache`)
    or ``enable_cache=True`` (the default backend) caches whole answers.
    ``enable_reflection=True`` (or ``reflection=ReflectionConfig(...)``) feeds
    a failed prompt's error back to the model and lets it answer again.
    ``spawnable`` (name → `Workflow`) and
    ``prompt_templates`` (name → `PromptTemplate`) are what
    the introspection tools may start or build on its behalf.
    ``history=True`` asks the session history plugin (``groundswell_history``)
    to record this agent's sessions. ``context`` lists context providers (by
    name, e.g. ``["history"]``, or callables taking a
    `ContextRequest`) whose text is added to the system
    prompt of every prompt.
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
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_turns: int = 20,
        token_budget: TokenBudget | None = None,
        cache: str | Cache | None = None,
        enable_cache: bool = False,
        tool_cache: Mapping[str, ToolCachePolicy] | None = None,
        enable_reflection: bool = False,
        reflection: ReflectionConfig | None = None,
        spawnable: Mapping[str, Any] | None = None,
        prompt_templates: Mapping[str, PromptTemplate] | None = None,
        history: bool = False,
        context: Sequence[Any] | None = None,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"Agent name must be a non-empty string, got {name!r}")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigurationError(f"max_tokens must be a positive int, got {max_tokens!r}")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigurationError(f"max_turns must be a positive int, got {max_turns!r}")
        self.name = name
        self.config: dict[str, Any] = {
            "model": model or DEFAULT_MODEL,
            "system": system,
            "tools": list(tools or []),
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
            "extra_headers": extra_headers,
            "extra_body": extra_body,
            "mcps": list(mcps or []),
            "skills": list(skills or []),
            "hooks": dict(hooks or {}),
            "env": dict(env or {}),
            "max_turns": max_turns,
            "token_budget": check_budget(token_budget, f"agent {name!r}"),
            # True means "the default backend" (GROUNDSWELL_CACHE, else lru).
            "cache": cache if cache is not None else (True if enable_cache else None),
        }
        if token_budget is not None and token_budget.input_limit(max_tokens) <= 0:
            raise token_budget.no_room(max_tokens, f"agent {name!r}")
        if cache is not None and not isinstance(cache, str | Cache):
            raise ConfigurationError(
                f"cache must be a backend name (e.g. 'lru', 'redis') or a groundswell.Cache, "
                f"got {type(cache).__name__}"
            )
        for value in self.config["env"].values():
            register_secret(str(value))
        register_mcp_secrets(self.config["mcps"])
        self.tool_cache: dict[str, ToolCachePolicy] = dict(tool_cache or {})
        for tool_name, policy in self.tool_cache.items():
            if not isinstance(policy, ToolCachePolicy):
                raise ConfigurationError(
                    f"tool_cache[{tool_name!r}] must be a ToolCachePolicy, got {type(policy).__name__}"
                )
        if reflection is not None and not isinstance(reflection, ReflectionConfig):
            raise ConfigurationError(
                f"Agent reflection must be a ReflectionConfig, got {type(reflection).__name__}"
            )
        # The settings a prompt-level enable_reflection=True uses, even when the agent
        # itself does not reflect.
        self._reflection_settings = reflection
        #: The agent's own reflection settings, or ``None`` when it does not reflect.
        self.reflection: ReflectionConfig | None = resolve_config(
            reflection if reflection is not None else enable_reflection, owner=f"agent {name!r}"
        )
        #: Reflections on this agent's prompts, oldest first (the last 1,000).
        self.reflection_history: list[ReflectionEntry] = []
        #: Workflows this agent may start through the ``request_spawn_workflow`` tool.
        self.spawnable: dict[str, Workflow[..., Any]] = dict(spawnable or {})
        for key, wf in self.spawnable.items():
            if not isinstance(wf, Workflow):
                raise ConfigurationError(
                    f"spawnable[{key!r}] must be a groundswell.Workflow, got {type(wf).__name__}"
                )
        #: Prompt templates this agent may fill in through ``generate_dynamic_prompt``.
        self.prompt_templates: dict[str, PromptTemplate] = dict(prompt_templates or {})
        for key, template in self.prompt_templates.items():
            if not isinstance(template, PromptTemplate):
                raise ConfigurationError(
                    f"prompt_templates[{key!r}] must be a groundswell.PromptTemplate, "
                    f"got {type(template).__name__}"
                )
        if not isinstance(history, bool):
            raise ConfigurationError(f"history must be True or False, got {history!r}")
        #: Whether the session history plugin records this agent's sessions.
        self.history = history
        #: Context providers whose text joins the system prompt of each prompt.
        self.context: list[Any] = check_context(context, f"agent {name!r}")
        self._client = client
        if client is not None and isinstance(client.api_key, str):
            register_secret(client.api_key)

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client; created from the environment on first use if none was given."""
        if self._client is None:
            try:
                self._client = anthropic.AsyncAnthropic()
            except anthropic.AnthropicError as exc:
                raise ConfigurationError(
                    f"agent {self.name!r} has no client: {exc}. Set ANTHROPIC_API_KEY, or pass "
                    "client=... (offline: groundswell.testing.FakeAnthropicAPI().client())"
                ) from exc
            if isinstance(self._client.api_key, str):
                register_secret(self._client.api_key)
        return self._client

    # -- public API -----------------------------------------------------------------

    @overload
    async def prompt(self, prompt: Prompt[T], overrides: PromptOverrides | None = None) -> T: ...
    @overload
    async def prompt(self, prompt: str, overrides: PromptOverrides | None = None) -> str: ...

    async def prompt(
        self, prompt: Prompt[Any] | str, overrides: PromptOverrides | None = None
    ) -> Any:
        """Run the prompt to completion and return its validated output.

        Returns a ``response_format`` instance, or the text when there is none.
        Raises `ModelAPIError`, `ResponseValidationError`,
        `MaxTurnsExceeded`, `ConfigurationError`.
        """
        return (await self.run(prompt, overrides)).output

    async def run(
        self, prompt: Prompt[Any] | str, overrides: PromptOverrides | None = None
    ) -> PromptResult[Any]:
        """Like `prompt`, but returns a `PromptResult` with the tree and usage."""
        return await self._execute(_as_prompt(prompt), overrides or NO_OVERRIDES, None)

    async def stream(
        self, prompt: Prompt[Any] | str, overrides: PromptOverrides | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Run the prompt, yielding deltas and tool activity; the last event is ``result``."""
        queue: asyncio.Queue[StreamEvent | BaseException | None] = asyncio.Queue()

        async def produce() -> None:
            try:
                result = await self._execute(
                    _as_prompt(prompt), overrides or NO_OVERRIDES, queue.put_nowait
                )
                queue.put_nowait(StreamEvent("result", result=result.output))
            except BaseException as exc:
                queue.put_nowait(exc)
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(produce())
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def reflect(self, prompt: Prompt[T] | str, overrides: PromptOverrides | None = None) -> T:
        """Answer, then critique and revise that answer; returns the revised output.

        Both passes are prompt nodes under one ``reflection`` node.
        """
        p = _as_prompt(prompt)
        frame = _frame.get()
        tree = frame.tree if frame else new_run_tree()
        node = tree.start_node(
            NodeType.REFLECTION, f"{self.name}:reflect", frame.node if frame else None
        )
        # Keep the caller's hooks: reflecting is not running a sub-agent.
        token = _frame.set(
            Frame(tree, node, frame.workflow, frame.hooks) if frame else Frame(tree, node)
        )
        try:
            first = await self.prompt(p, overrides)
            answer = first.model_dump_json() if isinstance(first, BaseModel) else str(first)
            revision = p.with_(
                user=(
                    f"{p.user}\n\nA previous answer to this request was:\n<answer>\n{answer}\n</answer>\n\n"
                    "Critique that answer against the request: look for mistakes, omissions and "
                    "unclear parts. Then reply with a complete, corrected answer in the same format."
                )
            )
            revised = await self.prompt(revision, overrides)
        except BaseException as exc:
            tree.end_node_after(node, exc)
            raise
        finally:
            _frame.reset(token)
        tree.end_node(node, NodeStatus.COMPLETED, output=revised, record_output=True)
        return revised  # type: ignore[no-any-return]

    # -- reflection -------------------------------------------------------------------

    def _reflection_for(
        self, prompt: Prompt[Any], overrides: PromptOverrides
    ) -> tuple[ReflectionConfig | None, Level]:
        """The reflection settings in force for one call (overrides > prompt > agent)."""
        config = overrides.reflection
        if config is not None:  # the override's own settings beat anything the prompt says
            on = config.enabled and overrides.enable_reflection is not False
            return (config if on else None), "prompt"
        enabled = overrides.enable_reflection
        if enabled is None:
            enabled = prompt.enable_reflection
        if enabled is None:
            return self.reflection, "agent"
        if not enabled:
            return None, "prompt"
        base = self._reflection_settings
        if base is None:
            return resolve_config(True, owner=self.name), "prompt"
        return (base if base.enabled else dataclasses.replace(base, enabled=True)), "prompt"

    async def _execute(
        self,
        prompt: Prompt[Any],
        overrides: PromptOverrides,
        emit: Callable[[StreamEvent], None] | None,
    ) -> PromptResult[Any]:
        if (
            self.reflection is None
            and prompt.enable_reflection is None
            and (
                overrides is NO_OVERRIDES
                or (overrides.enable_reflection is None and overrides.reflection is None)
            )
        ):
            return await self._run(prompt, overrides, emit)
        config, level = self._reflection_for(prompt, overrides)
        if config is None or config.max_attempts == 1:
            return await self._run(prompt, overrides, emit)
        if _frame.get() is not None:
            return await self._run_reflecting(prompt, overrides, emit, config, level)
        # Outside any run the attempts need one tree to share: a prompt node holds them.
        tree = new_run_tree()
        root = tree.start_node(
            NodeType.PROMPT, self.name, None, payload={"agent": self.name, "reflection": level}
        )
        token = _frame.set(Frame(tree, root))
        try:
            result = await self._run_reflecting(prompt, overrides, emit, config, level)
        except BaseException as exc:
            tree.end_node_after(root, exc)
            raise
        finally:
            _frame.reset(token)
        root.metrics["usage"] = dict(result.usage)
        root.metrics["attempts"] = result.node.metrics.get("attempt", 1)
        tree.end_node(root, NodeStatus.COMPLETED, output=result.output, record_output=True)
        return result

    async def _run_reflecting(
        self,
        prompt: Prompt[Any],
        overrides: PromptOverrides,
        emit: Callable[[StreamEvent], None] | None,
        config: ReflectionConfig,
        level: Level,
    ) -> PromptResult[Any]:
        """Attempts of one prompt, with a reflection between a failure and the next try."""
        outer = _frame.get()
        previous: list[ReflectionEntry] = []
        retry: _Retry | None = None
        attempt = 1
        first_key: tuple[Cache, str] | None = None
        while True:
            box: dict[str, Any] = {}
            try:
                result = await self._run(
                    prompt, overrides, emit, attempt=attempt, retry=retry, box=box
                )
            except AGENT_REFLECTABLE as exc:
                failure: Exception = exc
            else:
                if first_key is not None:
                    await _remember_corrected(*first_key, result.output)
                return result
            if attempt == 1 and "cache" in box:
                first_key = box["cache"]
            if attempt >= config.max_attempts or "node" not in box:
                mark_given_up(failure)
                raise failure
            node: EventNode = box["node"]
            tree: EventTree = box["tree"]
            raw = getattr(failure, "raw", None)
            context = ReflectionContext(
                level=level,
                failed_node=node,
                error=failure,
                attempt=attempt,
                previous_attempts=tuple(previous),
                config=config,
                tree=tree,
                agent=self,
                prompt=prompt,
                messages=tuple(box.get("messages") or ()),
                output=raw if isinstance(raw, str) else None,
                system=box.get("system"),
            )
            parent = tree.get_node(node.parent_id) if node.parent_id else None
            entry = await reflect_once(
                context,
                name=self.name,
                parent=parent,
                workflow=outer.workflow if outer else None,
            )
            if entry is not None:
                self.reflection_history.append(entry)
                del self.reflection_history[:-_HISTORY_LIMIT]
                if outer is not None and outer.workflow is not None:
                    outer.workflow.reflection._add(entry)
            if entry is None or not entry.should_retry:
                mark_given_up(failure)
                raise failure
            try:
                prompt, overrides = _revised(prompt, overrides, entry)
            except ConfigurationError as exc:  # e.g. revised data that cannot be rendered
                strategy_failed(failure, tree.get_node(entry.node_id), tree, entry.strategy, exc)
                mark_given_up(failure)
                raise failure from None
            previous.append(entry)
            await pause(config)
            if emit is not None:
                emit(StreamEvent("retry", text=f"attempt {attempt} failed: {context.error_text}"))
            retry = _Retry.after(context, entry)
            attempt += 1

    # -- the loop -------------------------------------------------------------------

    def _settings(self, prompt: Prompt[Any], overrides: PromptOverrides) -> dict[str, Any]:
        settings = dict(self.config)
        for name in ("system", "tools", "mcps", "skills", "hooks"):
            value = getattr(prompt, name)
            if value is not None:
                settings[name] = value
        if overrides is not NO_OVERRIDES:
            given = overrides.set_fields()
            settings.update(given)
            for value in (given.get("env") or {}).values():
                register_secret(str(value))
            register_mcp_secrets(given.get("mcps") or [])
        return settings

    async def _run(
        self,
        prompt: Prompt[Any],
        overrides: PromptOverrides,
        emit: Callable[[StreamEvent], None] | None,
        *,
        attempt: int | None = None,
        retry: _Retry | None = None,
        box: dict[str, Any] | None = None,
    ) -> PromptResult[Any]:
        settings = self._settings(prompt, overrides)
        client = self.client
        outer = _frame.get()
        tree = outer.tree if outer else new_run_tree()
        payload = {
            "agent": self.name,
            "model": settings["model"],
            "user": prompt.user,
            "response_format": prompt.response_format.__name__ if prompt.response_format else None,
        }
        if prompt.data is not None:
            payload["data"] = prompt.data
        if self.history:
            payload["history"] = True
        node = tree.start_node(
            NodeType.PROMPT, self.name, outer.node if outer else None, payload=payload
        )
        if attempt is not None:
            node.metrics["attempt"] = attempt
        if box is not None:
            box["node"], box["tree"] = node, tree
        workflow = outer.workflow if outer else None
        # Set when this prompt runs inside another agent's tool call.
        parent_hooks: HookRunner | None = outer.hooks if outer else None
        token = _frame.set(Frame(tree, node, workflow, agent=self))
        usage: dict[str, int] = {}
        subagent = {"agent_id": node.id, "agent_type": self.name}
        try:
            if parent_hooks is not None:
                await parent_hooks.run("SubagentStart", subagent)
            budget = resolve_budget(overrides.token_budget, self.config["token_budget"], tree, node)
            result = await self._loop(
                prompt, settings, client, tree, node, usage, emit, retry, box, budget
            )
        except BaseException as exc:
            node.metrics["usage"] = usage
            tree.end_node_after(node, exc)
            raise
        finally:
            _frame.reset(token)
            if parent_hooks is not None:
                with contextlib.suppress(Exception):
                    await parent_hooks.run("SubagentStop", {**subagent, "stop_hook_active": False})
        node.metrics["usage"] = usage
        node.metrics["turns"] = result.turns
        if result.extracted and workflow is not None:
            workflow.state.update(result.extracted)
        tree.end_node(node, NodeStatus.COMPLETED, output=result.output, record_output=True)
        result.tree, result.node, result.usage = tree, node, usage
        return result

    async def _loop(
        self,
        prompt: Prompt[Any],
        settings: dict[str, Any],
        client: anthropic.AsyncAnthropic,
        tree: EventTree,
        node: EventNode,
        usage: dict[str, int],
        emit: Callable[[StreamEvent], None] | None,
        retry: _Retry | None = None,
        box: dict[str, Any] | None = None,
        budget: tuple[TokenBudget, str] | None = None,
    ) -> PromptResult[Any]:
        hooks = HookRunner(settings.get("hooks"), session_id=node.id)
        user_text = prompt.render()
        if retry is not None and retry.note:
            user_text = f"{user_text}\n\n{retry.note}"
        outputs = await hooks.run("UserPromptSubmit", {"prompt": user_text})
        reason = next(
            (str(o.get("reason") or "blocked") for o in outputs if o.get("decision") == "block"),
            None,
        )
        if reason is not None:
            raise PromptBlocked(f"a UserPromptSubmit hook blocked the prompt: {reason}")
        extra = [s["additionalContext"] for s in specific(outputs) if s.get("additionalContext")]
        if extra:
            user_text = "\n\n".join([user_text, *map(str, extra)])

        local_skills = [s for s in settings.get("skills") or [] if isinstance(s, Skill)]
        api_skills = [s for s in settings.get("skills") or [] if isinstance(s, Mapping)]
        if len(local_skills) + len(api_skills) != len(settings.get("skills") or []):
            raise ConfigurationError(
                "skills items must be groundswell.Skill objects or API skill dicts"
            )
        system = settings.get("system")
        if local_skills:
            system = _append_system(system, skills_system_text(local_skills))
        if self.context:
            frame = _frame.get()
            request = ContextRequest(
                agent=self.name,
                user=user_text,
                tree=tree,
                node=node,
                state=frame.workflow.state if frame and frame.workflow else {},
            )
            for section in await gather_context(self.context, request):
                system = _append_system(system, section)

        env = dict(settings.get("env") or {})
        mcps = settings.get("mcps") or []
        # No MCP servers is the common case: skip connecting anything.
        async with MCPBridge(mcps, env) if mcps else _NO_MCP as bridge:
            tools = _Tools()
            for item in settings.get("tools") or []:
                for resolved in _resolve_tool(item):
                    tools.add(resolved, item if isinstance(item, str) else None)
            if local_skills:
                tools.add(skills_tool(local_skills))
            for mcp_tool in bridge.tools:
                tools.add(mcp_tool)

            if system:
                node.payload["system"] = jsonable(system)
            messages: list[dict[str, Any]] = [{"role": "user", "content": user_text}]
            if retry is not None:
                messages.extend(retry.messages)
            if box is not None:
                box["messages"], box["system"] = messages, system
            guard = None
            if budget is not None:
                guard = Enforcer(
                    budget[0],
                    source=budget[1],
                    usage=usage,
                    schema=prompt.response_format,
                    tree=tree,
                    node=node,
                    agent=self,
                    client=client,
                    model=settings["model"],
                    max_tokens=settings["max_tokens"],
                )
            run = _Conversation(
                agent=self,
                prompt=prompt,
                settings=settings,
                client=client,
                tree=tree,
                node=node,
                usage=usage,
                emit=emit,
                hooks=hooks,
                tools=tools,
                env=env,
                system=system,
                remote_mcp=list(bridge.remote),
                api_skills=api_skills,
                messages=messages,
                guard=guard,
            )
            cache = _cache_for(settings)
            if cache is None:
                return await run.turns()
            first, _ = run.request()
            fmt = prompt.response_format
            key = request_cache_key(self.name, first)
            if box is not None:
                box["cache"] = (cache, key)
            holder: dict[str, PromptResult[Any]] = {}

            async def produce() -> Any:
                holder["result"] = await run.turns()
                return holder["result"].output

            output, hit = await through_cache(
                cache,
                key,
                produce,
                encode=_encode_output,
                decode=lambda value: fmt.model_validate(value) if fmt is not None else str(value),
                tree=tree,
                node=node,
            )
            if hit:
                extracted = _extract(prompt.rules, output, tree, node)
                return PromptResult(
                    output=output,
                    tree=tree,
                    node=node,
                    messages=messages,
                    turns=0,
                    extracted=extracted,
                )
            return holder["result"]

    async def _model_turn(
        self,
        client: anthropic.AsyncAnthropic,
        params: dict[str, Any],
        beta: bool,
        tree: EventTree,
        parent: EventNode,
        usage: dict[str, int],
        emit: Callable[[StreamEvent], None] | None,
    ) -> Any:
        request = {
            "model": params["model"],
            "max_tokens": params["max_tokens"],
            "messages": len(params["messages"]),
            "tools": [t.get("name") for t in params.get("tools", [])],
            "stream": emit is not None,
        }
        sampling = params.get("extra_body") or {}
        for name in ("temperature", "top_p", "top_k"):
            if isinstance(sampling.get(name), int | float):
                request[name] = sampling[name]
        if params.get("stop_sequences"):
            request["stop_sequences"] = jsonable(list(params["stop_sequences"]))
        attempt = 0
        while True:
            attempt += 1
            node = tree.start_node(
                NodeType.MODEL_CALL,
                str(params["model"]),
                parent,
                # Model and tool names, counts and flags only: nothing to scrub.
                payload={"request": request},
                trusted=True,
            )
            streamed: dict[str, list[str]] = {"text": [], "tool_input": []}

            def on_delta(kind: str, delta: str, streamed: dict[str, list[str]] = streamed) -> None:
                streamed[kind].append(delta)
                assert emit is not None
                emit(
                    StreamEvent("text", text=delta)
                    if kind == "text"
                    else StreamEvent("tool_input", tool_input=delta)
                )

            try:
                message = await call_model(client, params, beta, on_delta if emit else None)
            except asyncio.CancelledError:
                tree.end_node(node, NodeStatus.CANCELLED)
                raise
            except TypeError as exc:
                if "authentication" not in str(exc):
                    raise
                # The SDK only notices a missing key when the request is built.
                missing = ConfigurationError(
                    f"agent {self.name!r} has no API key: set ANTHROPIC_API_KEY, or pass "
                    "client=... (offline: groundswell.testing.FakeAnthropicAPI().client())"
                )
                tree.end_node(node, NodeStatus.FAILED, error=missing)
                raise missing from exc
            except (
                Exception
            ) as exc:  # SDK, transport or anything else: a typed error, a closed node
                error = api_error(exc, str(params["model"]))
                tree.end_node(node, NodeStatus.FAILED, error=error)
                if is_retryable_stream_error(exc) and attempt <= MID_STREAM_RETRIES:
                    tree.add_event(parent, "stream_retry", attempt=attempt, error=str(error))
                    if emit is not None:
                        # Deltas already sent for this turn are void; say so before resending.
                        emit(StreamEvent("retry", text=str(error)))
                    continue
                raise error from exc
            turn_usage = _usage(message.usage)
            for key, value in turn_usage.items():
                usage[key] = usage.get(key, 0) + value
            node.metrics["usage"] = turn_usage
            node.metrics["attempt"] = attempt
            text = "".join(getattr(b, "text", "") for b in message.content if b.type == "text")
            node.payload["response"] = jsonable(
                {
                    "id": message.id,
                    "model": message.model,
                    "stop_reason": message.stop_reason,
                    "text": text[:_PREVIEW],
                    "tool_calls": [b.name for b in message.content if b.type == "tool_use"],
                }
            )
            if emit is not None:
                node.payload["stream"] = {
                    "text_deltas": len(streamed["text"]),
                    "tool_input_deltas": len(streamed["tool_input"]),
                }
            tree.end_node(node, NodeStatus.COMPLETED)
            return message

    async def _tool_call(
        self,
        call: dict[str, Any],
        tools: _Tools,
        hooks: HookRunner,
        env: dict[str, str],
        tree: EventTree,
        parent: EventNode,
        emit: Callable[[StreamEvent], None] | None,
    ) -> dict[str, Any]:
        name, call_id, tool_input = call["name"], call["id"], dict(call.get("input") or {})
        handler = tools.handlers.get(name)
        kind = NodeType.MCP_CALL if isinstance(handler, _MCPTool) else NodeType.TOOL_CALL
        payload = {"tool_use_id": call_id, "input": tool_input}
        if name in tools.toolsets:
            payload["toolset"] = tools.toolsets[name]
        node = tree.start_node(kind, name, parent, payload=payload)
        outer = _frame.get()
        token = _frame.set(Frame(tree, node, outer.workflow if outer else None, hooks, agent=self))
        if emit:
            emit(
                StreamEvent(
                    "tool_call", tool_call={"id": call_id, "name": name, "input": tool_input}
                )
            )
        is_error = False
        error: BaseException | None = None
        try:
            pre = await hooks.run(
                "PreToolUse",
                {"tool_name": name, "tool_input": tool_input, "tool_use_id": call_id},
                tool_name=name,
                tool_use_id=call_id,
            )
            denied = blocked(pre)
            updates = [
                s["updatedInput"]
                for s in specific(pre)
                if isinstance(s.get("updatedInput"), Mapping)
            ]
            if denied is not None:
                content: Any = f"Tool call blocked by a PreToolUse hook: {denied}"
                is_error = True
                error = ToolError(content)
            else:
                if updates:
                    tool_input = dict(updates[-1])
                    tree.add_event(node, "input_rewritten", input=tool_input)

                async def run_handler() -> Any:
                    if handler is None:
                        raise ToolError(
                            f"no local handler for tool {name!r} (available: {sorted(tools.handlers)})"
                        )
                    if isinstance(handler, _MCPTool):
                        text, failed = await call_mcp_tool(handler, tool_input)
                        if failed:
                            raise _ToolFailed(text)
                        return text
                    value = await handler.run(
                        tool_input,
                        ToolContext(agent=self.name, tool_use_id=call_id, env=env, node_id=node.id),
                    )
                    return tool_result_content(value)

                try:
                    policy = self._tool_policy(name, handler)
                    if policy is None:
                        content = await run_handler()
                    else:
                        content = await cached_tool_call(
                            policy, name, tool_input, run_handler, self._tool_cache(), tree, node
                        )
                except asyncio.CancelledError:
                    raise
                except _ToolFailed as exc:
                    error, is_error, content = ToolError(exc.content), True, exc.content
                except Exception as exc:
                    error, is_error = exc, True
                    content = f"{type(exc).__name__}: {exc}"
                about = {"tool_name": name, "tool_input": tool_input, "tool_use_id": call_id}
                if is_error:
                    await hooks.run(
                        "PostToolUseFailure",
                        {**about, "error": content},
                        tool_name=name,
                        tool_use_id=call_id,
                    )
                else:
                    try:
                        post = await hooks.run(
                            "PostToolUse",
                            {**about, "tool_response": content},
                            tool_name=name,
                            tool_use_id=call_id,
                        )
                    except Exception as exc:  # a broken hook must not void a tool that worked
                        post = []
                        tree.add_event(
                            node,
                            "hook_error",
                            hook="PostToolUse",
                            error=f"{type(exc).__name__}: {exc}",
                        )
                    for spec in specific(post):
                        replaced = spec.get("updatedToolOutput", spec.get("updatedMCPToolOutput"))
                        if replaced is not None:
                            content = tool_result_content(replaced)
                            tree.add_event(node, "output_rewritten")
                        if spec.get("additionalContext"):
                            content = f"{_as_text(content)}\n\n{spec['additionalContext']}"
        except asyncio.CancelledError:
            tree.end_node(node, NodeStatus.CANCELLED)
            raise
        except Exception as exc:  # a hook itself failed: the model sees it, the run goes on
            error, is_error = exc, True
            content = f"{type(exc).__name__}: {exc}"
        finally:
            _frame.reset(token)
        node.payload["is_error"] = is_error
        tree.end_node(
            node,
            NodeStatus.FAILED if is_error else NodeStatus.COMPLETED,
            error=error,
            output=content,
            record_output=True,
        )
        block = {"type": "tool_result", "tool_use_id": call_id, "content": content}
        if is_error:
            block["is_error"] = True
        if emit:
            emit(
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
        return block

    def _tool_policy(self, name: str, handler: Any) -> ToolCachePolicy | None:
        policy = self.tool_cache.get(name) or getattr(handler, "cache", None)
        return policy if isinstance(policy, ToolCachePolicy) and policy.enabled else None

    def _tool_cache(self) -> Cache:
        choice = self.config.get("cache")
        if choice is None or choice is True or isinstance(choice, str):
            return get_cache(choice if isinstance(choice, str) else None)
        return choice  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.config['model']!r})"


@dataclass(frozen=True)
class _Retry:
    """How the next attempt of a failed prompt hears about the failure.

    With the unusable reply at hand, the retry continues that conversation: the
    reply as the assistant turn, then the feedback as a user turn. Otherwise
    (the tool loop ran out of turns) the feedback follows the user text.
    """

    messages: tuple[dict[str, Any], ...] = ()
    note: str | None = None

    @classmethod
    def after(cls, context: ReflectionContext, entry: ReflectionEntry) -> _Retry:
        lines = [
            "Your previous reply could not be used.",
            f"Error: {context.error_text}",
        ]
        if entry.reason and entry.reason != context.error_text:
            lines.append(f"Reflection: {entry.reason}")
        wanted = context.prompt.response_format if context.prompt is not None else None
        lines.append(
            "Answer again, completely, fixing this"
            + (f" (reply with JSON that fits the {wanted.__name__} schema)." if wanted else ".")
        )
        feedback = "\n".join(lines)
        if context.output and context.output.strip():
            return cls(
                messages=(
                    {"role": "assistant", "content": context.output},
                    {"role": "user", "content": feedback},
                )
            )
        return cls(note=feedback)


def _encode_output(output: Any) -> Any:
    """A prompt's output as cached: validated models as JSON-ready dicts."""
    return output.model_dump(mode="json") if isinstance(output, BaseModel) else output


async def _remember_corrected(cache: Cache, key: str, output: Any) -> None:
    """Cache a reflection-corrected answer under the first attempt's key too.

    Without this, every later call of the same prompt would fail its first
    attempt again before reaching the corrected answer.
    """
    with contextlib.suppress(Exception):  # a cache outage never fails a prompt
        await cache.set(key, cache_entry(_encode_output(output)))


def _revised(
    prompt: Prompt[Any], overrides: PromptOverrides, entry: ReflectionEntry
) -> tuple[Prompt[Any], PromptOverrides]:
    """The prompt and overrides for a retry, with the reflection's revisions applied."""
    if entry.revised_data is not None:
        prompt = prompt.with_(data=entry.revised_data)
    if entry.revised_system is not None:
        prompt = prompt.with_(system=entry.revised_system)
        if overrides.system is not None:  # overrides win, so the revision must go there too
            overrides = dataclasses.replace(overrides, system=entry.revised_system)
    return prompt, overrides


class _ToolFailed(Exception):
    """An MCP tool answered with isError: its text is what the model sees."""

    def __init__(self, content: str) -> None:
        super().__init__(content)
        self.content = content


@dataclass
class _Conversation:
    """The turns of one prompt: model calls, tool calls and the Stop hook, until done."""

    agent: Agent
    prompt: Prompt[Any]
    settings: dict[str, Any]
    client: anthropic.AsyncAnthropic
    tree: EventTree
    node: EventNode
    usage: dict[str, int]
    emit: Callable[[StreamEvent], None] | None
    hooks: HookRunner
    tools: _Tools
    env: dict[str, str]
    system: Any
    remote_mcp: list[dict[str, Any]]
    api_skills: list[Any]
    messages: list[dict[str, Any]]
    guard: Enforcer | None = None

    def request(self) -> tuple[dict[str, Any], bool]:
        result: tuple[dict[str, Any], bool] = build_request(
            self.settings,
            self.messages,
            tools=self.tools.definitions,
            system=self.system,
            response_format=self.prompt.response_format,
            mcp_servers=self.remote_mcp,
            api_skills=self.api_skills,
        )
        return result

    async def turns(self) -> PromptResult[Any]:
        agent, tree, node, messages = self.agent, self.tree, self.node, self.messages
        stop_hook_active = False
        for turn in range(1, self.settings["max_turns"] + 1):
            if self.guard is not None:
                await self.guard.check(messages, self.system, self.tools.definitions)
            params, beta = self.request()
            message = await agent._model_turn(
                self.client, params, beta, tree, node, self.usage, self.emit
            )
            content = [_block(b) for b in message.content]
            if content:  # the API rejects an empty assistant turn; consecutive user turns merge
                messages.append({"role": "assistant", "content": content})
            calls = [b for b in content if b.get("type") == "tool_use"]
            if message.stop_reason == "tool_use" and calls:
                results = await asyncio.gather(
                    *(
                        agent._tool_call(c, self.tools, self.hooks, self.env, tree, node, self.emit)
                        for c in calls
                    )
                )
                messages.append({"role": "user", "content": list(results)})
                continue
            if message.stop_reason == "pause_turn":
                continue  # a server tool paused a long turn: send it back to go on
            text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
            stop = await self.hooks.run("Stop", {"stop_hook_active": stop_hook_active})
            reason = next(
                (str(o.get("reason") or "") for o in stop if o.get("decision") == "block"), None
            )
            if reason is not None:
                stop_hook_active = True
                tree.add_event(node, "stop_blocked", reason=reason)
                messages.append({"role": "user", "content": reason or "Please continue."})
                continue
            if message.stop_reason == "max_tokens":
                tree.add_event(node, "truncated", max_tokens=self.settings["max_tokens"])
            try:
                output = parse_output(text, self.prompt.response_format)
            except ResponseValidationError as exc:
                if message.stop_reason == "max_tokens":
                    exc.args = (
                        f"the reply was cut off at max_tokens={self.settings['max_tokens']}; {exc}",
                    )
                raise
            extracted = _extract(self.prompt.rules, output, tree, node)
            return PromptResult(
                output=output,
                tree=tree,
                node=node,
                messages=messages,
                turns=turn,
                extracted=extracted,
            )
        why = (
            "a Stop hook kept blocking the end"
            if stop_hook_active
            else "check the tools it keeps calling"
        )
        raise MaxTurnsExceeded(
            f"agent {agent.name!r} did not finish within max_turns={self.settings['max_turns']} "
            f"model turns; raise max_turns or {why}"
        )


def _extract(
    rules: tuple[Extract, ...], output: Any, tree: EventTree, node: EventNode
) -> dict[str, Any]:
    """Apply a prompt's extraction rules to its answer, as an ``extraction`` node."""
    if not rules:
        return {}
    text = _output_text(output)
    about = [
        {
            "store_as": r.store_as,
            "pattern": r.regex.pattern,
            "format": r.format,
            "required": r.required,
        }
        for r in rules
    ]
    step = tree.start_node(NodeType.EXTRACTION, "extract", node, payload={"rules": about})
    try:
        values, misses = extract_all(rules, text)
    except ExtractionError as exc:
        tree.end_node(step, NodeStatus.FAILED, error=exc)
        raise
    for miss in misses:
        tree.add_event(step, "extraction_missed", **miss)
    node.payload["extracted"] = jsonable(values)
    tree.end_node(step, NodeStatus.COMPLETED, output=values, record_output=True)
    return values


def _output_text(output: Any) -> str:
    """The text extraction searches: the answer, or a structured answer's compact JSON
    (the same whether it came from the model or the cache)."""
    return output.model_dump_json() if isinstance(output, BaseModel) else str(output)


def _cache_for(settings: Mapping[str, Any]) -> Cache | None:
    if settings.get("disable_cache"):
        return None
    choice = settings.get("cache")
    if choice is None or choice is False:
        return None
    if choice is True:
        # "The default backend": the enclosing workflow's choice, else the process default.
        frame = _frame.get()
        chosen = frame.workflow.cache if frame is not None and frame.workflow is not None else None
        if chosen is None:
            return get_cache(None)
        return get_cache(chosen) if isinstance(chosen, str) else chosen
    if isinstance(choice, str):
        return get_cache(choice)
    # Checked once when the agent or override was built: isinstance against a
    # runtime Protocol costs more than the rest of a cache hit.
    return choice  # type: ignore[no-any-return]


def _block(block: Any) -> dict[str, Any]:
    """An SDK content block as the dict sent back in the next request."""
    # Plain attribute reads for the common blocks: model_dump costs more than the rest
    # of a turn's bookkeeping put together.
    kind = block.type
    if kind == "text" and not getattr(block, "citations", None):
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    dumped: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return dumped


_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def _usage(usage: Any) -> dict[str, int]:
    return {
        name: value
        for name in _USAGE_FIELDS
        if isinstance(value := getattr(usage, name, None), int)
    }


class _NoMCP:
    """Stands in for MCPBridge when an agent has no MCP servers."""

    local: tuple[Any, ...] = ()
    remote: tuple[dict[str, Any], ...] = ()
    tools: tuple[_MCPTool, ...] = ()

    async def __aenter__(self) -> _NoMCP:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_MCP = _NoMCP()


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, Mapping))


def _as_prompt(prompt: Prompt[Any] | str) -> Prompt[Any]:
    if isinstance(prompt, Prompt):
        return prompt
    if isinstance(prompt, str):
        return Prompt(user=prompt)
    raise ConfigurationError(f"expected a Prompt or a string, got {type(prompt).__name__}")


def _append_system(system: Any, section: str) -> Any:
    """``system`` (text or content blocks) with ``section`` added at the end."""
    if isinstance(system, str) or system is None:
        return f"{system}\n\n{section}" if system else section
    return [*system, {"type": "text", "text": section}]


def _resolve_tool(item: Any) -> list[Any]:
    if not isinstance(item, str):
        return [item]
    providers = get_plugin_manager().tool_providers()
    record = providers.get(item)
    if record is None:
        raise ConfigurationError(
            f"no toolset named {item!r}; available: {sorted(providers) or 'none installed'}"
        )
    produced = record.factory()
    return list(produced) if not isinstance(produced, Mapping | Tool) else [produced]


def create_agent(**settings: Any) -> Agent:
    """Build an `Agent` at run time (inside a tool or step it mounts where it runs)."""
    return Agent(**settings)
