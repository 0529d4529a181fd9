"""Checking what `Agent` is built with, setting by setting."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..cache.backends import ToolCachePolicy
from ..errors import ConfigurationError
from ..model.request_fields import sdk_fields
from ..model.settings_check import check_flag
from ..prompt.prompt import check_cache_name
from ..tools.tool import check_cache_policy

__all__ = ["check_cache_choice", "check_tool_cache", "model_or_default", "request_options"]


def model_or_default(model: str | None, default: str, owner: str) -> str:
    """``model``, else ``GROUNDSWELL_MODEL``, else ``default``; refuses an empty variable."""
    if model is not None:
        return model
    # Read when the agent is built, so a later GROUNDSWELL_MODEL counts too.
    chosen = os.environ.get("GROUNDSWELL_MODEL", default)
    if not chosen.strip():
        raise ConfigurationError(
            f"{owner}: GROUNDSWELL_MODEL is set but empty; unset it (for the default "
            "model) or set it to a model name such as 'claude-sonnet-4-6'"
        )
    return chosen


def request_options(options: dict[str, Any]) -> dict[str, Any]:
    """Take the SDK's request fields that have no keyword of their own out of ``options``."""
    if not options:
        return {}
    fields = sdk_fields()
    return {name: options.pop(name) for name in list(options) if name in fields}


def check_cache_choice(cache: Any, enable_cache: Any, owner: str) -> Any:
    """``cache``/``enable_cache`` as the agent keeps them: a backend, ``True`` (the default
    backend: the workflow's, else ``GROUNDSWELL_CACHE``, else lru) or ``None``."""
    check_flag("enable_cache", enable_cache, owner)
    check_cache_name(cache, owner)
    default_cache = os.environ.get("GROUNDSWELL_CACHE")
    if cache is None and enable_cache and default_cache:
        check_cache_name(default_cache, f"{owner} (GROUNDSWELL_CACHE)")
    return cache if cache is not None else (True if enable_cache else None)


def check_tool_cache(tool_cache: Any, owner: str) -> dict[str, ToolCachePolicy]:
    """``tool_cache``: tool names to `ToolCachePolicy`, checked."""
    if tool_cache is not None and not isinstance(tool_cache, Mapping):
        raise ConfigurationError(
            f"{owner}: tool_cache must map tool names to ToolCachePolicy, "
            f"got {type(tool_cache).__name__}"
        )
    policies = dict(tool_cache or {})
    for tool_name, policy in policies.items():
        if not isinstance(tool_name, str):
            raise ConfigurationError(
                f"{owner}: tool_cache keys must be tool names, got {tool_name!r}"
            )
        check_cache_policy(policy, f"{owner}: tool_cache[{tool_name!r}]")
    return policies
