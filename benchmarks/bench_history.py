"""Session history benchmarks: recording throughput, the introspection API's latency
with 50 and with 10,000 sessions for one agent (targets: median under 20 ms and under
200 ms), and what scoring costs per session.

Recording: real agents (``history=True``) on the in-process fake API prompt at a
steady rate for 15 s in a process of their own (1,000 prompts/s in one process;
2,000/s over two processes sharing one SQLite file; 1,000/s without history for the
baseline). This process samples every 0.1 s the prompts finished, the sessions
committed (through a SQLite connection of its own) and the processes' RSS; the loss
window is how long ago the oldest finished-but-uncommitted prompt finished, that is,
what a crash at that moment would lose. ``sink_capacity`` replays the events of
10,000 real prompts into the sink alone, for several ``commit_every``.

The API runs as ``groundswell history serve`` (uvicorn) in its own process and
is queried over loopback HTTP with keep-alive, on SQLite and, when reachable, on the PostgreSQL server at
``GROUNDSWELL_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
Results go to ``DIR/history.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import queue
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from _report import output_dir, write
from groundswell_history import HistorySink, HistoryStore, relevance, task_signature
from groundswell_history.api import issue_token
from groundswell_history.relevance import scorer
from groundswell_history.sink import COMMIT_EVERY

import groundswell
from groundswell import Agent, Event, EventSink, flush_sinks, get_plugin_manager, hookimpl
from groundswell.testing import FakeAnthropicAPI, text

SECRET = b"benchmark-secret-of-enough-length"
TARGETS_MS = {50: 20.0, 10_000: 200.0}
DAY = 86_400.0


def seed(store: HistoryStore, sessions: int, agent: str = "bench") -> float:
    """``sessions`` finished sessions over the last 90 days, a third on the queried task,
    plus as many of another agent; returns the seconds it took."""
    now = time.time()
    fix = task_signature("Fix login bug", "bugfix", ["auth/*.py"])
    other = task_signature("Write docs", "docs")
    t0 = time.perf_counter()
    for owner in (agent, f"{agent}-other"):
        batch: list[tuple[str, dict[str, Any]]] = []
        for n in range(sessions):
            sid = f"{owner}-{n}"
            on_task = n % 3 == 0
            batch.append(
                (
                    "start_session",
                    {
                        "session_id": sid,
                        "agent_id": owner,
                        "started_at": now - (n % 90) * DAY - n,
                        "task_signature": fix if on_task else other,
                        "title": "Fix login bug" if on_task else "Write docs",
                        "category": "bugfix" if on_task else "docs",
                        "file_patterns": ["auth/*.py"] if on_task else [],
                        "metadata": {"user": f"request {n}", "model": "claude"},
                    },
                )
            )
            batch.append(
                (
                    "end_session",
                    {
                        "session_id": sid,
                        "status": "failed" if n % 7 == 0 else "completed",
                        "output": f"the answer to request {n} " * 8,
                    },
                )
            )
            if len(batch) >= 2_000:
                store.write_batch(batch)
                batch = []
        if batch:
            store.write_batch(batch)
    return time.perf_counter() - t0


class Server:
    """``groundswell history serve`` in its own process, as users run it."""

    def __init__(self, url: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = url

    def __enter__(self) -> Server:
        # The server needs the history plugin (its command), whatever the benchmarks load.
        env = {
            **os.environ,
            "GROUNDSWELL_HISTORY_SECRET": SECRET.decode(),
            "GROUNDSWELL_LOAD_PLUGINS": "history",
        }
        command = [sys.executable, "-m", "groundswell.cli", "history", "serve"]
        command += ["--url", self.url, "--port", str(self.port), "--log-level", "warning"]
        self.process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx2.get(f"http://127.0.0.1:{self.port}/api/health").raise_for_status()
                return self
            except httpx2.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("groundswell history serve did not start") from None
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(10)


def latency(store: HistoryStore, sessions: int, requests: int) -> dict[str, Any]:
    seconds = seed(store, sessions)
    signature = task_signature("Fix login bug", "bugfix", ["auth/*.py"])
    headers = {"Authorization": f"Bearer {issue_token('bench', SECRET)}"}
    cases: dict[str, dict[str, str | float]] = {
        "task_signature": {"task_signature": str(signature)},
        "no_signature": {"min_relevance": 0.0},
        "with_iterations": {"task_signature": str(signature), "include_iterations": "true"},
    }
    result: dict[str, Any] = {"sessions": sessions, "seed_s": round(seconds, 2)}
    with (
        Server(store.url) as server,
        httpx2.Client(
            base_url=f"http://127.0.0.1:{server.port}", headers=headers, timeout=30
        ) as client,
    ):
        for name, params in cases.items():
            for _ in range(3):  # warm the connection and the database's caches
                client.get("/api/introspection/bench", params=params).raise_for_status()
            times = []
            for _ in range(requests):
                t0 = time.perf_counter()
                answer = client.get("/api/introspection/bench", params=params)
                times.append((time.perf_counter() - t0) * 1e3)
                answer.raise_for_status()
            times.sort()
            result[name] = {
                "requests": requests,
                "returned": answer.json()["count"],
                "median_ms": round(statistics.median(times), 2),
                "p95_ms": round(times[int(len(times) * 0.95) - 1], 2),
            }
    median = result["task_signature"]["median_ms"]
    result["target_median_ms"] = TARGETS_MS[sessions]
    result["meets_target"] = median < TARGETS_MS[sessions]
    return result


def scoring_cost() -> dict[str, Any]:
    """relevance() per session, and the scorer the store uses for a whole query, with a
    signature (exact, partial and no matches) and without one."""
    now = time.time()
    fix = task_signature("Fix login bug", "bugfix", ["auth/*.py"])
    rows = [
        {
            "task_signature": fix if n % 3 == 0 else None,
            "title": "Fix login bug" if n % 3 == 0 else "Write docs",
            "category": "bugfix" if n % 2 else "docs",
            "file_patterns": ["auth/*.py"] if n % 5 == 0 else [],
            "status": "completed",
            "started_at": now - n * 60,
        }
        for n in range(100_000)
    ]
    found = {}
    for name, signature in (("with_signature", fix), ("without_signature", None)):
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            for row in rows:
                relevance(row, signature, now)
            runs.append(time.perf_counter() - t0)
        score = scorer(signature, now)
        batch = []
        for _ in range(3):
            t0 = time.perf_counter()
            for row in rows:
                score(
                    row["status"],
                    row["started_at"],
                    row["task_signature"],
                    row["title"],
                    row["category"],
                    row["file_patterns"],
                )
            batch.append(time.perf_counter() - t0)
        found[name] = {
            "relevance_us_per_session": round(min(runs) / len(rows) * 1e6, 3),
            "store_scorer_us_per_session": round(min(batch) / len(rows) * 1e6, 3),
        }
    return found


# -- recording throughput ------------------------------------------------------------

STREAM_S = 15.0
TICK_S = 0.01
MAX_IN_FLIGHT = 2_000
SAMPLE_S = 0.1


def _record_stream(
    home: str,
    rate: float,
    history: bool,
    env: dict[str, str],
    sent: Any,
    go: Any,
    results: Any,
) -> None:
    """One recording process: real agents (``history=True``) prompting the in-process
    fake API at ``rate`` prompts/s for STREAM_S seconds, recorded by the bundled sink
    into ``home/history.db``; ``sent`` counts finished prompts for the parent."""
    os.environ.update(env, GROUNDSWELL_HOME=home)  # read when the sink is made, not before

    async def drive() -> dict[str, Any]:
        api = FakeAnthropicAPI(lambda request: text("pong"))
        client = api.client(max_retries=0)
        agent = Agent(name="bench", client=client, max_tokens=16, history=history)
        await agent.prompt("warm up")
        await asyncio.to_thread(groundswell.flush_sinks, 60)
        sent.value = -1  # ready; the parent starts every process's clock at once
        await asyncio.to_thread(go.wait)
        sent.value = 0
        running: set[asyncio.Task[Any]] = set()
        done = 0

        def finished(task: asyncio.Task[Any]) -> None:
            nonlocal done
            running.discard(task)
            done += 1
            sent.value = done

        started = time.monotonic()
        launched = 0
        while (elapsed := time.monotonic() - started) < STREAM_S:
            due = int(rate * elapsed) - launched
            for _ in range(max(0, min(due, MAX_IN_FLIGHT - len(running)))):
                task = asyncio.ensure_future(agent.prompt("ping"))
                task.add_done_callback(finished)
                running.add(task)
                launched += 1
            api.requests.clear()  # the fake keeps every request: not ours to measure
            await asyncio.sleep(TICK_S)
        await asyncio.gather(*running)
        stream_s = time.monotonic() - started
        drained = await asyncio.to_thread(groundswell.flush_sinks, 600)
        stats = groundswell.get_plugin_manager().sink_hub().stats()["history"]
        return {
            "prompts": done,
            "stream_s": stream_s,
            "drain_s": time.monotonic() - started - stream_s,
            "drained": drained,
            "events_dropped": stats["dropped"],
        }

    results.put(asyncio.run(drive()))


def _rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # gone, or not Linux
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _committed(path: Path) -> int:
    """Sessions committed with their end, read through a connection of our own."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            row = db.execute("SELECT count(*) FROM gs_sessions WHERE status != 'running'")
            return int(row.fetchone()[0])
    except sqlite3.OperationalError:  # no schema yet
        return 0


def recording(
    rate: float, *, processes: int = 1, history: bool = True, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``processes`` processes prompting at ``rate`` prompts/s in all for STREAM_S seconds,
    recorded into one SQLite file. Sampled every SAMPLE_S from this process: prompts
    finished, sessions committed (from a connection of our own), the processes' RSS."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as home:
        path = Path(home) / "history.db"
        results = context.Queue()
        counters = [context.Value("q", 0) for _ in range(processes)]
        go = context.Event()
        children = [
            context.Process(
                target=_record_stream,
                args=(home, rate / processes, history, env or {}, sent, go, results),
            )
            for sent in counters
        ]
        for child in children:
            child.start()

        def check() -> None:
            if any(not c.is_alive() and c.exitcode for c in children):
                codes = [c.exitcode for c in children]
                raise RuntimeError(f"a recording process failed (exit codes {codes})")

        while any(sent.value != -1 for sent in counters):
            check()
            time.sleep(0.01)
        go.set()
        started = time.monotonic()
        base_rss = sum(_rss_mb(c.pid or 0) for c in children)
        samples: list[tuple[float, int, int, float]] = []
        outcomes: list[dict[str, Any]] = []
        while len(outcomes) < processes:
            try:
                outcomes.append(results.get(timeout=SAMPLE_S))
            except queue.Empty:
                check()
                finished = sum(sent.value for sent in counters)
                rss = sum(_rss_mb(c.pid or 0) for c in children)
                samples.append((time.monotonic() - started, finished, _committed(path), rss))
        for child in children:
            child.join(30)
        committed_end = _committed(path)
    stream_s = max(o["stream_s"] for o in outcomes)
    prompts = sum(o["prompts"] for o in outcomes)
    during = [s for s in samples if s[0] <= stream_s]
    # A crash at a sample's moment loses the prompts finished but not committed: the
    # loss window is how long ago the oldest of them finished.
    windows = []
    for now, _, committed, _ in during:
        first = next((t for t, n, _, _ in samples if n > committed), now)
        windows.append(max(0.0, now - first))
    last = during[-1] if during else (stream_s, prompts, committed_end, 0.0)
    return {
        "processes": processes,
        "history": history,
        "target_prompts_per_s": rate,
        "prompts_per_s": round(prompts / stream_s),
        "committed_per_s_during_stream": round(last[2] / last[0]) if history else None,
        "prompts_at_stream_end": last[1],
        "committed_at_stream_end": last[2],
        "committed_after_drain": committed_end,
        "drain_s": round(max(o["drain_s"] for o in outcomes), 2),
        "worst_loss_window_s": round(max(windows, default=0.0), 2) if history else None,
        "rss_mb_start": round(base_rss),
        "rss_mb_peak": round(max((s[3] for s in samples), default=0.0)),
        "events_dropped": sum(o["events_dropped"] for o in outcomes),
        "timeline": [
            {"t": round(t), "prompts": n, "committed": c, "rss_mb": round(r)}
            for t, n, c, r in samples[int(1 / SAMPLE_S) - 1 :: int(1 / SAMPLE_S)]
        ],
    }


CAPACITY_SESSIONS = 10_000


class _Capture:
    """An event sink keeping every event, to replay them later."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def handle(self, event: Event) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


def _captured(sessions: int) -> list[Event]:
    """The events of ``sessions`` real prompts (agents on the in-process fake API)."""
    capture = _Capture()

    class Plugin:
        @hookimpl
        def register_event_sinks(self) -> EventSink:
            return EventSink(name="bench-capture", factory=lambda: capture)

    manager = get_plugin_manager()
    name = manager.register(Plugin(), name="bench-capture")
    try:
        api = FakeAnthropicAPI(lambda request: text("pong"))
        agent = Agent(name="bench", client=api.client(max_retries=0), max_tokens=16)

        async def run() -> None:
            for _ in range(sessions // 1_000):
                await asyncio.gather(*(agent.prompt("ping") for _ in range(1_000)))
                api.requests.clear()

        asyncio.run(run())
        flush_sinks(120)
    finally:
        manager.unregister(name)
    return capture.events


def sink_capacity(backends: list[tuple[str, str]]) -> dict[str, Any]:
    """What the sink alone records per second on one thread: real events replayed into
    ``handle()`` as fast as it takes them, never told it caught up (so only its bounds
    commit), then closed. An in-process run at N prompts/s spends about
    N / sessions_per_s of a core on recording."""
    events = _captured(CAPACITY_SESSIONS)
    found: dict[str, Any] = {"sessions": CAPACITY_SESSIONS, "events": len(events)}
    for backend, url in backends:
        found[backend] = {}
        for every in (50, COMMIT_EVERY, 5_000):
            store = HistoryStore(url)
            empty(store)  # opening and creating the schema are not per-session work
            sink = HistorySink(url, record_all=True, store=store, commit_every=every)
            t0 = time.perf_counter()
            for event in events:
                sink.handle(event)
            sink.close()
            seconds = time.perf_counter() - t0
            recorded = len(HistoryStore(url).sessions("bench", limit=None))
            found[backend][f"commit_every_{every}"] = {
                "sessions_per_s": round(CAPACITY_SESSIONS / seconds),
                "recorded": recorded,
            }
    return found


def stores(directory: Path) -> list[tuple[str, str]]:
    found = [("sqlite", f"sqlite:///{directory / 'history.db'}")]
    raw = os.environ.get(
        "GROUNDSWELL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    )
    try:
        import psycopg

        with psycopg.connect(raw, connect_timeout=3):
            pass
        found.append(("postgresql", raw.replace("postgresql://", "postgresql+psycopg://", 1)))
    except Exception as exc:
        print(f"PostgreSQL not measured ({type(exc).__name__}: {exc})")
    return found


def empty(store: HistoryStore) -> None:
    meta = store._tables[0]
    with store.engine.begin() as conn:
        for table in reversed(meta.sorted_tables):
            conn.execute(table.delete())


def main() -> None:
    directory = output_dir(__doc__)
    report: dict[str, Any] = {"scoring": scoring_cost(), "api": {}}
    report["recording"] = {
        "sqlite_1000_per_s": recording(1_000),
        "sqlite_2000_per_s_2_processes": recording(2_000, processes=2),
        "no_history_1000_per_s": recording(1_000, history=False),
    }
    with tempfile.TemporaryDirectory() as tmp:
        backends = stores(Path(tmp))
        report["recording"]["sink_capacity"] = sink_capacity(backends)
        for backend, url in backends:
            report["api"][backend] = {}
            for sessions, requests in ((50, 300), (10_000, 40)):
                store = HistoryStore(url)
                empty(store)
                report["api"][backend][str(sessions)] = latency(store, sessions, requests)
                empty(store)
                store.close()
    write(report, "history", directory)


if __name__ == "__main__":
    main()
