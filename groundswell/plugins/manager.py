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
import difflib
import importlib
import importlib.metadata as md
import logging
import threading
from typing import Any, overload

import pluggy

from .. import hookspecs
from ..errors import ConfigurationError, PluginError
from ..hookspecs import (
    AgentMiddleware,
    AgentOption,
    CacheBackend,
    CliCommand,
    ContextProvider,
    EventSink,
    ExecutionBackend,
    NamedEvaluator,
    ReflectionStrategy,
    TokenCounter,
    ToolProvider,
)
from ..tree.events import SinkHub, sink_problems
from .loading import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    KERNEL_PLUGINS,
    PluginInfo,
    env_list,
    kernel_plugin,
    strict_plugins,
)
from .records import HOOK_OF_RECORD, HOOK_RECORDS, KIND_NOUNS, RecordT, as_records

__all__ = ["PluginManager", "flush_sinks", "get_plugin_manager"]

logger = logging.getLogger("groundswell.plugins")

# Bundled plugins whose dependencies sit behind an extra: plugin (and record) name -> extra.
_EXTRAS = {"redis": "redis", "dbos": "durable", "history": "history"}


class PluginManager:
    """Groundswell's plugin registry (a thin layer over `pluggy.PluginManager`)."""

    def __init__(self, *, strict: bool | None = None) -> None:
        #: None follows GROUNDSWELL_STRICT_PLUGINS; False always reports and skips.
        self.strict = strict
        if strict is None:
            strict_plugins()  # a value that means neither on nor off fails now, not at a failure
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
        # the ``estimate`` and ``anthropic`` token counters, the ``local`` execution
        # backend, the default agent middleware) register like any plugin, so every
        # collector sees them, and no allow-list can switch them off. They are
        # tryfirst, so only a plugin's tryfirst hook takes their names.
        kernel = kernel_plugin(
            *(
                hook
                for module in KERNEL_PLUGINS
                for hook_name in HOOK_RECORDS
                if (hook := getattr(importlib.import_module(module), hook_name, None)) is not None
            )
        )
        self._infos[BUILTIN] = PluginInfo(name=BUILTIN, source="builtin")
        self._register(kernel, self._infos[BUILTIN], always_raise=True)

    # -- loading -------------------------------------------------------------------

    def load_entrypoints(self) -> int:
        """Load every allowed entry point of the ``groundswell`` group; returns how many loaded."""
        allow = env_list("GROUNDSWELL_LOAD_PLUGINS")
        deny = env_list("GROUNDSWELL_DISABLE_PLUGINS") or set()
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
            # Most likely a typo, which would also turn off every plugin the user meant
            # to keep (the default cache ``lru`` among them): said loudly, raised when strict.
            message = (
                f"GROUNDSWELL_LOAD_PLUGINS names {name!r}, but no installed plugin has that "
                f"name (installed: {', '.join(sorted(available)) or 'none'}); only the plugins "
                "it names load, so fix the name (or use '' to load none)"
            )
            self.warnings.append(message)
            if self.strict if self.strict is not None else strict_plugins():
                raise PluginError(message, plugin=name)
            logger.warning(message)
        for name in sorted(deny - available):
            # A typo here leaves on the plugin the user meant to turn off.
            close = difflib.get_close_matches(name, sorted(available), n=1)
            message = (
                f"GROUNDSWELL_DISABLE_PLUGINS names {name!r}, but no installed plugin has that "
                f"name{f' (did you mean {close[0]!r}?)' if close else ''}; it turns nothing off "
                f"(installed: {', '.join(sorted(available)) or 'none'})"
            )
            self.warnings.append(message)
            if self.strict if self.strict is not None else strict_plugins():
                raise PluginError(message, plugin=name)
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

    @property
    def generation(self) -> int:
        """A number that changes whenever a plugin is registered or removed."""
        return self._sinks_gen

    def report(self, plugin: str, message: str, exc: BaseException | None = None) -> None:
        """Record a problem of the plugin named ``plugin``: logged once, or raised when strict."""
        info = self._infos.get(plugin) or PluginInfo(name=plugin)
        self._report(info, message, exc)

    def note(self, plugin: str, message: str) -> None:
        """Record a problem of ``plugin`` that the kernel contained (the run went on without it).

        Listed with the plugin's errors, never raised (even when strict): the caller logged it.
        """
        info = self._infos.get(plugin)
        if info is not None and message not in info.errors:
            info.errors.append(message)

    def owner(self, hook_name: str, record_name: str) -> str | None:
        """The plugin that registered ``record_name`` through ``hook_name``, if any."""
        return self._collect_owned(hook_name, HOOK_RECORDS[hook_name])[1].get(record_name)

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
        for hook_name, record_type in HOOK_RECORDS.items():
            _, owners = self._collect_owned(hook_name, record_type)
            for record_name, plugin in owners.items():
                out.setdefault(plugin, {}).setdefault(hook_name, []).append(record_name)
        return out

    @property
    def errors(self) -> dict[str, list[str]]:
        """Plugin name → its errors, for plugins that had any."""
        return {i.name: list(i.errors) for i in self._infos.values() if i.errors}

    def check(self) -> None:
        """Call every registration hook once, so hook failures and name clashes are recorded.

        No factory is called here (sinks start when the first run starts).
        """
        for hook_name, record_type in HOOK_RECORDS.items():
            self._collect(hook_name, record_type)

    @overload
    def lookup(self, kind: type[RecordT], name: str) -> RecordT: ...

    @overload
    def lookup(self, kind: str, name: str) -> Any: ...

    def lookup(self, kind: str | type[Any], name: str) -> Any:
        """The record of one kind registered as ``name``; the one way to resolve a name.

        ``kind`` is a record type (``CacheBackend``: the result is typed) or its
        hook's name (``"register_cache_backends"``). An unknown name raises
        `ConfigurationError`, the same for every kind::

            no cache backend named 'x'; available: lru, redis, sqlite

        (``available: none installed`` when there are none), followed by what
        may explain it: the plugin of that name turned off by
        ``GROUNDSWELL_LOAD_PLUGINS``/``GROUNDSWELL_DISABLE_PLUGINS``, the extra a
        bundled plugin needs (``pip install "groundswell[redis]"``), and the
        last error of each plugin that failed to load or register.
        """
        hook_name = kind if isinstance(kind, str) else HOOK_OF_RECORD.get(kind)
        if hook_name not in HOOK_RECORDS:
            raise TypeError(
                f"lookup: {kind!r} is not a record type or registration hook name; one of: "
                + ", ".join(sorted(HOOK_RECORDS))
            )
        records = self._collect(hook_name, HOOK_RECORDS[hook_name])
        record = records.get(name)
        if record is None:
            raise ConfigurationError(self._not_found(hook_name, name, sorted(records)))
        return record

    def _not_found(self, hook_name: str, name: str, available: list[str]) -> str:
        message = (
            f"no {KIND_NOUNS[hook_name]} named {name!r}; "
            f"available: {', '.join(available) or 'none installed'}"
        )
        # Bundled plugins name their main record after themselves, so a plugin of
        # the same name that is off or broken is the likely explanation.
        skipped = self.skipped.get(name)
        loaded = self._infos.get(name)
        if skipped is not None and skipped.disabled:
            message += f"; plugin {name!r} is installed but not loaded ({skipped.disabled})"
        elif name in _EXTRAS and (loaded is None or not loaded.ok):
            message += (
                f"; it comes with the bundled {name!r} plugin: "
                f'pip install "groundswell[{_EXTRAS[name]}]"'
            )
        for plugin, errors in sorted(self.errors.items()):
            message += f"; plugin {plugin!r} failed: {errors[-1]}"
        for warning in self.warnings:
            message += f"; {warning}"
        return message

    # -- collectors ------------------------------------------------------------------

    def _collect(self, hook_name: str, record_type: type[RecordT]) -> dict[str, RecordT]:
        return self._collect_owned(hook_name, record_type)[0]

    def _collect_owned(
        self, hook_name: str, record_type: type[RecordT]
    ) -> tuple[dict[str, RecordT], dict[str, str]]:
        """Records by name, and the plugin that registered each name."""
        records: dict[str, RecordT] = {}
        owners: dict[str, str] = {}
        first: dict[str, pluggy.HookImpl] = {}
        caller = getattr(self._pm.hook, hook_name)
        # Calling each implementation on its own isolates a raising plugin; pluggy's
        # own call would abort the whole collection at the first failure. Walked in
        # the order pluggy calls them (get_hookimpls() is that order reversed:
        # tryfirst ones, then plain, then trylast; later-registered first within
        # each), and the first one to register a name keeps it.
        for impl in reversed(caller.get_hookimpls()):
            info = self._infos.get(impl.plugin_name) or PluginInfo(name=impl.plugin_name)
            if impl.hookwrapper or impl.wrapper:
                self._report(info, f"{hook_name}: registration hooks cannot be hook wrappers")
                continue
            try:
                items = as_records(impl.function(), record_type, hook_name)
            except Exception as exc:
                self._report(info, f"{hook_name} raised {type(exc).__name__}: {exc}", exc)
                continue
            for item in items:
                winner = first.get(item.name)
                if winner is None:
                    records[item.name] = item
                    owners[item.name] = impl.plugin_name
                    first[item.name] = impl
                elif impl.plugin_name == BUILTIN and winner.plugin_name != BUILTIN:
                    # Only a tryfirst hook gets here (see kernel_plugin): a deliberate
                    # replacement of a kernel default, so not an error.
                    logger.info(
                        "plugin %r replaces the kernel's %s %r",
                        winner.plugin_name,
                        KIND_NOUNS[hook_name],
                        item.name,
                    )
                else:
                    self._report(info, _clash(hook_name, item.name, winner, impl))
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

    def agent_middleware(self) -> dict[str, AgentMiddleware]:
        """Agent middleware by name, the kernel's own defaults included."""
        return self._collect("register_agent_middleware", AgentMiddleware)

    def agent_options(self) -> dict[str, AgentOption]:
        """The agent options plugins declare (``Agent(name=value)``), by name."""
        return self._collect("register_agent_options", AgentOption)

    def evaluators(self) -> dict[str, NamedEvaluator]:
        """The eval evaluators plugins add (`groundswell.evals`), by name."""
        return self._collect("register_evaluators", NamedEvaluator)

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
                problems = sink_problems(sink)
                if problems:  # e.g. an async handle(), which nothing would ever await
                    raise TypeError("; ".join(problems))
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


def _clash(hook_name: str, name: str, winner: pluggy.HookImpl, loser: pluggy.HookImpl) -> str:
    message = (
        f"{hook_name}: name {name!r} is already registered by plugin {winner.plugin_name!r}; "
        f"the one from plugin {loser.plugin_name!r} is ignored"
    )
    # tryfirst helps unless the winner is a tryfirst plugin (then registration order decides).
    if not loser.tryfirst and (winner.plugin_name == BUILTIN or not winner.tryfirst):
        message += " (mark its hookimpl tryfirst=True to take the name)"
    return message


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
