"""The sessions API (list, get, iterations, create, update, terminate) and the
introspection endpoint's defaults, field names and partial matches: over HTTP, through
a real uvicorn server on a loopback port, with real tokens, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from groundswell_history import HistoryStore, SessionConflict, create_app, task_signature
from groundswell_history.api import caller_for_token, issue_operator_token, issue_token

import groundswell
from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI, text

from .test_history_api import SECRET, Server, auth

DAY = 86_400.0
CLI = (sys.executable, "-m", "groundswell.cli")
OPERATOR = {"Authorization": f"Bearer {issue_operator_token('ops', SECRET)}"}


@pytest.fixture
def api(history_store: HistoryStore) -> Iterator[httpx2.Client]:
    with (
        Server(create_app(history_store, secret=SECRET)) as server,
        httpx2.Client(base_url=server.url, timeout=10) as client,
    ):
        yield client


def when(iso: str) -> float:
    """An ISO 8601 time from the API as a Unix time."""
    return datetime.fromisoformat(iso).timestamp()


def seed(store: HistoryStore, now: float) -> None:
    """alice: four sessions of two tasks in every status; bob: one."""
    rows = [
        ("a-done", "alice", "T-1", 3, "completed"),
        ("a-failed", "alice", "T-1", 2, "failed"),
        ("a-stopped", "alice", "T-2", 1, "terminated"),
        ("a-running", "alice", "T-2", 0, None),
        ("b-done", "bob", "T-1", 0.5, "completed"),
    ]
    for sid, agent, task, days, status in rows:
        store.start_session(sid, agent, task_id=task, started_at=now - days * DAY)
        store.add_iteration(sid, "model_turn", name="claude", output=f"turn of {sid}")
        if status is not None:
            store.end_session(sid, status, output=f"output of {sid}", error=None)  # type: ignore[arg-type]


def test_an_agent_creates_updates_and_terminates_its_own_session(api: httpx2.Client) -> None:
    made = api.post(
        "/api/sessions",
        json={
            "task_id": "T-7",
            "title": "Fix login bug",
            "category": "bugfix",
            "file_patterns": ["auth/*.py"],
            "metadata": {"ticket": 7},
        },
        headers=auth("alice"),
    )
    assert made.status_code == 201, made.text
    session = made.json()
    sid = session["session_id"]
    assert session["agent_id"] == "alice" and session["status"] == "running"
    assert session["task_id"] == "T-7" and session["metadata"] == {"ticket": 7}
    assert session["task_signature"] == task_signature("Fix login bug", "bugfix", ["auth/*.py"])
    assert abs(when(session["started_at"]) - time.time()) < 60
    assert session["completed_at"] is None and session["relevance_score"] is None
    assert "iterations" not in session  # none were loaded

    got = api.get(f"/api/sessions/{sid}", headers=auth("alice")).json()
    assert got["session_id"] == sid and got["iterations"] == []

    patched = api.patch(
        f"/api/sessions/{sid}",
        json={"summary": "half way there", "metadata": {"step": 2}},
        headers=auth("alice"),
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["summary"] == "half way there"
    assert patched.json()["metadata"] == {"ticket": 7, "step": 2}  # merged
    assert patched.json()["status"] == "running"

    ended = api.post(
        f"/api/sessions/{sid}/terminate", json={"reason": "taking too long"}, headers=auth("alice")
    )
    assert ended.status_code == 200, ended.text
    assert ended.json()["status"] == "terminated" and ended.json()["error"] == "taking too long"
    assert when(ended.json()["completed_at"]) >= when(ended.json()["started_at"])

    again = api.post(f"/api/sessions/{sid}/terminate", headers=auth("alice"))
    assert again.status_code == 409
    assert again.json()["message"] == (
        f"session {sid!r} has ended already (terminated); only a running session can be terminated"
    )
    back = api.patch(f"/api/sessions/{sid}", json={"status": "running"}, headers=auth("alice"))
    assert back.status_code == 422 and "status" in back.json()["message"]
    # An ended session stays ended, but what it ended as can be corrected.
    fixed = api.patch(f"/api/sessions/{sid}", json={"status": "completed"}, headers=auth("alice"))
    assert fixed.status_code == 200 and fixed.json()["status"] == "completed"
    assert fixed.json()["completed_at"] == ended.json()["completed_at"]


def test_a_session_is_created_with_its_own_id_times_and_outcome(api: httpx2.Client) -> None:
    body = {
        "session_id": "import-1",
        "status": "completed",
        "started_at": "2026-02-08T06:06:04Z",
        "completed_at": "2026-02-08T06:08:47.500000+00:00",
        "summary": "Successfully implemented feature X",
    }
    made = api.post("/api/sessions", json=body, headers=auth("alice"))
    assert made.status_code == 201, made.text
    assert made.json()["started_at"] == "2026-02-08T06:06:04Z"
    assert made.json()["completed_at"] == "2026-02-08T06:08:47.500000Z"
    assert made.json()["summary"] == "Successfully implemented feature X"
    taken = api.post("/api/sessions", json=body, headers=auth("alice"))
    assert taken.status_code == 409
    assert taken.json()["message"] == (
        "a session with id 'import-1' exists already; choose another id"
    )


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"session_id": "has space"}, "session_id: String should match pattern"),
        # The shape of a recorded session's id (a prompt node's): refused, so a client
        # cannot make the session another agent's run is about to record.
        ({"session_id": "0123456789abcdef"}, "16 hex digits is the shape of a recorded"),
        ({"session_id": "0123456789ABCDEF"}, "choose another id"),
        ({"metadata": {f"k{i}": i for i in range(65)}}, "at most 64 keys, got 65"),
        ({"metadata": {"blob": "x" * 17_000}}, "at most 16384 bytes as JSON"),
        (
            {
                "status": "completed",
                "started_at": "2026-02-09T00:00:00Z",
                "completed_at": "2026-02-08T00:00:00Z",
            },
            "completed_at is before started_at",
        ),
        ({"completed_at": "2026-02-08T00:00:00Z"}, "a running session has no completed_at"),
        ({"status": "paused"}, "status: Input should be 'running', 'completed'"),
        ({"category": "bugfix"}, "give its title too"),
        ({"colour": "red"}, "colour: Extra inputs are not permitted"),
        ({"started_at": "1969-12-31T23:59:59Z"}, "must be between 1970-01-01 and 9999-12-31"),
    ],
)
def test_bad_new_sessions_get_422_naming_the_problem(
    api: httpx2.Client, body: dict[str, Any], says: str
) -> None:
    answer = api.post("/api/sessions", json=body, headers=auth("alice"))
    assert answer.status_code == 422, answer.text
    assert says in answer.json()["message"]


def test_requests_that_are_not_json_or_name_unknown_parameters_get_422(
    api: httpx2.Client,
) -> None:
    garbled = api.post(
        "/api/sessions",
        content=b"\xff\xfe not json",
        headers={**auth("alice"), "Content-Type": "application/json"},
    )
    assert garbled.status_code == 422
    assert "send JSON text" in garbled.json()["message"]
    misspelt = api.get("/api/sessions", params={"stauts": "failed"}, headers=auth("alice"))
    assert misspelt.status_code == 422
    assert misspelt.json()["message"].startswith(
        "stauts: unknown parameter; use agent_id, task_id, status, limit, offset"
    )
    # An operator must say whose session it creates.
    nobody = api.post("/api/sessions", json={}, headers=OPERATOR)
    assert nobody.status_code == 422
    assert "give agent_id" in nobody.json()["message"]


def test_listing_filters_pages_and_stays_within_the_tokens_agent(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    seed(history_store, time.time())
    mine = api.get("/api/sessions", headers=auth("alice")).json()
    assert [s["session_id"] for s in mine["sessions"]] == [
        "a-running",
        "a-stopped",
        "a-failed",
        "a-done",
    ]
    assert mine["total"] == mine["count"] == 4 and mine["limit"] == 50 and mine["offset"] == 0
    assert all("iterations" not in s for s in mine["sessions"])
    assert "b-done" not in str(mine)

    def ids(**params: Any) -> list[str]:
        answer = api.get("/api/sessions", params=params, headers=auth("alice"))
        assert answer.status_code == 200, answer.text
        return [s["session_id"] for s in answer.json()["sessions"]]

    assert ids(status="terminated") == ["a-stopped"]
    assert ids(task_id="T-1") == ["a-failed", "a-done"]
    assert ids(task_id="T-1", status="completed") == ["a-done"]
    assert ids(limit=2) == ["a-running", "a-stopped"]
    page = api.get("/api/sessions", params={"limit": 2, "offset": 2}, headers=auth("alice"))
    assert [s["session_id"] for s in page.json()["sessions"]] == ["a-failed", "a-done"]
    assert page.json()["total"] == 4 and page.json()["count"] == 2

    others = api.get("/api/sessions", params={"agent_id": "bob"}, headers=auth("alice"))
    assert others.status_code == 403
    assert others.json()["message"].startswith(
        "this token belongs to agent 'alice'; an agent can read only its own sessions"
    )
    assert "groundswell history token --operator" in others.json()["message"]
    everyone = api.get("/api/sessions", params={"task_id": "T-1"}, headers=OPERATOR).json()
    assert [s["session_id"] for s in everyone["sessions"]] == ["b-done", "a-failed", "a-done"]
    bobs = api.get("/api/sessions", params={"agent_id": "bob"}, headers=OPERATOR).json()
    assert [s["agent_id"] for s in bobs["sessions"]] == ["bob"]
    assert api.get("/api/sessions").status_code == 401
    forged = {"Authorization": f"Bearer {issue_operator_token('ops', b'another-secret-here')}"}
    assert api.get("/api/sessions", headers=forged).status_code == 401


def test_another_agents_session_cannot_be_seen_or_changed(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    seed(history_store, time.time())
    history_store.start_session("b-live", "bob")
    for method, path, body in [
        ("GET", "/api/sessions/b-live", None),
        ("GET", "/api/sessions/b-live/iterations", None),
        ("PATCH", "/api/sessions/b-live", {"summary": "hijacked"}),
        ("POST", "/api/sessions/b-live/terminate", {}),
    ]:
        answer = api.request(method, path, json=body, headers=auth("alice"))
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["message"] == "no session 'b-live' among agent 'alice''s sessions"
    stolen = api.post("/api/sessions", json={"agent_id": "bob"}, headers=auth("alice"))
    assert stolen.status_code == 403
    assert history_store.session("b-live", include_iterations=False).status == "running"  # type: ignore[union-attr]
    assert history_store.count_sessions(agent_id="bob") == 2
    # An operator may: it terminates bob's session.
    ended = api.post("/api/sessions/b-live/terminate", headers=OPERATOR)
    assert ended.status_code == 200 and ended.json()["status"] == "terminated"
    missing = api.get("/api/sessions/nope", headers=OPERATOR)
    assert missing.status_code == 404 and missing.json()["message"] == "no session 'nope'"


def test_a_sessions_iterations_in_order_with_iso_times(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    now = time.time()
    history_store.start_session("s", "alice", started_at=now - 10)
    history_store.add_iteration(
        "s", "model_turn", name="claude", output="let me look", started_at=now - 9, ended_at=now - 8
    )
    history_store.add_iteration(
        "s", "tool_call", name="read_file", input={"path": "a.py"}, status="failed", error="nope"
    )
    answer = api.get("/api/sessions/s/iterations", headers=auth("alice"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["session_id"] == "s" and body["count"] == 2
    first, second = body["iterations"]
    assert (first["seq"], first["kind"], first["name"]) == (1, "model_turn", "claude")
    assert when(first["started_at"]) == pytest.approx(now - 9, abs=1e-3)
    assert when(first["completed_at"]) == pytest.approx(now - 8, abs=1e-3)
    assert second["status"] == "failed" and second["input_summary"] == '{"path": "a.py"}'
    assert second["started_at"] is None


def test_introspection_answers_completed_sessions_unless_asked(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    seed(history_store, time.time())

    def statuses(**params: Any) -> list[str]:
        answer = api.get(
            "/api/introspection/alice",
            params={"min_relevance": 0, **params},
            headers=auth("alice"),
        )
        assert answer.status_code == 200, answer.text
        return sorted(s["status"] for s in answer.json()["sessions"])

    assert statuses() == ["completed"]
    assert statuses(include_failures="true") == ["completed", "failed", "terminated"]
    assert statuses(include_running="true") == ["completed", "running"]
    both = statuses(include_failures="true", include_running="true")
    assert both == ["completed", "failed", "running", "terminated"]


def test_introspection_sessions_carry_the_harness_field_names(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    now = time.time()
    history_store.start_session("s1", "alice", started_at=now - 60, task_id="T-1")
    history_store.end_session("s1", "completed", output="done well", ended_at=now - 30)
    answer = api.get(
        "/api/introspection/alice", params={"min_relevance": 0}, headers=auth("alice")
    ).json()
    (session,) = answer["sessions"]
    for name in (
        "session_id",
        "agent_id",
        "task_id",
        "status",
        "started_at",
        "completed_at",
        "relevance_score",
        "summary",
    ):
        assert name in session, name
    for old in ("id", "relevance", "ended_at", "output_summary"):
        assert old not in session, old
    assert session["session_id"] == "s1" and session["summary"] == "done well"
    assert when(session["started_at"]) == pytest.approx(now - 60, abs=1e-3)
    assert when(session["completed_at"]) == pytest.approx(now - 30, abs=1e-3)
    assert session["started_at"].endswith("Z")
    # The sessions API answers the same session in the same form (no score there).
    listed = api.get("/api/sessions/s1", headers=auth("alice")).json()
    assert {k: v for k, v in listed.items() if k not in ("relevance_score", "iterations")} == {
        k: v for k, v in session.items() if k != "relevance_score"
    }
    assert listed["relevance_score"] is None


def test_partial_matches_reach_the_api_through_the_tasks_parts(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    now = time.time()
    full = task_signature("Fix login bug", "bugfix", ["auth/*.py"])
    history_store.start_session(
        "s",
        "alice",
        started_at=now,
        task_signature=full,
        title="Fix login bug",
        category="bugfix",
        file_patterns=["auth/*.py"],
    )
    history_store.end_session("s", "completed", ended_at=now + 1)

    def score(params: Any) -> float:
        answer = api.get(
            "/api/introspection/alice", params={"min_relevance": 0, **params}, headers=auth("alice")
        )
        assert answer.status_code == 200, answer.text
        (session,) = answer.json()["sessions"]
        return float(session["relevance_score"])

    # The same task without its file patterns: a partial match (0.3) through its parts...
    assert score({"title": "Fix login bug", "category": "bugfix"}) == pytest.approx(0.8, abs=1e-3)
    # ...but its bare digest matches exactly or not at all.
    bare = task_signature("Fix login bug", "bugfix")
    assert score({"task_signature": bare}) == pytest.approx(0.5, abs=1e-3)
    # The full parts (file patterns repeated as parameters) are an exact match.
    parts = {"title": "fix LOGIN bug", "category": "bugfix", "file_patterns": ["auth/*.py"]}
    assert score(parts) == pytest.approx(1.0, abs=1e-3)
    shared = {"title": "Other task", "file_patterns": ["docs/*", "auth/*.py"]}
    assert score(shared) == pytest.approx(0.8, abs=1e-3)  # a shared file pattern
    echo = api.get(
        "/api/introspection/alice", params={**parts, "min_relevance": 0}, headers=auth("alice")
    ).json()["query"]
    assert echo["task_signature"] == full and echo["file_patterns"] == ["auth/*.py"]

    clash = api.get(
        "/api/introspection/alice",
        params={"title": "Fix login bug", "task_signature": "0" * 64},
        headers=auth("alice"),
    )
    assert clash.status_code == 422
    assert "is not the signature of title, category and file_patterns" in clash.json()["message"]
    orphan = api.get(
        "/api/introspection/alice", params={"category": "bugfix"}, headers=auth("alice")
    )
    assert orphan.status_code == 422 and "give its title too" in orphan.json()["message"]


async def test_cancelled_and_terminated_prompts_are_terminated_over_http(
    api: httpx2.Client, recording_store: HistoryStore
) -> None:
    slow = dataclasses.replace(text("too late"), delay=30)
    fake = FakeAnthropicAPI([slow])
    agent = Agent(name="impatient", history=True, client=fake.client())
    task = asyncio.create_task(agent.prompt("take your time"))
    deadline = time.monotonic() + 10
    while not fake.requests:  # the model call is under way
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert groundswell.flush_sinks()
    answer = api.get(
        "/api/sessions", params={"status": "terminated"}, headers=auth("impatient")
    ).json()
    (session,) = answer["sessions"]
    assert session["summary"] is None and session["completed_at"] is not None


async def test_a_terminate_over_http_is_kept_when_the_prompt_ends_later(
    api: httpx2.Client, recording_store: HistoryStore
) -> None:
    fake = FakeAnthropicAPI([dataclasses.replace(text("finished anyway"), delay=3.0)])
    agent = Agent(name="worker", history=True, client=fake.client())
    task = asyncio.create_task(agent.prompt("long job"))
    deadline = time.monotonic() + 10
    while True:  # until the running session is recorded
        groundswell.flush_sinks()
        running = await asyncio.to_thread(
            api.get, "/api/sessions", params={"status": "running"}, headers=auth("worker")
        )
        if running.json()["sessions"]:
            break
        assert time.monotonic() < deadline, "the running session was never recorded"
        await asyncio.sleep(0.05)
    sid = running.json()["sessions"][0]["session_id"]
    stopped = await asyncio.to_thread(
        api.post, f"/api/sessions/{sid}/terminate", json={"reason": "ops"}, headers=auth("worker")
    )
    assert stopped.status_code == 200
    assert await task == "finished anyway"  # in its own process, the prompt went on
    assert groundswell.flush_sinks()
    final = api.get(f"/api/sessions/{sid}", headers=auth("worker")).json()
    assert final["status"] == "terminated" and final["error"] == "ops"  # the first end wins
    assert final["completed_at"] == stopped.json()["completed_at"]


def test_a_session_that_ended_meanwhile_is_not_terminated(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    sid = api.post("/api/sessions", json={}, headers=auth("alice")).json()["session_id"]
    assert sid.startswith("api-")  # made ids never look like a recorded session's
    # The run ends it (as the sink does) between a terminate's look and its write:
    # the write itself checks the session is still running.
    history_store.end_session(sid, "completed", output="done", agent_id="alice")
    with pytest.raises(SessionConflict, match="has ended already \\(completed\\)"):
        history_store.update_session(sid, status="terminated", expected_status="running")
    late = api.post(f"/api/sessions/{sid}/terminate", json={"reason": "ops"}, headers=auth("alice"))
    assert late.status_code == 409
    assert late.json()["message"] == (
        f"session {sid!r} has ended already (completed); only a running session can be terminated"
    )
    kept = api.get(f"/api/sessions/{sid}", headers=auth("alice")).json()
    assert kept["status"] == "completed" and kept["summary"] == "done" and kept["error"] is None


def test_a_taken_id_gets_the_same_409_whoever_has_it(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    history_store.create_session("bob", session_id="deploy-7")
    api.post("/api/sessions", json={"session_id": "mine-7"}, headers=auth("alice"))
    theirs = api.post("/api/sessions", json={"session_id": "deploy-7"}, headers=auth("alice"))
    ours = api.post("/api/sessions", json={"session_id": "mine-7"}, headers=auth("alice"))
    assert theirs.status_code == ours.status_code == 409
    # Nothing tells alice that the id is someone else's.
    assert theirs.json()["message"].replace("deploy-7", "X") == ours.json()["message"].replace(
        "mine-7", "X"
    )
    assert "bob" not in theirs.text and theirs.json()["message"].endswith("choose another id")


def test_metadata_merged_past_its_limits_is_refused(
    api: httpx2.Client, history_store: HistoryStore
) -> None:
    full = {f"k{i}": i for i in range(64)}
    sid = api.post("/api/sessions", json={"metadata": full}, headers=auth("alice")).json()[
        "session_id"
    ]
    more = api.patch(f"/api/sessions/{sid}", json={"metadata": {"k64": 1}}, headers=auth("alice"))
    assert more.status_code == 422
    assert "metadata may have at most 64 keys, got 65" in more.json()["message"]
    same = api.patch(f"/api/sessions/{sid}", json={"metadata": {"k0": "x"}}, headers=auth("alice"))
    assert same.status_code == 200  # replacing a key adds none
    big = {"k1": "y" * 9_000}
    grown = api.patch(f"/api/sessions/{sid}", json={"metadata": big}, headers=auth("alice"))
    assert grown.status_code == 200
    again = api.patch(
        f"/api/sessions/{sid}", json={"metadata": {"k2": "z" * 9_000}}, headers=auth("alice")
    )
    assert again.status_code == 422
    assert "metadata may take at most 16384 bytes as JSON" in again.json()["message"]
    stored = history_store.session(sid, include_iterations=False)
    assert stored is not None and stored.metadata["k2"] == 2 and len(stored.metadata) == 64


def test_the_cli_issues_operator_tokens(tmp_path: Path) -> None:
    env = {**os.environ, "GROUNDSWELL_HOME": str(tmp_path), "GROUNDSWELL_HISTORY_SECRET": "s" * 32}
    made = subprocess.run(
        [*CLI, "history", "token", "--operator"], env=env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    caller = caller_for_token(made.stdout.strip(), b"s" * 32)
    assert caller is not None and caller.operator and caller.name == "operator"
    named = subprocess.run(
        [*CLI, "history", "token", "--operator", "oncall"], env=env, capture_output=True, text=True
    )
    assert caller_for_token(named.stdout.strip(), b"s" * 32) == type(caller)("oncall", True)
    agent = caller_for_token(issue_token("oncall", b"s" * 32), b"s" * 32)
    assert agent is not None and not agent.operator  # an agent named like one is no operator
    neither = subprocess.run([*CLI, "history", "token"], env=env, capture_output=True, text=True)
    assert neither.returncode == 2
    assert "say whose token: groundswell history token AGENT_ID" in neither.stderr
    both = subprocess.run(
        [*CLI, "history", "token", "alice", "--operator"], env=env, capture_output=True, text=True
    )
    assert both.returncode == 2 and "not both" in both.stderr
