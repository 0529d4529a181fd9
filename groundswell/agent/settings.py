"""An agent's settings: its arguments checked into ``Agent.config``, a call's merged over them."""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, NoReturn

from ..budget.token_budget import TokenBudget, check_budget, check_retention
from ..cache.backends import Cache, ToolCachePolicy
from ..errors import ConfigurationError
from ..hooks.runner import check_hooks
from ..mcp.bridge import check_mcps
from ..mcp.client import Elicitation, check_elicitation_handler
from ..mcp.config import register_mcp_secrets
from ..model.requests import build_request
from ..model.settings_check import check_flag, check_settings
from ..plugins.manager import get_plugin_manager
from ..prompt.context_providers import check_context
from ..prompt.prompt import NO_OVERRIDES, Prompt, PromptOverrides
from ..reflection import ReflectionConfig, ReflectionEntry, resolve_config
from ..scrubbing.serialize import register_secret
from ..skills.local import check_skills
from ..tools.tool import DepsT, check_context_ttl, check_timeout, check_tools
from ..waits.approval import Approval, Policy, check_approval
from .checks import check_options, deps_check
from .config import check_cache_choice, check_tool_cache, model_or_default, request_options
from .middleware import Layer, resolve
from .overrides import check_client

if TYPE_CHECKING:  # the SDK is imported when a client is made (`make_client`), not here
    import anthropic

__all__ = ["DEFAULT_MODEL", "AgentSettings"]

# claude-sonnet-4-5 reaches end-of-life on 2026-11-30 (the SDK warns); 4-6 is current.
DEFAULT_MODEL = os.environ.get("GROUNDSWELL_MODEL", "claude-sonnet-4-6")


class _ReadOnlySettings(dict[str, Any]):
    """Settings a middleware's ``active()`` may read but not change: a dict's reads, at a
    dict's speed, and a `TypeError` for every write (`Agent._execute`)."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("run.settings are read-only here")

    __setitem__ = __delitem__ = update = pop = popitem = setdefault = clear = _refuse
    __ior__ = _refuse


class AgentSettings(Generic[DepsT]):
    """An agent's checked settings (`Agent.config`) and how one call's settings merge over them."""

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
        # ``config`` read-only: what a middleware's active() reads as ``run.settings`` on a
        # call that sets nothing of its own (`Agent._execute`).
        self._config_view: Mapping[str, Any] = _ReadOnlySettings(self.config)
        #: True when these settings send no request field beyond the model, max_tokens,
        #: system and tools (most agents): a call that sets nothing of its own, with no
        #: middleware, then sends those without reading every field again on each model
        #: turn (`PromptRun.bare_request`).
        self.bare_request: bool = set(
            build_request(self.config, [], tools=(), system=None, response_format=None)
        ) == {"model", "max_tokens", "messages"}
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


_OWN_PARAMETERS = frozenset(inspect.signature(AgentSettings.__init__).parameters) - {
    "self",
    "options",
}


def _effort_of(settings: dict[str, Any], given: Any) -> None:
    """An ``output_config.effort`` set at a higher level wins over a lower level's ``effort``
    (the shorthand), as every setting does; the same level's ``effort`` wins over it."""
    fields = dict(given)
    config = fields.get("output_config")
    if isinstance(config, Mapping) and "effort" in config and "effort" not in fields:
        settings["effort"] = None
