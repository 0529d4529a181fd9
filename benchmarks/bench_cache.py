"""Cache benchmarks: key computation, a cache hit versus a model call, LRU throughput.

Results go to ``DIR/cache.json``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from _report import output_dir, write
from groundswell_lru import LRUCache
from pydantic import BaseModel

from groundswell import Agent, Prompt
from groundswell.cache.backends import request_cache_key
from groundswell.testing import FakeAnthropicAPI, json_reply


class Verdict(BaseModel):
    approve: bool
    reason: str


def typical_request() -> dict[str, Any]:
    """A realistic first request: system prompt, a diff as data, three tools, a schema."""
    diff = "\n".join(f"+ line {i} of the change with some code in it" for i in range(40))
    tool = {
        "name": "read_file",
        "description": "Read a file from the repository and return its text.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Path from the root."}},
            "required": ["path"],
        },
    }
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "system": "You are a careful code reviewer. " * 10,
        "messages": [{"role": "user", "content": f"Judge this diff\n\n<data>\n{diff}\n</data>"}],
        "tools": [tool, {**tool, "name": "list_files"}, {**tool, "name": "grep"}],
        "extra_body": {"temperature": 0.0},
        "output_config": {"format": {"type": "json_schema", "schema": Verdict.model_json_schema()}},
    }


def key_speed() -> dict[str, Any]:
    request = typical_request()
    runs = []
    for _ in range(15):
        t0 = time.perf_counter()
        for _ in range(1_000):
            request_cache_key("judge", request)
        runs.append((time.perf_counter() - t0) / 1_000 * 1e6)
    median = statistics.median(runs)
    return {"median_us": round(median, 2), "target_us": 50, "meets_target": median < 50}


async def hit_versus_call() -> dict[str, Any]:
    fake = FakeAnthropicAPI(lambda request: json_reply({"approve": True, "reason": "fine"}))
    client = fake.client(max_retries=0)
    cached = Agent(name="cached", client=client, cache=LRUCache())
    uncached = Agent(name="uncached", client=client)
    prompt = Prompt(user="Judge", data={"diff": "+x"}, response_format=Verdict)
    await cached.prompt(prompt)  # fill the cache
    hit: list[float] = []
    call: list[float] = []
    # Blocks of each kind, alternating, so each path pays for its own garbage.
    for _ in range(6):
        for agent, into in ((cached, hit), (uncached, call)):
            for _ in range(250):
                t0 = time.perf_counter()
                await agent.prompt(prompt)
                into.append(time.perf_counter() - t0)
    h, c = statistics.median(hit) * 1e6, statistics.median(call) * 1e6
    return {
        "hit_us": round(h, 1),
        "fake_api_call_us": round(c, 1),
        "speedup": round(c / h, 1),
        "target_speedup": 10,
        "meets_target": c / h >= 10,
        "note": "the fake answers in-process; a real API call is ~1000x slower still",
    }


async def lru_throughput() -> dict[str, Any]:
    cache = LRUCache(max_items=10_000)
    n = 50_000
    t0 = time.perf_counter()
    for i in range(n):
        await cache.set(f"ns:{i % 20_000}", {"value": i})
    t1 = time.perf_counter()
    for i in range(n):
        await cache.get(f"ns:{i % 20_000}")
    t2 = time.perf_counter()
    return {
        "set_per_s": round(n / (t1 - t0)),
        "get_per_s": round(n / (t2 - t1)),
        "evictions": cache.metrics()["evictions"],
    }


async def run_all() -> dict[str, Any]:
    return {
        "key": key_speed(),
        "hit_vs_call": await hit_versus_call(),
        "lru": await lru_throughput(),
    }


def main() -> None:
    directory = output_dir(__doc__)
    write(asyncio.run(run_all()), "cache", directory)


if __name__ == "__main__":
    main()
