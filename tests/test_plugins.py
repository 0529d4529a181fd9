"""The plugin system: entry-point loading, isolation, env controls, records, collectors."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable

import pytest

import groundswell
from groundswell import (
    CacheBackend,
    EventSink,
    PluginError,
    PluginManager,
    ReflectionStrategy,
    hookimpl,
)

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


def test_duplicate_record_names_are_rejected_naming_both_plugins(lenient: None) -> None:
    class First:
        @hookimpl
        def register_cache_backends(self) -> CacheBackend:
            return CacheBackend(name="shared", factory=dict)

    class Second:
        @hookimpl
        def register_cache_backends(self) -> CacheBackend:
            return CacheBackend(name="shared", factory=list)

    manager = PluginManager()
    manager.register(First(), name="first")
    manager.register(Second(), name="second")
    assert manager.cache_backends()["shared"].factory is dict
    (error,) = manager.errors["second"]
    assert "'shared' is already registered by plugin 'first'" in error
    assert "'second'" in error


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


@pytest.mark.parametrize(
    ("load", "disable", "expected"),
    [
        (
            None,
            None,
            {
                "lru",
                "redis",
                "reflection",
                "introspection",
                "otel",
                "jsonl",
                "history",
                "dbos",
                "good",
            },
        ),
        ("", None, set()),
        ("good", None, {"good"}),
        ("good,lru", "lru", {"good"}),
        (None, "lru, good, redis, reflection, introspection, otel, jsonl, history, dbos", set()),
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
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GROUNDSWELL_LOAD_PLUGINS", "lur")
    manager = PluginManager()
    with caplog.at_level(logging.WARNING, "groundswell.plugins"):
        manager.load_entrypoints()
    assert manager.list_plugins() == []
    assert "names 'lur', but no installed plugin has that name" in manager.warnings[0]
    assert "installed: " in caplog.text and "lru" in caplog.text


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
