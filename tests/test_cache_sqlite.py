"""The bundled ``sqlite`` cache backend on real SQLite files: the cache contract (lock
included), answers and tool results shared by processes and outliving them, LRU eviction."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from groundswell_sqlite import PATH_ENV, SQLiteCache, default_path

from groundswell import (
    Agent,
    ConfigurationError,
    PromptOverrides,
    Tool,
    ToolCachePolicy,
    get_plugin_manager,
)
from groundswell.testing import FakeAnthropicAPI, check_cache_backend, text, tool_use

# One process's run: an agent answering from the cache named by GROUNDSWELL_CACHE, with a
# cached tool; it prints what ran and what came from the cache.
RUN = """
import asyncio, json, sys
from groundswell import Agent, PromptOverrides, Tool, ToolCachePolicy, clear_tool_cache
from groundswell.testing import FakeAnthropicAPI, text, tool_use

ran = []

def rates(pair: str) -> str:
    \"\"\"Today's exchange rate.\"\"\"
    ran.append(pair)
    return f"{pair}: 1.08"

async def main() -> None:
    # A fresh process clears what other processes stored.
    cleared = await clear_tool_cache("rates") if sys.argv[1] == "clear" else None
    # share_cache: no fake's own scope, so answers are keyed as a real client's are.
    fake = FakeAnthropicAPI(
        [tool_use("rates", {"pair": "EURUSD"}), text("1.08"), tool_use("rates", {"pair": "EURUSD"}), text("1.08")],
        share_cache=True,
    )
    agent = Agent(
        name="fx", client=fake.client(), enable_cache=True,
        tools=[Tool(rates, cache=ToolCachePolicy(ttl=600))],
    )
    answer = await agent.run("EURUSD?")
    # Past the answer cache: the tool's own cache answers, or the tool runs.
    tool = await agent.run("EURUSD rate, once more?", PromptOverrides(disable_cache=True))
    print(json.dumps({"answer": answer.node.metrics["cache"], "tool_ran": ran,
                      "requests": len(fake.requests), "cleared": cleared}))

asyncio.run(main())
"""


def run(path: Path, *args: str) -> dict[str, object]:
    env = {**os.environ, PATH_ENV: str(path), "GROUNDSWELL_CACHE": "sqlite"}
    out = subprocess.run(
        [sys.executable, "-c", RUN, *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


async def test_it_keeps_the_cache_contract_lock_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await check_cache_backend(SQLiteCache(tmp_path / "given.db"), ttl=0.5)
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "from-env.db"))
    await check_cache_backend(SQLiteCache, ttl=0.5)  # the factory, as the kernel calls it
    assert (tmp_path / "from-env.db").exists()
    assert "sqlite" in {name for name, _ in get_plugin_manager().cache_backends().items()}


async def test_answers_and_tool_results_outlive_the_process_and_other_processes_share_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache.db"
    first = await asyncio.to_thread(run, path, "fill")
    assert first == {"answer": "miss", "tool_ran": ["EURUSD"], "requests": 4, "cleared": None}
    # Another process, the same file: the answer and the tool result are there already.
    second = await asyncio.to_thread(run, path, "read")
    assert (second["answer"], second["tool_ran"], second["requests"]) == ("hit", [], 2)
    # A fresh process clears the tool's entries, which it never stored itself.
    third = await asyncio.to_thread(run, path, "clear")
    assert (third["cleared"], third["answer"], third["tool_ran"]) == (1, "hit", ["EURUSD"])


async def test_beyond_max_items_the_least_recently_used_entries_are_evicted(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "small.db", max_items=2)
    calls: list[str] = []

    def lookup(city: str) -> str:
        """The weather."""
        calls.append(city)
        return f"Sunny in {city}"

    cities = ["Oslo", "Bergen", "Oslo", "Tromsø", "Oslo", "Bergen"]
    fake = FakeAnthropicAPI(
        [r for c in cities for r in (tool_use("lookup", {"city": c}), text("ok"))]
    )
    agent = Agent(
        name="sqlite-lru",
        client=fake.client(),
        cache=cache,
        tools=[Tool(lookup, cache=ToolCachePolicy(ttl=600))],
    )
    for city in cities:  # tool results only: answers would take room in the cache too
        await agent.run(f"Weather in {city}?", PromptOverrides(disable_cache=True))
    # Oslo stays (it is used again and again); Bergen was the least recently used.
    assert calls == ["Oslo", "Bergen", "Tromsø", "Bergen"]
    metrics = cache.metrics()
    assert (metrics["evictions"], metrics["size"], metrics["max_items"]) == (2, 2, 2)


def test_the_file_comes_from_the_environment_and_a_bad_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PATH_ENV, raising=False)
    monkeypatch.setenv("GROUNDSWELL_HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / "cache.db"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(PATH_ENV, str(blocker / "cache.db"))
    with pytest.raises(ConfigurationError, match=rf"\({PATH_ENV}\).*set {PATH_ENV} to a writable"):
        SQLiteCache()
    with pytest.raises(ConfigurationError, match="max_items must be an int >= 1"):
        SQLiteCache(tmp_path / "x.db", max_items=0)
