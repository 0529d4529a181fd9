"""Self-improvement (retry history, failure analysis, the approaches that fixed them),
usage metrics, the agent-facing guide, the injection switch and the schema migration:
through real runs against the fake API, the history tools an agent calls, and the HTTP
API on a real server with real tokens, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from groundswell_history import AGENT_GUIDE, HistoryStore, create_app, set_task, task_signature
from groundswell_history.api import issue_operator_token
from pydantic import BaseModel

import groundswell
from groundswell import Agent, Prompt, ResponseValidationError, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, json_reply, text, tool_use

from .test_history_api import SECRET, Server, auth

DOCS = Path(__file__).parent.parent / "docs" / "history.md"
OPERATOR = {"Authorization": f"Bearer {issue_operator_token('ops', SECRET)}"}


class Verdict(BaseModel):
    approve: bool
    reason: str


@pytest.fixture
def api(recording_store: HistoryStore) -> Iterator[httpx2.Client]:
    with (
        Server(create_app(recording_store, secret=SECRET)) as server,
        httpx2.Client(base_url=server.url, timeout=10) as client,
    ):
        yield client


async def attempt(agent: Agent, request: str) -> Any:
    """One attempt at task T-9, as a run of its own (as a scheduler's retry would be)."""

    @workflow
    async def review(ctx: WorkflowContext) -> Any:
        async def work() -> Any:
            set_task("Review the login fix", category="review", task_id="T-9")
            return await agent.prompt(Prompt(user=request, response_format=Verdict))

        return await ctx.step("review", work)

    return await review.run()


async def test_a_task_that_failed_then_succeeded_shows_its_retries_and_its_fix(
    api: httpx2.Client, recording_store: HistoryStore
) -> None:
    fake = FakeAnthropicAPI(
        [text("I approve!"), json_reply({"approve": True, "reason": "tests pass"})]
    )
    agent = Agent(name="reviewer", history=True, client=fake.client())
    with pytest.raises(groundswell.WorkflowError) as failed:
        await attempt(agent, "Review PR 9")
    assert isinstance(failed.value.__cause__, ResponseValidationError)
    await attempt(agent, "Review PR 9; answer as JSON")
    assert groundswell.flush_sinks()
    signature = task_signature("Review the login fix", "review")
    recording_store.learn_success(
        "reviewer", "State the verdict as JSON only", task_signature=signature
    )
    recording_store.learn_error(
        "reviewer", "ResponseValidationError: not JSON", fix="answer with the JSON object only"
    )
    first, second = recording_store.list_sessions(agent_id="reviewer")[::-1]

    retries = api.get("/api/retries", params={"task_id": "T-9"}, headers=auth("reviewer"))
    assert retries.status_code == 200, retries.text
    (task,) = retries.json()["tasks"]
    assert task["task_id"] == "T-9" and task["title"] == "Review the login fix"
    assert (task["attempt_count"], task["failures"], task["resolved"]) == (2, 1, True)
    one, two = task["attempts"]
    assert (one["attempt"], one["session_id"], one["status"]) == (1, first.id, "failed")
    assert one["error_type"] == "ResponseValidationError"
    assert (two["attempt"], two["session_id"], two["status"]) == (2, second.id, "completed")
    assert two["error_type"] is None and "tests pass" in two["summary"]

    failures = api.get("/api/failures", headers=auth("reviewer"))
    assert failures.status_code == 200, failures.text
    (kind,) = failures.json()["failures"]
    assert (kind["error_type"], kind["category"], kind["count"]) == (
        "ResponseValidationError",
        "validation",
        1,
    )
    assert kind["advice"].startswith("Answer exactly in the requested format")
    assert kind["session_ids"] == [first.id] and kind["tasks"] == ["T-9"]
    (fix,) = kind["fixes"]
    assert fix["failed_session_id"] == first.id and fix["fixed_session_id"] == second.id
    assert fix["request"] == "Review PR 9; answer as JSON"
    assert fix["approaches"] == ["State the verdict as JSON only"]
    assert kind["learned_fixes"] == ["answer with the JSON object only"]

    # The same through the Python API...
    (python_task,) = recording_store.retry_history("reviewer", task_id="T-9")
    assert python_task.resolved and [a.status for a in python_task.attempts] == [
        "failed",
        "completed",
    ]
    assert recording_store.failure_analysis("reviewer")[0].advice == kind["advice"]
    # ...and only for the agent itself, unless an operator asks.
    refused = api.get("/api/retries", params={"agent_id": "reviewer"}, headers=auth("other"))
    assert refused.status_code == 403
    assert api.get("/api/retries", headers=auth("other")).json()["tasks"] == []
    everyone = api.get("/api/failures", headers=OPERATOR).json()
    assert everyone["agent_id"] is None and everyone["count"] == 1

    # The agent reviews its own track record with its history tool.
    fake.add(tool_use("review_past_failures", {"task_id": "T-9"}), text("I'll answer in JSON."))
    asker = Agent(name="reviewer", tools=["history"], client=fake.client())
    result = await asker.run("Before you review PR 10: what went wrong last time?")
    (call,) = result.tree.find(type=groundswell.NodeType.TOOL_CALL)
    reviewed = json.loads(call.payload["output"])
    assert reviewed["agent_id"] == "reviewer"
    assert reviewed["retries"][0]["attempts"][0]["error_type"] == "ResponseValidationError"
    assert reviewed["failures"][0]["fixes"][0]["fixed_session_id"] == second.id
    assert reviewed["failures"][0]["learned_fixes"] == ["answer with the JSON object only"]


async def test_usage_counts_each_agents_queries_and_their_average_relevance(
    api: httpx2.Client, recording_store: HistoryStore
) -> None:
    now = time.time()
    for sid, agent in [("a1", "alice"), ("a2", "alice"), ("b1", "bob")]:
        recording_store.start_session(sid, agent, started_at=now)
        recording_store.end_session(sid, "completed", output=f"work {sid}")
    found = api.get(
        "/api/introspection/alice", params={"min_relevance": 0}, headers=auth("alice")
    ).json()
    scores = [s["relevance_score"] for s in found["sessions"]]
    assert len(scores) == 2
    empty = api.get(
        "/api/introspection/alice", params={"min_relevance": 1}, headers=auth("alice")
    ).json()
    assert empty["count"] == 0
    api.get("/api/introspection/bob", params={"min_relevance": 0}, headers=auth("bob"))
    api.get("/api/introspection/bob", params={"min_relevance": 0}, headers=OPERATOR)  # not bob's
    fake = FakeAnthropicAPI(
        [tool_use("query_past_sessions", {"min_relevance": 0}), text("I see two sessions.")]
    )
    await Agent(name="alice", tools=["history"], client=fake.client()).run("What did I do?")

    mine = api.get("/api/usage", headers=auth("alice"))
    assert mine.status_code == 200, mine.text
    (usage,) = mine.json()["agents"]
    assert usage["agent_id"] == "alice" and usage["queries"] == 3
    assert usage["by_source"] == {"api": 2, "tool": 1} and usage["empty_queries"] == 1
    assert usage["sessions_returned"] == 4
    assert usage["average_relevance"] == pytest.approx(sum(scores) / 2, abs=1e-3)
    assert abs(datetime_of(usage["last_query_at"]) - time.time()) < 60
    assert api.get("/api/usage", params={"agent_id": "bob"}, headers=auth("alice")).status_code == (
        403
    )
    everyone = api.get("/api/usage", headers=OPERATOR).json()
    assert [(u["agent_id"], u["queries"]) for u in everyone["agents"]] == [
        ("alice", 3),
        ("bob", 1),
    ]
    assert recording_store.usage("bob")[0].average_relevance == pytest.approx(0.5, abs=1e-3)


def datetime_of(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


async def test_the_injection_switch_keeps_history_out_of_every_prompt(
    recording_store: HistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording_store.start_session("s", "fixer", started_at=time.time(), title="Fix login bug")
    recording_store.end_session("s", "completed", output="patched auth/session.py")
    fake = FakeAnthropicAPI([text("one"), text("two"), text("three")])
    agent = Agent(name="fixer", system="You fix bugs.", context=["history"], client=fake.client())

    monkeypatch.setenv("GROUNDSWELL_HISTORY_INJECTION", "0")
    off = await agent.run("Fix it")
    assert fake.requests[0].system == "You fix bugs."
    events = {e["type"]: e for e in off.node.events}  # type: ignore[union-attr]
    assert events["context_skipped"] == {
        **events["context_skipped"],
        "provider": "history",
        "reason": "GROUNDSWELL_HISTORY_INJECTION=0",
    }

    monkeypatch.setenv("GROUNDSWELL_HISTORY_INJECTION", "1")
    await agent.run("Fix it")
    assert "patched auth/session.py" in fake.requests[1].system

    monkeypatch.setenv("GROUNDSWELL_HISTORY_INJECTION", "perhaps")
    odd = await agent.run("Fix it")
    assert fake.requests[2].system == "You fix bugs."  # the prompt still runs
    (error,) = [e for e in odd.node.events if e["type"] == "context_error"]  # type: ignore[union-attr]
    assert "GROUNDSWELL_HISTORY_INJECTION='perhaps' is not a switch: set it to 0" in error["error"]


async def test_the_agent_reads_its_guide_in_the_tool_and_the_docs_say_the_same(
    recording_store: HistoryStore,
) -> None:
    fake = FakeAnthropicAPI([text("noted")])
    await Agent(name="reader", tools=["history"], client=fake.client()).run("hello")
    tools = {t["name"]: t for t in fake.requests[0].tools}
    assert set(tools) == {"query_past_sessions", "review_past_failures"}
    description = tools["query_past_sessions"]["description"]
    assert description.endswith(AGENT_GUIDE)
    assert "When to use it:" in description and "review_past_failures" in description
    assert "agent_id" not in tools["review_past_failures"]["input_schema"]["properties"]
    assert AGENT_GUIDE in DOCS.read_text()


def test_a_store_written_before_terminated_existed_is_migrated(
    history_store: HistoryStore,
) -> None:
    import sqlalchemy as sa

    history_store.start_session("old", "a", started_at=time.time())
    history_store.add_iteration("old", "model_turn", name="m", status="completed")
    _, info, sessions, iterations, *_ = history_store._tables
    with history_store.engine.begin() as conn:  # as version 1 wrote a cancelled prompt
        conn.execute(sessions.update().values(status="cancelled", ended_at=time.time()))
        conn.execute(iterations.update().values(status="cancelled"))
        conn.execute(info.delete().where(info.c.key == "schema_version"))
        conn.execute(info.insert().values(key="schema_version", value="1"))
    with HistoryStore(history_store.url) as reopened:
        session = reopened.session("old")
        assert session is not None and session.status == "terminated"
        assert session.iterations and session.iterations[0]["status"] == "terminated"
        with reopened.engine.connect() as conn:
            version = conn.execute(
                sa.select(info.c.value).where(info.c.key == "schema_version")
            ).scalar()
        assert version == "2"


def test_failure_analysis_reads_an_agents_success_patterns_once(
    history_store: HistoryStore,
) -> None:
    import sqlalchemy as sa

    now = time.time()
    for i in range(8):  # eight tasks, each failed once and then done
        signature = task_signature(f"Task {i}", "bugfix")
        common = {"task_id": f"T-{i}", "task_signature": signature, "title": f"Task {i}"}
        history_store.create_session(
            "fixer", status="failed", started_at=now - 100 + i, error="KeyError: 'x'", **common
        )
        history_store.create_session(
            "fixer", status="completed", started_at=now - 50 + i, summary="done", **common
        )
    history_store.learn_success(
        "fixer", "check the key first", task_signature=task_signature("Task 0", "bugfix")
    )
    reads: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "gs_memories" in statement:
            reads.append(statement)

    sa.event.listen(history_store.engine, "before_cursor_execute", count)
    try:
        (kind,) = history_store.failure_analysis("fixer")
    finally:
        sa.event.remove(history_store.engine, "before_cursor_execute", count)
    assert kind.error_type == "KeyError" and kind.count == 8
    assert len(kind.fixes) == 5  # the cap: the other three tasks' fixes are not looked at
    assert kind.fixes[0].approaches == ["check the key first"]
    # One read of its success patterns (not one per fixing attempt), one of its error patterns.
    assert len(reads) == 2
