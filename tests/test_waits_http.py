"""Where people answer: the waits API over HTTP (a real uvicorn server in this process,
next to real workflows on the local engine), its tokens, the Python client and the
wait's agent. The commands and ``groundswell serve`` are in test_waits_cli.py."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from groundswell_history import serving
from groundswell_history.auth import issue_operator_token, issue_token
from pydantic import BaseModel

import groundswell
from groundswell import (
    InvalidAnswer,
    UnknownWait,
    WaitClosed,
    WorkflowContext,
    workflow,
)
from groundswell.waits import Wait
from groundswell.waits.client import (
    HTTPWaits,
    WaitsServerError,
)
from groundswell.waits.core import open_wait

from .conftest import RecordingSink
from .test_history_api import SECRET

CLI = (sys.executable, "-m", "groundswell.cli")
OPERATOR = issue_operator_token("ada", SECRET)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ADA = bearer(OPERATOR)
ALICE = bearer(issue_token("alice", SECRET))
BOB = bearer(issue_token("bob", SECRET))


class Release(BaseModel):
    version: str
    notes: str


@workflow(name="release")
async def release(ctx: WorkflowContext, service: str) -> str:
    plan = await ctx.ask(f"Which version of {service}?", Release)
    return f"released {service} {plan.version}: {plan.notes}"


@workflow(name="tool-gate")
async def gated(ctx: WorkflowContext, agent: str, tool: str) -> dict[str, Any]:
    """An agent's tool call waiting for approval, opened the way the approval middleware does."""
    decision = await open_wait(
        "approval",
        {"agent": agent, "tool": tool, "input": {"path": f"{agent}.txt"}},
        tree=ctx.event_tree,
        parent=ctx.node,
        name="approval",
        workflow=ctx,
    )
    return {"kind": decision.kind, "input": decision.input, "reason": decision.reason}


# Every test here ends with no wait of its own left open (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_wait_left_open")


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with serving(port=0, secret=SECRET) as running:
        yield running.url


@pytest.fixture
async def http(server: str) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(base_url=server, timeout=10) as client:
        yield client


async def open_waits(count: int, **match: str) -> list[Wait]:
    """The open waits (matching ``match`` on their fields), once there are ``count``."""
    deadline = time.monotonic() + 10
    while True:
        found = [
            w
            for w in groundswell.waits.pending()
            if all((w.agent if k == "agent" else getattr(w, k)) == v for k, v in match.items())
        ]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{count} waits did not open: {found}"
        await asyncio.sleep(0.005)


async def test_a_question_is_listed_and_answered_over_http_and_the_run_gets_the_answer(
    http: httpx2.AsyncClient, recording_sink: RecordingSink
) -> None:
    run = asyncio.create_task(release.run("billing"))
    (wait,) = await open_waits(1, kind="question")

    listed = await http.get("/api/waits", headers=ADA)
    assert listed.status_code == 200, listed.text
    assert listed.json()["count"] == 1
    (shown,) = listed.json()["waits"]
    assert shown == wait.to_dict()
    assert shown["request"]["question"] == "Which version of billing?"
    assert shown["agent"] is None and shown["request"]["schema"]["required"] == ["version", "notes"]

    # An answer that does not fit: 422 naming what is wrong, and the wait stays open.
    bad = await http.post(
        f"/api/waits/{wait.id}/answer", json={"value": {"version": "2"}}, headers=ADA
    )
    assert bad.status_code == 422
    assert "notes: Field required" in bad.json()["message"]
    assert bad.json()["detail"][0]["loc"] == ["notes"]
    assert [w.id for w in groundswell.waits.pending()] == [wait.id]

    good = await http.post(
        f"/api/waits/{wait.id}/answer",
        json={"value": {"version": "2.1", "notes": "faster"}, "by": "grace"},
        headers=ADA,
    )
    assert good.status_code == 200, good.text
    assert good.json()["decision"] | {"at": None} == {
        "kind": "answer",
        "input": None,
        "reason": None,
        "value": {"version": "2.1", "notes": "faster"},
        "by": "operator:ada for grace",
        "at": None,
    }
    assert good.json()["wait"]["id"] == wait.id
    result = await run
    assert result.output == "released billing 2.1: faster"
    node = result.tree.find(type="wait")[0]
    assert node.payload["answered_by"] == "operator:ada for grace"
    assert node.payload["decision"] == "answer"
    # The request for a decision reached the sinks, and so did the answer.
    opened = [
        e
        for e in recording_sink.events
        if e.kind == "node_event" and e.data["event"]["type"] == "wait_opened"
    ]
    assert [e.data["event"]["wait_id"] for e in opened] == [wait.id]
    ended = [e for e in recording_sink.events if e.kind == "node_end" and e.node.id == node.id]
    assert ended and ended[0].node.payload["answered_by"] == "operator:ada for grace"


async def test_agent_tokens_see_and_decide_only_their_agents_waits(
    http: httpx2.AsyncClient,
) -> None:
    runs = [
        asyncio.create_task(gated.run("alice", "delete_file")),
        asyncio.create_task(gated.run("bob", "send_mail")),
        asyncio.create_task(release.run("billing")),
    ]
    await open_waits(3)
    (alices,) = await open_waits(1, agent="alice")
    (bobs,) = await open_waits(1, agent="bob")
    (question,) = await open_waits(1, kind="question")

    async def ids(headers: dict[str, str], **params: str) -> list[str]:
        answer = await http.get("/api/waits", headers=headers, params=params)
        assert answer.status_code == 200, answer.text
        return [w["id"] for w in answer.json()["waits"]]

    assert await ids(ALICE) == [alices.id]
    assert await ids(BOB) == [bobs.id]
    assert await ids(ALICE, agent="alice") == [alices.id]
    assert sorted(await ids(ADA)) == sorted([alices.id, bobs.id, question.id])
    assert await ids(ADA, agent="bob") == [bobs.id]
    assert await ids(ADA, kind="question") == [question.id]
    assert await ids(ADA, kind="approval", agent="alice") == [alices.id]
    listed = await http.get("/api/waits", headers=ALICE)
    assert "bob" not in listed.text and "send_mail" not in listed.text

    # Naming another agent is a 403; deciding another agent's wait, or a wait no agent
    # opened, is a 404 as if it did not exist, and it stays open.
    other = await http.get("/api/waits", params={"agent": "bob"}, headers=ALICE)
    assert other.status_code == 403 and "agent 'alice'" in other.json()["message"]
    for target in (bobs, question):
        refused = await http.post(f"/api/waits/{target.id}/approve", headers=ALICE)
        assert refused.status_code == 404, refused.text
        assert "among agent 'alice''s waits" in refused.json()["message"]
        assert "send_mail" not in refused.text
    assert len(groundswell.waits.pending()) == 3

    # An agent's token decides its own agent's wait, recorded under the token's name.
    ok = await http.post(
        f"/api/waits/{alices.id}/approve", json={"input": {"path": "x"}}, headers=ALICE
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["decision"]["by"] == "agent:alice" and ok.json()["wait"]["agent"] == "alice"
    rejected = await http.post(
        f"/api/waits/{bobs.id}/reject", json={"reason": "not today"}, headers=ADA
    )
    assert rejected.json()["decision"] | {"at": 0} == {
        "kind": "reject",
        "input": None,
        "reason": "not today",
        "value": None,
        "by": "operator:ada",
        "at": 0,
    }
    answered = await http.post(
        f"/api/waits/{question.id}/answer",
        json={"value": '{"version": "3", "notes": "n"}'},  # JSON text, as a form sends it
        headers=ADA,
    )
    assert answered.status_code == 200, answered.text
    outputs = [(await r).output for r in runs]
    assert outputs == [
        {"kind": "approve", "input": {"path": "x"}, "reason": None},
        {"kind": "reject", "input": None, "reason": "not today"},
        "released billing 3: n",
    ]


async def test_the_token_names_who_decided_and_by_only_says_for_whom(
    http: httpx2.AsyncClient,
) -> None:
    """A body's ``by`` cannot pass a decision off as someone else's, and an agent named
    like an operator is still an agent: its token sees no operator's waits."""
    impostor = bearer(issue_token("operator:ada", SECRET))
    runs = [
        asyncio.create_task(gated.run("alice", "delete_file")),
        asyncio.create_task(gated.run("operator:ada", "drop_table")),
        asyncio.create_task(release.run("billing")),
    ]
    await open_waits(3)
    (alices,) = await open_waits(1, agent="alice")
    (its_own,) = await open_waits(1, agent="operator:ada")
    (question,) = await open_waits(1, kind="question")

    seen = await http.get("/api/waits", headers=impostor)
    assert [w["id"] for w in seen.json()["waits"]] == [its_own.id]
    refused = await http.post(
        f"/api/waits/{question.id}/answer", json={"value": "x"}, headers=impostor
    )
    assert refused.status_code == 404

    spoofed = await http.post(
        f"/api/waits/{alices.id}/approve", json={"by": "operator:root"}, headers=ALICE
    )
    assert spoofed.json()["decision"]["by"] == "agent:alice for operator:root"
    own = await http.post(f"/api/waits/{its_own.id}/approve", headers=impostor)
    assert own.json()["decision"]["by"] == "agent:operator:ada"
    await http.post(
        f"/api/waits/{question.id}/answer",
        json={"value": {"version": "1", "notes": "n"}},
        headers=ADA,
    )
    results = [await r for r in runs]
    answered_by = [r.tree.find(type="wait")[0].payload["answered_by"] for r in results]
    assert answered_by == ["agent:alice for operator:root", "agent:operator:ada", "operator:ada"]


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_missing_or_wrong_token_is_refused(http: httpx2.AsyncClient, method: str) -> None:
    run = asyncio.create_task(gated.run("alice", "delete_file"))
    (wait,) = await open_waits(1, agent="alice")
    path = "/api/waits" if method == "GET" else f"/api/waits/{wait.id}/approve"
    refusals = [
        ({}, "missing bearer token"),
        ({"Authorization": "Basic YWxhZGRpbjpvcGVu"}, "Bearer scheme"),
        (bearer("not-a-token"), "invalid token"),
        (bearer(issue_token("alice", b"another-servers-secret-key")), "invalid token"),
        (bearer(issue_operator_token("ada", b"another-servers-secret-key")), "invalid token"),
    ]
    for headers, says in refusals:
        answer = await http.request(method, path, headers=headers)
        assert answer.status_code == 401, (headers, answer.text)
        assert says in answer.json()["message"]
        assert answer.headers["www-authenticate"] == "Bearer"
        assert "delete_file" not in answer.text
    # Refused without a word about the wait, which is still open.
    assert [w.id for w in groundswell.waits.pending()] == [wait.id]
    groundswell.waits.approve(wait.id)
    await run


async def test_unknown_closed_and_unfitting_decisions(http: httpx2.AsyncClient) -> None:
    runs = [
        asyncio.create_task(gated.run("alice", "delete_file")),
        asyncio.create_task(release.run("billing")),
    ]
    (approval,) = await open_waits(1, kind="approval")
    (question,) = await open_waits(1, kind="question")

    unknown = await http.post("/api/waits/0123456789ab/approve", headers=ADA)
    assert unknown.status_code == 404 and "no open wait '0123456789ab'" in unknown.json()["message"]

    async def post(path: str, body: Any = None, headers: dict[str, str] = ADA) -> httpx2.Response:
        return await http.post(path, json=body, headers=headers)

    # The wrong verb for the kind, a missing reason, an unknown field, a non-object input.
    wrong = await post(f"/api/waits/{question.id}/approve")
    assert wrong.status_code == 422 and "decide it with" in wrong.json()["message"]
    wrong = await post(f"/api/waits/{approval.id}/answer", {"value": "yes"})
    assert wrong.status_code == 422 and "decide it with" in wrong.json()["message"]
    for body in ({}, {"reason": ""}):
        missing = await post(f"/api/waits/{approval.id}/reject", body)
        assert missing.status_code == 422 and "reason" in missing.json()["message"]
    extra = await post(f"/api/waits/{approval.id}/approve", {"inputs": {}})
    assert extra.status_code == 422 and "inputs" in extra.json()["message"]
    not_object = await post(f"/api/waits/{approval.id}/approve", {"input": [1]})
    assert not_object.status_code == 422
    unknown_parameter = await http.get("/api/waits", params={"knd": "question"}, headers=ADA)
    assert (
        unknown_parameter.status_code == 422
        and "knd: unknown parameter" in (unknown_parameter.json()["message"])
    )
    assert len(groundswell.waits.pending()) == 2

    # Decided once, then again: 409 saying how it closed (to its own agent's token too).
    listed = await http.get("/api/waits", headers=ALICE)
    assert [w["id"] for w in listed.json()["waits"]] == [approval.id]
    assert (await post(f"/api/waits/{approval.id}/approve", headers=ALICE)).status_code == 200
    again = await post(f"/api/waits/{approval.id}/reject", {"reason": "late"}, headers=ALICE)
    assert again.status_code == 409, again.text
    assert again.json()["closed"] == "approved by agent:alice"
    # ...but never to another agent's token, which cannot tell it was ever there.
    other = await post(f"/api/waits/{approval.id}/approve", headers=BOB)
    assert other.status_code == 404 and "approved" not in other.text
    await post(f"/api/waits/{question.id}/answer", {"value": {"version": "1", "notes": "n"}})
    closed = await post(
        f"/api/waits/{question.id}/answer", {"value": {"version": "2", "notes": "n"}}
    )
    assert closed.status_code == 409 and closed.json()["closed"] == "answered by operator:ada"
    await asyncio.gather(*runs)


async def test_the_python_client_mirrors_groundswell_waits(server: str) -> None:
    run = asyncio.create_task(release.run("docs"))
    (wait,) = await open_waits(1)
    with HTTPWaits(server, OPERATOR) as client:
        (listed,) = await asyncio.to_thread(client.pending)
        assert listed == wait
        with pytest.raises(InvalidAnswer) as bad:
            await asyncio.to_thread(client.answer, wait.id, {"version": "1"})
        assert bad.value.errors[0]["loc"] == ["notes"] and bad.value.wait_id == wait.id
        with pytest.raises(UnknownWait, match="no open wait 'feedfacecafe'"):
            await asyncio.to_thread(client.approve, "feedfacecafe")
        answered = await asyncio.to_thread(
            lambda: client.answer(wait.id, {"version": "4", "notes": "n"}, by="lin")
        )
        assert answered.wait == wait and answered.decision.by == "operator:ada for lin"
        with pytest.raises(WaitClosed) as closed:
            await asyncio.to_thread(client.answer, wait.id, "again")
        assert closed.value.closed == "answered by operator:ada for lin"
    assert (await run).output == "released docs 4: n"

    with HTTPWaits(server) as anonymous, pytest.raises(WaitsServerError) as refused:
        anonymous.pending()
    assert refused.value.status == 401 and "GROUNDSWELL_TOKEN" in str(refused.value)


def test_wait_agent_comes_from_its_request() -> None:
    wait = Wait("abc", "approval", "r", "n", {"agent": "alice", "tool": "t"}, 1.0)
    assert wait.agent == "alice" and wait.to_dict()["agent"] == "alice"
    assert Wait("abc", "question", "r", "n", {"question": "q?"}, 1.0).agent is None
    assert Wait("abc", "question", "r", "n", {"agent": 3}, 1.0).agent is None
