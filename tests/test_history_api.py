"""The introspection HTTP API, served by a real uvicorn server, on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import sqlalchemy
import uvicorn
from groundswell_history import HistoryStore, create_app, task_signature
from groundswell_history.api import agent_for_token, issue_token

import groundswell
from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI, text

from .conftest import RecordingSink

SECRET = b"a-test-secret-of-enough-length"
DAY = 86_400.0
CLI = (sys.executable, "-m", "groundswell.cli")


class Server:
    """A real uvicorn server for ``app`` on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        # IPPROTO_TCP named: with protocol 0, asyncio sets no TCP_NODELAY on accepted
        # connections, and each request after the first on a kept-alive one waits ~40 ms.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the API server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def api(history_store: HistoryStore) -> Iterator[httpx2.Client]:
    with (
        Server(create_app(history_store, secret=SECRET)) as server,
        httpx2.Client(base_url=server.url, timeout=10) as client,
    ):
        yield client


def auth(agent: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(agent, SECRET)}"}


def seed(store: HistoryStore, now: float) -> None:
    fix = task_signature("Fix login bug", "bugfix")
    for sid, sig, days, status in [
        ("exact", fix, 1, "completed"),
        ("exact-failed", fix, 0, "failed"),
        ("plain-new", None, 0.2, "completed"),
        ("plain-old", None, 50, "completed"),
    ]:
        store.start_session(sid, "alice", started_at=now - days * DAY, task_signature=sig)
        store.add_iteration(sid, "model_turn", name="claude", output="thinking")
        if status == "failed":
            store.end_session(sid, "failed", error="TimeoutError: slow")
        else:
            store.end_session(sid, "completed", output=f"answer of {sid}")
    store.start_session("bobs", "bob", started_at=now, task_signature=fix)
    store.end_session("bobs", "completed", output="BOB'S SECRET WORK")


def test_an_agent_reads_its_sessions_ranked(api: httpx2.Client, history_store: Any) -> None:
    seed(history_store, time.time())
    sig = task_signature("Fix login bug", "bugfix")
    found = api.get(
        "/api/introspection/alice", params={"task_signature": sig}, headers=auth("alice")
    )
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["agent_id"] == "alice"
    assert body["query"] == {
        "task_signature": sig,
        "title": None,
        "category": None,
        "file_patterns": [],
        "limit": 10,
        "min_relevance": 0.5,
        "include_iterations": False,
        "include_failures": False,
        "include_running": False,
    }
    # Completed sessions only by default; with no match, completed hours ago
    # (0.49) and 50 days ago (0.2) fall under min_relevance.
    assert [s["session_id"] for s in body["sessions"]] == ["exact"]
    assert body["count"] == 1
    first = body["sessions"][0]
    assert first["relevance_score"] == pytest.approx(0.5 + 0.3 * 2.718281828**-0.1 + 0.2, abs=1e-3)
    assert first["summary"] == "answer of exact" and "iterations" not in first
    assert "BOB'S" not in found.text
    # exact+completed (0.97) > exact+failed today (0.8), when failures are asked for.
    with_failures = api.get(
        "/api/introspection/alice",
        params={"task_signature": sig, "include_failures": "true"},
        headers=auth("alice"),
    ).json()
    assert [s["session_id"] for s in with_failures["sessions"]] == ["exact", "exact-failed"]

    narrowed = api.get(
        "/api/introspection/alice",
        params={
            "task_signature": sig,
            "limit": 1,
            "include_iterations": "true",
            "include_failures": "false",
            "min_relevance": 0.9,
        },
        headers=auth("alice"),
    ).json()
    (only,) = narrowed["sessions"]
    assert only["session_id"] == "exact"
    assert only["iterations"][0]["output_summary"] == "thinking"
    without_task = api.get(
        "/api/introspection/alice",
        params={"min_relevance": 0, "include_failures": "true"},
        headers=auth("alice"),
    ).json()
    assert without_task["count"] == 4
    assert [s["session_id"] for s in without_task["sessions"]] == [
        "plain-new",  # 0.49: recency and outcome only
        "exact",  # 0.47
        "exact-failed",  # 0.30
        "plain-old",  # 0.20
    ]


def test_tokens_decide_who_may_read(api: httpx2.Client, history_store: Any) -> None:
    seed(history_store, time.time())
    other = api.get("/api/introspection/bob", headers=auth("alice"))
    assert other.status_code == 403
    assert other.json()["detail"] == (
        "this token belongs to agent 'alice'; an agent can read only its own sessions "
        "(to see every agent's, use an operator token: `groundswell history token --operator`)"
    )
    assert "BOB'S" not in other.text
    missing = api.get("/api/introspection/alice")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in missing.json()["detail"]
    token = issue_token("alice", SECRET)
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert (
        api.get(
            "/api/introspection/alice", headers={"Authorization": f"Bearer {forged}"}
        ).status_code
        == 401
    )
    other_server = issue_token("alice", b"some-other-servers-secret")
    unsigned = api.get(
        "/api/introspection/alice", headers={"Authorization": f"Bearer {other_server}"}
    )
    assert unsigned.status_code == 401
    # The likely cause is named: the server and the `token` command see different secrets.
    assert "different secrets" in unsigned.json()["message"]
    assert "GROUNDSWELL_HISTORY_SECRET" in unsigned.json()["message"]
    assert "GROUNDSWELL_HOME" in unsigned.json()["message"]
    basic = api.get("/api/introspection/alice", headers={"Authorization": "Basic YTpi"})
    assert basic.status_code == 401
    assert basic.json()["message"] == (
        "Authorization must use the Bearer scheme: Authorization: Bearer <token>"
    )
    assert other.json()["message"] == other.json()["detail"]
    assert agent_for_token(token, SECRET) == "alice"
    assert agent_for_token("gsh.not.valid", SECRET) is None


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"limit": 0}, "limit: Input should be greater than or equal to 1 (got '0')"),
        ({"limit": 500}, "limit: Input should be less than or equal to 100 (got '500')"),
        ({"limit": "ten"}, "limit: Input should be a valid integer"),
        ({"min_relevance": 1.5}, "min_relevance: Input should be less than or equal to 1"),
        ({"task_signature": "not-a-signature"}, "task_signature: String should match pattern"),
        ({"include_iterations": "perhaps"}, "include_iterations: Input should be a valid boolean"),
        ({"limt": 5}, "limt: unknown parameter; use task_signature, limit, min_relevance"),
    ],
)
def test_invalid_parameters_get_422_with_a_clear_message(
    api: httpx2.Client, params: dict[str, Any], says: str
) -> None:
    answer = api.get("/api/introspection/alice", params=params, headers=auth("alice"))
    assert answer.status_code == 422
    assert says in answer.json()["message"]


def test_every_query_is_logged_and_emitted(
    api: httpx2.Client,
    history_store: Any,
    recording_sink: RecordingSink,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed(history_store, time.time())
    with caplog.at_level(logging.INFO, logger="groundswell.history.api"):
        sig = task_signature("Fix login bug", "bugfix")
        found = api.get(
            "/api/introspection/alice", params={"task_signature": sig}, headers=auth("alice")
        )
        assert found.status_code == 200
        assert api.get("/api/introspection/bob", headers=auth("alice")).status_code == 403
        assert api.get("/api/introspection/alice", params={"limit": 0}).status_code == 422
        assert groundswell.flush_sinks()
    logged = [r.getMessage() for r in caplog.records if r.name == "groundswell.history.api"]
    assert len(logged) == 3
    assert "'status': 200" in logged[0] and "'count': 1" in logged[0]
    assert "'status': 403" in logged[1] and "'caller': 'agent:alice'" in logged[1]
    events = [
        e.data["event"]
        for e in recording_sink.events
        if e.kind == "node_event" and e.data["event"]["type"] == "introspection.query"
    ]
    assert [e["status"] for e in events] == [200, 403, 422]
    assert events[2]["agent_id"] == "alice" and "limit" in events[2]["error"]
    # Queries are batched into one "history-api" run, not a run per query.
    runs = {e.run_id for e in recording_sink.events if e.kind == "node_event"}
    starts = [e for e in recording_sink.events if e.kind == "node_start"]
    assert len(runs) == 1 and [e.data["name"] for e in starts] == ["history-api"]
    assert events[0]["agent_id"] == "alice" and events[0]["count"] == 1
    assert events[0]["query"]["limit"] == 10 and events[0]["ms"] >= 0
    assert all(issue_token("alice", SECRET) not in str(e) for e in events)  # tokens never


async def test_a_real_run_is_visible_through_the_api(
    api: httpx2.Client, history_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUNDSWELL_HISTORY_URL", history_store.url)
    manager = groundswell.get_plugin_manager()
    manager.refresh_sinks("history")
    try:
        agent = Agent(name="carol", client=FakeAnthropicAPI([text("42")]).client())
        assert await agent.prompt("The answer?") == "42"
        assert groundswell.flush_sinks()
    finally:
        monkeypatch.delenv("GROUNDSWELL_HISTORY_URL")
        manager.refresh_sinks("history")
    body = api.get(
        "/api/introspection/carol", params={"include_iterations": True}, headers=auth("carol")
    ).json()
    (session,) = body["sessions"]
    assert session["status"] == "completed" and session["summary"] == "42"
    assert session["metadata"]["user"] == "The answer?"
    assert [i["kind"] for i in session["iterations"]] == ["model_turn"]


def test_the_openapi_schema_is_published(api: httpx2.Client) -> None:
    schema = api.get("/openapi.json").json()
    operation = schema["paths"]["/api/introspection/{agent_id}"]["get"]
    names = {p["name"] for p in operation["parameters"]}
    assert names == {
        "agent_id",
        "task_signature",
        "limit",
        "min_relevance",
        "include_iterations",
        "include_failures",
        "include_running",
        "title",
        "category",
        "file_patterns",
    }
    assert {"200", "401", "403", "422"} <= set(operation["responses"])
    assert operation["security"] == [{"HTTPBearer": []}]
    assert "IntrospectionResponse" in schema["components"]["schemas"]


def test_the_cli_issues_tokens_and_serves(tmp_path: Path) -> None:
    env = {**os.environ, "GROUNDSWELL_HOME": str(tmp_path / "home")}
    env.pop("GROUNDSWELL_HISTORY_SECRET", None)
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with HistoryStore(url) as store:
        store.start_session("s1", "dave", started_at=time.time())
        store.end_session("s1", "completed", output="dave's answer")
    token = subprocess.run(
        [*CLI, "history", "token", "dave"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert token.startswith("gsh.")
    secret_file = tmp_path / "home" / "history-api.secret"
    assert secret_file.stat().st_mode & 0o777 == 0o600
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [*CLI, "history", "serve", "--url", url, "--port", str(port)], env=env, stderr=log
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx2.get(
                    f"http://127.0.0.1:{port}/api/introspection/dave?min_relevance=0",
                    headers={"Authorization": f"Bearer {token}"},
                )
                break
            except httpx2.ConnectError:
                assert server.poll() is None, "groundswell history serve exited"
                assert time.monotonic() < deadline, "groundswell history serve did not start"
                time.sleep(0.1)
        assert answer.status_code == 200
        assert answer.json()["sessions"][0]["summary"] == "dave's answer"
        taken = subprocess.run(
            [*CLI, "history", "serve", "--url", url, "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert taken.returncode == 2
        assert f"cannot listen on 127.0.0.1:{port}" in taken.stderr
        assert "Traceback" not in taken.stderr
    finally:
        server.terminate()
        server.wait(10)
        log.close()
    served = (tmp_path / "serve.log").read_text()
    assert "groundswell.history.api: introspection query answered" in served
    assert "'agent_id': 'dave'" in served and token not in served
    bad = subprocess.run(
        [*CLI, "history", "serve", "--url", "nosuchdb://x"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("groundswell: history store: cannot use 'nosuchdb://x'")
    assert "Traceback" not in bad.stderr
    for given in ("99999", "http"):
        wrong = subprocess.run(
            [*CLI, "history", "serve", "--port", given], env=env, capture_output=True, text=True
        )
        assert wrong.returncode == 2 and "argument --port:" in wrong.stderr


def test_all_problems_are_named_at_once(api: httpx2.Client) -> None:
    answer = api.get(
        "/api/introspection/alice",
        params={"limt": 3, "limit": 0, "task_signature": "abc"},
        headers=auth("alice"),
    )
    assert answer.status_code == 422
    message = answer.json()["message"]
    for part in (
        "limit: Input should be greater",
        "task_signature: String should",
        "limt: unknown",
    ):
        assert part in message, part


def test_agent_names_with_slashes_and_odd_characters(
    api: httpx2.Client, history_store: Any
) -> None:
    now = time.time()
    for name in ("team/fixer", "ünï cødé ✓", "x" * 300):
        history_store.start_session(f"s-{len(name)}-{name[:3]}", name, started_at=now)
        history_store.end_session(f"s-{len(name)}-{name[:3]}", "completed", output=f"by {name[:8]}")
        for path in (name, name.replace("/", "%2F")):
            answer = api.get(
                f"/api/introspection/{path}", params={"min_relevance": 0}, headers=auth(name)
            )
            assert answer.status_code == 200, (name, answer.text)
            assert answer.json()["agent_id"] == name and answer.json()["count"] == 1
    assert api.get("/api/introspection/team/fixer", headers=auth("team")).status_code == 403


def test_an_agent_name_with_a_line_break_gets_a_documented_answer(
    api: httpx2.Client, history_store: Any
) -> None:
    # It used to match no route at all: an undocumented 404 with no problem body.
    name = "two\nlines"
    history_store.start_session("s-nl", name, started_at=time.time())
    history_store.end_session("s-nl", "completed", output="fine")
    answer = api.get(
        "/api/introspection/two%0Alines", params={"min_relevance": 0}, headers=auth(name)
    )
    assert answer.status_code == 200 and answer.json()["agent_id"] == name
    refused = api.get("/api/introspection/two%0Alines", headers=auth("other"))
    assert refused.status_code == 403 and "message" in refused.json()


def test_an_unreachable_store_is_503_and_health_says_so(history_store: Any) -> None:
    with (
        Server(create_app(history_store, secret=SECRET)) as server,
        httpx2.Client(base_url=server.url, timeout=30) as client,
    ):
        assert client.get("/api/health").json() == {"status": "ok", "schema_version": 2}
        # The database goes away while the server runs: point the store at a dead port.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        working = history_store.engine
        history_store.engine = sqlalchemy.create_engine(
            f"postgresql+psycopg://u@127.0.0.1:{port}/gone", pool_pre_ping=True
        )
        try:
            down = client.get("/api/introspection/alice", headers=auth("alice"))
            assert down.status_code == 503
            assert down.json()["message"] == "the history store cannot be reached; try again"
            health = client.get("/api/health")
            assert health.status_code == 503 and "cannot be reached" in health.json()["message"]
        finally:
            history_store.engine.dispose()
            history_store.engine = working
        # And back: the next query is answered again.
        assert client.get("/api/introspection/alice", headers=auth("alice")).status_code == 200


def test_racing_processes_agree_on_one_secret(tmp_path: Path) -> None:
    code = (
        "import os, sys; from groundswell_history.api import load_secret; "
        "sys.stdout.write(load_secret().decode())"
    )
    env = {**os.environ, "GROUNDSWELL_HOME": str(tmp_path / "home")}
    env.pop("GROUNDSWELL_HISTORY_SECRET", None)
    processes = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    secrets = {p.communicate(timeout=60)[0] for p in processes}
    assert all(p.returncode == 0 for p in processes)
    assert len(secrets) == 1 and len(secrets.pop()) == 64


def test_serve_refuses_a_store_it_cannot_use_before_listening(tmp_path: Path) -> None:
    env = {**os.environ, "GROUNDSWELL_HOME": str(tmp_path / "home")}
    missing = tmp_path / "no" / "such" / "dir" / "h.db"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    for url, message in [
        (f"sqlite:///{missing}", f"groundswell: no history store at 'sqlite:///{missing}'"),
        (
            "postgresql+psycopg://nobody@127.0.0.1:1/none",  # nothing listens on port 1
            "groundswell: history store at 'postgresql+psycopg://nobody@127.0.0.1:1/none' "
            "cannot be reached",
        ),
    ]:
        out = subprocess.run(
            [*CLI, "history", "serve", "--url", url, "--port", port],
            env=env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith(message) and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "no").exists()  # serving never creates a store


def test_a_missing_extra_names_the_extra_and_what_is_missing() -> None:
    code = (
        "import sys\n"
        "sys.modules['sqlalchemy'] = None\n"  # as if the [history] extra were not installed
        "import groundswell_history\n"
        "groundswell_history.load_api()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.rstrip().endswith(
        "ConfigurationError: the history API needs the [history] extra "
        '(sqlalchemy is not installed): pip install "groundswell[history]"'
    )


async def test_a_store_the_app_opened_is_closed_when_it_stops(
    tmp_path: Path, history_store: HistoryStore
) -> None:
    opened = create_app(f"sqlite:///{tmp_path / 'own.db'}", secret=SECRET)
    given = create_app(history_store, secret=SECRET)
    for app in (opened, given):
        app.state.store.ping()  # a pooled connection now
    pools = [app.state.store.engine.pool for app in (opened, given)]
    for app in (opened, given):
        async with app.router.lifespan_context(app):
            pass
    # The app's own store let go of its connections; the store it was given is its owner's.
    assert opened.state.store.engine.pool is not pools[0]
    assert opened.state.store.engine.pool.checkedin() == 0
    assert given.state.store.engine.pool is pools[1]


@pytest.mark.parametrize("route", ["/api/sessions", "/api/failures", "/api/introspection/alice"])
def test_a_single_value_parameter_given_twice_is_refused(api: httpx2.Client, route: str) -> None:
    # FastAPI alone would quietly keep the last one: the task asked about would not be
    # the one the client meant.
    answer = api.get(route, params=[("task_id", "a"), ("task_id", "b")], headers=auth("alice"))
    assert answer.status_code == 422
    assert "'task_id' was given 2 times: give it once" in answer.text
    patterns = [("title", "Fix login"), ("file_patterns", "*.py"), ("file_patterns", "*.md")]
    many = api.get("/api/introspection/alice", params=patterns, headers=auth("alice"))
    assert many.status_code == 200
