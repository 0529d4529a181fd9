"""Protocol checkers for plugin authors: does a cache backend, sink, middleware, counter or
execution engine do what the kernel expects of it?

Each checker is an ``async`` function that drives the object through the kernel's own
paths (real agents on `FakeAnthropicAPI`, real workflow runs, `groundswell.invalidate`)
and raises `ProtocolViolation` listing every problem it found, each with how to fix it::

    await check_cache_backend(MyCache())
    await check_sink(MySink())
    await check_middleware(MyMiddleware())

They change nothing they did not make: the entries, plugins and agents they create use
names of their own and are removed afterwards (best effort for a backend that fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel

from ..agent import Agent, Middleware, PromptResult, PromptRun, ToolCall
from ..budget.token_budget import TokenBudget
from ..budget.tokens import Counter, CountRequest
from ..cache.backends import (
    ToolCachePolicy,
    cache_entry,
    get_cache,
    lock_problem,
    request_cache_key,
)
from ..cache.guard import shown
from ..cache.tool_results import invalidate
from ..errors import GroundswellError, WorkflowError
from ..hookspecs import (
    AgentMiddleware,
    CacheBackend,
    EventSink,
    ExecutionBackend,
    TokenCounter,
    hookimpl,
)
from ..plugins.manager import flush_sinks, get_plugin_manager
from ..prompt.prompt import Prompt, PromptOverrides
from ..tools.tool import Tool
from ..tree.events import Event, sink_problems
from ..workflow.execution import ExecutionEngine
from ..workflow.workflow import WorkflowContext, WorkflowResult, workflow
from ._fake import FakeAnthropicAPI
from ._replies import MessagesRequest, Reply, json_reply, text, tool_use

__all__ = [
    "ProtocolViolation",
    "check_cache_backend",
    "check_counter",
    "check_engine",
    "check_middleware",
    "check_sink",
]

#: Seconds one call of the checked object may take before the checker calls it hung.
CALL_TIMEOUT_S = 5.0


class ProtocolViolation(AssertionError):
    """An object breaks its plugin protocol; ``violations`` says how, each with its fix.

    An `AssertionError`, so a test that calls a checker fails with the list as its message.
    """

    def __init__(self, subject: str, protocol: str, violations: list[str]) -> None:
        self.subject = subject
        self.protocol = protocol
        self.violations = list(violations)
        count = len(violations)
        lines = "\n".join(f"  - {v}" for v in violations)
        super().__init__(
            f"{subject} breaks the {protocol} protocol ({count} problem"
            f"{'s' if count != 1 else ''}):\n{lines}"
        )


class _Findings:
    """The violations found so far, each once, in the order found."""

    def __init__(self, subject: str, protocol: str) -> None:
        self.subject, self.protocol = subject, protocol
        self.found: list[str] = []
        self._lock = threading.Lock()  # sinks report from their worker thread

    def add(self, problem: str) -> None:
        with self._lock:
            if problem not in self.found:
                self.found.append(problem)

    def stop(self, problem: str) -> ProtocolViolation:
        """A problem that leaves nothing more to check: everything found so far, raised."""
        self.add(problem)
        return ProtocolViolation(self.subject, self.protocol, self.found)

    def raise_any(self) -> None:
        if self.found:
            raise ProtocolViolation(self.subject, self.protocol, self.found)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _discard(awaitable: Any) -> None:
    """Close a coroutine nobody will await, so Python does not warn about it later."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def _made(
    obj: Any, record_type: type[Any], kind: str, marker: str, findings: _Findings
) -> tuple[Any, Any]:
    """``obj`` as the object to check, and the record it came from (or None).

    ``obj`` may be the object itself, its record, or a factory (a class, or a
    function without the protocol's ``marker`` method), called with no
    arguments as the kernel calls factories.
    """
    record = obj if isinstance(obj, record_type) else None
    if record is not None:
        factory = record.factory
    elif isinstance(obj, type) or (callable(obj) and not hasattr(obj, marker)):
        factory = obj
    else:
        return obj, None
    try:
        made = factory()
    except Exception as exc:
        raise findings.stop(
            f"its factory raised {_error(exc)}; a {kind} factory is called with "
            "no arguments and reads any settings from the environment"
        ) from exc
    return made, record


async def _settle(made: Any, timeout: float) -> Any:
    """Await ``made`` within ``timeout`` (raises TimeoutError)."""
    async with asyncio.timeout(timeout):
        return await made


# -- cache backends --------------------------------------------------------------------


class _Verdict(BaseModel):
    approve: bool
    reason: str


_METHODS = ("get", "set", "bust", "bust_prefix")


class _CacheCheck:
    def __init__(self, cache: Any, findings: _Findings, ttl: float) -> None:
        self.cache, self.findings, self.ttl = cache, findings, ttl
        self.prefix = _unique("gs-check-")  # the namespace of every key written here
        self.tool = self.prefix.replace("-", "_")  # a tool name with the '_' of real ones
        self.misshapen = False
        self.kernel_said: set[str] = set()

    def key(self, label: str) -> str:
        return request_cache_key(self.prefix, {"check": label})

    def tool_key(self, tool: str, label: str) -> str:
        return f"tool.{tool}:{request_cache_key(self.prefix, {'tool': label}).split(':')[1]}"

    async def call(self, method: str, *args: Any) -> tuple[bool, Any]:
        """``(answered, result)`` of one call; any problem with the call itself is recorded."""
        shown_args = ", ".join(
            (repr(a) if len(a) < 40 else repr(a[:30] + "...")) if isinstance(a, str) else shown(a)
            for a in args
        )
        where = f"{method}({shown_args})"
        try:
            made = getattr(self.cache, method)(*args)
        except Exception as exc:
            self.findings.add(f"{where} raised {_error(exc)}")
            return False, None
        if not inspect.isawaitable(made):
            self.findings.add(
                f"{method} is not async: it returned {shown(made)}, not an awaitable; define "
                f"it as async def {method}(...) (the kernel awaits it)"
            )
            return True, made
        try:
            return True, await _settle(made, CALL_TIMEOUT_S)
        except TimeoutError:
            self.findings.add(
                f"{where} did not answer within {CALL_TIMEOUT_S:g} s; the kernel gives get and "
                "set 1 s (GROUNDSWELL_CACHE_TIMEOUT_S) and treats a slower answer as a miss"
            )
        except Exception as exc:
            self.findings.add(f"{where} raised {_error(exc)}")
        return False, None

    async def get_value(self, key: str, what: str) -> tuple[bool, Any]:
        """``(found, value)`` for ``key``; a wrong shape is recorded."""
        answered, entry = await self.call("get", key)
        if not answered or entry is None:
            return False, None
        if not isinstance(entry, Mapping) or "value" not in entry:
            if not self.misshapen:  # said once; then taken as the value, to check the rest
                self.misshapen = True
                self.findings.add(
                    f"get returned {shown(entry)} for {what}; it must return the whole dict "
                    "set() was given (with its 'value' and 'stored_at' keys), or None on a miss"
                )
            return True, entry
        return True, entry["value"]

    async def structure(self) -> None:
        missing = [m for m in (*_METHODS, "metrics") if not callable(getattr(self.cache, m, None))]
        if missing:
            raise self.findings.stop(
                f"{type(self.cache).__name__} has no {', '.join(missing)}; a cache backend has "
                "async get, set, bust and bust_prefix, and a plain metrics()"
            )
        try:
            metrics: Any = self.cache.metrics()
        except Exception as exc:
            self.findings.add(f"metrics() raised {_error(exc)}; it must return a dict")
            return
        if inspect.isawaitable(metrics):
            _discard(metrics)
            self.findings.add("metrics() is async; make it a plain def returning a dict")
        elif not isinstance(metrics, Mapping):
            self.findings.add(f"metrics() returned {shown(metrics)}; it must return a dict")

    async def round_trips(self) -> None:
        key = self.key("never-set")
        answered, missing = await self.call("get", key)
        if answered and missing is not None:
            self.findings.add(
                f"get on a key that was never set returned {shown(missing)}; a miss must be None"
            )
        # The shapes the kernel stores: answers (text, validated models as dicts) and
        # tool results (text, content blocks), empty ones included.
        shapes: list[tuple[str, str, Any]] = [
            ("a text answer", self.key("text"), "The answer is 42 — naïve café ✓\nLine two."),
            ("an empty answer", self.key("empty"), ""),
            ("a structured answer", self.key("model"),
             {"approve": True, "reason": "fine", "score": 0.5, "tags": ["a", "b"], "n": None}),
            ("a tool result", self.tool_key(f"{self.tool}_r", "text"), "Oslo: 20C"),
            ("a tool result of content blocks", self.tool_key(f"{self.tool}_r", "blocks"),
             [{"type": "text", "text": "row 1"}, {"type": "text", "text": "row 2"}]),
            ("a 100 kB answer", self.key("large"), "x" * 100_000),
        ]  # fmt: skip
        for what, key, value in shapes:
            stored = cache_entry(value)
            await self.call("set", key, stored, None)
            found, got = await self.get_value(key, what)
            if not found:
                self.findings.add(
                    f"get did not return {what} that set() had just stored (key {key[:40]}...)"
                )
            elif got != value:
                self.findings.add(
                    f"get returned {what} changed: stored {shown(value)}, got back "
                    f"{shown(got)} (values must round-trip as JSON does)"
                )
        key = self.key("overwritten")
        await self.call("set", key, cache_entry("first"), None)
        await self.call("set", key, cache_entry("second"), None)
        found, got = await self.get_value(key, "an overwritten value")
        if found and got != "second":
            self.findings.add(
                "set on a key that holds a value must replace it; get returned the old"
            )

    async def expiry_and_busting(self) -> None:
        short, long = self.key("ttl-short"), self.key("ttl-none")
        await self.call("set", short, cache_entry("short"), self.ttl)
        await self.call("set", long, cache_entry("long"), None)
        await asyncio.sleep(self.ttl / 2)
        found, _ = await self.get_value(short, "a value with a ttl")
        if not found:
            self.findings.add(
                f"a value set with ttl={self.ttl:g} was gone after {self.ttl / 2:g} s; ttl is in "
                "seconds (a float, possibly below 1), not milliseconds"
            )
        await asyncio.sleep(self.ttl / 2 + 0.6)  # room for stores that round up to whole seconds
        found, _ = await self.get_value(short, "an expired value")
        if found:
            self.findings.add(
                f"a value set with ttl={self.ttl:g} was still there after {self.ttl + 0.6:g} s; "
                "ttl is the entry's lifetime in seconds (round up if the store has only whole "
                "seconds)"
            )
        found, _ = await self.get_value(long, "a value set with ttl=None")
        if not found:
            self.findings.add(
                "a value set with ttl=None was gone within a second; None means the backend's "
                "default lifetime, not 'expire now'"
            )
        key = self.key("bust")
        await self.call("set", key, cache_entry("bust me"), None)
        busted = []
        for expected, when in ((True, "a key that was present"), (False, "a key already gone")):
            answered, result = await self.call("bust", key)
            busted.append(answered)
            if answered and result is not expected:
                self.findings.add(
                    f"bust on {when} returned {shown(result)}; it must return {expected} "
                    "(True if it removed the key, else False)"
                )
        if busted[0] and (await self.get_value(key, "a busted key"))[0]:
            self.findings.add("get still found a key after bust() removed it")
        await self.busting_prefixes()

    async def busting_prefixes(self) -> None:
        tool = self.tool
        prefix = f"tool.{tool}:"
        matching = [self.tool_key(tool, str(i)) for i in range(3)]
        # Keys a prefix must not match: another tool whose name starts the same, '_' taken
        # as a wildcard (SQL LIKE), the prefix inside a key, and an answer's namespace.
        decoys = [
            self.tool_key(f"{tool}2", "x"),
            self.tool_key(tool.replace("_", "X"), "x"),
            f"x.{matching[0]}",
            self.key("not-a-tool"),
        ]
        for key in (*matching, *decoys):
            await self.call("set", key, cache_entry(key), None)
        for expected in (3, 0):
            answered, removed = await self.call("bust_prefix", prefix)
            if not answered:
                break
            if isinstance(removed, bool) or not isinstance(removed, int):
                self.findings.add(
                    f"bust_prefix returned {shown(removed)}; it must return how many keys it "
                    "removed, as an int (0 when none matched); groundswell.invalidate() adds "
                    "these up"
                )
                break
            if removed != expected:
                self.findings.add(
                    f"bust_prefix({prefix!r}) returned {removed} where {expected} keys matched "
                    "(it must count the keys it removed, and match the prefix literally: no "
                    "wildcards, '_' included)"
                )
                break
        for key in matching:
            if (await self.get_value(key, "a key under a busted prefix"))[0]:
                self.findings.add("get still found a key after bust_prefix() removed its prefix")
                break
        for key in decoys:
            if not (await self.get_value(key, "a key outside the busted prefix"))[0]:
                self.findings.add(
                    f"bust_prefix({prefix!r}) also removed {key[:60]!r}, which does not start "
                    "with it; match the prefix literally ('_' and '%' are not wildcards)"
                )

    async def concurrency(self) -> None:
        keys = [self.key(f"concurrent-{i}") for i in range(50)]

        async def one(key: str) -> bool:
            await self.call("set", key, cache_entry(key), None)
            return (await self.get_value(key, "a value set concurrently")) == (True, key)

        if not all(await asyncio.gather(*(one(k) for k in keys))):
            self.findings.add(
                "50 concurrent set/get pairs did not each get their own value back; the "
                "instance serves every agent at once"
            )

        async def elsewhere() -> None:
            key = self.key("other-loop")
            await self.cache.set(key, cache_entry("other loop"), None)
            if await self.cache.get(key) is None:  # a wrong shape is reported already
                raise LookupError("get did not find what set() had just stored")

        try:
            await asyncio.wait_for(asyncio.to_thread(asyncio.run, elsewhere()), CALL_TIMEOUT_S)
        except Exception as exc:
            self.findings.add(
                f"set/get failed on another thread's event loop ({_error(exc)}); one instance "
                "serves the whole process, so keep loop-bound clients per event loop"
            )

    async def locking(self) -> None:
        """The optional lock (`groundswell.cache.backends.CacheLock`), when the backend offers it."""
        offered = [m for m in ("try_lock", "unlock") if callable(getattr(self.cache, m, None))]
        if not offered:
            return
        if len(offered) == 1:
            self.findings.add(
                f"it has {offered[0]} but not {'unlock' if offered[0] == 'try_lock' else 'try_lock'}"
                "; a backend that offers a lock has both (async try_lock(key, owner, ttl) and "
                "async unlock(key, owner)), or neither"
            )
            return
        key, ttl = self.key("lock"), self.ttl
        me, other = _unique("owner-"), _unique("owner-")

        async def take(owner: str, expected: bool, when: str, wrong: str = "") -> bool:
            answered, held = await self.call("try_lock", key, owner, ttl)
            if not answered:
                return False
            problem = lock_problem(held)
            if problem is not None:
                self.findings.add(problem)
                return False
            if held is not expected:
                self.findings.add(
                    wrong or f"try_lock {when} returned {held}; it must return {expected}"
                )
                return False
            return True

        try:
            if not (
                await take(me, True, "on a free key")
                and await take(other, False, "while another owner held the lock")
                and await take(me, True, "by the owner holding it (a renewal)")
            ):
                return
            if (await self.get_value(key, "a locked key"))[0]:
                self.findings.add(
                    "get found an entry under a key that was only locked; keep locks apart "
                    "from entries (e.g. under a prefix of their own)"
                )
            await self.call("unlock", key, other)
            wrong = "unlock(key, owner) released a lock that another owner held; release it only "
            wrong += "for its owner (compare and delete in one step, e.g. a Lua script)"
            if not await take(other, False, "after another owner's unlock", wrong):
                return
            await self.call("unlock", key, me)
            if not await take(other, True, "after its holder's unlock"):
                return
            await asyncio.sleep(ttl + 0.6)
            await take(me, True, f"after the holder's ttl={ttl:g} s ran out")
        finally:
            for owner in (me, other):
                with contextlib.suppress(Exception):
                    await _settle(self.cache.unlock(key, owner), CALL_TIMEOUT_S)

    async def through_the_kernel(self) -> None:
        fake = FakeAnthropicAPI(_answering)
        agent = Agent(name=self.prefix, client=fake.client(max_retries=0), cache=self.cache)
        for what, prompt in (
            ("a text answer", Prompt(user="checking a cache")),
            ("a structured answer", Prompt(user="verdict?", response_format=_Verdict)),
        ):
            sent = len(fake.requests)
            first, second = await agent.run(prompt), await agent.run(prompt)
            if self.kernel_errors(first, second):
                continue  # they say why the second was not a hit
            if second.node.metrics.get("cache") != "hit" or len(fake.requests) != sent + 1:
                self.findings.add(
                    f"an agent asked the same prompt twice ({what}) and the second was not "
                    "answered from the cache"
                )
            elif second.output != first.output:
                self.findings.add(f"{what} came back from the cache changed")
        await self.tool_results()

    async def tool_results(self) -> None:
        calls: list[str] = []

        def lookup(city: str) -> str:
            calls.append(city)
            return f"Sunny in {city}"

        event = f"{self.prefix}-changed"
        policy = ToolCachePolicy(ttl=60, invalidate_on=[event])
        tool = Tool(lookup, name=self.tool, description="The weather.", cache=policy)
        fake = FakeAnthropicAPI(_tool_then_answer(self.tool))
        agent = Agent(
            name=f"{self.prefix}-tools",
            client=fake.client(max_retries=0),
            tools=[tool],
            cache=self.cache,
        )
        # Tool results only: an answer from the cache would not call the tool at all.
        tools_only = PromptOverrides(disable_cache=True)
        errors = [self.kernel_errors(await agent.run("Weather in Oslo?", tools_only)) for _ in "12"]
        if calls != ["Oslo"] and not any(errors):
            self.findings.add(
                "a tool with a ToolCachePolicy ran again for the same arguments: its result was "
                "not served from the cache"
            )
        try:
            removed = await invalidate(event)
        except Exception as exc:
            self.findings.add(f"groundswell.invalidate() failed with this backend: {_error(exc)}")
        else:
            if removed != 1:
                self.findings.add(
                    f"groundswell.invalidate() cleared {removed} entries where the one tool "
                    "result was cached"
                )
        errors = [self.kernel_errors(await agent.run("Weather in Oslo?", tools_only))]
        if calls[-2:] != ["Oslo", "Oslo"] and not any(errors):
            self.findings.add("after groundswell.invalidate() the tool's cached result was used")

    def kernel_errors(self, *results: PromptResult[Any]) -> bool:
        """Report the kernel's own findings about the backend in the runs' trees (the first
        per operation); True if there were any."""
        found = False
        for result in results:
            for node in [result.node, *result.tree.find(type="tool_call")]:
                for event in node.events:
                    if event["type"] not in ("cache_error", "cache_skipped"):
                        continue
                    found = True
                    operation = event["operation"]
                    if event["type"] == "cache_error" and operation not in self.kernel_said:
                        self.kernel_said.add(operation)
                        self.findings.add(
                            f"in an agent's run the kernel recorded a cache_error on {operation}: "
                            f"{event['error']}"
                        )
        return found

    async def clean_up(self) -> None:
        decoy = self.tool.replace("_", "X")
        for prefix in (
            f"{self.prefix}:",
            f"tool.{self.tool}",
            f"x.tool.{self.tool}",
            f"tool.{decoy}",
        ):
            # Already reported if it fails: what a broken backend keeps is its own.
            with contextlib.suppress(Exception):
                await _settle(self.cache.bust_prefix(prefix), CALL_TIMEOUT_S)


def _answering(request: MessagesRequest) -> Reply:
    if request.output_schema is not None:
        return json_reply({"approve": True, "reason": "fine"})
    return text(f"answer to {request.last_user_text()}")


def _tool_then_answer(tool: str) -> Callable[[MessagesRequest], Reply]:
    def respond(request: MessagesRequest) -> Reply:
        results = request.latest_tool_results()
        if results:
            return text(f"{results[0]['content']}.")
        city = request.last_user_text().removeprefix("Weather in ").rstrip("?")
        return tool_use(tool, {"city": city})

    return respond


async def check_cache_backend(backend: Any, *, ttl: float = 0.5) -> None:
    """Check a cache backend against the `groundswell.Cache` protocol; raise `ProtocolViolation`.

    ``backend`` is the backend (a `Cache`), its factory (a class or a function
    called with no arguments), its `CacheBackend` record, or the name of a
    registered backend (made with `groundswell.get_cache`, as agents do). It is
    used directly and through the kernel: misses, round trips of every shape
    the kernel stores (answers and tool results), overwrites, ``ttl`` in seconds
    (``ttl`` here, kept short; raise it for a store with coarse expiry), ``None``
    as the default lifetime, ``bust`` and ``bust_prefix`` results, concurrent
    calls and calls from another event loop, agents answered from it, and
    `groundswell.invalidate`; and the optional lock (``try_lock``/``unlock``,
    `groundswell.cache.backends.CacheLock`) when the backend has one: exclusive,
    renewed by its owner, released only by it, and over after its ``ttl``.
    Takes about ``ttl + 1`` seconds, twice that with a lock (it waits
    ``ttl + 0.6`` for expiry: keep ``ttl`` >= 0.5 for a store that has whole
    seconds only).
    """
    findings = _Findings(_subject(backend), "groundswell.Cache")
    if isinstance(backend, str):
        try:
            cache: Any = get_cache(backend)
        except GroundswellError as exc:
            raise findings.stop(f"groundswell.get_cache({backend!r}) failed: {exc}") from exc
    else:
        cache, _ = _made(backend, CacheBackend, "cache backend", "get", findings)
    findings.subject = _subject(cache)
    check = _CacheCheck(cache, findings, ttl)
    try:
        await check.structure()  # stops here when methods are missing
        await check.round_trips()
        await check.expiry_and_busting()
        await check.concurrency()
        await check.locking()
        await check.through_the_kernel()
    finally:
        await check.clean_up()
    findings.raise_any()


def _subject(obj: Any) -> str:
    if isinstance(obj, str):
        return repr(obj)
    name = getattr(obj, "name", None)
    if isinstance(obj, type):
        return obj.__qualname__
    if isinstance(name, str) and not callable(obj):
        return f"{type(obj).__qualname__} {name!r}"
    if inspect.isfunction(obj):
        return f"the factory {obj.__qualname__}()"
    return type(obj).__qualname__


# -- event sinks -----------------------------------------------------------------------


class _SinkProbe:
    """Stands in for the sink in the hub, passing every call on and noting what went wrong."""

    def __init__(self, sink: Any, findings: _Findings, said: set[str]) -> None:
        self.sink, self.findings = sink, findings
        self.said = said  # what was already reported, as "name" or "name|kind|error"
        self.handled = 0
        self.closed = 0
        self.close_done = threading.Event()

    def _call(self, name: str, *args: Any) -> None:
        method = getattr(self.sink, name, None)
        if not callable(method):
            return
        try:
            result = method(*args)
        except BaseException as exc:  # SystemExit too: the hub would swallow it silently
            event = args[0] if args else None
            said = f"{name}|{event.kind if event else ''}|{_error(exc)}"
            if said not in self.said:  # once per error and kind of event, not per node
                self.said.add(said)
                on = (
                    f" on a {event.kind} event (first of a {event.node.type.value})"
                    if event
                    else ""
                )
                self.findings.add(
                    f"{name}() raised {_error(exc)}{on}; a sink must take every event"
                )
            return
        if inspect.isawaitable(result):
            _discard(result)
            if name not in self.said:
                self.said.add(name)
                self.findings.add(
                    f"{name}() returned {shown(result)}, which nothing awaits; make it a plain "
                    "def that does its work before returning (it runs on its own worker thread)"
                )

    def handle(self, event: Event) -> None:
        self.handled += 1
        self._call("handle", event)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        self.closed += 1
        try:
            self._call("close")
        finally:
            self.close_done.set()


async def check_sink(sink: Any) -> None:
    """Check an event sink against `groundswell.tree.events.Sink`; raise `ProtocolViolation`.

    ``sink`` is the sink, its factory (a class or a function called with no
    arguments) or its `EventSink` record. It is attached to the process's sink
    hub under a name of its own, gets every event of real runs (an agent with a
    tool, a failing workflow, two runs at once), is flushed with
    `groundswell.flush_sinks`, then detached, which closes it, as at exit.
    """
    findings = _Findings(_subject(sink), "event sink")
    made, _ = _made(sink, EventSink, "event sink", "handle", findings)
    if made is None:
        raise findings.stop(
            "its factory returned None, which means the sink is off in this process; configure "
            "it (its environment variables) before checking it"
        )
    findings.subject = _subject(made)
    said: set[str] = set()
    for problem in sink_problems(made):
        findings.add(problem)
        said.add(problem.split("()", 1)[0])  # "handle() is async": no second word on it
    if getattr(made, "close", None) is None:
        findings.add("it has no close() method; add one, even one that does nothing")
    probe = _SinkProbe(made, findings, said)
    name = _unique("check-sink-")

    class Attach:
        @hookimpl
        def register_event_sinks(self) -> EventSink:
            return EventSink(name=name, factory=lambda: probe)

    manager = get_plugin_manager()
    manager.register(Attach(), name=name)
    try:
        await _sink_runs()
        if not await asyncio.to_thread(flush_sinks, CALL_TIMEOUT_S):
            findings.add(
                f"handle() did not catch up with two runs' events within {CALL_TIMEOUT_S:g} s; "
                "keep it quick (batch slow I/O in flush())"
            )
    finally:
        await asyncio.to_thread(manager.unregister, name)  # closes it, within the deadline
    if probe.handled == 0:
        findings.add("the sink never got an event: it was not attached (see the errors above)")
    if probe.closed != 1 or not probe.close_done.is_set():
        findings.add("close() did not return in time when the sink was detached")
    findings.raise_any()


async def _sink_runs() -> None:
    """Runs that make every kind of event: nodes that pass and fail, tools, concurrent runs."""

    def lookup(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    fake = FakeAnthropicAPI(_tool_then_answer("lookup"))
    agent = Agent(name="sink-check", client=fake.client(max_retries=0), tools=[lookup])

    @workflow(name="sink-check")
    async def passing(ctx: WorkflowContext, city: str) -> str:
        ctx.event_tree.add_event(ctx.node, "checking", city=city)
        return str(await ctx.step("ask", lambda: agent.prompt(f"Weather in {city}?")))

    @workflow(name="sink-check-failing")
    async def failing(ctx: WorkflowContext) -> None:
        await ctx.step("fail", _fail)

    await asyncio.gather(passing.run("Oslo"), passing.run("Rome"))
    with contextlib.suppress(WorkflowError):
        await failing.run()


def _fail() -> None:
    raise ValueError("a step failing on purpose")


# -- agent middleware ------------------------------------------------------------------

_SEAMS = ("wrap_prompt", "before_model", "wrap_model_call", "wrap_tool_call")


class _ProbeBase(Middleware):
    """Wraps the middleware under check with its own name, order and seams."""

    def __init__(self, target: Middleware, findings: _Findings) -> None:
        self.target, self.findings = target, findings
        self.seen: set[str] = set()
        self.active_said: list[bool] = []

    def active(self, run: PromptRun) -> bool:
        try:
            said: Any = self.target.active(run)
        except Exception as exc:
            self.findings.add(f"active(run) raised {_error(exc)}; it must return True or False")
            return False
        if not isinstance(said, bool):
            self.findings.add(f"active(run) returned {shown(said)}; it must return True or False")
        self.active_said.append(bool(said))
        return bool(said)

    async def seam(
        self, seam: str, made: Any, passed: Callable[[], Any], fallback: Callable[[], Any]
    ) -> Any:
        """What the target's ``seam`` returned, awaited; on a problem: noted, and passed through."""
        self.seen.add(seam)
        if not inspect.isawaitable(made):
            self.findings.add(f"{seam} is not async; define it as async def {seam}(...)")
            return await fallback()
        try:
            result = await made
        except Exception as exc:
            if exc is passed() or isinstance(exc, GroundswellError):
                raise  # from deeper layers, or deliberate: the kernel passes those on
            self.findings.add(
                f"{seam} raised {_error(exc)} on a plain prompt (the kernel turns that into a "
                "PluginError naming the middleware)"
            )
            return await fallback()
        if inspect.isawaitable(result):
            _discard(result)
            self.findings.add(
                f"{seam} returned an awaitable it never awaited; write `return await "
                f"call_next(...)`"
            )
            return await fallback()
        return result


async def _probe_wrap_prompt(
    self: _ProbeBase, run: PromptRun, call_next: Callable[[], Awaitable[PromptResult[Any]]]
) -> PromptResult[Any]:
    got: list[PromptResult[Any]] = []
    failed: list[BaseException] = []

    async def counted() -> PromptResult[Any]:
        try:
            got.append(await call_next())
        except BaseException as exc:
            failed.append(exc)
            raise
        return got[-1]

    async def fallback() -> PromptResult[Any]:
        return got[-1] if got else await call_next()

    made = self.target.wrap_prompt(run, counted)
    result = await self.seam("wrap_prompt", made, lambda: failed[-1] if failed else None, fallback)
    if not got and not failed:
        self.findings.add(
            "wrap_prompt returned without calling call_next(), so the agent never ran: "
            "`return await call_next()` (answer alone only when you really have the answer)"
        )
    if not isinstance(result, PromptResult):
        self.findings.add(
            f"wrap_prompt returned {shown(result)}; it must return a PromptResult (what "
            "`await call_next()` returned, or one made with dataclasses.replace)"
        )
        return await fallback()
    return result


async def _probe_before_model(
    self: _ProbeBase, run: PromptRun, request: dict[str, Any]
) -> dict[str, Any]:
    original = dict(request)

    async def fallback() -> dict[str, Any]:
        return original

    result = await self.seam(
        "before_model", self.target.before_model(run, request), lambda: None, fallback
    )
    if not isinstance(result, dict):
        self.findings.add(
            f"before_model returned {shown(result)}; it must return the request dict "
            "(the one it got, or a changed copy)"
        )
        return original
    lost = [k for k in ("model", "max_tokens", "messages") if k not in result]
    if lost:
        self.findings.add(f"before_model returned a request without {', '.join(lost)}")
        return original
    return result


async def _probe_wrap_model_call(
    self: _ProbeBase,
    run: PromptRun,
    request: dict[str, Any],
    call_next: Callable[[dict[str, Any]], Awaitable[Any]],
) -> Any:
    got: list[Any] = []
    failed: list[BaseException] = []

    async def counted(changed: Any) -> Any:
        if not isinstance(changed, dict):
            self.findings.add(
                f"wrap_model_call passed {shown(changed)} to call_next; pass the request dict"
            )
            changed = request
        try:
            got.append(await call_next(changed))
        except BaseException as exc:
            failed.append(exc)
            raise
        return got[-1]

    async def fallback() -> Any:
        return got[-1] if got else await call_next(request)

    made = self.target.wrap_model_call(run, request, counted)
    result = await self.seam(
        "wrap_model_call", made, lambda: failed[-1] if failed else None, fallback
    )
    if not hasattr(result, "content") or not hasattr(result, "stop_reason"):
        self.findings.add(
            f"wrap_model_call returned {shown(result)}; it must return the SDK's Message "
            "(what `await call_next(request)` returned)"
        )
        return await fallback()
    return result


async def _probe_wrap_tool_call(
    self: _ProbeBase,
    run: PromptRun,
    call: ToolCall,
    call_next: Callable[[ToolCall], Awaitable[Any]],
) -> Any:
    got: list[Any] = []
    failed: list[BaseException] = []

    async def counted(changed: ToolCall) -> Any:
        try:
            got.append(await call_next(changed))
        except BaseException as exc:
            failed.append(exc)
            raise
        return got[-1]

    async def fallback() -> Any:
        return got[-1] if got else await call_next(call)

    made = self.target.wrap_tool_call(run, call, counted)
    result = await self.seam(
        "wrap_tool_call", made, lambda: failed[-1] if failed else None, fallback
    )
    if not got and not failed:
        self.findings.add(
            "wrap_tool_call returned without calling call_next(call), so the tool never "
            "ran: `return await call_next(call)`"
        )
    return result


_PROBES: dict[str, Callable[..., Any]] = {
    "wrap_prompt": _probe_wrap_prompt,
    "before_model": _probe_before_model,
    "wrap_model_call": _probe_wrap_model_call,
    "wrap_tool_call": _probe_wrap_tool_call,
}


async def check_middleware(
    middleware: Any, *, agent_options: Mapping[str, Any] | None = None
) -> None:
    """Check agent middleware against the `groundswell.Middleware` seams; raise `ProtocolViolation`.

    ``middleware`` is an instance, its factory (a class or a function called
    with no arguments), its `AgentMiddleware` record (whose name and order
    win), or the name of a registered one. Real agents on `FakeAnthropicAPI`
    run prompts with one tool call through it, one at a time and then
    concurrently: each seam it overrides must be async, call through, and
    return what the seam must (a `PromptResult`, the request dict, the SDK's
    ``Message``, the tool's result), ``active`` must return a bool, and
    concurrent prompts must each get their own answer. ``agent_options`` are
    extra ``Agent(...)`` keywords, e.g. a plugin's option that makes it active.
    """
    findings = _Findings(_subject(middleware), "agent middleware")
    if isinstance(middleware, str):
        record = get_plugin_manager().lookup(AgentMiddleware, middleware)
        middleware = record
    made, record = _made(middleware, AgentMiddleware, "middleware", "wrap_prompt", findings)
    if not isinstance(made, Middleware):
        raise findings.stop(
            f"it is {shown(made)}, not a groundswell.Middleware; subclass Middleware and "
            "override the seams you need"
        )
    kind = type(made)
    name = record.name if record else kind.name or kind.__name__
    findings.subject = f"middleware {name!r}"
    seams = [s for s in _SEAMS if getattr(kind, s) is not getattr(Middleware, s)]
    if not seams:
        findings.add(
            "it overrides none of the seams (wrap_prompt, before_model, "
            "wrap_model_call, wrap_tool_call), so it does nothing"
        )
    attrs: dict[str, Any] = {s: _PROBES[s] for s in seams}
    attrs["name"] = name
    attrs["order"] = record.order if record else kind.order
    attrs["retries"] = kind.retries
    probe = type(f"Checked{kind.__name__}", (_ProbeBase,), attrs)(made, findings)
    await _middleware_runs(probe, findings, dict(agent_options or {}))
    if probe.active_said and not any(probe.active_said):
        findings.add(
            "active(run) said False for every prompt, so nothing else was checked; pass "
            "agent_options= that make it take part"
        )
    else:
        for seam in seams:
            if seam not in probe.seen:
                findings.add(f"{seam} was never called on a prompt with a tool call")
    findings.raise_any()


async def _middleware_runs(probe: _ProbeBase, findings: _Findings, options: dict[str, Any]) -> None:
    def lookup(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    fake = FakeAnthropicAPI(_tool_then_answer("lookup"))
    agent = Agent(
        name=_unique("middleware-check-"),
        client=fake.client(max_retries=0),
        tools=[lookup],
        middleware=[probe],
        **options,
    )
    cities = ("Oslo", "Rome", "Lima")
    try:
        alone = [await agent.prompt(f"Weather in {c}?") for c in cities]
        together = await asyncio.gather(*(agent.prompt(f"Weather in {c}?") for c in cities))
    except Exception as exc:
        raise findings.stop(f"a prompt through it failed: {_error(exc)}") from exc
    if list(together) != alone:
        findings.add(
            "prompts run at once got answers other than the same prompts run one at a time; "
            "the instance serves every prompt at once, so keep per-prompt state in run.scratch"
        )


# -- token counters --------------------------------------------------------------------


async def check_counter(counter: Any) -> None:
    """Check a token counter against `groundswell.budget.tokens.Counter`; raise `ProtocolViolation`.

    ``counter`` is the counter, its factory, its `TokenCounter` record or a
    registered name. ``count`` must be async and return an ``int`` >= 0 for
    requests of text, content blocks, tools and a system prompt, count a
    longer request as no fewer tokens, give the same answers concurrently, and
    serve a budgeted agent without ``budget_counter_error`` events.
    """
    findings = _Findings(_subject(counter), "token counter")
    if isinstance(counter, str):
        counter = get_plugin_manager().lookup(TokenCounter, counter)
    made, _ = _made(counter, TokenCounter, "token counter", "count", findings)
    findings.subject = _subject(made)
    if not isinstance(made, Counter):
        raise findings.stop(
            "it has no count(request) method; define async def count(self, request)"
        )
    fake = FakeAnthropicAPI([])
    client = fake.client(max_retries=0)
    short = [{"role": "user", "content": "Hello"}]
    long: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Oslo? " * 20},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Oslo"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny in Oslo"},
        ]},
    ]  # fmt: skip
    tool = {"name": "lookup", "description": "Weather.", "input_schema": {"type": "object"}}
    requests = [
        CountRequest("claude-sonnet-4-6", short, None, (), client),
        CountRequest("claude-sonnet-4-6", long, [{"type": "text", "text": "Be brief."}], [tool],
                     client),
    ]  # fmt: skip

    async def count(request: CountRequest) -> int | None:
        try:
            made_count: Any = made.count(request)
        except Exception as exc:
            findings.add(f"count(request) raised {_error(exc)}")
            return None
        if not inspect.isawaitable(made_count):
            findings.add("count is not async; define it as async def count(self, request)")
            tokens = made_count
        else:
            try:
                tokens = await _settle(made_count, CALL_TIMEOUT_S)
            except Exception as exc:
                findings.add(f"count(request) raised {_error(exc)}")
                return None
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            findings.add(
                f"count returned {shown(tokens)}; it must return the input tokens as an int >= 0"
            )
            return None
        return tokens

    alone = [await count(r) for r in requests]
    if None not in alone:
        if alone[1] < alone[0]:  # type: ignore[operator]
            findings.add(
                f"a longer request counted fewer tokens ({alone[1]}) than 'Hello' ({alone[0]})"
            )
        together = await asyncio.gather(*(count(r) for r in requests * 3))
        if list(together) != alone * 3:
            findings.add("counting the same requests at once gave other answers than one by one")
    await _counted_prompt(made, findings)
    findings.raise_any()


async def _counted_prompt(counter: Any, findings: _Findings) -> None:
    fake = FakeAnthropicAPI(lambda request: text("Counted."))
    agent = Agent(
        name="counter-check",
        client=fake.client(max_retries=0),
        token_budget=TokenBudget(max_total=200_000, counter=counter),
    )
    result = await agent.run("How many tokens is this?")
    for event in result.node.events:
        if event["type"] == "budget_counter_error":
            findings.add(f"in a budgeted prompt the counter failed: {event['error']}")


# -- execution engines -----------------------------------------------------------------


async def check_engine(engine: Any) -> None:
    """Check an execution engine against `groundswell.ExecutionEngine`; raise `ProtocolViolation`.

    ``engine`` is the engine, its factory or its `ExecutionBackend` record. It
    is registered under a name of its own and runs ``Workflow(durable=name)``
    workflows: ``run_workflow`` must return the `WorkflowResult` of
    ``call.run_here()``, steps must return their bodies' outputs, a failing
    step must fail the run with its own error as the cause, and concurrent runs
    must each get their own result. ``spawn`` (queues) is not exercised.
    """
    findings = _Findings(_subject(engine), "execution engine")
    made, _ = _made(engine, ExecutionBackend, "execution backend", "run_workflow", findings)
    findings.subject = _subject(made)
    if not isinstance(made, ExecutionEngine):
        raise findings.stop(
            "it lacks run_workflow, run_step or spawn; an engine has all three (async)"
        )
    name = _unique("check-engine-")

    class Register:
        @hookimpl
        def register_execution_backends(self) -> ExecutionBackend:
            return ExecutionBackend(name=name, factory=lambda: made)

    manager = get_plugin_manager()
    manager.register(Register(), name=name)
    try:
        await _engine_runs(name, findings)
    finally:
        manager.unregister(name)
    findings.raise_any()


async def _engine_runs(name: str, findings: _Findings) -> None:
    async def later(value: int) -> int:
        await asyncio.sleep(0)
        return value

    @workflow(name="engine-check", durable=name)
    async def adding(ctx: WorkflowContext, a: int, b: int) -> int:
        first = await ctx.step("first", lambda: a)
        second = await ctx.step("second", lambda: later(b))
        return int(first) + int(second)

    @workflow(name="engine-check-failing", durable=name)
    async def failing(ctx: WorkflowContext) -> None:
        await ctx.step("fail", _fail)

    try:
        results: list[Any] = await asyncio.wait_for(
            asyncio.gather(*(adding.run(i, 10 * i) for i in (1, 2, 3))), CALL_TIMEOUT_S * 2
        )
    except Exception as exc:
        findings.add(f"a workflow run through it failed: {_error(exc)}")
        return
    for i, result in zip((1, 2, 3), results, strict=True):
        if not isinstance(result, WorkflowResult):
            findings.add(
                f"run_workflow returned {shown(result)}; it must return the WorkflowResult "
                "that `await call.run_here()` returned"
            )
            break
        if result.output != 11 * i:
            findings.add(
                f"a workflow returning {11 * i} gave {result.output!r}: steps must return their "
                "bodies' outputs (run_step: `return await call()`)"
            )
            break
    try:
        await failing.run()
    except WorkflowError as exc:
        if not isinstance(exc.__cause__, ValueError):
            findings.add(
                f"a step's ValueError reached the caller as {_error(exc.__cause__ or exc)}; "
                "let a step's exception propagate unchanged"
            )
    except Exception as exc:
        findings.add(
            f"a failing step raised {_error(exc)} instead of a WorkflowError; run_workflow "
            "must let call.run_here()'s WorkflowError propagate"
        )
    else:
        findings.add("a workflow whose step raised did not fail: exceptions must propagate")
