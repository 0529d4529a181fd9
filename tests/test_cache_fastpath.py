"""The cache's hot paths: keys encoded by orjson, hits without in-flight bookkeeping,
deadlines set on the loop only for a backend call that has to wait."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import enum
import gc
import json
from typing import Any

import orjson
import pytest
from groundswell_lru import LRUCache
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from groundswell import Agent, Prompt
from groundswell.cache.backends import request_cache_key, through_cache
from groundswell.cache.canonical import canonical_bytes, canonical_json, canonicalize
from groundswell.cache.guard import Deadline, within
from groundswell.testing import FakeAnthropicAPI, json_reply, text
from groundswell.tree.tree import EventTree

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)  # orjson's range; beyond: below
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(value=json_values)
def test_key_bytes_hold_the_same_canonical_data_as_the_canonical_text(value: Any) -> None:
    encoded = canonical_bytes(value)
    assert json.loads(encoded) == json.loads(canonical_json(value))
    assert encoded == orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


class Tag(str, enum.Enum):  # noqa: UP042 (str and Enum, as older code writes it)
    A = "a"


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ((1, (2, 3)), [1, [2, 3]]),
        ({"c": Colour.RED, "l": Level.HIGH}, {"c": "red", "l": 3}),
        ({Name("k"): Name("v")}, {"k": "v"}),
        ({Tag.A: Tag.A}, {"a": "a"}),
        (collections.OrderedDict([("b", 1), ("a", 2)]), {"a": 2, "b": 1}),
        ({"when": dt.date(2024, 1, 2), 3: None}, {"when": "2024-01-02", "3": None}),
        ({"n": float("nan"), "i": float("inf")}, {"n": "NaN", "i": "Infinity"}),
    ],
)
def test_values_with_one_canonical_form_give_one_key(value: Any, plain: Any) -> None:
    # orjson would encode these its own way (or not at all); the canonical form decides.
    assert canonical_bytes(value) == canonical_bytes(plain)
    assert json.loads(canonical_bytes(value)) == canonicalize(value)


def test_nan_and_null_stay_apart() -> None:
    # orjson writes NaN as null; the key must not.
    assert canonical_bytes([float("nan")]) != canonical_bytes([None])
    assert canonical_bytes({"x": float("-inf")}) != canonical_bytes({"x": None})


def test_what_orjson_cannot_encode_is_encoded_by_the_standard_library() -> None:
    big = {"n": 2**64, "m": -(2**63) - 1}
    assert canonical_bytes(big) == b'{"m":-9223372036854775809,"n":18446744073709551616}'
    assert canonical_bytes({"n": 2**64}) != canonical_bytes({"n": 2**64 + 1})
    assert canonical_bytes({"n": 2**64}) != canonical_bytes({"n": str(2**64)})
    deep: Any = 1
    for _ in range(300):
        deep = [deep]
    assert canonical_bytes(deep) == ("[" * 300 + "1" + "]" * 300).encode()
    assert request_cache_key("judge", {"messages": deep}) != request_cache_key("judge", {})


def test_keys_refuse_what_the_canonical_form_refuses() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(TypeError, match="circular reference"):
        request_cache_key("judge", {"metadata": loop})
    with pytest.raises(TypeError, match="cannot make a canonical JSON form of object"):
        request_cache_key("judge", {"metadata": {"x": object()}})
    with pytest.raises(TypeError, match="collide"):
        request_cache_key("judge", {"metadata": {1: "a", "1": "b"}})
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate has no UTF-8 form
        request_cache_key("judge", {"system": "\ud800"})


def test_extra_body_fields_count_as_sent_whatever_the_order() -> None:
    # The SDK sends extra_body over the other fields, so its value is the one that counts.
    first = {"temperature": 0.5, "extra_body": {"temperature": 0.2}}
    last = {"extra_body": {"temperature": 0.2}, "temperature": 0.5}
    assert request_cache_key("judge", first) == request_cache_key("judge", last)
    assert request_cache_key("judge", first) == request_cache_key("judge", {"temperature": 0.2})


class SuspendingCache(LRUCache):
    """An LRU cache whose every call waits a loop turn first, as a network backend does."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    async def get(self, key: str) -> Any:
        self.gets += 1
        await asyncio.sleep(0)
        return await super().get(key)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        await asyncio.sleep(0)
        await super().set(key, value, ttl)


async def test_concurrent_calls_share_one_lookup_and_one_request() -> None:
    fake = FakeAnthropicAPI(lambda request: text(f"answer to {request.last_user_text()}"))
    cache = SuspendingCache()
    agent = Agent(name="overlap", client=fake.client(), cache=cache)
    outputs = await asyncio.gather(*(agent.run("same") for _ in range(20)))
    assert {o.output for o in outputs} == {"answer to same"}
    # The first caller asks the backend; the others wait for it, lookup included.
    assert len(fake.requests) == 1 and cache.gets == 1
    assert sorted(o.node.metrics["cache"] for o in outputs) == ["hit"] * 19 + ["miss"]
    later = await agent.run("same")
    assert later.node.metrics["cache"] == "hit" and len(fake.requests) == 1


class FlakyCache(SuspendingCache):
    """Its first ``failures`` gets raise, as a backend in a short outage does."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def get(self, key: str) -> Any:
        if self.failures:
            self.failures -= 1
            self.gets += 1
            await asyncio.sleep(0)
            raise ConnectionError("backend blip")
        return await super().get(key)


async def test_concurrent_callers_meet_a_failing_backend_once() -> None:
    # Each failure counts toward skipping the backend: callers waiting for the
    # first one must not each fail on their own and trip it.
    fake = FakeAnthropicAPI(lambda request: text("fresh"))
    cache = FlakyCache(failures=3)
    agent = Agent(name="blip", client=fake.client(), cache=cache)
    first, *others = await asyncio.gather(*(agent.run("same") for _ in range(3)))
    assert cache.gets == 1 and len(fake.requests) == 1
    assert [e["type"] for e in first.node.events] == ["cache_error", "cache_miss"]
    for other in others:
        assert [e["type"] for e in other.node.events] == ["cache_hit"]
    # Not skipped after one failure: the answer was stored.
    assert cache.metrics()["size"] == 1


class FailingLeader:
    """Callers of one key through `through_cache`; the first to produce fails once released."""

    def __init__(self) -> None:
        self.cache = SuspendingCache()
        self.tree = EventTree()
        self.root = self.tree.start_node("workflow", "w")
        self.release, self.started = asyncio.Event(), asyncio.Event()
        self.produced = 0

    async def produce(self) -> str:
        self.produced += 1
        self.started.set()
        await self.release.wait()
        raise ConnectionError("model gone")

    async def ask(self) -> tuple[str, bool]:
        node = self.tree.start_node("prompt", "q", self.root)
        return await through_cache(
            self.cache, "ns:k", self.produce, encode=str, decode=str, tree=self.tree, node=node
        )


async def test_a_failed_leader_fails_the_callers_waiting_on_it_and_is_not_stored() -> None:
    calls = FailingLeader()
    tasks = [asyncio.create_task(calls.ask()) for _ in range(3)]
    await calls.started.wait()
    for _ in range(3):  # the others' lookups come back, and find the leader
        await asyncio.sleep(0)
    calls.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert calls.produced == 1 and all(isinstance(r, ConnectionError) for r in results)
    assert await calls.cache.get("ns:k") is None


async def test_no_timer_for_a_call_that_answers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    armed: list[float] = []
    real = asyncio.timeout_at

    def counting(when: float | None) -> asyncio.Timeout:
        armed.append(when or 0.0)
        return real(when)

    monkeypatch.setattr(asyncio, "timeout_at", counting)
    cache = LRUCache()
    await cache.set("k", {"value": 1, "stored_at": 0.0})
    deadline = Deadline(1.0)
    assert await within(lambda: cache.get("k"), deadline) == {"value": 1, "stored_at": 0.0}
    assert armed == [] and not deadline.expired()

    waits = Deadline(0.01)
    with pytest.raises(TimeoutError):
        await within(lambda: asyncio.Event().wait(), waits)
    assert len(armed) == 1 and waits.expired()


class Precise(float):
    """A float subclass, as numpy.float64 is."""


def test_a_float_subclass_keys_as_the_float_it_equals() -> None:
    plain = request_cache_key("judge", {"extra_body": {"top_p": 1e-05}})
    assert request_cache_key("judge", {"extra_body": {"top_p": Precise(1e-05)}}) == plain


async def test_a_hit_nobody_waits_for_leaves_nothing_on_the_event_loop() -> None:
    # A loop that never yields (every hit answered from memory) must not pile up
    # callbacks: each used to schedule one, held until the loop ran again.
    fake = FakeAnthropicAPI(lambda request: text("once"))
    agent = Agent(name="quiet", client=fake.client(), cache=LRUCache())
    await agent.prompt("same")

    def handles() -> int:
        return sum(isinstance(o, asyncio.Handle) for o in gc.get_objects())

    before = handles()
    for _ in range(500):
        assert await agent.prompt("same") == "once"
    assert handles() - before < 10 and len(fake.requests) == 1


async def test_a_waiter_cancelled_while_its_leader_fails_warns_about_nothing(
    recwarn: pytest.WarningsRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    calls = FailingLeader()
    leader = asyncio.create_task(calls.ask())
    await calls.started.wait()
    waiter = asyncio.create_task(calls.ask())
    for _ in range(3):
        await asyncio.sleep(0)
    waiter.cancel()
    calls.release.set()
    with pytest.raises(ConnectionError):
        await leader
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gc.collect()
    await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text
    assert not [w for w in recwarn if "never retrieved" in str(w.message)]


class Reading(BaseModel):
    value: float
    count: int
    label: str
    points: list[float]


async def test_a_cached_answer_reads_back_as_the_model_first_gave_it() -> None:
    answer = {"value": 1e308, "count": 2**70, "label": 'é \u2028 "q"', "points": [0.1, -0.0]}
    fake = FakeAnthropicAPI(lambda request: json_reply(answer))
    agent = Agent(name="reads", client=fake.client(), cache=LRUCache())
    prompt = Prompt(user="measure", response_format=Reading)
    miss = await agent.run(prompt)
    hit = await agent.run(prompt)
    assert hit.node.metrics["cache"] == "hit" and len(fake.requests) == 1
    assert hit.output == miss.output == Reading(**answer)
    assert hit.output is not miss.output  # each hit validates a fresh answer
