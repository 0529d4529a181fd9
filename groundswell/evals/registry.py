"""Evaluators by name: the built-in ones and those plugins register.

A dataset names its evaluators (``- contains: "A-1"``); `from_spec` turns such
an entry into an evaluator. Plugins add names through the
``register_evaluators`` hook (`groundswell.NamedEvaluator` records).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError, GroundswellError, PluginError
from ..plugins.manager import get_plugin_manager
from .evaluators import Contains, Equals, EqualsExpected, Regex
from .judge import LLMJudge
from .tree_checks import (
    MaxCost,
    MaxDuration,
    MaxModelTurns,
    NoFailedNodes,
    ToolCalls,
    ToolsCalled,
)

__all__ = ["BUILTIN_EVALUATORS", "evaluator_names", "from_spec", "from_specs"]

#: The evaluators every dataset can name, by name.
BUILTIN_EVALUATORS: dict[str, Callable[..., Any]] = {
    cls.name: cls
    for cls in (
        EqualsExpected,
        Equals,
        Contains,
        Regex,
        ToolsCalled,
        ToolCalls,
        NoFailedNodes,
        MaxModelTurns,
        MaxCost,
        MaxDuration,
        LLMJudge,
    )
}


def _factories() -> dict[str, tuple[Callable[..., Any], str | None]]:
    """Every evaluator name, with its factory and the plugin that registered it."""
    found: dict[str, tuple[Callable[..., Any], str | None]] = {
        name: (factory, None) for name, factory in BUILTIN_EVALUATORS.items()
    }
    manager = get_plugin_manager()
    for name, record in manager.evaluators().items():
        plugin = manager.owner("register_evaluators", name) or name
        if name in found:
            raise PluginError(
                f"plugin {plugin!r} registers an evaluator named {name!r}, which is built in; "
                "give it another name",
                plugin=plugin,
            )
        found[name] = (record.factory, plugin)
    return found


def evaluator_names() -> list[str]:
    """The names a dataset can use, built-in and from plugins, sorted."""
    return sorted(_factories())


def from_spec(spec: Any) -> Any:
    """The evaluator a dataset entry names, or ``spec`` itself when it is one already.

    ``"name"`` makes it with no arguments, ``{"name": {"key": value}}`` with keyword
    arguments, ``{"name": value}`` with one argument.
    """
    if not isinstance(spec, str | dict):
        if callable(spec) or hasattr(spec, "evaluate"):
            return spec
        raise ConfigurationError(
            f"an evaluator is a name, a {{name: arguments}} mapping, an object with "
            f"evaluate(ctx) or a function of the context; got {type(spec).__name__}"
        )
    if isinstance(spec, str):
        name, argument = spec, None
    else:
        if len(spec) != 1:
            raise ConfigurationError(
                f"an evaluator entry is one name with its arguments, like "
                f"{{contains: 'A-1'}}; got {sorted(spec)}"
            )
        ((name, argument),) = spec.items()
    factories = _factories()
    if name not in factories:
        close = difflib.get_close_matches(name, factories, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigurationError(
            f"no evaluator named {name!r}{hint} (known: {', '.join(sorted(factories))}; "
            "plugins add more through register_evaluators)"
        )
    factory, plugin = factories[name]
    try:
        if argument is None:
            return factory()
        if isinstance(argument, dict):
            return factory(**argument)
        return factory(argument)
    except GroundswellError:
        raise
    except TypeError as exc:
        raise ConfigurationError(f"evaluator {name!r}: {exc}") from exc
    except Exception as exc:
        if plugin is None:
            raise ConfigurationError(f"evaluator {name!r}: {exc}") from exc
        raise PluginError(
            f"evaluator {name!r} of plugin {plugin!r} could not be made: "
            f"{type(exc).__name__}: {exc}",
            plugin=plugin,
        ) from exc


def from_specs(specs: Any) -> list[Any]:
    """`from_spec` of each entry."""
    return [from_spec(spec) for spec in specs or ()]
