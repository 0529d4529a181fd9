"""The history store, memory, task signatures and relevance, on SQLite and on the real
PostgreSQL server."""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from groundswell_history import (
    HistoryStore,
    SessionConflict,
    StoreUnavailable,
    relevance,
    task_signature,
)
from groundswell_history.relevance import TaskSignature
from groundswell_history.store import safe_url

import groundswell
from groundswell import ConfigurationError

from .conftest import _empty_store

DAY = 86_400.0


@pytest.fixture
def store(history_store: HistoryStore) -> HistoryStore:
    """A fresh store, once on SQLite and once on the real PostgreSQL server."""
    return history_store


# -- signatures and relevance ----------------------------------------------------------------


def test_a_signature_ignores_spelling_and_order() -> None:
    a = task_signature("Fix the  Login bug", "Bugs", ["src/auth/*.py", "tests/*"])
    b = task_signature(" fix the login BUG ", "bugs", ["tests/*", "src/auth/*.py", "tests/*"])
    assert a == b and len(a) == 64 and int(a, 16) >= 0
    assert a != task_signature("Fix the login bug", "bugs", ["src/auth/*.py"])
    assert a != task_signature("Fix the login bug")
    assert isinstance(a, TaskSignature) and a.task_category == "bugs"
    with pytest.raises(ValueError, match="title must be a non-empty string"):
        task_signature("  ")
    with pytest.raises(ValueError, match="file_patterns must be a list"):
        task_signature("x", file_patterns="src/*")


def test_relevance_adds_signature_recency_and_outcome() -> None:
    now = 1_800_000_000.0
    sig = task_signature("Fix login", "bugs", ["src/auth/*"])
    session = {"task_signature": str(sig), "status": "completed", "started_at": now}
    assert relevance(session, sig, now) == 1.0  # 0.5 + 0.3 + 0.2
    assert relevance({**session, "status": "running"}, sig, now) == pytest.approx(0.9)
    assert relevance({**session, "status": "failed"}, sig, now) == pytest.approx(0.8)
    # Without a signature: recency and outcome only.
    assert relevance(session, None, now) == pytest.approx(0.5)
    # Ten days old: the recency part has decayed to 0.3 * e^-1.
    old = {**session, "started_at": now - 10 * DAY}
    assert relevance(old, sig, now) == pytest.approx(0.5 + 0.3 * math.exp(-1) + 0.2)
    # Very old and failed, no match: close to 0, never below.
    ancient = {"task_signature": "x" * 64, "status": "failed", "started_at": now - 3650 * DAY}
    assert 0.0 <= relevance(ancient, sig, now) < 0.001
    # A session from the future (clock skew) counts as new, and the score stays at most 1.
    assert relevance({**session, "started_at": now + DAY}, sig, now) == 1.0


def test_partial_matches_need_the_parts_of_the_signature() -> None:
    now = 1_800_000_000.0
    sig = task_signature("Fix login", "bugs", ["src/auth/*"])
    base = {"status": "failed", "started_at": now - 3650 * DAY, "task_signature": "0" * 64}
    assert relevance({**base, "category": "Bugs"}, sig, now) == pytest.approx(0.3, abs=1e-3)
    assert relevance({**base, "file_patterns": ["src/auth/*"]}, sig, now) == pytest.approx(
        0.3, abs=1e-3
    )
    assert relevance({**base, "title": "fix  LOGIN"}, sig, now) == pytest.approx(0.3, abs=1e-3)
    # A bare hex string can only match exactly.
    assert relevance({**base, "category": "bugs"}, str(sig), now) < 0.001


# -- sessions ---------------------------------------------------------------------------------


def test_sessions_and_iterations_round_trip(store: HistoryStore) -> None:
    sig = task_signature("Review PR", "review")
    store.start_session(
        "s1",
        "reviewer",
        task_id="PR-7",
        task_signature=sig,
        title="Review PR",
        category="review",
        file_patterns=["src/*"],
        metadata={"pr": 7, "api_key": "sk-ant-abcdefghijklmnop"},
    )
    store.add_iteration("s1", "model_turn", name="claude", usage={"input_tokens": 10})
    store.add_iteration(
        "s1", "tool_call", name="read_file", input={"path": "a.py"}, output="print(1)"
    )
    store.add_iteration("s1", "tool_call", name="run", status="failed", error="exit 1")
    store.end_session("s1", "completed", output="Looks good")

    session = store.session("s1")
    assert session is not None
    assert session.agent_id == "reviewer" and session.status == "completed"
    assert session.task_signature == sig and session.file_patterns == ["src/*"]
    assert session.metadata == {"pr": 7, "api_key": "**********"}
    assert session.output_summary == "Looks good"
    assert session.ended_at is not None and session.ended_at >= session.started_at
    assert session.iterations is not None
    assert [(i["seq"], i["kind"], i["name"]) for i in session.iterations] == [
        (1, "model_turn", "claude"),
        (2, "tool_call", "read_file"),
        (3, "tool_call", "run"),
    ]
    assert session.iterations[0]["usage"] == {"input_tokens": 10}
    assert session.iterations[1]["input_summary"] == '{"path": "a.py"}'
    assert session.iterations[2]["error"] == "exit 1"
    assert store.session("nope") is None


def test_relevant_sessions_rank_filter_and_stay_per_agent(store: HistoryStore) -> None:
    now = time.time()
    sig = task_signature("Deploy", "ops")
    rows = [
        ("a-exact-done", "a", sig, "completed", now - DAY),
        ("a-exact-failed", "a", sig, "failed", now - DAY),
        ("a-other-old", "a", task_signature("Other"), "completed", now - 30 * DAY),
        ("b-exact-done", "b", sig, "completed", now),
    ]
    for sid, agent, signature, status, started in rows:
        store.start_session(sid, agent, task_signature=signature, started_at=started)
        store.end_session(sid, status)  # type: ignore[arg-type]
    ranked = store.relevant_sessions("a", task_signature=sig, min_relevance=0.0, now=now)
    assert [s.id for s, _ in ranked] == ["a-exact-done", "a-exact-failed", "a-other-old"]
    scores = [score for _, score in ranked]
    assert scores == sorted(scores, reverse=True) and all(0 <= x <= 1 for x in scores)
    assert [s.id for s, _ in store.relevant_sessions("a", task_signature=sig, now=now)] == [
        "a-exact-done",
        "a-exact-failed",
    ]
    no_failures = store.relevant_sessions(
        "a", task_signature=sig, include_failures=False, min_relevance=0.0, now=now
    )
    assert "a-exact-failed" not in [s.id for s, _ in no_failures]
    assert len(store.relevant_sessions("a", min_relevance=0.0, limit=1, now=now)) == 1
    assert all(s.agent_id == "b" for s, _ in store.relevant_sessions("b", min_relevance=0.0))
    with pytest.raises(ValueError, match="min_relevance must be between 0 and 1"):
        store.relevant_sessions("a", min_relevance=2)


# -- memory -----------------------------------------------------------------------------------


def test_memory_remember_recall_forget_and_ttl(store: HistoryStore) -> None:
    store.remember("a", "style", "Answer in British English", kind="preference", importance=0.9)
    store.remember("a", "repo", "The repo uses uv", importance=0.4)
    # Long enough to outlive the calls below on a loaded machine (CI has two cores).
    store.remember("a", "tmp", "short-lived", ttl=1.0)
    tmp_expires = time.time() + 1.0
    store.remember("b", "style", "Terse")
    first = store.recall("a", "style")
    assert first is not None and first.content == "Answer in British English"
    assert first.kind == "preference" and first.access_count == 1
    again = store.recall("a", "style")
    assert again is not None and again.access_count == 2 and again.last_accessed_at is not None
    # Replacing keeps one memory under the key.
    store.remember("a", "repo", "The repo uses pip", importance=0.5)
    assert [m.key for m in store.recall_all("a")] == ["style", "repo", "tmp"]
    time.sleep(max(0.0, tmp_expires - time.time()) + 0.05)
    assert store.recall("a", "tmp") is None  # expired
    assert [m.key for m in store.recall_all("a")] == ["style", "repo"]
    assert [m.key for m in store.recall_all("a", kind="preference")] == ["style"]
    assert [m.key for m in store.recall_all("a", min_importance=0.6)] == ["style"]
    assert store.forget("a", "repo") == 1 and store.forget("a", "repo") == 0
    assert store.recall("b", "style") is not None  # other agents untouched
    assert store.forget("a") == 1


def test_learned_errors_and_successes(store: HistoryStore) -> None:
    one = store.learn_error("a", "KeyError: 'user'", fix="check the key first")
    same = store.learn_error("a", "KeyError: 'user'", fix="use .get()")
    assert one.key == same.key
    errors = store.recall_all("a", kind="error_pattern")
    assert len(errors) == 1 and errors[0].content.endswith("Fix: use .get()")
    sig = task_signature("Parse logs")
    store.learn_success("a", "Stream the file line by line", task_signature=sig)
    (success,) = store.recall_all("a", kind="success_pattern")
    assert success.metadata == {"task_signature": str(sig)}


def test_secrets_never_reach_the_store(store: HistoryStore) -> None:
    groundswell.register_secret("registered-secret-value")
    store.remember("a", "k", "key sk-ant-api03-abcdefghijkl and registered-secret-value here")
    memory = store.recall("a", "k")
    assert memory is not None
    assert "sk-ant-api03" not in memory.content and "registered-secret-value" not in memory.content
    store.start_session("s", "a", metadata={"Authorization": "Bearer abcdefghijklmnopqrstu"})
    store.add_iteration("s", "tool_call", input={"password": "hunter22", "q": "ok"})
    store.end_session("s", "failed", error="401: Bearer abcdefghijklmnopqrstu rejected")
    session = store.session("s")
    assert session is not None and session.iterations is not None
    assert session.metadata == {"Authorization": "**********"}
    assert "hunter22" not in str(session.iterations) and '"q": "ok"' in str(session.iterations)
    assert session.error is not None and "abcdefghijklmnopqrstu" not in session.error


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("DB_PASSWORD=hunter2hunter2", "DB_PASSWORD=**********"),
        ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx", "OPENAI_API_KEY=**********"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "AWS_SECRET_ACCESS_KEY=**********"),
        ('{"client_secret": "abcd1234"}', '{"client_secret": "**********"}'),
        ("postgresql://admin:S3cretPass@db/app", "postgresql://admin:**********@db/app"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: **********"),
        ("key AIzaSyA1234567890abcdefghijklmnopqrstuv", "key **********"),
        ("token_count: 1234 tokens", "token_count: 1234 tokens"),
        ("the author=Jane wrote it", "the author=Jane wrote it"),
        ("nul\x00byte", "nulbyte"),
    ],
)
def test_secret_looking_text_is_scrubbed(store: HistoryStore, text: str, kept: str) -> None:
    store.start_session("s", "a", metadata={"note": text})
    store.end_session("s", "completed", output=text)
    (session,) = store.sessions("a")
    assert kept in session.output_summary  # type: ignore[operator]
    assert kept in session.metadata["note"]


def test_bad_input_is_named(store: HistoryStore) -> None:
    with pytest.raises(ValueError, match="memory kind must be one of context"):
        store.remember("a", "k", "x", kind="opinion")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="importance must be between 0 and 1"):
        store.remember("a", "k", "x", importance=3)
    with pytest.raises(ValueError, match="ttl must be seconds > 0"):
        store.remember("a", "k", "x", ttl=0)


def test_bad_urls_are_named_without_their_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        HistoryStore("nosuchdialect://user:pw123456@host/db")
    assert "pw123456" not in str(caught.value) and "user:**********@" in str(caught.value)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreUnavailable, match="cannot be reached: connection failed") as down:
        HistoryStore(f"postgresql+psycopg://user:pw123456@127.0.0.1:{port}/db")
    assert "pw123456" not in str(down.value)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    HistoryStore(url).close()
    with sqlite3.connect(tmp_path / "h.db") as conn:
        conn.execute("UPDATE gs_history_info SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ConfigurationError, match="schema version 99, newer than"):
        HistoryStore(url)


def test_default_location_follows_groundswell_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GROUNDSWELL_HISTORY_URL", raising=False)
    monkeypatch.setenv("GROUNDSWELL_HOME", str(tmp_path / "home"))
    with HistoryStore() as made:
        made.remember("a", "k", "v")
    assert (tmp_path / "home" / "history.db").exists()
    monkeypatch.setenv("GROUNDSWELL_HISTORY_URL", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    with HistoryStore() as made:
        assert made.url.endswith("elsewhere.db")


# -- several processes ---------------------------------------------------------------------


def _writer(url: str, worker: int, count: int) -> None:
    store = HistoryStore(url)
    for i in range(count):
        sid = f"w{worker}-{i}"
        store.start_session(sid, f"agent-{worker % 2}")
        store.add_iteration(sid, "model_turn", name="m")
        store.end_session(sid, "completed", output=f"done {i}")
        store.remember(f"agent-{worker % 2}", f"k{worker}-{i}", "v")
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_writers_in_two_processes_lose_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'shared.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("history_database")
    )
    store = HistoryStore(url)
    _empty_store(store)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(url, w, 40)) for w in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    sessions = store.sessions("agent-0") + store.sessions("agent-1")
    assert len(sessions) == 80 and all(s.status == "completed" for s in sessions)
    assert len(store.recall_all("agent-0")) + len(store.recall_all("agent-1")) == 80
    loaded = store.sessions("agent-0", include_iterations=True)
    assert all(s.iterations and len(s.iterations) == 1 for s in loaded)
    _empty_store(store)
    store.close()


def test_a_process_killed_mid_write_leaves_a_readable_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    script = textwrap.dedent(
        f"""
        import sys
        from groundswell_history import HistoryStore
        store = HistoryStore({url!r})
        i = 0
        while True:
            store.start_session(f"s{{i}}", "a")
            store.add_iteration(f"s{{i}}", "model_turn", output="x" * 5000)
            store.end_session(f"s{{i}}", "completed")
            i += 1
            if i == 20:
                print("writing", flush=True)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "writing"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    with HistoryStore(url) as store:
        sessions = store.sessions("a", include_iterations=True)
    assert len(sessions) >= 20
    finished = [s for s in sessions if s.status == "completed"]
    assert len(finished) >= 20 and all(s.iterations for s in finished)
    with sqlite3.connect(tmp_path / "crash.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_old_sessions_are_purged_with_their_iterations(store: HistoryStore) -> None:
    now = time.time()
    for sid, agent, days in [("old-a", "a", 40), ("new-a", "a", 1), ("old-b", "b", 40)]:
        store.start_session(sid, agent, started_at=now - days * DAY)
        store.add_iteration(sid, "model_turn", output="x")
    assert store.purge_sessions(30 * DAY, agent_id="a") == 1
    assert [s.id for s in store.sessions("a")] == ["new-a"]
    assert store.session("old-a") is None
    assert store.purge_sessions(30 * DAY) == 1  # b's old session, then nothing else
    assert store.sessions("b") == []
    (kept,) = store.sessions("a", include_iterations=True)
    assert kept.iterations and len(kept.iterations) == 1
    with store.engine.connect() as conn:
        iterations = store._tables[3]
        count = conn.execute(iterations.select()).fetchall()
    assert len(count) == 1  # the purged sessions' iterations went with them
    with pytest.raises(ValueError, match="older_than must be seconds"):
        store.purge_sessions(-1)


def test_stores_opening_a_new_sqlite_file_at_once_all_open_it(tmp_path: Path) -> None:
    # A sink's store and a tool's may open a fresh database in the same moment;
    # switching it to WAL then answers "locked" to all but one of them.
    import threading

    failures: list[BaseException] = []

    def open_store(url: str) -> None:
        try:
            HistoryStore(url).close()
        except BaseException as exc:
            failures.append(exc)

    for round_ in range(15):
        url = f"sqlite:///{tmp_path / f'h{round_}.db'}"
        threads = [threading.Thread(target=open_store, args=(url,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # An unescaped "@" in the password: none of it shows, not even after the first "@".
        ("postgresql://u:p@ss@host/db", "postgresql://u:**********@host/db"),
        ("postgresql://:pw@host/db", "postgresql://:**********@host/db"),
        (
            "postgresql://u@host/db?password=x&sslmode=require",
            "postgresql://u@host/db?password=**********&sslmode=require",
        ),
        ("postgresql+psycopg://u:pw@h:5432/db", "postgresql+psycopg://u:**********@h:5432/db"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        ("not a url at all", "<unparseable URL>"),
    ],
)
def test_urls_in_messages_never_show_a_password(url: str, shown: str) -> None:
    assert safe_url(url) == shown


def test_updates_can_require_the_status_they_saw(store: HistoryStore) -> None:
    store.start_session("s1", "a")
    store.end_session("s1", "completed", output="done")
    with pytest.raises(SessionConflict, match="has ended already \\(completed\\)"):
        store.update_session("s1", status="terminated", expected_status="running")
    with pytest.raises(SessionConflict, match="has ended already"):
        store.terminate_session("s1")
    kept = store.session("s1", include_iterations=False)
    assert kept is not None and kept.status == "completed" and kept.error is None
    assert store.terminate_session("nope") is None


def test_iterations_and_ends_given_an_agent_reach_only_its_session(store: HistoryStore) -> None:
    store.create_session("mallory", session_id="shared")
    store.add_iteration("shared", "model_turn", name="claude", agent_id="alice")
    store.end_session("shared", "failed", error="boom", agent_id="alice")
    taken = store.session("shared")
    assert taken is not None and taken.iterations == [] and taken.status == "running"
    store.add_iteration("shared", "model_turn", name="claude", agent_id="mallory")
    store.end_session("shared", "completed", agent_id="mallory")
    own = store.session("shared")
    assert own is not None and own.status == "completed"
    assert [i["seq"] for i in own.iterations or ()] == [1]


def test_merged_metadata_is_capped(store: HistoryStore) -> None:
    store.start_session("s1", "a", metadata={f"k{i}": i for i in range(64)})
    with pytest.raises(ValueError, match="at most 64 keys, got 65"):
        store.update_session("s1", metadata={"one-more": 1})
    kept = store.session("s1", include_iterations=False)
    assert kept is not None and "one-more" not in kept.metadata
