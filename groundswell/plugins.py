"""Plugin loading, listing and the typed collectors over the hook families.

Entry points in the ``groundswell`` group are loaded one at a time, so one
broken plugin is reported (name, version, error) and skipped instead of taking
the host down. Environment controls:

- ``GROUNDSWELL_LOAD_PLUGINS``: comma-separated allow-list of entry-point names
  (``""`` loads none);
- ``GROUNDSWELL_DISABLE_PLUGINS``: comma-separated deny-list;
- ``GROUNDSWELL_STRICT_PLUGINS=1``: raise :class:`PluginError` instead of
  reporting and skipping (useful in test suites).
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pluggy

from . import hookspecs
from .errors import PluginError
from .events import Sink, SinkHub
from .hookspecs import CacheBackend, EventSink, ReflectionStrategy, ToolProvider

__all__ = ["PluginInfo", "PluginManager", "get_plugin_manager"]

logger = logging.getLogger("groundswell.plugins")

ENTRY_POINT_GROUP = "groundswell"
_HOOK_RECORDS: dict[str, type[Any]] = {
    "register_cache_backends": CacheBackend,
    "register_reflection_strategies": ReflectionStrategy,
    "register_event_sinks": EventSink,
    "register_tool_providers": ToolProvider,
}
R = TypeVar("R", CacheBackend, ReflectionStrategy, EventSink, ToolProvider)


def _env_list(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def strict_plugins() -> bool:
    """True when ``GROUNDSWELL_STRICT_PLUGINS`` asks for plugin errors to raise."""
    return os.environ.get("GROUNDSWELL_STRICT_PLUGINS", "").lower() in {"1", "true", "yes", "on"}


@dataclass
class PluginInfo:
    """What ``groundswell plugins`` shows for one plugin."""

    name: str
    version: str | None = None
    distribution: str | None = None
    hooks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    source: str = "entry point"

    @property
    def ok(self) -> bool:
        """True when the plugin loaded and none of its hooks failed."""
        return not self.errors


class PluginManager:
    """Groundswell's plugin registry (a thin layer over :class:`pluggy.PluginManager`)."""

    def __init__(self, *, strict: bool | None = None) -> None:
        #: None follows GROUNDSWELL_STRICT_PLUGINS; False always reports and skips.
        self.strict = strict
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._infos: dict[str, PluginInfo] = {}
        self._hub: SinkHub | None = None
        self._lock = threading.RLock()

    # -- loading -------------------------------------------------------------------

    def load_entrypoints(self) -> int:
        """Load every allowed entry point of the ``groundswell`` group; returns how many loaded."""
        allow = _env_list("GROUNDSWELL_LOAD_PLUGINS")
        deny = _env_list("GROUNDSWELL_DISABLE_PLUGINS") or set()
        loaded = 0
        seen: set[str] = set()
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            # The same distribution can be visible twice on sys.path (editable installs).
            if ep.name in seen or (allow is not None and ep.name not in allow) or ep.name in deny:
                continue
            seen.add(ep.name)
            dist = ep.dist
            info = PluginInfo(
                name=ep.name,
                version=dist.version if dist else None,
                distribution=dist.metadata["Name"] if dist else None,
            )
            with self._lock:
                if ep.name in self._infos:
                    continue
                self._infos[ep.name] = info
            try:
                plugin = ep.load()
            except Exception as exc:
                self._report(info, f"import failed: {type(exc).__name__}: {exc}", exc)
                continue
            if self._register(plugin, info):
                loaded += 1
        return loaded

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin object or module at run time; returns its name.

        Raises :class:`PluginError` if the name is taken or a hook is unknown.
        """
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        with self._lock:
            if name in self._infos:
                raise PluginError(f"a plugin named {name!r} is already registered", plugin=name)
            info = PluginInfo(name=name, source="registered")
            self._infos[name] = info
        if not self._register(plugin, info, always_raise=True):
            raise PluginError(f"plugin {name!r} failed to register: {info.errors[-1]}", plugin=name)
        return name

    def unregister(self, name: str) -> None:
        """Remove the plugin registered under ``name`` (no error if absent)."""
        with self._lock:
            self._infos.pop(name, None)
            if self._pm.has_plugin(name):
                self._pm.unregister(name=name)
            self._reset_sinks()

    def _register(self, plugin: object, info: PluginInfo, always_raise: bool = False) -> bool:
        try:
            self._pm.register(plugin, name=info.name)
            # Catches misspelled hook names (e.g. register_cache_backend) at load time.
            self._pm.check_pending()
        except Exception as exc:
            if self._pm.has_plugin(info.name):
                self._pm.unregister(name=info.name)
            if always_raise:
                info.errors.append(f"{type(exc).__name__}: {exc}")
                with self._lock:
                    self._infos.pop(info.name, None)
                return False
            self._report(info, f"registration failed: {exc}", exc)
            return False
        info.hooks = sorted(c.name for c in self._pm.get_hookcallers(plugin) or [])
        self._reset_sinks()
        return True

    def _report(self, info: PluginInfo, message: str, exc: BaseException | None = None) -> None:
        first_time = message not in info.errors
        if first_time:
            info.errors.append(message)
        label = f"{info.name} {info.version}" if info.version else info.name
        if self.strict if self.strict is not None else strict_plugins():
            raise PluginError(f"plugin {label!r}: {message}", plugin=info.name) from exc
        if first_time:
            logger.warning("plugin %r skipped: %s", label, message)

    # -- listing -------------------------------------------------------------------

    def list_plugins(self) -> list[PluginInfo]:
        """Every plugin seen, loaded or failed, sorted by name."""
        return sorted(self._infos.values(), key=lambda i: i.name)

    @property
    def errors(self) -> dict[str, list[str]]:
        """Plugin name → its errors, for plugins that had any."""
        return {i.name: list(i.errors) for i in self._infos.values() if i.errors}

    def check(self) -> None:
        """Run every collector and start every sink once, so hook failures are recorded."""
        self.cache_backends()
        self.reflection_strategies()
        self.tool_providers()
        self.event_sinks()

    # -- collectors ------------------------------------------------------------------

    def _collect(self, hook_name: str, record_type: type[R]) -> dict[str, R]:
        records: dict[str, R] = {}
        owners: dict[str, str] = {}
        caller = getattr(self._pm.hook, hook_name)
        # Calling each implementation on its own isolates a raising plugin; pluggy's
        # own call would abort the whole collection at the first failure.
        for impl in caller.get_hookimpls():  # registration order: first one wins
            info = self._infos.get(impl.plugin_name) or PluginInfo(name=impl.plugin_name)
            try:
                items = _as_records(impl.function(), record_type, hook_name)
            except Exception as exc:
                self._report(info, f"{hook_name} raised {type(exc).__name__}: {exc}", exc)
                continue
            for item in items:
                if item.name in records:
                    self._report(
                        info,
                        f"{hook_name}: name {item.name!r} is already registered by plugin "
                        f"{owners[item.name]!r}; the one from plugin {impl.plugin_name!r} is ignored",
                    )
                    continue
                records[item.name] = item
                owners[item.name] = impl.plugin_name
        return records

    def cache_backends(self) -> dict[str, CacheBackend]:
        """Cache backends by name."""
        return self._collect("register_cache_backends", CacheBackend)

    def reflection_strategies(self) -> dict[str, ReflectionStrategy]:
        """Reflection strategies by name."""
        return self._collect("register_reflection_strategies", ReflectionStrategy)

    def event_sinks(self) -> dict[str, EventSink]:
        """Event sinks by name."""
        return self._collect("register_event_sinks", EventSink)

    def tool_providers(self) -> dict[str, ToolProvider]:
        """Tool providers by name."""
        return self._collect("register_tool_providers", ToolProvider)

    # -- event sinks -----------------------------------------------------------------

    def sink_hub(self) -> SinkHub:
        """The hub delivering events to every registered sink (built on first use)."""
        hub = self._hub
        if hub is not None:
            return hub
        with self._lock:
            if self._hub is None:
                sinks: dict[str, Sink] = {}
                for name, record in self.event_sinks().items():
                    try:
                        sink = record.factory()
                        if not callable(getattr(sink, "handle", None)):
                            raise TypeError("its factory returned an object without handle(event)")
                    except Exception as exc:
                        info = self._owner_info(name)
                        self._report(info, f"event sink {name!r} failed to start: {exc}", exc)
                        continue
                    sinks[name] = sink
                self._hub = SinkHub(sinks)
            return self._hub

    def _owner_info(self, sink_name: str) -> PluginInfo:
        for impl in self._pm.hook.register_event_sinks.get_hookimpls():
            info = self._infos.get(impl.plugin_name)
            if info is not None:
                try:
                    names = {r.name for r in _as_records(impl.function(), EventSink, "")}
                except Exception:
                    continue
                if sink_name in names:
                    return info
        return PluginInfo(name=sink_name)

    def _reset_sinks(self) -> None:
        # A plugin came or went: rebuild the sink set on next use.
        hub, self._hub = self._hub, None
        if hub is not None:
            hub.close(timeout=1.0)


def _as_records(value: Any, record_type: type[R], hook_name: str) -> list[R]:
    if value is None:
        return []
    items: Iterable[Any] = [value] if isinstance(value, record_type) else value
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise TypeError(
            f"{hook_name} must return {record_type.__name__} records, got {value!r:.80}"
        )
    out: list[R] = []
    for item in items:
        if not isinstance(item, record_type):
            raise TypeError(
                f"{hook_name} must return {record_type.__name__} records, got {type(item).__name__}"
            )
        out.append(item)
    return out


_manager: PluginManager | None = None
_manager_lock = threading.Lock()


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager; entry points are loaded on first call."""
    global _manager
    if _manager is None:
        with _manager_lock:
            if _manager is None:
                manager = PluginManager()
                manager.load_entrypoints()
                _manager = manager
    return _manager


def reset_plugin_manager() -> None:
    """Forget the process-wide manager (its sinks are closed); the next use reloads plugins."""
    global _manager
    with _manager_lock:
        old, _manager = _manager, None
    if old is not None:
        old._reset_sinks()
