"""Concurrent identical prompts make one model call: across event loops, threads and processes.

Within a process the kernel merges callers of one key on every event loop;
across processes a backend that offers a lock (`groundswell.cache.backends.CacheLock`,
the bundled Redis one) does, with waiting callers that take over when the
holder dies. A failing lock never loses an answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from groundswell_lru import LRUCache

from groundswell import Agent, PromptResult
from groundswell.testing import FakeAnthropicAPI, Reply, text

LOOPS = 8
DISTINCT = 20


def slow_answers(fake_delay: float) -> FakeAnthropicAPI:
    """A fake whose answers take ``fake_delay`` seconds, so that identical prompts overlap."""
    return FakeAnthropicAPI(
        lambda request: Reply(
            [{"type": "text", "text": f"answer to {request.last_user_text()}"}], delay=fake_delay
        )
    )


def test_identical_prompts_on_many_event_loops_make_one_model_call_each() -> None:
    fake = slow_answers(0.3)
    agent = Agent(name="loops", enable_cache=True, cache=LRUCache())
    start = threading.Barrier(LOOPS)
    outputs: list[list[str]] = []
    failures: list[BaseException] = []

    async def ask_all() -> list[str]:
        # Each thread's loop asks every question, in its own order.
        return list(await asyncio.gather(*(agent.prompt(f"q{i}") for i in range(DISTINCT))))

    def thread() -> None:
        try:
            start.wait(10)
            with agent.override(client=fake.client()):  # one client per loop, one fake
                outputs.append(asyncio.run(ask_all()))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=thread) for _ in range(LOOPS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert len(outputs) == LOOPS
    assert all(out == [f"answer to q{i}" for i in range(DISTINCT)] for out in outputs)
    assert len(fake.requests) == DISTINCT  # 134 calls for 20 before


async def test_a_cancelled_caller_hands_the_call_to_one_waiting_for_it() -> None:
    fake = slow_answers(1.0)  # long enough that the first is still calling when cancelled
    agent = Agent(name="handover", client=fake.client(), cache=LRUCache())
    first = asyncio.create_task(agent.run("same"))
    await asyncio.sleep(0.05)  # the first is calling the model
    others = [asyncio.create_task(agent.run("same")) for _ in range(3)]
    await asyncio.sleep(0.05)
    first.cancel()
    results = await asyncio.gather(*others)
    assert [r.output for r in results] == ["answer to same"] * 3
    assert sorted(r.node.metrics["cache"] for r in results) == ["hit", "hit", "miss"]
    assert len(fake.requests) == 2  # the cancelled call, and the one that took over
    with pytest.raises(asyncio.CancelledError):
        await first


# -- a backend's lock ------------------------------------------------------------------


class BrokenLock(LRUCache):
    """An in-process cache whose lock fails as a shared store's would in an outage."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.tries = 0

    async def try_lock(self, key: str, owner: str, ttl: float) -> Any:
        self.tries += 1
        if self.how == "raises":
            raise ConnectionError("lock server gone")
        if self.how == "hangs":
            await asyncio.Event().wait()
        if self.how == "held":  # another owner holds it, forever
            return False
        return "yes"  # not a bool

    async def unlock(self, key: str, owner: str) -> bool:
        return True


@pytest.mark.parametrize("how", ["raises", "hangs", "misshapen"])
async def test_a_failing_lock_never_loses_the_answer(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUNDSWELL_CACHE_TIMEOUT_S", "0.2")
    fake = FakeAnthropicAPI(lambda request: text(f"fresh {len(fake.requests)}"))
    cache = BrokenLock(how)
    agent = Agent(name=f"lock-{how}", client=fake.client(), cache=cache)
    first = await agent.run("q")
    assert first.output == "fresh 1" and first.node.metrics["cache"] == "miss"
    errors = [e for e in first.node.events if e["type"] == "cache_error"]
    assert [e["operation"] for e in errors] == ["try_lock"]
    again = await agent.run("q")  # stored all the same
    assert again.node.metrics["cache"] == "hit" and len(fake.requests) == 1


async def test_a_lock_held_elsewhere_is_waited_for_while_its_holder_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its holder renews it (answering a long request): the caller keeps waiting
    # for that answer, asking the backend now and then, and calls no model.
    monkeypatch.setenv("GROUNDSWELL_CACHE_LOCK_S", "0.3")
    fake = FakeAnthropicAPI(lambda request: text("mine"))
    cache = BrokenLock("held")
    agent = Agent(name="lock-held", client=fake.client(), cache=cache)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await agent.run("q")
    assert fake.requests == [] and cache.tries > 3


# -- across processes, on a real Redis ---------------------------------------------------

CHILD = """
import asyncio, json, sys, time
from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI, Reply
from groundswell_redis import RedisCache

url, prefix, start, questions, copies, delay = sys.argv[1:7]
fake = FakeAnthropicAPI(
    lambda r: Reply([{"type": "text", "text": "answer to " + r.last_user_text()}],
                    delay=float(delay)),
    share_cache=True,  # the fakes of every process stand for one real API
)
agent = Agent(name="fleet", client=fake.client(), cache=RedisCache(url, prefix=prefix))

async def main():
    asked = [f"q{i}" for i in range(int(questions))] * int(copies)
    time.sleep(max(0.0, float(start) - time.time()))  # all processes begin together
    results = await asyncio.gather(*(agent.run(q) for q in asked))
    assert all(r.output == "answer to " + q for r, q in zip(results, asked)), results
    print(json.dumps({"calls": len(fake.requests),
                      "misses": sum(r.node.metrics["cache"] == "miss" for r in results),
                      "waited": sum(any(e["type"] == "cache_wait" for e in r.node.events)
                                    for r in results)}))

asyncio.run(main())
"""


def run_children(
    url: str, prefix: str, count: int, questions: int, copies: int, delay: float
) -> list[dict[str, int]]:
    start = time.time() + 4.0  # after every child has imported Groundswell
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, url, prefix, str(start), str(questions), str(copies),
             str(delay)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]  # fmt: skip
    done = [(child, *child.communicate(timeout=60)) for child in children]
    for child, _, err in done:
        assert child.returncode == 0, err
    return [json.loads(out.strip().splitlines()[-1]) for _, out, _ in done]


@pytest.mark.slow  # spawns processes
def test_identical_prompts_in_several_processes_make_one_model_call_each(
    redis_server_url: str, redis_prefix: str
) -> None:
    found = run_children(redis_server_url, redis_prefix, 4, questions=5, copies=3, delay=1.0)
    assert sum(f["calls"] for f in found) == 5  # one per distinct prompt, in all processes
    assert sum(f["misses"] for f in found) == 5
    assert sum(f["waited"] for f in found) >= 1  # some waited for another process's answer
    import redis

    with redis.Redis.from_url(redis_server_url) as admin:
        assert admin.keys(f"{redis_prefix}lock:*") == []  # every lock was let go
        for key in admin.scan_iter(match=f"{redis_prefix}*"):
            admin.delete(key)


HOLDER = """
import asyncio, sys
from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI, Reply
from groundswell_redis import RedisCache

url, prefix = sys.argv[1:3]
fake = FakeAnthropicAPI(lambda r: Reply([{"type": "text", "text": "never sent"}], delay=60),
                        share_cache=True)
agent = Agent(name="orphan", client=fake.client(), cache=RedisCache(url, prefix=prefix))
asyncio.run(agent.prompt("the question"))
"""


def spawn(code: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **env},
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow  # spawns and kills a process
async def test_when_the_process_holding_the_lock_dies_a_waiting_one_takes_over(
    redis_server_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis
    from groundswell_redis import RedisCache

    monkeypatch.setenv("GROUNDSWELL_CACHE_LOCK_S", "1")
    holder = spawn(HOLDER, redis_server_url, redis_prefix, GROUNDSWELL_CACHE_LOCK_S="1")
    admin = redis.Redis.from_url(redis_server_url)
    try:
        deadline = time.monotonic() + 30
        while not admin.keys(f"{redis_prefix}lock:*"):  # it is calling the model
            assert holder.poll() is None and time.monotonic() < deadline, holder.returncode
            await asyncio.sleep(0.05)
        fake = FakeAnthropicAPI(lambda r: text("answered here"), share_cache=True)
        cache = RedisCache(redis_server_url, prefix=redis_prefix)
        agent = Agent(name="orphan", client=fake.client(), cache=cache)
        waiting = asyncio.create_task(agent.run("the question"))
        await asyncio.sleep(0.5)
        assert not waiting.done() and fake.requests == []  # it waits for the holder
        holder.send_signal(signal.SIGKILL)
        began = time.monotonic()
        result: PromptResult[Any] = await asyncio.wait_for(waiting, 10)
        assert time.monotonic() - began < 3  # within about one lease
        assert result.output == "answered here" and len(fake.requests) == 1
        kinds = [e["type"] for e in result.node.events]
        assert kinds == ["cache_wait", "cache_miss"]
        assert await cache.get(result.node.events[0]["key"]) is not None  # stored
        await cache.aclose()
    finally:
        holder.kill()
        holder.wait(5)
        for key in admin.scan_iter(match=f"{redis_prefix}*"):
            admin.delete(key)
        admin.close()


class Locking(LRUCache):
    """An in-process cache with the optional lock, recording what the kernel asks of it."""

    def __init__(self) -> None:
        super().__init__()
        self.locks: dict[str, tuple[str, float]] = {}
        self.calls: list[str] = []

    async def get(self, key: str) -> Any:
        self.calls.append("get")
        return await super().get(key)

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        self.calls.append("set")
        await super().set(key, value, ttl)

    async def try_lock(self, key: str, owner: str, ttl: float) -> bool:
        self.calls.append("try_lock")
        held = self.locks.get(key)
        if held is not None and held[0] != owner and held[1] > time.monotonic():
            return False
        self.locks[key] = (owner, time.monotonic() + ttl)
        return True

    async def unlock(self, key: str, owner: str) -> bool:
        self.calls.append("unlock")
        if self.locks.get(key, ("",))[0] != owner:
            return False
        del self.locks[key]
        return True


async def test_the_lock_is_taken_on_a_miss_and_let_go_once_the_answer_is_stored() -> None:
    cache = Locking()
    agent = Agent(name="locked", client=FakeAnthropicAPI([text("a")]).client(), cache=cache)
    await agent.prompt("q")
    # The second get: the answer may have been stored between the first and the lock.
    assert cache.calls == ["get", "try_lock", "get", "set", "unlock"] and cache.locks == {}
    cache.calls.clear()
    assert await agent.prompt("q") == "a" and cache.calls == ["get"]  # a hit takes no lock


async def test_a_prompt_failing_after_its_answer_lets_go_of_the_lock_at_once() -> None:
    from groundswell import Middleware, PluginError

    class Refuses(Middleware):
        order = 250  # around the answer cache, inside the prompt

        async def wrap_prompt(self, run: Any, call_next: Any) -> Any:
            await call_next()
            raise ValueError("not this answer")

    cache = Locking()
    fake = FakeAnthropicAPI([text("a")])
    agent = Agent(name="refused", client=fake.client(), cache=cache, middleware=[Refuses()])
    with pytest.raises(PluginError, match="not this answer"):
        await agent.prompt("q")
    for _ in range(3):
        await asyncio.sleep(0)  # the unlock runs in the background
    assert cache.locks == {} and cache.calls[-1] == "unlock"
    assert "set" not in cache.calls  # an answer its prompt refused is never stored


async def test_a_caller_arriving_while_the_answer_waits_to_be_stored_does_not_ask_again() -> None:
    # The answer is stored only once the attempt has succeeded as a whole (after the
    # layers around the cache, here a slow one). A caller coming in that window used to
    # find neither the call in flight nor the entry, and asked the model a second time.
    from groundswell import Middleware

    answered = asyncio.Event()

    class SlowAfter(Middleware):
        order = 250  # around the cache (300): its work comes before the answer is stored

        async def wrap_prompt(self, run: Any, call_next: Any) -> Any:
            result = await call_next()
            answered.set()
            await asyncio.sleep(0.3)
            return result

    fake = FakeAnthropicAPI([text("only once")] * 3)
    agent = Agent(name="window", client=fake.client(), cache=LRUCache(), middleware=[SlowAfter()])
    first = asyncio.create_task(agent.run("same"))
    await answered.wait()  # the first caller has its answer and is in the slow layer
    second = await agent.run("same")
    assert (await first).output == second.output == "only once"
    assert len(fake.requests) == 1
    assert second.node.metrics["cache"] == "hit"


async def test_a_caller_waiting_on_an_answer_its_attempt_then_refuses_asks_for_itself() -> None:
    from groundswell import Middleware

    answered = asyncio.Event()

    class RefuseFirst(Middleware):
        order = 250
        refused = False

        async def wrap_prompt(self, run: Any, call_next: Any) -> Any:
            result = await call_next()
            answered.set()
            await asyncio.sleep(0.3)
            if not RefuseFirst.refused:
                RefuseFirst.refused = True
                raise ValueError("the first answer is refused after the model gave it")
            return result

    fake = FakeAnthropicAPI([text("first"), text("second")])
    agent = Agent(name="refuse", client=fake.client(), cache=LRUCache(), middleware=[RefuseFirst()])
    first = asyncio.create_task(agent.run("same"))
    await answered.wait()
    second = await agent.run("same")  # waits on the first, which then fails
    with pytest.raises(Exception, match="refused after the model gave it"):
        await first
    assert second.output == "second"  # never the refused answer, never a hang
    assert len(fake.requests) == 2
