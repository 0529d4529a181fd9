"""Shared fixtures. Plugin errors raise in this suite unless a test turns that off."""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("GROUNDSWELL_STRICT_PLUGINS", "1")
# What the suite stores by default (history database, API secret, durable-run files) goes
# to a folder of this test process's own, never into the user's ~/.groundswell.
os.environ["GROUNDSWELL_HOME"] = tempfile.mkdtemp(prefix="groundswell-tests-")

import groundswell
from groundswell import Event, EventSink, hookimpl

_SUITE_HOME = os.environ["GROUNDSWELL_HOME"]
atexit.register(shutil.rmtree, _SUITE_HOME, ignore_errors=True)

# tests/data holds projects with test files of their own; they run in subprocesses.
collect_ignore_glob = ["data/*"]

# Options for a pytest this suite runs in a subprocess (a user's project, a page's tests):
# the plugins of this repository's own test tools, which such a run never uses, kept from
# loading (schemathesis and hypothesis alone take seconds to import).
UNUSED_PYTEST_PLUGINS = (
    "-p no:schemathesis -p no:hypothesispytest -p no:xdist -p no:xdist.looponfail"
)


class RecordingSink:
    """An event sink that keeps every event it is given."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.closed = False
        self._lock = threading.Lock()

    def handle(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def close(self) -> None:
        self.closed = True

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


@pytest.fixture
def no_wait_left_open() -> Iterator[None]:
    """Fails a test that leaves a wait of its own open (waits of this process)."""
    before = {w.id for w in groundswell.waits.pending()}
    yield
    left = [w for w in groundswell.waits.pending() if w.id not in before]
    assert not left, f"the test left waits open: {left}"


@pytest.fixture
def add_sink() -> Iterator[Callable[..., str]]:
    """Register a sink (by a real plugin object) on the process manager for one test."""
    manager = groundswell.get_plugin_manager()
    names: list[str] = []

    def add(sink: object, name: str = "test-sink") -> str:
        class Plugin:
            @hookimpl
            def register_event_sinks(self) -> EventSink:
                return EventSink(name=name, factory=lambda: sink)

        names.append(manager.register(Plugin(), name=f"plugin-{name}"))
        return name

    yield add
    for name in names:
        manager.unregister(name)


@pytest.fixture
def recording_sink(add_sink: Callable[..., str]) -> RecordingSink:
    sink = RecordingSink()
    add_sink(sink, "recording")
    return sink


@pytest.fixture
def make_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Install a tiny distribution (module + dist-info) onto sys.path for this test."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    created: list[str] = []

    def make(
        dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]
    ) -> None:
        for module, source in modules.items():
            (site / f"{module}.py").write_text(textwrap.dedent(source))
            created.append(module)
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(f"[groundswell]\n{lines}\n")
        importlib.invalidate_caches()

    yield make  # type: ignore[misc]
    for module in created:
        sys.modules.pop(module, None)


def _service_missing(what: str, url: str, error: BaseException) -> None:
    service_unavailable(f"{what} not reachable at {url} ({type(error).__name__}: {error})")


def service_unavailable(message: str) -> None:
    """Skip the test (fail it under ``GROUNDSWELL_REQUIRE_SERVICES=1``, as in CI)."""
    if os.environ.get("GROUNDSWELL_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{message}; GROUNDSWELL_REQUIRE_SERVICES=1 makes it mandatory")
    pytest.skip(message)


@pytest.fixture(scope="session")
def groundswell_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's wheel, built by pip as a user builds it, once per test run: the
    processes of a parallel run share it (the first builds it, under a file lock)."""
    import fcntl
    import subprocess

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder; each worker's own is a subfolder
    dist = shared / "groundswell-wheel"
    with open(shared / "groundswell-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not any(dist.glob("groundswell-*.whl")):
            env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSWELL_")}
            env["PIP_NO_INDEX"] = "1"
            build = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "-w", str(dist), str(Path(__file__).resolve().parent.parent)],
                capture_output=True, text=True, timeout=600, env=env,
            )  # fmt: skip
            assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("groundswell-*.whl")
    return wheel


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    """The Redis server for tests (REDIS_URL, default redis://127.0.0.1:6379/0)."""
    import socket
    from urllib.parse import urlparse

    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=2
        ):
            pass
    except OSError as exc:
        _service_missing("Redis", url, exc)
    return url


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix no other test (or test run) uses."""
    return f"gs-test:{os.getpid()}:{os.urandom(4).hex()}:"


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The PostgreSQL server for tests as a SQLAlchemy URL (GROUNDSWELL_TEST_POSTGRES_URL,
    default postgresql://postgres@127.0.0.1:5432/test)."""
    raw = os.environ.get(
        "GROUNDSWELL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    )
    try:
        import psycopg

        with psycopg.connect(raw, connect_timeout=3):
            pass
    except Exception as exc:  # no driver, no server, no database
        _service_missing("PostgreSQL", raw, exc)
    return raw.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture(scope="session")
def history_database(postgres_url: str) -> Iterator[str]:
    """A database of this test process's own on the PostgreSQL server, for the history
    store's tables, as a SQLAlchemy URL; dropped at the end of the session.

    Tests empty those tables before and after they run (`history_store`): in one database
    shared by the processes of a parallel run (``./dev test``), a test would delete the
    rows of a test running at the same time in another process.
    """
    from .scratch_db import fresh_database

    with fresh_database(postgres_url, prefix="gs_history") as url:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A fresh session history store, once on SQLite and once on the real PostgreSQL."""
    from groundswell_history import HistoryStore

    if request.param == "sqlite":
        made = HistoryStore(f"sqlite:///{tmp_path / 'history.db'}")
        yield made
        made.close()
        return
    made = HistoryStore(request.getfixturevalue("history_database"))
    _empty_store(made)
    yield made
    _empty_store(made)
    made.close()


def _empty_store(store: Any) -> None:
    meta = store._tables[0]
    with store.engine.begin() as conn:
        for table in reversed(meta.sorted_tables):
            conn.execute(table.delete())


@pytest.fixture
def recording_store(
    history_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """``history_store`` as the store the history sink records into and the history
    plugin reads: on SQLite it is the default file (``GROUNDSWELL_HOME`` points at its
    folder); on PostgreSQL it is ``GROUNDSWELL_HISTORY_URL`` (which records every agent)."""
    monkeypatch.delenv("GROUNDSWELL_HISTORY_URL", raising=False)
    monkeypatch.setenv("GROUNDSWELL_HOME", str(tmp_path))
    if history_store.engine.dialect.name != "sqlite":
        monkeypatch.setenv("GROUNDSWELL_HISTORY_URL", history_store.url)
    manager = groundswell.get_plugin_manager()
    manager.refresh_sinks("history")
    yield history_store
    monkeypatch.delenv("GROUNDSWELL_HISTORY_URL", raising=False)
    monkeypatch.setenv("GROUNDSWELL_HOME", _SUITE_HOME)
    manager.refresh_sinks("history")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that hold slow tests first, each file's tests kept together and in order.

    Parallel workers then start on the long tests and end on short ones, instead of
    one worker finishing a file of slow tests alone while the other waits.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(autouse=True)
def _tool_result_backends_of_other_tests_forgotten() -> Iterator[None]:
    """A backend a test sent tool results to (perhaps a deliberately broken one) is not
    reached by a later test's ``clear_tool_cache()`` or ``invalidate()``."""
    from groundswell.cache.tool_results import forget_backend, used_backends

    before = {id(cache) for cache in used_backends()}
    yield
    for cache in used_backends():
        if id(cache) not in before:
            forget_backend(cache)
