"""The plugin system: entry-point loading, isolation, env controls, records, collectors."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import groundswell
from groundswell import (
    AgentMiddleware,
    AgentOption,
    CacheBackend,
    ConfigurationError,
    EventSink,
    ExecutionBackend,
    PluginError,
    PluginManager,
    ReflectionStrategy,
    TokenCounter,
    hookimpl,
)
from groundswell.budget.tokens import get_counter
from groundswell.workflow.execution import get_engine

GOOD = """
from groundswell import CacheBackend, ToolProvider, hookimpl

@hookimpl
def register_cache_backends():
    return [CacheBackend(name="memo", factory=dict, description="a dict")]

@hookimpl
def register_tool_providers():
    return ToolProvider(name="calc", factory=lambda: ["add"])
"""

RAISING_HOOK = """
from groundswell import hookimpl

@hookimpl
def register_cache_backends():
    raise RuntimeError("backend table is corrupt")
"""

MISSPELLED = """
from groundswell import hookimpl

@hookimpl
def register_cache_backend():  # missing the final s
    return []
"""


@pytest.fixture
def lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROUNDSWELL_STRICT_PLUGINS", "0")


def names(manager: PluginManager) -> list[str]:
    return [i.name for i in manager.list_plugins()]


def test_bundled_lru_plugin_loads_through_its_entry_point() -> None:
    manager = groundswell.get_plugin_manager()
    info = {i.name: i for i in manager.list_plugins()}["lru"]
    assert info.ok and info.source == "entry point"
    assert info.distribution == "groundswell" and info.version == groundswell.__version__
    assert info.hooks == ["register_cache_backends"]
    assert "lru" in manager.cache_backends()


def test_third_party_entry_point_is_loaded_and_its_records_collected(
    make_distribution: Callable[..., None],
) -> None:
    make_distribution("gs-good", "1.2.3", {"good": "gs_good"}, {"gs_good": GOOD})
    manager = PluginManager()
    manager.load_entrypoints()
    info = {i.name: i for i in manager.list_plugins()}["good"]
    assert (info.version, info.distribution) == ("1.2.3", "gs-good")
    assert info.hooks == ["register_cache_backends", "register_tool_providers"]
    backends = manager.cache_backends()
    assert set(backends) >= {"lru", "memo"}
    assert backends["memo"].factory() == {}
    assert manager.tool_providers()["calc"].factory() == ["add"]


def test_broken_import_is_reported_and_skipped(
    make_distribution: Callable[..., None], lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    make_distribution("gs-broken", "0.9", {"broken": "gs_broken"}, {"gs_broken": "1/0"})
    make_distribution("gs-good", "1.0", {"good": "gs_good"}, {"gs_good": GOOD})
    manager = PluginManager()
    with caplog.at_level(logging.WARNING, "groundswell.plugins"):
        manager.load_entrypoints()
    infos = {i.name: i for i in manager.list_plugins()}
    assert not infos["broken"].ok and infos["broken"].version == "0.9"
    assert "ZeroDivisionError" in infos["broken"].errors[0]
    assert infos["good"].ok and "memo" in manager.cache_backends()
    assert "'broken 0.9'" in caplog.text


def test_broken_import_raises_in_strict_mode(make_distribution: Callable[..., None]) -> None:
    make_distribution("gs-broken", "0.9", {"broken": "gs_broken"}, {"gs_broken": "1/0"})
    with pytest.raises(PluginError, match=r"broken 0\.9.*import failed") as info:
        PluginManager().load_entrypoints()
    assert info.value.plugin == "broken"
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_hook_that_raises_is_isolated(
    make_distribution: Callable[..., None], lenient: None
) -> None:
    make_distribution("gs-raise", "1.0", {"raiser": "gs_raise"}, {"gs_raise": RAISING_HOOK})
    manager = PluginManager()
    manager.load_entrypoints()
    assert "lru" in manager.cache_backends()  # the other plugins' records survive
    errors = manager.errors["raiser"]
    assert errors == ["register_cache_backends raised RuntimeError: backend table is corrupt"]
    manager.cache_backends()
    assert len(manager.errors["raiser"]) == 1  # reported once, not per call


def test_hook_that_raises_is_an_error_in_strict_mode(
    make_distribution: Callable[..., None],
) -> None:
    make_distribution("gs-raise", "1.0", {"raiser": "gs_raise"}, {"gs_raise": RAISING_HOOK})
    manager = PluginManager()
    manager.load_entrypoints()
    with pytest.raises(PluginError, match="backend table is corrupt"):
        manager.cache_backends()


def test_misspelled_hook_is_caught_at_load(
    make_distribution: Callable[..., None], lenient: None
) -> None:
    make_distribution("gs-typo", "1.0", {"typo": "gs_typo"}, {"gs_typo": MISSPELLED})
    manager = PluginManager()
    manager.load_entrypoints()
    (error,) = manager.errors["typo"]
    assert "unknown hook 'register_cache_backend'" in error
    assert "typo" not in [n for n, _ in manager._pm.list_name_plugin()]


def backend_plugin(factory: Callable[[], Any], **marks: bool) -> object:
    """A plugin registering the cache backend ``shared``, its hookimpl marked with ``marks``."""

    class Plugin:
        @hookimpl(**marks)
        def register_cache_backends(self) -> CacheBackend:
            return CacheBackend(name="shared", factory=factory)

    return Plugin()


def test_a_name_clash_goes_to_the_plugin_pluggy_calls_first_naming_both(lenient: None) -> None:
    manager = PluginManager()
    manager.register(backend_plugin(dict), name="first")
    manager.register(backend_plugin(list), name="second")
    # pluggy calls later-registered implementations first, so "second" keeps the name.
    assert manager.cache_backends()["shared"].factory is list
    assert manager.provides()["second"] == {"register_cache_backends": ["shared"]}
    (error,) = manager.errors["first"]
    assert "'shared' is already registered by plugin 'second'" in error
    assert "the one from plugin 'first' is ignored" in error
    assert "mark its hookimpl tryfirst=True to take the name" in error
    assert "second" not in manager.errors


def test_a_tryfirst_hookimpl_wins_a_name_clash_and_a_trylast_one_loses(lenient: None) -> None:
    manager = PluginManager()
    manager.register(backend_plugin(dict, tryfirst=True), name="eager")
    manager.register(backend_plugin(list), name="plain")
    manager.register(backend_plugin(set, trylast=True), name="late")
    assert manager.cache_backends()["shared"].factory is dict
    assert "already registered by plugin 'eager'" in manager.errors["plain"][0]
    assert "already registered by plugin 'eager'" in manager.errors["late"][0]
    assert "eager" not in manager.errors


def test_a_plugin_cannot_take_a_kernel_record_name_by_accident(lenient: None) -> None:
    class Rival:
        @hookimpl
        def register_token_counters(self) -> TokenCounter:
            return TokenCounter(name="anthropic", factory=dict)

    manager = PluginManager()
    manager.register(Rival(), name="rival")
    assert manager.lookup(TokenCounter, "anthropic").factory is not dict
    (error,) = manager.errors["rival"]
    assert "'anthropic' is already registered by plugin 'groundswell'" in error
    assert "tryfirst=True" in error


def test_a_tryfirst_plugin_replaces_a_kernel_record_without_an_error() -> None:
    class Replacement:
        @hookimpl(tryfirst=True)
        def register_execution_backends(self) -> ExecutionBackend:
            return ExecutionBackend(name="local", factory=dict, description="mine")

    manager = PluginManager()  # strict: any reported clash would raise
    manager.register(Replacement(), name="replacement")
    manager.check()
    assert manager.execution_backends()["local"].description == "mine"
    assert manager.provides()["replacement"] == {"register_execution_backends": ["local"]}
    assert (
        "register_execution_backends" not in manager.provides()[groundswell.plugins.loading.BUILTIN]
    )
    assert manager.errors == {}


def test_duplicate_plugin_name_and_bad_hook_results_are_errors() -> None:
    manager = PluginManager()

    class Plugin:
        @hookimpl
        def register_reflection_strategies(self) -> list[str]:
            return ["not a record"]

    manager.register(Plugin(), name="p")
    with pytest.raises(PluginError, match="already registered"):
        manager.register(Plugin(), name="p")
    with pytest.raises(PluginError, match="must return ReflectionStrategy records, got str"):
        manager.reflection_strategies()


def test_records_validate_their_fields() -> None:
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        EventSink(name="", factory=dict)
    with pytest.raises(TypeError, match="factory must be callable"):
        ReflectionStrategy(name="x", factory="nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"AgentMiddleware\.name must be a non-empty string"):
        AgentMiddleware(" ", dict)
    with pytest.raises(TypeError, match="AgentMiddleware 'm': factory must be callable"):
        AgentMiddleware("m", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"order must be an int .*got True"):
        AgentMiddleware("m", dict, True)
    with pytest.raises(TypeError, match=r"order must be an int .*got '100'"):
        AgentMiddleware("m", dict, "100")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="default must be True or False, got 1"):
        AgentMiddleware("m", dict, 100, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be a Python identifier .*got 'max-depth'"):
        AgentOption("max-depth")
    with pytest.raises(TypeError, match="must be a Python identifier"):
        AgentOption("class")
    with pytest.raises(TypeError, match="AgentOption 'depth': check must be callable or None"):
        AgentOption("depth", check=3)  # type: ignore[arg-type]


class RateLimit:
    """Stands in for a `groundswell.Middleware` subclass (the listing never builds one)."""


def _positive(value: Any, owner: str) -> int:
    if not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{owner}: max_depth must be a positive int, got {value!r}")
    return value


def test_hook_register_agent_middleware() -> None:
    class Plugin:
        @hookimpl
        def register_agent_middleware(self) -> list[AgentMiddleware]:
            return [
                AgentMiddleware("ratelimit", RateLimit, description="paces model calls"),
                AgentMiddleware("audit", RateLimit, 100, True),
            ]

    manager = PluginManager()
    manager.register(Plugin(), name="limits")
    middleware = manager.agent_middleware()
    assert middleware["ratelimit"] == AgentMiddleware(
        name="ratelimit",
        factory=RateLimit,
        order=500,
        default=False,
        description="paces model calls",
    )
    assert (middleware["audit"].order, middleware["audit"].default) == (100, True)
    assert isinstance(middleware["audit"].factory(), RateLimit)
    assert manager.provides()["limits"] == {"register_agent_middleware": ["ratelimit", "audit"]}


def test_hook_register_agent_options() -> None:
    class Plugin:
        @hookimpl
        def register_agent_options(self) -> tuple[AgentOption, ...]:
            return (
                AgentOption("max_depth", check=_positive, default=3, description="how deep"),
                AgentOption("remember"),
            )

    manager = PluginManager()
    manager.register(Plugin(), name="options")
    options = manager.agent_options()
    depth = options["max_depth"]
    assert (depth.default, depth.description) == (3, "how deep")
    assert depth.check is not None and depth.check(5, "Agent 'a'") == 5
    with pytest.raises(ConfigurationError, match="Agent 'a': max_depth must be a positive int"):
        depth.check(0, "Agent 'a'")
    assert options["remember"] == AgentOption("remember", None, None, "")
    assert manager.lookup("register_agent_options", "remember") == options["remember"]


def test_check_calls_every_registration_hook(lenient: None) -> None:
    def broken(self: object) -> None:
        raise RuntimeError("broken on purpose")

    hooks = [n for n in dir(groundswell.hookspecs) if n.startswith("register_")]
    plugin = type("Broken", (), {name: hookimpl(broken) for name in hooks})
    manager = PluginManager()
    manager.register(plugin(), name="broken")
    manager.check()
    failed = {e.split(" raised ")[0] for e in manager.errors["broken"]}
    assert failed == set(hooks) and len(hooks) == 11


def test_every_unknown_name_gets_the_same_error_listing_what_is_available() -> None:
    manager = PluginManager()
    with pytest.raises(ConfigurationError) as info:
        manager.lookup(ReflectionStrategy, "nope")
    assert str(info.value) == "no reflection strategy named 'nope'; available: feedback"
    with pytest.raises(
        ConfigurationError,
        match=r"^no agent middleware named 'x'; available: approval, batch, budget, cache, context, ",
    ):
        manager.lookup("register_agent_middleware", "x")
    with pytest.raises(
        ConfigurationError, match=r"^no toolset named 'math'; available: none installed$"
    ):
        manager.lookup(groundswell.ToolProvider, "math")
    found: TokenCounter = manager.lookup(TokenCounter, "anthropic")
    assert found.name == "anthropic"
    with pytest.raises(TypeError, match="not a record type or registration hook name"):
        manager.lookup("cache_backends", "lru")


def test_get_engine_and_get_counter_use_the_same_error() -> None:
    with pytest.raises(
        ConfigurationError, match=r"^no execution backend named 'nowhere'; available: .*local"
    ):
        get_engine("nowhere")
    with pytest.raises(
        ConfigurationError,
        match=r"^no token counter named 'tiktoken'; available: anthropic, estimate",
    ):
        get_counter("tiktoken")


def test_an_unknown_name_of_a_bundled_plugin_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bare = PluginManager()  # no entry points loaded: as if the plugin were not there
    with pytest.raises(
        ConfigurationError, match=r'bundled .dbos. plugin: pip install "groundswell\[durable\]"'
    ):
        bare.lookup(ExecutionBackend, "dbos")
    monkeypatch.setenv("GROUNDSWELL_DISABLE_PLUGINS", "redis")
    manager = PluginManager()
    manager.load_entrypoints()
    with pytest.raises(ConfigurationError) as info:
        manager.lookup(CacheBackend, "redis")
    assert str(info.value) == (
        "no cache backend named 'redis'; available: lru, sqlite; plugin 'redis' is installed but "
        "not loaded (named in GROUNDSWELL_DISABLE_PLUGINS)"
    )


def test_an_unknown_name_reports_plugins_that_failed_to_load(
    make_distribution: Callable[..., None], lenient: None
) -> None:
    make_distribution("gs-broken", "0.9", {"broken": "gs_broken"}, {"gs_broken": "1/0"})
    manager = PluginManager()
    manager.load_entrypoints()
    with pytest.raises(ConfigurationError) as info:
        manager.lookup(CacheBackend, "memo")
    assert str(info.value).startswith(
        "no cache backend named 'memo'; available: lru, redis, sqlite; "
    )
    assert "plugin 'broken' failed: import failed: ZeroDivisionError" in str(info.value)


@pytest.mark.parametrize(
    ("load", "disable", "expected"),
    [
        (
            None,
            None,
            {
                "lru",
                "redis",
                "sqlite",
                "reflection",
                "introspection",
                "otel",
                "jsonl",
                "history",
                "dbos",
                "pii",
                "good",
            },
        ),
        ("", None, set()),
        ("good", None, {"good"}),
        ("good,lru", "lru", {"good"}),
        (
            None,
            "lru, good, redis, sqlite, reflection, introspection, otel, jsonl, history, dbos, pii",
            set(),
        ),
    ],
)
def test_env_allow_and_deny_lists(
    make_distribution: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    load: str | None,
    disable: str | None,
    expected: set[str],
) -> None:
    make_distribution("gs-good", "1.0", {"good": "gs_good"}, {"gs_good": GOOD})
    for var, value in [
        ("GROUNDSWELL_LOAD_PLUGINS", load),
        ("GROUNDSWELL_DISABLE_PLUGINS", disable),
    ]:
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    manager = PluginManager()
    manager.load_entrypoints()
    assert set(names(manager)) == expected


def test_hook_returning_none_adds_nothing() -> None:
    class Quiet:
        @hookimpl
        def register_tool_providers(self) -> None:
            return None

    manager = PluginManager()
    manager.register(Quiet(), name="quiet")
    assert manager.tool_providers() == {}
    assert manager.list_plugins()[0].hooks == ["register_tool_providers"]


def test_two_distributions_claiming_one_name_is_reported(
    make_distribution: Callable[..., None], lenient: None
) -> None:
    make_distribution("gs-one", "1.0", {"same": "gs_one"}, {"gs_one": GOOD})
    make_distribution("gs-two", "2.0", {"same": "gs_two"}, {"gs_two": GOOD})
    manager = PluginManager()
    manager.load_entrypoints()
    (error,) = manager.errors["same"]
    assert "also used by distribution" in error and "that one is ignored" in error


def test_plugin_calling_sys_exit_on_import_is_isolated(
    make_distribution: Callable[..., None], lenient: None
) -> None:
    code = "import sys\nsys.exit('no thanks')\n"
    make_distribution("gs-exit", "1.0", {"exiting": "gs_exit"}, {"gs_exit": code})
    manager = PluginManager()
    manager.load_entrypoints()
    assert "SystemExit: no thanks" in manager.errors["exiting"][0]
    assert "lru" in manager.cache_backends()


def test_allow_list_naming_nothing_installed_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, lenient: None
) -> None:
    monkeypatch.setenv("GROUNDSWELL_LOAD_PLUGINS", "lur")
    manager = PluginManager()
    with caplog.at_level(logging.WARNING, "groundswell.plugins"):
        manager.load_entrypoints()
    assert manager.list_plugins() == []
    assert "names 'lur', but no installed plugin has that name" in manager.warnings[0]
    assert "installed: " in caplog.text and "lru" in caplog.text
    # The default cache it turned off says why when it is asked for.
    with pytest.raises(ConfigurationError, match=r"'lru'.*GROUNDSWELL_LOAD_PLUGINS names 'lur'"):
        manager.lookup(CacheBackend, "lru")


def test_allow_list_naming_nothing_installed_raises_when_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_LOAD_PLUGINS", "lur")
    with pytest.raises(PluginError, match="names 'lur', but no installed plugin has that name"):
        PluginManager(strict=True).load_entrypoints()


def test_loading_every_bundled_plugin_stays_cheap() -> None:
    # Importing anthropic takes about a second; no plugin may pay it at load time,
    # or every `groundswell` command would (the CLI loads plugins for their commands).
    code = (
        "import sys, groundswell; m = groundswell.PluginManager(); m.load_entrypoints(); "
        "print([i.name for i in m.list_plugins() if i.ok]); print('anthropic' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    names, heavy = out.stdout.splitlines()
    assert "reflection" in names and "history" in names
    assert heavy == "False"
