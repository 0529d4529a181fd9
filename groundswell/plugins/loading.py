"""Which plugins load: the entry-point group, the kernel's plugins, the environment's lists."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from ..errors import ConfigurationError
from ..hookspecs import hookimpl

ENTRY_POINT_GROUP = "groundswell"
#: The kernel's own default plugins, by module name (as datasette names its
#: DEFAULT_PLUGINS): importing them here by name keeps the registry below the
#: features it registers.
KERNEL_PLUGINS = (
    "groundswell.reflection",
    "groundswell.budget.tokens",
    "groundswell.workflow.execution",
    "groundswell.middleware",
)
BUILTIN = "groundswell"


def env_list(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off", ""})


def strict_plugins() -> bool:
    """True when ``GROUNDSWELL_STRICT_PLUGINS`` asks for plugin errors to raise.

    It takes ``1``/``true``/``yes``/``on`` and ``0``/``false``/``no``/``off``/``""``
    (any case); anything else is a `ConfigurationError`, not a silent "off".
    """
    raw = os.environ.get("GROUNDSWELL_STRICT_PLUGINS", "")
    value = raw.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigurationError(
        f"GROUNDSWELL_STRICT_PLUGINS={raw!r:.40} means neither on nor off; set it to 1, true, "
        "yes or on (plugin errors raise), or to 0, false, no, off or '' (they are reported)"
    )


@dataclass
class PluginInfo:
    """What ``groundswell plugins`` shows for one plugin."""

    name: str
    version: str | None = None
    distribution: str | None = None
    hooks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    source: str = "entry point"
    #: Why an installed plugin was not loaded (an allow- or deny-list), else None.
    disabled: str | None = None

    @property
    def ok(self) -> bool:
        """True when the plugin loaded and none of its hooks failed."""
        return not self.errors


def kernel_plugin(*hooks: Callable[[], Any]) -> SimpleNamespace:
    """The kernel's own registration hooks as one plugin, each marked ``tryfirst``.

    Registered before any plugin and tryfirst, the kernel's hooks are called
    before every plain plugin's, so its records keep their names against them;
    a plugin's tryfirst hook is called before the kernel's (pluggy calls
    later-registered ones first), which is how a plugin replaces a kernel record.
    """

    def tryfirst(hook: Callable[[], Any]) -> Callable[[], Any]:
        # A wrapper, so the modules' own functions keep their plain markers.
        def impl() -> Any:
            return hook()

        return hookimpl(tryfirst=True)(impl)

    return SimpleNamespace(**{hook.__name__: tryfirst(hook) for hook in hooks})
