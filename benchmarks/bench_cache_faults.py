"""Cache faults: what a hung cache backend adds to each prompt, before and after it is skipped.

Two backends that hang, with the default settings (``GROUNDSWELL_CACHE_TIMEOUT_S``
1 s, skipped after 3 failures in a row): an in-process one whose ``get`` and
``set`` never return, and a real ``redis-server`` stopped with SIGSTOP (left out
when ``redis-server`` or the redis package is missing). The goal is at most
50 ms added per prompt once the backend is skipped. Also measured: how long a
process takes to exit when an event sink's ``close()`` never returns (default
``GROUNDSWELL_SINK_TIMEOUT_S``, 5 s). Results go to ``DIR/cache_faults.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from typing import Any

from _report import output_dir, write
from groundswell_lru import LRUCache

from groundswell import Agent, Cache
from groundswell.cache.guard import SKIP_AFTER, SKIP_FOR_S, TIMEOUT_S
from groundswell.testing import FakeAnthropicAPI, text
from groundswell.tree.events import CLOSE_TIMEOUT_S

GOAL_MS = 50.0
SKIPPED_PROMPTS = 200


class HangingCache(LRUCache):
    """Its ``get`` and ``set`` never return, like a server that accepts and never answers."""

    async def get(self, key: str) -> Any:
        await asyncio.Event().wait()

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        await asyncio.Event().wait()


def fake() -> FakeAnthropicAPI:
    return FakeAnthropicAPI(lambda request: text(f"answer to {request.last_user_text()}"))


async def prompt_ms(agent: Agent, question: str) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    result = await agent.run(question)
    elapsed = (time.perf_counter() - t0) * 1000
    kinds = [e["type"] for e in result.node.events if e["type"].startswith("cache_")]
    return elapsed, kinds


async def baseline_ms() -> float:
    """A prompt's latency with no cache at all (every question new)."""
    agent = Agent(name="baseline", client=fake().client())
    runs = [(await prompt_ms(agent, f"baseline {i}"))[0] for i in range(SKIPPED_PROMPTS)]
    return statistics.median(runs[20:])


async def while_hung(cache: Cache, base: float) -> dict[str, Any]:
    """Added latency per prompt while ``cache`` hangs: each prompt until it is skipped, then after."""
    agent = Agent(name="hung", client=fake().client(), cache=cache)
    before: list[float] = []
    after: list[float] = []
    for i in range(20 + SKIPPED_PROMPTS):
        elapsed, kinds = await prompt_ms(agent, f"question {i}")
        if "cache_error" in kinds:
            before.append(elapsed - base)
        elif "cache_skipped" in kinds:
            after.append(elapsed - base)
        if len(after) >= SKIPPED_PROMPTS:
            break
    after_median = statistics.median(after)
    return {
        "added_ms_per_prompt_before_skipped": [round(ms, 1) for ms in before],
        "prompts_before_skipped": len(before),
        "added_ms_after_skipped_median": round(after_median, 3),
        "added_ms_after_skipped_p95": round(statistics.quantiles(after, n=20)[18], 3),
        "goal_ms_after_skipped": GOAL_MS,
        "meets_goal": after_median <= GOAL_MS,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def stopped_redis() -> Iterator[str | None]:
    """A private redis-server, stopped with SIGSTOP once the cache has used it; None if unavailable."""
    binary = shutil.which("redis-server")
    try:
        import redis  # noqa: F401
    except ImportError:
        binary = None
    if binary is None:
        yield None
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", folder],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0|{server.pid}"
        finally:
            server.send_signal(signal.SIGCONT)
            server.kill()
            server.wait(5)


async def hung_redis(address: str, base: float) -> dict[str, Any]:
    from groundswell_redis import RedisCache

    url, pid = address.split("|")
    cache = RedisCache(url)
    agent = Agent(name="warm", client=fake().client(), cache=cache)
    await agent.prompt("warm up")  # connected before the server stops
    os.kill(int(pid), signal.SIGSTOP)
    return await while_hung(cache, base)


SINK_SCRIPT = textwrap.dedent(
    """
    import asyncio, threading
    import groundswell
    from groundswell import EventSink, hookimpl, workflow

    class NeverCloses:
        def handle(self, event):
            pass

        def close(self):
            threading.Event().wait()

    class Plugin:
        @hookimpl
        def register_event_sinks(self):
            return EventSink(name="never-closes", factory=NeverCloses)

    groundswell.get_plugin_manager().register(Plugin(), name="never-closes")

    @workflow(name="short")
    async def short(ctx):
        return await ctx.step("one", lambda: 1)

    asyncio.run(short.run())
    print("done", flush=True)
    """
)


def sink_exit() -> dict[str, Any]:
    """Seconds from a script's last line to its exit, when a sink's close() never returns."""
    process = subprocess.Popen(
        [sys.executable, "-c", SINK_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    process.stdout.readline()  # "done": the script has finished, exit begins
    t0 = time.perf_counter()
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        return {"exited": False, "limit_s": 120}
    seconds = time.perf_counter() - t0
    stderr = process.stderr.read() if process.stderr else ""
    return {
        "exited": True,
        "seconds_to_exit": round(seconds, 2),
        "deadline_s": CLOSE_TIMEOUT_S,
        "warned": "event sink 'never-closes' did not finish close()" in stderr,
    }


async def run_all() -> dict[str, Any]:
    base = await baseline_ms()
    results: dict[str, Any] = {
        "settings": {"timeout_s": TIMEOUT_S, "skip_after": SKIP_AFTER, "skip_for_s": SKIP_FOR_S},
        "baseline_prompt_ms": round(base, 3),
        "hanging_backend": await while_hung(HangingCache(), base),
    }
    with stopped_redis() as address:
        if address is None:
            results["sigstopped_redis"] = {"skipped": "redis-server or redis package missing"}
        else:
            results["sigstopped_redis"] = await hung_redis(address, base)
    return results


def main() -> None:
    directory = output_dir(__doc__)
    for name in list(os.environ):
        if name.startswith(("GROUNDSWELL_CACHE_", "GROUNDSWELL_SINK_")):
            del os.environ[name]  # the defaults are what is measured
    results = asyncio.run(run_all())
    results["sink_close_blocks_exit"] = sink_exit()
    write(results, "cache_faults", directory)


if __name__ == "__main__":
    main()
