"""The cache backend checker: a `groundswell.Cache` used directly and through agents."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from ..agent import Agent, PromptResult
from ..cache.backends import (
    ToolCachePolicy,
    cache_entry,
    get_cache,
    lock_problem,
    request_cache_key,
)
from ..cache.guard import shown
from ..cache.tool_results import forget_backend, invalidate
from ..errors import GroundswellError
from ..hookspecs import CacheBackend
from ..prompt.prompt import Prompt, PromptOverrides
from ..tools.tool import Tool
from ._checks import (
    CALL_TIMEOUT_S,
    Findings,
    discard,
    error,
    object_to_check,
    settle,
    subject,
    tool_then_answer,
    unique,
)
from ._fake import FakeAnthropicAPI
from ._replies import MessagesRequest, Reply, json_reply, text

__all__ = ["check_cache_backend"]


class _Verdict(BaseModel):
    approve: bool
    reason: str


_METHODS = ("get", "set", "bust", "bust_prefix")


class _CacheCheck:
    def __init__(self, cache: Any, findings: Findings, ttl: float) -> None:
        self.cache, self.findings, self.ttl = cache, findings, ttl
        self.prefix = unique("gs-check-")  # the namespace of every key written here
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
            self.findings.add(f"{where} raised {error(exc)}")
            return False, None
        if not inspect.isawaitable(made):
            self.findings.add(
                f"{method} is not async: it returned {shown(made)}, not an awaitable; define "
                f"it as async def {method}(...) (the kernel awaits it)"
            )
            return True, made
        try:
            return True, await settle(made, CALL_TIMEOUT_S)
        except TimeoutError:
            self.findings.add(
                f"{where} did not answer within {CALL_TIMEOUT_S:g} s; the kernel gives get and "
                "set 1 s (GROUNDSWELL_CACHE_TIMEOUT_S) and treats a slower answer as a miss"
            )
        except Exception as exc:
            self.findings.add(f"{where} raised {error(exc)}")
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
            self.findings.add(f"metrics() raised {error(exc)}; it must return a dict")
            return
        if inspect.isawaitable(metrics):
            discard(metrics)
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
        clock = asyncio.get_running_loop().time
        began = clock()
        await self.call("set", short, cache_entry("short"), self.ttl)
        await self.call("set", long, cache_entry("long"), None)
        await asyncio.sleep(self.ttl / 2)
        found, _ = await self.get_value(short, "a value with a ttl")
        # Only a value gone before its ttl could have run out is a fault: on a busy
        # machine the calls alone may take longer than the ttl.
        if not found and clock() - began < self.ttl:
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
                f"set/get failed on another thread's event loop ({error(exc)}); one instance "
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
        me, other = unique("owner-"), unique("owner-")
        clock = asyncio.get_running_loop().time
        taken = [clock()]  # when the holder last took (or renewed) the lock

        async def take(owner: str, expected: bool, when: str, wrong: str = "") -> bool:
            began = clock()
            answered, held = await self.call("try_lock", key, owner, ttl)
            if not answered:
                return False
            problem = lock_problem(held)
            if problem is not None:
                self.findings.add(problem)
                return False
            since, taken[0] = taken[0], began if held is True else taken[0]
            if held is True and not expected and clock() - since >= ttl:
                # The holder's ttl may have run out first (a busy machine): no verdict.
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
                    await settle(self.cache.unlock(key, owner), CALL_TIMEOUT_S)

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
        fake = FakeAnthropicAPI(tool_then_answer(self.tool))
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
            self.findings.add(f"groundswell.invalidate() failed with this backend: {error(exc)}")
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
                await settle(self.cache.bust_prefix(prefix), CALL_TIMEOUT_S)


def _answering(request: MessagesRequest) -> Reply:
    if request.output_schema is not None:
        return json_reply({"approve": True, "reason": "fine"})
    return text(f"answer to {request.last_user_text()}")


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
    findings = Findings(subject(backend), "groundswell.Cache")
    if isinstance(backend, str):
        try:
            cache: Any = get_cache(backend)
        except GroundswellError as exc:
            raise findings.stop(f"groundswell.get_cache({backend!r}) failed: {exc}") from exc
    else:
        cache, _ = object_to_check(backend, CacheBackend, "cache backend", "get", findings)
    findings.subject = subject(cache)
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
        # The kernel remembers the backends tool results went to; a checked one (maybe
        # broken) must not be reached by a later clear_tool_cache() in this process.
        forget_backend(cache)
    findings.raise_any()
