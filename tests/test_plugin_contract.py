"""The plugin contract: plugins written from the docs pass the checkers, broken ones are told
what to fix, and the kernel names a plugin that breaks its protocol instead of failing deep
inside (while a run with a broken cache still returns its result)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import re
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from groundswell_lru import LRUCache

import groundswell
from groundswell import (
    Agent,
    AgentMiddleware,
    CacheBackend,
    EventSink,
    Middleware,
    PluginError,
    PromptResult,
    PromptRun,
    TokenBudget,
    TokenCounter,
    Tool,
    ToolCachePolicy,
    hookimpl,
    invalidate,
)
from groundswell.agent import ModelNext, PromptNext, ToolNext
from groundswell.budget.tokens import CountRequest
from groundswell.testing import (
    FakeAnthropicAPI,
    ProtocolViolation,
    check_cache_backend,
    check_counter,
    check_engine,
    check_middleware,
    check_sink,
    text,
    tool_use,
)
from groundswell.tree.events import Event, SinkHub
from groundswell.workflow.execution import LocalEngine

ROOT = Path(__file__).resolve().parent.parent
QUICK_TTL = 0.1  # the checkers' ttl: short, as every test here waits it out once


@pytest.fixture
def register() -> Iterator[Any]:
    """Register plugin objects on the process manager for one test, under unique names."""
    manager = groundswell.get_plugin_manager()
    names: list[str] = []

    def add(plugin: object, name: str) -> str:
        names.append(manager.register(plugin, name=name))
        return name

    yield add
    for name in names:
        manager.unregister(name)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- a third-party cache backend, written from docs/plugin-hooks.md alone ----------------


class SqliteCache:
    """Answers and tool results in one SQLite file, shared by every process that opens it.

    The path comes from ``TEST_SQLITE_CACHE`` (factories get no arguments), or
    is given when an instance is passed directly.
    """

    def __init__(self, path: str | None = None, default_ttl: float = 3600.0) -> None:
        path = path or os.environ.get("TEST_SQLITE_CACHE") or ":memory:"
        # One instance serves every thread and event loop: one connection, one lock.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS entries "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL NOT NULL)"
        )
        self._lock = threading.Lock()
        self.default_ttl = default_ttl
        self.hits = self.misses = 0

    def _run(self, sql: str, *params: Any) -> tuple[Any, int]:
        with self._lock:
            cursor = self._db.execute(sql, params)
            return cursor.fetchone(), cursor.rowcount

    async def _do(self, sql: str, *params: Any) -> tuple[Any, int]:
        # Off the event loop: a slow disk must not hold up other prompts.
        return await asyncio.to_thread(self._run, sql, *params)

    async def get(self, key: str) -> Any | None:
        row, _ = await self._do("SELECT value, expires FROM entries WHERE key = ?", key)
        if row is None or row[1] <= time.time():
            self.misses += 1
            return None  # a miss: None, never an exception
        self.hits += 1
        return json.loads(row[0])  # the whole entry set() stored

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        life = self.default_ttl if ttl is None else ttl  # seconds; None: the default
        await self._do(
            "INSERT OR REPLACE INTO entries VALUES (?, ?, ?)",
            key,
            json.dumps(value),
            time.time() + life,
        )

    async def bust(self, key: str) -> bool:
        _, removed = await self._do("DELETE FROM entries WHERE key = ?", key)
        return removed > 0

    async def bust_prefix(self, prefix: str) -> int:
        # A literal prefix: LIKE would take the '_' of tool names as a wildcard.
        _, removed = await self._do(
            "DELETE FROM entries WHERE substr(key, 1, ?) = ?", len(prefix), prefix
        )
        return removed

    def metrics(self) -> dict[str, Any]:
        return {"backend": "sqlite", "hits": self.hits, "misses": self.misses}


async def test_a_sqlite_backend_written_from_the_docs_keeps_the_contract(
    register: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cache.db"
    monkeypatch.setenv("TEST_SQLITE_CACHE", str(path))
    name = unique("sqlite")

    class Plugin:
        @hookimpl
        def register_cache_backends(self) -> CacheBackend:
            return CacheBackend(name=name, factory=SqliteCache, description="one SQLite file")

    register(Plugin(), "sqlite-plugin")
    await check_cache_backend(name, ttl=QUICK_TTL)  # by name, made as agents make it
    await check_cache_backend(SqliteCache, ttl=QUICK_TTL)  # the class, as a factory

    fake = FakeAnthropicAPI(lambda request: text(f"answer to {request.last_user_text()}"))
    agent = Agent(name="sqlite-user", client=fake.client(), cache=name)
    first, second = await agent.run("q"), await agent.run("q")
    assert (first.output, second.output) == ("answer to q", "answer to q")
    assert second.node.metrics["cache"] == "hit" and len(fake.requests) == 1
    elsewhere = await Agent(name="sqlite-user", client=fake.client(), cache=SqliteCache()).run("q")
    assert elsewhere.node.metrics["cache"] == "hit"  # another instance, the same file


# -- broken cache backends --------------------------------------------------------------


class NoCount(LRUCache):
    async def bust_prefix(self, prefix: str) -> Any:
        await super().bust_prefix(prefix)  # the count is never returned


class TrueCount(LRUCache):
    async def bust_prefix(self, prefix: str) -> Any:
        return await super().bust_prefix(prefix) > 0


class ValueOnly(LRUCache):
    async def get(self, key: str) -> Any:
        entry = await super().get(key)
        return entry["value"] if entry else None  # the value, not the entry set() got


class RaisingBust(LRUCache):
    async def bust(self, key: str) -> bool:
        raise RuntimeError("bust is not supported")


class NumberBust(LRUCache):
    async def bust(self, key: str) -> Any:
        return int(await super().bust(key))


class SyncGet(LRUCache):
    def get(self, key: str) -> Any:  # type: ignore[override]
        return None


class Milliseconds(LRUCache):
    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        await super().set(key, value, None if ttl is None else ttl / 1000)


class NoneMeansNow(LRUCache):
    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        await super().set(key, value, ttl or 1e-9)


class WildcardPrefix(LRUCache):
    async def bust_prefix(self, prefix: str) -> int:
        pattern = re.compile(re.escape(prefix).replace("_", "."))  # '_' as SQL LIKE takes it
        keys = [k for k in list(self._data) if pattern.match(k)]
        for key in keys:
            await self.bust(key)
        return len(keys)


class LoopBound(LRUCache):
    """Keeps the event loop it was first used on, as a client made in __init__ would."""

    loop: asyncio.AbstractEventLoop | None = None

    async def get(self, key: str) -> Any:
        self.loop = self.loop or asyncio.get_running_loop()
        found = self.loop.create_future()
        self.loop.call_soon(found.set_result, None)
        await found
        return await super().get(key)


@pytest.mark.parametrize(
    ("backend", "problem"),
    [
        (NoCount, "bust_prefix returned None; it must return how many keys it removed, as an "
                  "int (0 when none matched)"),
        (TrueCount, "bust_prefix returned True (bool); it must return how many keys it removed"),
        (ValueOnly, "get returned a str for a text answer; it must return the whole dict set() "
                    "was given (with its 'value' and 'stored_at' keys), or None on a miss"),
        (RaisingBust, "raised RuntimeError: bust is not supported"),
        (NumberBust, "bust on a key that was present returned 1 (int); it must return True"),
        (SyncGet, "get is not async: it returned None, not an awaitable; define it as async "
                  "def get(...)"),
        (Milliseconds, "was gone after 0.05 s; ttl is in seconds (a float, possibly below 1), "
                       "not milliseconds"),
        (NoneMeansNow, "a value set with ttl=None was gone within a second; None means the "
                       "backend's default lifetime"),
        (WildcardPrefix, "which does not start with it; match the prefix literally"),
        (LoopBound, "set/get failed on another thread's event loop"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "",
)  # fmt: skip
async def test_a_broken_backend_fails_the_checker_saying_what_to_fix(
    backend: type[Any], problem: str
) -> None:
    with pytest.raises(ProtocolViolation) as raised:
        await check_cache_backend(backend(), ttl=QUICK_TTL)
    violation = raised.value
    assert isinstance(violation, AssertionError)
    assert str(violation).startswith(f"{backend.__name__} breaks the groundswell.Cache protocol")
    assert any(problem in v for v in violation.violations), violation.violations


class Locking(LRUCache):
    """An in-process backend with the optional lock, kept as the contract says."""

    def __init__(self) -> None:
        super().__init__()
        self.locks: dict[str, tuple[str, float]] = {}  # key -> (owner, until)

    async def try_lock(self, key: str, owner: str, ttl: float) -> bool:
        held = self.locks.get(key)
        if held is not None and held[0] != owner and held[1] > time.monotonic():
            return False
        self.locks[key] = (owner, time.monotonic() + ttl)
        return True

    async def unlock(self, key: str, owner: str) -> bool:
        if self.locks.get(key, ("",))[0] != owner:
            return False
        del self.locks[key]
        return True


class NotExclusive(Locking):
    async def try_lock(self, key: str, owner: str, ttl: float) -> bool:
        return True


class UnlocksAnyone(Locking):
    async def unlock(self, key: str, owner: str) -> bool:
        return self.locks.pop(key, None) is not None


class LockOnly(LRUCache):
    async def try_lock(self, key: str, owner: str, ttl: float) -> bool:
        return True


async def test_a_backend_with_a_lock_keeping_the_contract_passes_the_checker() -> None:
    await check_cache_backend(Locking(), ttl=QUICK_TTL)


@pytest.mark.parametrize(
    ("backend", "problem"),
    [
        (NotExclusive, "try_lock while another owner held the lock returned True; it must "
                       "return False"),
        (UnlocksAnyone, "unlock(key, owner) released a lock that another owner held"),
        (LockOnly, "it has try_lock but not unlock"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "",
)  # fmt: skip
async def test_a_broken_lock_fails_the_checker_saying_what_to_fix(
    backend: type[Any], problem: str
) -> None:
    with pytest.raises(ProtocolViolation) as raised:
        await check_cache_backend(backend(), ttl=QUICK_TTL)
    assert any(problem in v for v in raised.value.violations), raised.value.violations


async def test_a_backend_missing_methods_stops_the_checker_at_once() -> None:
    class Half:
        async def get(self, key: str) -> Any:
            return None

    with pytest.raises(ProtocolViolation, match="Half has no set, bust, bust_prefix, metrics"):
        await check_cache_backend(Half())


def lookup(user: str) -> str:
    """Look a user up."""
    return f"user {user}"


async def cache_a_tool_result(cache: Any, event: str) -> PromptResult[Any]:
    fake = FakeAnthropicAPI([tool_use("lookup", {"user": "ada"}), text("ok")])
    agent = Agent(
        name=unique("tool-user"),
        client=fake.client(),
        tools=[Tool(lookup, cache=ToolCachePolicy(invalidate_on=[event]))],
        cache=cache,
    )
    return await agent.run("who?")


async def test_invalidate_with_a_broken_backend_raises_a_clear_error_naming_the_plugin(
    register: Any,
) -> None:
    name, event = unique("nocount"), unique("users-changed")

    class Plugin:
        @hookimpl
        def register_cache_backends(self) -> CacheBackend:
            return CacheBackend(name=name, factory=NoCount)

    register(Plugin(), "nocount-plugin")
    good = LRUCache()
    await cache_a_tool_result(name, event)
    await cache_a_tool_result(good, event)
    assert good.metrics()["size"] == 2  # the answer and the tool result
    with pytest.raises(PluginError) as raised:
        await invalidate(event)
    assert str(raised.value) == (
        f"cache backend {name!r} (NoCount) of plugin 'nocount-plugin' breaks the "
        "groundswell.Cache protocol: bust_prefix returned None; it must return how many keys "
        "it removed, as an int (0 when none matched)"
    )
    assert raised.value.plugin == "nocount-plugin"
    assert good.metrics()["size"] == 1  # the other backend was still cleared


async def test_a_run_with_a_broken_backend_still_returns_its_result(
    register: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert os.environ["GROUNDSWELL_STRICT_PLUGINS"] == "1"  # contained even when strict
    monkeypatch.setenv("GROUNDSWELL_CACHE_SKIP_FOR_S", "60")
    name = unique("valueonly")

    class Plugin:
        @hookimpl
        def register_cache_backends(self) -> CacheBackend:
            return CacheBackend(name=name, factory=ValueOnly)

    register(Plugin(), "valueonly-plugin")
    fake = FakeAnthropicAPI(lambda request: text(f"answer to {request.last_user_text()}"))
    agent = Agent(name="broken-cache-user", client=fake.client(), cache=name)
    with caplog.at_level(logging.WARNING, "groundswell.cache"):
        results = [await agent.run("q") for _ in range(5)]
    assert [r.output for r in results] == ["answer to q"] * 5
    problem = (
        "get returned a dict without a 'value' key; it must return None on a miss, or the "
        "dict set() stored under "
        "that key (with its 'value' and 'stored_at' keys)"
    )
    first_error = next(e for e in results[1].node.events if e["type"] == "cache_error")
    assert (first_error["operation"], first_error["error"]) == ("get", problem)
    # A cache fault like any other: after three in a row, get is skipped for a while.
    assert any(e["type"] == "cache_skipped" for e in results[4].node.events)
    assert len(caplog.records) == 1 and problem in caplog.records[0].getMessage()
    errors = groundswell.get_plugin_manager().errors["valueonly-plugin"]
    assert errors == [f"cache backend {name!r} (ValueOnly): {problem}"]


async def test_an_entry_whose_stored_at_is_not_a_number_is_a_miss_not_a_failure() -> None:
    class Garbled(LRUCache):
        async def get(self, key: str) -> Any:
            entry = await super().get(key)
            return {**entry, "stored_at": "yesterday"} if entry else None

    fake = FakeAnthropicAPI(lambda request: text("fresh"))
    agent = Agent(name="garbled", client=fake.client(), cache=Garbled())
    results = [await agent.run("q") for _ in range(2)]
    assert [r.output for r in results] == ["fresh", "fresh"] and len(fake.requests) == 2
    (error,) = [e for e in results[1].node.events if e["type"] == "cache_error"]
    assert error["operation"] == "decode"


async def test_a_cache_factory_that_fails_or_returns_no_cache_is_a_plugin_error(
    register: Any,
) -> None:
    broken, empty = unique("broken"), unique("empty")

    def fails() -> Any:
        raise OSError("disk full")

    class Plugin:
        @hookimpl
        def register_cache_backends(self) -> list[CacheBackend]:
            return [CacheBackend(name=broken, factory=fails), CacheBackend(empty, factory=dict)]

    register(Plugin(), "factories-plugin")
    with pytest.raises(PluginError) as raised:
        groundswell.get_cache(broken)
    assert str(raised.value) == (
        f"cache backend {broken!r} of plugin 'factories-plugin' could not be made: "
        "OSError: disk full"
    )
    with pytest.raises(PluginError, match=r"which has no set, bust, bust_prefix, metrics; it "
                       r"must return a groundswell\.Cache") as raised:  # fmt: skip
        groundswell.get_cache(empty)
    assert raised.value.plugin == "factories-plugin"
    # A prompt gets the same error, not one blaming the cache middleware.
    with pytest.raises(PluginError, match="could not be made: OSError: disk full"):
        await Agent(name="no-cache", client=FakeAnthropicAPI([]).client(), cache=broken).run("q")


# -- event sinks --------------------------------------------------------------------------


class JsonLinesSink:
    """Writes every event to a JSON-lines file, in batches (a typical third-party sink)."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8")
        self.pending: list[str] = []

    def handle(self, event: Event) -> None:
        self.pending.append(json.dumps(event.to_record(), default=str))

    def flush(self) -> None:
        self.file.write("".join(f"{line}\n" for line in self.pending))
        self.file.flush()
        self.pending.clear()

    def close(self) -> None:
        self.flush()
        self.file.close()


async def test_a_file_sink_keeps_the_contract_and_writes_every_event(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    sink = JsonLinesSink(path)
    await check_sink(sink)
    assert sink.file.closed
    kinds = {json.loads(line)["kind"] for line in path.read_text().splitlines()}
    assert kinds == {"node_start", "node_end", "node_event"}


class AsyncHandle:
    async def handle(self, event: Event) -> None:
        pass

    def close(self) -> None:
        pass


class PicksOutput:
    def handle(self, event: Event) -> None:
        if event.kind == "node_end":
            print(event.data["output"])  # node_end data has no output (the node has)

    def close(self) -> None:
        pass


class AsyncClose:
    def handle(self, event: Event) -> None:
        pass

    async def close(self) -> None:
        pass


class NoClose:
    def handle(self, event: Event) -> None:
        pass


@pytest.mark.parametrize(
    ("sink", "problem"),
    [
        (AsyncHandle(), "handle() is async, and nothing awaits it: make it a plain def"),
        (PicksOutput(), "handle() raised KeyError: 'output' on a node_end event"),
        (AsyncClose(), "close() is async, and nothing awaits it"),
        (NoClose(), "it has no close() method; add one, even one that does nothing"),
        (lambda: None, "its factory returned None, which means the sink is off"),
    ],
    ids=["async-handle", "raises", "async-close", "no-close", "off"],
)
async def test_a_broken_sink_fails_the_checker_saying_what_to_fix(sink: Any, problem: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited" left behind
        with pytest.raises(ProtocolViolation, match="breaks the event sink protocol") as raised:
            await check_sink(sink)
        gc.collect()
    assert any(problem in v for v in raised.value.violations), raised.value.violations


def test_a_sink_with_an_async_method_is_refused_when_it_starts_naming_its_plugin(
    register: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("async-sink")

    class Plugin:
        @hookimpl
        def register_event_sinks(self) -> EventSink:
            return EventSink(name=name, factory=AsyncHandle)

    manager = groundswell.get_plugin_manager()
    register(Plugin(), "async-sink-plugin")
    with pytest.raises(PluginError, match=rf"event sink '{name}' failed to start: handle\(\) is "
                       "async, and nothing awaits it"):  # fmt: skip
        manager.sink_hub()
    monkeypatch.setenv("GROUNDSWELL_STRICT_PLUGINS", "0")
    assert name not in manager.sink_hub().names()
    assert "handle() is async" in manager.errors["async-sink-plugin"][0]


def test_a_sink_that_returns_a_coroutine_has_it_closed_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def send(event: Event) -> None:
        pass

    class Sneaky:
        def handle(self, event: Event) -> Any:
            return send(event)  # a plain def handing back a coroutine nobody awaits

        def close(self) -> None:
            pass

    hub = SinkHub({"sneaky": Sneaky()})
    node = groundswell.EventNode("step", "x")
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, "groundswell.sinks"):
        warnings.simplefilter("error")
        for _ in range(3):
            hub.dispatch(Event("node_start", node, {}, "run"))
        assert hub.flush()
        gc.collect()
    assert hub.stats()["sneaky"]["errors"] == 3
    assert "handle() returned coroutine, which nothing awaits" in caplog.text
    hub.close()


# -- agent middleware -------------------------------------------------------------------


class Audit(Middleware):
    """Tags requests and records every tool call (a typical third-party middleware)."""

    name = "audit"
    order = 250

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        run.scratch["audit.tools"] = []
        result = await call_next()
        run.tree.add_event(run.node, "audit", tools=run.scratch["audit.tools"])
        return result

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        return {**request, "metadata": {"user_id": f"agent-{run.agent.name}"}}

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        return await call_next(request)

    async def wrap_tool_call(self, run: PromptRun, call: Any, call_next: ToolNext) -> Any:
        run.scratch["audit.tools"].append(call.name)
        return await call_next(call)


async def test_a_good_middleware_keeps_the_contract_as_instance_class_and_record() -> None:
    await check_middleware(Audit())
    await check_middleware(Audit)
    await check_middleware(AgentMiddleware("audit", Audit, 120))  # wraps every attempt


class ReturnsOutput(Middleware):
    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> Any:
        return (await call_next()).output


class ForgetsRequest(Middleware):
    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> Any:
        request["metadata"] = {"user_id": "me"}


class NoAwait(Middleware):
    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        return call_next(request)


class MadeUp(Middleware):
    async def wrap_tool_call(self, run: PromptRun, call: Any, call_next: ToolNext) -> Any:
        return "made up"


class Raising(Middleware):
    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        raise KeyError("tone")


class Maybe(Middleware):
    def active(self, run: PromptRun) -> Any:
        return "yes"

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        return await call_next()


class StateOnSelf(Middleware):
    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        self.user = run.prompt.user
        result = await call_next()
        await asyncio.sleep(0.01)  # another prompt sets self.user meanwhile
        result.output = f"{result.output} ({self.user})"
        return result


class NeverActive(Middleware):
    def active(self, run: PromptRun) -> bool:
        return run.agent.options.get("never") is not None

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        return await call_next()


@pytest.mark.parametrize(
    ("middleware", "problem"),
    [
        (ReturnsOutput(), "wrap_prompt returned a str; it must return a PromptResult"),
        (ForgetsRequest(), "before_model returned None; it must return the request dict"),
        (NoAwait(), "wrap_model_call returned an awaitable it never awaited; write `return "
                    "await call_next(...)`"),
        (MadeUp(), "wrap_tool_call returned without calling call_next(call), so the tool never "
                   "ran"),
        (Raising(), "wrap_model_call raised KeyError: 'tone' on a plain prompt"),
        (Maybe(), "active(run) returned a str; it must return True or False"),
        (StateOnSelf(), "keep per-prompt state in run.scratch"),
        (NeverActive(), "active(run) said False for every prompt, so nothing else was checked"),
        (object, "it is an object, not a groundswell.Middleware"),
    ],
    ids=lambda v: "" if isinstance(v, str) else getattr(v, "__name__", type(v).__name__),
)  # fmt: skip
async def test_a_broken_middleware_fails_the_checker_saying_what_to_fix(
    middleware: Any, problem: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ProtocolViolation, match="breaks the agent middleware protocol") as e:
            await check_middleware(middleware)
        gc.collect()
    assert any(problem in v for v in e.value.violations), e.value.violations


# -- token counters and execution engines ----------------------------------------------


class WordCounter:
    async def count(self, request: CountRequest) -> int:
        return sum(len(str(m["content"]).split()) for m in request.messages)


class HalfTokens:
    async def count(self, request: CountRequest) -> float:
        return len(str(request.messages)) / 2


async def test_counters_are_checked_and_a_wrong_count_names_the_counter(register: Any) -> None:
    await check_counter(WordCounter())
    with pytest.raises(ProtocolViolation, match="it must return the input tokens as an int >= 0"):
        await check_counter(HalfTokens())
    name = unique("halves")

    class Plugin:
        @hookimpl
        def register_token_counters(self) -> TokenCounter:
            return TokenCounter(name=name, factory=HalfTokens)

    register(Plugin(), "halves-plugin")
    fake = FakeAnthropicAPI(lambda request: text("ok"))
    agent = Agent(
        name="halves",
        client=fake.client(),
        token_budget=TokenBudget(max_total=10_000, counter=name),
    )
    result = await agent.run("count me")
    assert result.output == "ok"  # the turn was estimated instead
    (event,) = [e for e in result.node.events if e["type"] == "budget_counter_error"]
    assert event["error"].startswith(
        f"PluginError: token counter {name!r} of plugin 'halves-plugin': count returned float"
    )
    assert event["error"].endswith("it must return the request's input tokens as an int >= 0")


class Swallowing(LocalEngine):
    async def run_step(self, ctx: Any, node: Any, call: Any) -> Any:
        try:
            return await call()
        except Exception:
            return None


class Forgetting(LocalEngine):
    async def run_workflow(self, call: Any) -> Any:
        await call.run_here()


async def test_engines_are_checked() -> None:
    await check_engine(LocalEngine())
    with pytest.raises(ProtocolViolation, match="a workflow whose step raised did not fail"):
        await check_engine(Swallowing())
    with pytest.raises(ProtocolViolation, match="run_workflow returned None; it must return the"):
        await check_engine(Forgetting)


# -- the docs ------------------------------------------------------------------------------


def test_the_hook_reference_states_every_protocol_method_and_promises_no_options() -> None:
    page = (ROOT / "docs" / "plugin-hooks.md").read_text()
    methods = [
        "async get(key)", "async set(key, value, ttl=None)", "async bust(key)",
        "async bust_prefix(prefix)", "metrics()", "handle(event)", "flush()", "close()",
        "async count(request) -> int", "async run_workflow(call)",
        "async run_step(ctx, node, call)", "async spawn(ctx, node, call, queue)",
        "wrap_prompt(run, call_next)", "before_model(run, request)",
        "wrap_model_call(run, request, call_next)", "wrap_tool_call(run, call, call_next)",
        "active(run)",
    ]  # fmt: skip
    missing = [m for m in methods if f"`{m}`" not in page]
    assert not missing, missing
    assert "**options" not in page
    assert "## Factories and settings" in page
    assert "## Testing your plugin" in (ROOT / "docs" / "plugins.md").read_text()
