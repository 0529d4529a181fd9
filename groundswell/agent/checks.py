"""What `Agent` checks: its options, ``deps_type`` and a call's overrides; the client it makes."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigurationError
from ..model.output_types import type_name
from ..plugins.manager import get_plugin_manager
from ..scrubbing.serialize import register_secret

__all__ = [
    "NO_LOOP",
    "check_options",
    "deps_check",
    "deps_error",
    "make_client",
    "overrides_error",
]


def check_options(given: Mapping[str, Any], owner: str, own: frozenset[str]) -> dict[str, Any]:
    """Every option plugins declare: its default, or the given value its plugin checked."""
    manager = get_plugin_manager()
    declared = manager.agent_options()
    for name in declared.keys() & own:
        # Agent's own parameter always takes the keyword: the option could never be set.
        plugin = manager.owner("register_agent_options", name) or name
        manager.report(
            plugin, f"agent option {name!r} is a parameter of Agent itself; choose another name"
        )
    options = {name: record.default for name, record in declared.items()}
    for name, value in given.items():
        record = declared.get(name)
        if record is None:
            if name in _ELSEWHERE:  # a habit from another framework: the fix is known
                raise ConfigurationError(
                    f"{owner}: Agent() got an unknown option {name!r}; {_ELSEWHERE[name]}"
                )
            from ..model.request_fields import sdk_fields

            choices = sorted(own | declared.keys() | sdk_fields())
            close = difflib.get_close_matches(name, choices, 3, 0.75)
            guess = f"did you mean {' or '.join(close)}? " if close else ""
            raise ConfigurationError(
                f"{owner}: Agent() got an unknown option {name!r}; {guess}options plugins "
                f"declare: {', '.join(sorted(declared)) or 'none'} (is the plugin that provides "
                "it installed and loaded?)"
            )
        options[name] = record.check(value, owner) if record.check is not None else value
    return options


# What other agent frameworks (pydantic-ai's Agent among them) call these.
_PER_PROMPT = "the output type is set per prompt: Prompt(user=..., response_format=...)"
_ELSEWHERE = {
    "output_type": _PER_PROMPT,
    "result_type": _PER_PROMPT,
    "response_format": _PER_PROMPT,
    "system_prompt": "did you mean system=...? (the agent's instructions)",
    "instructions": "did you mean system=...? (the agent's instructions)",
}


def deps_check(expected: Any, owner: str) -> Callable[[Any], bool]:
    """Whether a deps object is of type ``expected`` (a class, a generic alias or a union)."""
    if expected is Any or expected is object:
        return lambda value: True
    if expected is None or expected is type(None):
        return lambda value: value is None
    origin = typing.get_origin(expected)
    if origin is typing.Union or origin is types.UnionType:
        checks = [deps_check(arg, owner) for arg in typing.get_args(expected)]
        return lambda value: any(check(value) for check in checks)
    runtime = origin if isinstance(origin, type) else expected
    if not isinstance(runtime, type):
        raise ConfigurationError(
            f"{owner}: deps_type must be a class (the type of the deps object each call "
            f"passes, which tools get as ctx.deps), got {expected!r:.60}"
        )
    try:
        isinstance(None, runtime)
    except TypeError as exc:
        if getattr(runtime, "_is_protocol", False):
            # A Protocol without @runtime_checkable: a static promise that mypy
            # checks; at run time any object may keep it.
            return lambda value: True
        raise ConfigurationError(
            f"{owner}: deps_type={type_name(expected)} cannot be checked with isinstance "
            f"({exc}); give a class"
        ) from None
    return lambda value: isinstance(value, runtime)


def overrides_error(agent: str, overrides: Any) -> ConfigurationError:
    """The error for a call's ``overrides`` argument that is not a `PromptOverrides`."""
    kind = type(overrides).__name__
    if isinstance(overrides, list | tuple):
        hint = "to continue a conversation pass message_history=result.messages"
    elif isinstance(overrides, Mapping):
        hint = "pass PromptOverrides(**settings)"
    else:
        hint = "pass PromptOverrides(model=..., temperature=...) or None"
    return ConfigurationError(
        f"agent {agent!r}: overrides (the argument after the prompt) must be a "
        f"PromptOverrides, got {kind}; {hint}"
    )


def make_client(agent: str) -> Any:
    """An ``anthropic.AsyncAnthropic`` from the environment, its key registered as a secret."""
    import anthropic

    try:
        client = anthropic.AsyncAnthropic()
    except anthropic.AnthropicError as exc:
        raise ConfigurationError(
            f"agent {agent!r} has no client: {exc}. Set ANTHROPIC_API_KEY, or pass "
            "client=... (offline: groundswell.testing.FakeAnthropicAPI().client(); in "
            "a test: the fake_agents fixture, groundswell.testing.use_fake() or "
            "agent.override(client=...))"
        ) from exc
    if isinstance(client.api_key, str):
        register_secret(client.api_key)
    return client


def deps_error(agent: str, expected: Any, deps: Any) -> ConfigurationError:
    """The error for a call whose ``deps`` are not of the agent's ``deps_type``."""
    name = type_name(expected)
    if deps is None:
        return ConfigurationError(
            f"agent {agent!r} declares deps_type={name}: pass deps=... (a "
            f"{name}) to prompt(), run(), stream() or run_sync()"
        )
    return ConfigurationError(
        f"agent {agent!r}: deps must be a {name} (its deps_type), got "
        f"{type(deps).__name__} {deps!r:.60}"
    )


class _NoLoop:
    """The key of the client made outside any event loop (a weakly referable object)."""


#: Where an agent keeps the client it made outside any event loop.
NO_LOOP = _NoLoop()
