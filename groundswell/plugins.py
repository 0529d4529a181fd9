"""Plugin loading, listing and the typed collectors over the hook families.

Entry points in the ``groundswell`` group are loaded one at a time, so one
broken plugin is reported (name, version, error) and skipped instead of taking
the host down. Environment controls:

- ``GROUNDSWELL_LOAD_PLUGINS``: comma-separated allow-list of entry-point names
  (``""`` loads none);
- ``GROUNDSWELL_DISABLE_PLUGINS``: comma-separated deny-list;
- ``GROUNDSWELL_STRICT_PLUGINS=1``: raise `PluginError` instead of
  reporting and skipping (useful in test suites).
"""

from __future__ import annotations

import atexit
import importlib.metadata as md
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypeVar

import pluggy

from . import hookspecs
from .errors import PluginError
from .events import SinkHub
from .hookspecs import (
    CacheBackend,
    CliCommand,
    ContextProvider,
    EventSink,
    ExecutionBackend,
    ReflectionStrategy,
    TokenCounter,
    ToolProvider,
)

__all__ = ["PluginInfo", "PluginManager", "flush_sinks", "get_plugin_manager"]

logger = logging.getLogger("groundswell.plugins")

ENTRY_POINT_GROUP = "groundswell"
BUILTIN = "groundswell"
_HOOK_RECORDS: dict[str, type[Any]] = {
    "register_cache_backends": CacheBackend,
    "register_reflection_strategies": ReflectionStrategy,
    "register_event_sinks": EventSink,
    "register_tool_providers": ToolProvider,
    "register_context_providers": ContextProvider,
    "register_cli_commands": CliCommand,
    "register_token_counters": TokenCounter,
    "register_execution_backends": ExecutionBackend,
}
R = TypeVar(
    "R",
    CacheBackend,
    ReflectionStrategy,
    EventSink,
    ToolProvider,
    TokenCounter,
    ContextProvider,
    CliCommand,
    ExecutionBackend,
)


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
    #: Why an installed plugin was not loaded (an allow- or deny-list), else None.
    disabled: str | None = None

    @property
    def ok(self) -> bool:
        """True when the plugin loaded and none of its hooks failed."""
        return not self.errors


class PluginManager:
    """Groundswell's plugin registry (a thin layer over `pluggy.PluginManager`)."""

    def __init__(self, *, strict: bool | None = None) -> None:
        #: None follows GROUNDSWELL_STRICT_PLUGINS; False always reports and skips.
        self.strict = strict
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._infos: dict[str, PluginInfo] = {}
        self._hub: SinkHub | None = None
        # Bumped whenever the set of sinks may have changed; a hub is current when
        # it was synced at the latest generation (set only after the sync finished,
        # so other threads wait for a sync in progress instead of skipping it).
        self._sinks_gen = 1
        self._synced_gen = 0
        self._lock = threading.RLock()
        #: Problems that belong to no plugin (e.g. an allow-list naming nothing installed).
        self.warnings: list[str] = []
        #: Installed plugins that the allow- or deny-list kept from loading.
        self.skipped: dict[str, PluginInfo] = {}
        # The kernel's own hook implementations (the ``feedback`` reflection strategy,
        # the ``estimate`` and ``anthropic`` token counters) register like any plugin,
        # so every collector sees them, and no allow-list can switch them off.
        from . import execution, reflection, tokens

        kernel = SimpleNamespace(
            register_reflection_strategies=reflection.register_reflection_strategies,
            register_token_counters=tokens.register_token_counters,
            register_execution_backends=execution.register_execution_backends,
        )
        self._infos[BUILTIN] = PluginInfo(name=BUILTIN, source="builtin")
        self._register(kernel, self._infos[BUILTIN], always_raise=True)

    # -- loading -------------------------------------------------------------------

    def load_entrypoints(self) -> int:
        """Load every allowed entry point of the ``groundswell`` group; returns how many loaded."""
        allow = _env_list("GROUNDSWELL_LOAD_PLUGINS")
        deny = _env_list("GROUNDSWELL_DISABLE_PLUGINS") or set()
        loaded = 0
        seen: dict[str, str | None] = {}
        available: set[str] = set()
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            available.add(ep.name)
            dist = ep.dist
            dist_name = dist.metadata["Name"] if dist else None
            if ep.name in seen:
                # The same distribution twice on sys.path (editable installs) is harmless;
                # two distributions claiming one name is a conflict worth reporting.
                if seen[ep.name] != dist_name and ep.name in self._infos:
                    self._report(
                        self._infos[ep.name],
                        f"entry point name {ep.name!r} is also used by distribution "
                        f"{dist_name!r}; that one is ignored",
                    )
                continue
            seen[ep.name] = dist_name
            info = PluginInfo(
                name=ep.name, version=dist.version if dist else None, distribution=dist_name
            )
            if ep.name in deny:
                info.disabled = "named in GROUNDSWELL_DISABLE_PLUGINS"
            elif allow is not None and ep.name not in allow:
                info.disabled = "not named in GROUNDSWELL_LOAD_PLUGINS"
            if info.disabled:
                self.skipped.setdefault(ep.name, info)
                continue
            with self._lock:
                if ep.name in self._infos:
                    continue
                self._infos[ep.name] = info
            try:
                plugin = ep.load()
            except (Exception, SystemExit) as exc:  # a plugin calling sys.exit() on import too
                self._report(info, f"import failed: {type(exc).__name__}: {exc}", exc)
                continue
            if self._register(plugin, info):
                loaded += 1
        for name in sorted((allow or set()) - available):
            message = (
                f"GROUNDSWELL_LOAD_PLUGINS names {name!r}, but no installed plugin has that "
                f"name (installed: {', '.join(sorted(available)) or 'none'})"
            )
            self.warnings.append(message)
            logger.warning(message)
        return loaded

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin object or module at run time; returns its name.

        Raises `PluginError` if the name is taken or a hook is unknown.
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
        """Remove the plugin registered under ``name`` (no error if absent).

        Its event sinks are flushed and closed; other sinks are left running.
        """
        with self._lock:
            self._infos.pop(name, None)
            if self._pm.has_plugin(name):
                self._pm.unregister(name=name)
            self._sinks_gen += 1
            if self._hub is not None:
                self._sync_sinks(self._hub)

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
        self._sinks_gen += 1
        return True

    def _report(self, info: PluginInfo, message: str, exc: BaseException | None = None) -> None:
        first_time = message not in info.errors
        if first_time:
            info.errors.append(message)
        label = f"{info.name} {info.version}" if info.version else info.name
        if self.strict if self.strict is not None else strict_plugins():
            raise PluginError(f"plugin {label!r}: {message}", plugin=info.name) from exc
        if first_time:
            logger.warning("plugin %r: %s", label, message)

    # -- listing -------------------------------------------------------------------

    def list_plugins(self, *, builtin: bool = False) -> list[PluginInfo]:
        """Every plugin seen, loaded or failed, sorted by name.

        The kernel's own hook implementations (``groundswell``, which registers
        the ``feedback`` reflection strategy) are listed only with ``builtin=True``.
        """
        infos = (i for i in self._infos.values() if builtin or i.source != "builtin")
        return sorted(infos, key=lambda i: i.name)

    def provides(self) -> dict[str, dict[str, list[str]]]:
        """Plugin name → hook name → the record names it registered there."""
        out: dict[str, dict[str, list[str]]] = {}
        for hook_name, record_type in _HOOK_RECORDS.items():
            _, owners = self._collect_owned(hook_name, record_type)
            for record_name, plugin in owners.items():
                out.setdefault(plugin, {}).setdefault(hook_name, []).append(record_name)
        return out

    @property
    def errors(self) -> dict[str, list[str]]:
        """Plugin name → its errors, for plugins that had any."""
        return {i.name: list(i.errors) for i in self._infos.values() if i.errors}

    def check(self) -> None:
        """Call every registration hook once, so hook failures are recorded.

        Sink factories are not called here; they run when the first run starts.
        """
        self.cache_backends()
        self.reflection_strategies()
        self.tool_providers()
        self.event_sinks()

    # -- collectors ------------------------------------------------------------------

    def _collect(self, hook_name: str, record_type: type[R]) -> dict[str, R]:
        return self._collect_owned(hook_name, record_type)[0]

    def _collect_owned(
        self, hook_name: str, record_type: type[R]
    ) -> tuple[dict[str, R], dict[str, str]]:
        """Records by name, and the plugin that registered each name."""
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
        return records, owners

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

    def context_providers(self) -> dict[str, ContextProvider]:
        """Context providers (for ``Agent(context=[...])``) by name."""
        return self._collect("register_context_providers", ContextProvider)

    def cli_commands(self) -> dict[str, CliCommand]:
        """Commands plugins add to the ``groundswell`` command, by name."""
        return self._collect("register_cli_commands", CliCommand)

    def token_counters(self) -> dict[str, TokenCounter]:
        """Token counters by name."""
        return self._collect("register_token_counters", TokenCounter)

    def execution_backends(self) -> dict[str, ExecutionBackend]:
        """Execution backends (``local``, and durable ones such as ``dbos``) by name."""
        return self._collect("register_execution_backends", ExecutionBackend)

    # -- event sinks -----------------------------------------------------------------

    def sink_hub(self) -> SinkHub:
        """The hub delivering events to every registered sink.

        A sink's factory is called once, the first time a run needs the hub
        after its plugin registered; registering or removing other plugins never
        restarts it.
        """
        hub = self._hub
        if hub is not None and self._synced_gen == self._sinks_gen:
            return hub
        with self._lock:
            if self._hub is None:
                self._hub = SinkHub()
                atexit.register(self._hub.close)
            if self._synced_gen != self._sinks_gen:
                self._sync_sinks(self._hub)
            return self._hub

    def _sync_sinks(self, hub: SinkHub) -> None:
        generation = self._sinks_gen
        records, owners = self._collect_owned("register_event_sinks", EventSink)
        for name in hub.names():
            if name not in records:
                hub.remove(name)
        attached = set(hub.names())
        for name, record in records.items():
            if name in attached:
                continue
            try:
                sink = record.factory()
                if sink is None:
                    # Nothing to do in this process (e.g. no exporter configured);
                    # refresh_sinks() asks again after the configuration changed.
                    continue
                if not callable(getattr(sink, "handle", None)):
                    raise TypeError("its factory returned an object without handle(event)")
            except Exception as exc:
                info = self._infos.get(owners[name]) or PluginInfo(name=name)
                self._report(info, f"event sink {name!r} failed to start: {exc}", exc)
                continue
            hub.add(name, sink)
        # Only now: a factory that raised (strict mode) leaves the hub due for a resync.
        self._synced_gen = generation

    def refresh_sinks(self, *names: str, timeout: float = 5.0) -> None:
        """Restart the named sinks (all when none are named): their factories run again.

        For plugins whose configuration changed after the first run, e.g.
        ``groundswell_otel.instrument()``: the old sink is flushed and closed,
        and the next run calls the factory again (which may now return a sink
        where it returned ``None`` before).
        """
        hub = self._hub
        if hub is not None:
            for name in names or tuple(hub.names()):
                if name in hub.names():
                    hub.remove(name, timeout)
        self._sinks_gen += 1

    def close(self, timeout: float = 5.0) -> None:
        """Flush and close every event sink."""
        hub, self._hub = self._hub, None
        self._sinks_gen += 1
        if hub is not None:
            hub.close(timeout)


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
        old.close()


def flush_sinks(timeout: float = 5.0) -> bool:
    """Wait until every event sink has handled the events sent so far; False on timeout.

    Useful at the end of a short script or test: sinks work on background
    threads, and are otherwise flushed and closed at interpreter exit.
    """
    manager = _manager
    if manager is None or manager._hub is None:
        return True
    return manager._hub.flush(timeout)
