"""What `Agent` checks when it is built: plugin-declared options and its ``deps_type``."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigurationError
from ..model import type_name
from ..plugins import get_plugin_manager

__all__ = ["check_options", "deps_check"]


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
            raise ConfigurationError(
                f"{owner}: Agent() got an unknown option {name!r}; options plugins declare: "
                f"{', '.join(sorted(declared)) or 'none'} (is the plugin that provides it "
                "installed and loaded?)"
            )
        options[name] = record.check(value, owner) if record.check is not None else value
    return options


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
    except TypeError as exc:  # e.g. a Protocol that is not runtime_checkable
        raise ConfigurationError(
            f"{owner}: deps_type={type_name(expected)} cannot be checked with isinstance "
            f"({exc}); give a class"
        ) from None
    return lambda value: isinstance(value, runtime)
