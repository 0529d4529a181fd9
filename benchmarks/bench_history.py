"""Session history benchmarks: the introspection API's latency with 50 and with 10,000
sessions for one agent (targets: median under 20 ms and under 200 ms), and what
scoring costs per session.

The API runs as ``groundswell history serve`` (uvicorn) in its own process and
is queried over loopback HTTP with keep-alive, on SQLite and, when reachable, on the PostgreSQL server at
``GROUNDSWELL_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
Results go to ``DIR/history.json``.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from _report import output_dir, write
from groundswell_history import HistoryStore, relevance, task_signature
from groundswell_history.api import issue_token
from groundswell_history.relevance import scorer

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
    cases = {
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
    with tempfile.TemporaryDirectory() as tmp:
        for backend, url in stores(Path(tmp)):
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
