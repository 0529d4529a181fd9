"""An agent's own history in its system prompt: ``Agent(context=["history"])``."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path

import pytest
from groundswell_history import (
    HistoryStore,
    build_agent_prompt,
    injection,
    set_task,
    task_signature,
)

import groundswell
from groundswell import Agent, ConfigurationError, ContextRequest, WorkflowContext, workflow
from groundswell.testing import FakeAnthropicAPI, text

DAY = 86_400.0


@pytest.fixture
def home(recording_store: HistoryStore) -> HistoryStore:
    return recording_store


def seed(store: HistoryStore, now: float) -> None:
    """Eight sessions of one agent, of known relevance to the "Fix login bug" task."""
    fix = task_signature("Fix login bug", "bugfix", ["auth/*.py"])
    other = task_signature("Write release notes", "docs")
    rows = [
        # (id, signature, title, category, days ago, status, output or error)
        ("s-exact-new", fix, "Fix login bug", "bugfix", 1, "completed", "patched auth/session.py"),
        ("s-exact-fail", fix, "Fix login bug", "bugfix", 2, "failed", "TimeoutError: db slow"),
        ("s-partial", None, "Fix signup bug", "bugfix", 0, "completed", "patched signup"),
        ("s-exact-old", fix, "Fix login bug", "bugfix", 40, "completed", "old patch"),
        ("s-other-new", other, "Write release notes", "docs", 0, "completed", "notes v1"),
        ("s-other-old", other, "Write release notes", "docs", 30, "completed", "notes v0"),
        ("s-none-old", None, None, None, 60, "failed", "ValueError: ancient"),
        ("s-leaky", other, "Write release notes", "docs", 90, "completed", "api_key=abcd1234efgh"),
    ]
    for sid, sig, title, category, days, status, result in rows:
        store.start_session(
            sid,
            "fixer",
            started_at=now - days * DAY,
            task_signature=sig,
            title=title,
            category=category,
            file_patterns=["auth/*.py"] if sig == fix else (),
            metadata={"user": f"work on {title or 'something'}"},
        )
        if status == "failed":
            store.end_session(sid, "failed", error=result, ended_at=now - days * DAY + 5)
        else:
            store.end_session(sid, "completed", output=result, ended_at=now - days * DAY + 5)
    store.start_session("someone-else", "intruder", started_at=now, title="Fix login bug")
    store.end_session("someone-else", "completed", output="INTRUDER OUTPUT")


def test_the_section_lists_the_top_five_sessions_best_first(home: HistoryStore) -> None:
    now = time.time()
    seed(home, now)
    home.learn_error("fixer", "TimeoutError when the db is slow", fix="retry with backoff")
    home.learn_success(
        "fixer",
        "Reproduce with a failing test first",
        task_signature=task_signature("Fix login bug", "bugfix", ["auth/*.py"]),
    )
    home.learn_success("fixer", "Unrelated approach for docs")
    home.remember("fixer", "style", "Prefer small commits", kind="preference", importance=0.9)
    home.remember("intruder", "x", "INTRUDER MEMORY")

    section = build_agent_prompt(
        "fixer", task_signature("Fix login bug", "bugfix", ["auth/*.py"]), store=home, now=now
    )
    lines = section.splitlines()
    assert lines[0] == "## Your history"
    session_lines = [line for line in lines if "(relevance" in line]
    assert len(session_lines) == 5  # the top-5 cut
    # exact, yesterday, completed 0.97; partial (same category), today 0.80; exact,
    # failed 0.75; exact, 40 days old 0.71; no match, today 0.50.
    assert "patched auth/session.py" in session_lines[0]
    assert "relevance 0.97" in session_lines[0]
    assert "patched signup" in session_lines[1]  # partial (same category), today
    assert "TimeoutError: db slow" in session_lines[2] and "failed:" in session_lines[2]
    assert "old patch" in session_lines[3]
    assert "notes v1" in session_lines[4]  # no signature match: recency and outcome
    assert "notes v0" not in section and "ancient" not in section  # below the cut
    errors = lines.index("Errors you have met before (avoid them):")
    assert "retry with backoff" in lines[errors + 1]
    works = lines.index("Approaches that worked:")
    assert "Reproduce with a failing test first" in lines[works + 1]  # this task's first
    assert "Prefer small commits" in section
    assert "INTRUDER" not in section


def test_no_task_ranks_by_recency_and_outcome_and_nothing_is_empty(home: HistoryStore) -> None:
    assert build_agent_prompt("nobody", store=home) == ""
    now = time.time()
    seed(home, now)
    section = build_agent_prompt("fixer", store=home, now=now)
    session_lines = [line for line in section.splitlines() if "(relevance" in line]
    scores = [line.rsplit("relevance ", 1)[1].rstrip(")") for line in session_lines]
    # Completed today, completed today, completed yesterday, failed two days ago,
    # completed 30 days ago; the 40-day-old exact match of before falls out.
    assert scores == ["0.50", "0.50", "0.47", "0.25", "0.21"]
    assert "old patch" not in section
    assert "patched signup" in section and "notes v1" in section  # today, completed


def test_secrets_are_filtered_from_the_section(home: HistoryStore) -> None:
    now = time.time()
    groundswell.register_secret("a-registered-secret-42")
    home.start_session("s1", "keeper", started_at=now, title="Deploy")
    # Written straight into the table: a value that escaped the store's filter
    # (say, from an older version) is still not repeated to the model.
    sessions = home._tables[2]
    with home.engine.begin() as conn:
        conn.execute(
            sessions.update()
            .where(sessions.c.id == "s1")
            .values(
                status="completed",
                output_summary="used password=hunter2hunter2 and sk-ant-api03-abcdefghijklmn",
            )
        )
    home.learn_error("keeper", "login failed with token a-registered-secret-42")
    home.learn_success(
        "keeper",
        "set DB_PASSWORD=hunter3hunter3 and OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuv, "
        "then connect to postgresql://admin:S3cretPass@db/app",
    )
    home.remember("keeper", "later", "the vault code is ZEBRA-ALPHA-42")
    # Registered after it was stored: still never repeated to the model.
    groundswell.register_secret("ZEBRA-ALPHA-42")
    section = build_agent_prompt("keeper", "Deploy", store=home, now=now)
    for leaked in ("hunter2", "hunter3", "sk-ant-api03", "sk-proj", "S3cretPass", "ZEBRA"):
        assert leaked not in section, leaked
    assert "a-registered-secret-42" not in section
    assert "password=**********" in section and "DB_PASSWORD=**********" in section


async def test_a_prompt_gets_its_history_in_the_system_prompt(home: HistoryStore) -> None:
    fake = FakeAnthropicAPI([text("patched again"), text("done")])
    agent = Agent(
        name="fixer",
        system="You fix bugs.",
        history=True,
        context=["history"],
        client=fake.client(),
    )
    now = time.time()
    seed(home, now)
    home.learn_error("fixer", "Forgot to run the migrations")

    @workflow
    async def fix(ctx: WorkflowContext) -> str:
        async def work() -> str:
            set_task("Fix login bug", category="bugfix", file_patterns=["auth/*.py"])
            return await agent.prompt("The login page fails again.")

        return await ctx.step("work", work)

    result = await fix.run()
    system = fake.requests[0].system
    assert system.startswith("You fix bugs.\n\n## Your history\n")
    # The step's task decides the ranking: the exact-task session comes first.
    first = next(line for line in system.splitlines() if "(relevance" in line)
    assert "patched auth/session.py" in first
    assert "Forgot to run the migrations" in system
    assert "INTRUDER" not in system
    (prompt,) = result.tree.find(type=groundswell.NodeType.PROMPT)
    assert prompt.payload["system"] == system
    (event,) = [e for e in prompt.events if e["type"] == "context"]
    assert event["provider"] == "history" and event["chars"] == len(system) - len(
        "You fix bugs.\n\n"
    )

    # The session just recorded is part of the next prompt's history, and a
    # running session never lists itself.
    assert groundswell.flush_sinks()
    await agent.prompt("And the logout page?")
    again = fake.requests[1].system
    assert "patched again" in again
    assert "logout" not in again


async def test_a_failing_provider_never_fails_the_prompt(home: HistoryStore) -> None:
    def broken(request: ContextRequest) -> str:
        raise RuntimeError("provider exploded")

    async def friendly(request: ContextRequest) -> str:
        return f"Hello {request.agent}; you were asked: {request.user}"

    fake = FakeAnthropicAPI([text("fine")])
    agent = Agent(name="sturdy", context=[broken, friendly], client=fake.client())
    result = await agent.run("status?")
    assert result.output == "fine"
    assert fake.requests[0].system == "Hello sturdy; you were asked: status?"
    events = {e["type"]: e for e in result.node.events}  # type: ignore[union-attr]
    assert events["context_error"]["provider"] == "broken"
    assert "provider exploded" in events["context_error"]["error"]


async def test_bad_context_settings_are_clear_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"context=\['history'\]"):
        Agent(name="a", context="history")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="provider names"):
        Agent(name="a", context=[42])
    # A misspelt provider is caught when the agent is made, not at its first prompt.
    with pytest.raises(ConfigurationError, match=r"no context provider named 'histroy'.*history"):
        Agent(name="a", context=["histroy"])


async def test_an_object_with_provide_and_a_stuck_provider(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Rules:
        def provide(self, request: ContextRequest) -> str:
            return "Rule: cite sources. Token sk-ant-api03-shouldnotleak is registered."

    async def stuck(request: ContextRequest) -> str:
        await asyncio.sleep(30)
        return "never"

    groundswell.register_secret("sk-ant-api03-shouldnotleak")
    monkeypatch.setattr("groundswell.prompt.context_providers.TIMEOUT_S", 0.2)
    fake = FakeAnthropicAPI([text("a"), text("b")])
    agent = Agent(name="ruled", context=[Rules(), stuck], client=fake.client())
    with caplog.at_level(logging.WARNING, logger="groundswell.context"):
        first = await agent.run("one")
        await agent.run("two")
    assert fake.requests[0].system == "Rule: cite sources. Token ********** is registered."
    errors = [e for e in first.node.events if e["type"] == "context_error"]  # type: ignore[union-attr]
    assert errors == [{**errors[0], "provider": "stuck", "error": "no answer within 0.2 s"}]
    # Logged once while it keeps failing, not once per prompt.
    assert len([r for r in caplog.records if "'stuck' failed" in r.getMessage()]) == 1


async def test_an_unreachable_store_costs_one_prompt_a_try_not_every_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(
        "GROUNDSWELL_HISTORY_URL", f"postgresql+psycopg://u:pw@127.0.0.1:{port}/history"
    )
    monkeypatch.setenv("GROUNDSWELL_HOME", str(tmp_path))
    manager = groundswell.get_plugin_manager()
    manager.refresh_sinks("history")
    try:
        fake = FakeAnthropicAPI([text("still answered"), text("again")])
        agent = Agent(name="offline", context=["history"], client=fake.client())
        first = await agent.run("one")
        second = await agent.run("two")
    finally:
        monkeypatch.delenv("GROUNDSWELL_HISTORY_URL")
        manager.refresh_sinks("history")
        injection._down_until.clear()
    assert (first.output, second.output) == ("still answered", "again")
    assert fake.requests[0].system is None  # no section, and no failure
    (error,) = [e for e in first.node.events if e["type"] == "context_error"]  # type: ignore[union-attr]
    assert "cannot be reached" in error["error"] and "pw" not in error["error"]
    (again,) = [e for e in second.node.events if e["type"] == "context_error"]  # type: ignore[union-attr]
    assert "failed recently; next try in" in again["error"]
