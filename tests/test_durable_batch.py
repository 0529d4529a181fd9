"""Batched prompts in durable runs: the batch's ticket is checkpointed, not sent again.

Two ``batch=True`` prompts wait at the same time and go in one batch; the
run's process is killed (SIGKILL) while the batch is pending, after both
tickets committed; a new process recovers the run, waits for the recorded
batch, and the run ends with both answers, the fake having seen one batch
created in all. Real processes, the real PostgreSQL and one fake Anthropic
API on a loopback port that keeps each batch in progress until the test ends
it.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from groundswell import EventTree
from groundswell.testing import FakeAnthropicAPI, LoopbackServer

from .test_durable import RECOVER, Project, database  # noqa: F401 - the fixture, used by name
from .test_durable_tools_once import recorded, until

pytestmark = pytest.mark.slow

FLOWS = """
import asyncio
import os

import anthropic

import groundswell_dbos
from groundswell import Agent, WorkflowContext, workflow

groundswell_dbos.configure(system_database_url=os.environ["DBOS_SYSTEM_DATABASE_URL"])

geo = Agent(
    name="geo",
    system="Answer with the city only.",
    batch=True,
    extra_headers={"x-tenant-token": "tenant-secret"},
    client=anthropic.AsyncAnthropic(
        api_key="test-key", base_url=os.environ["FAKE_URL"], max_retries=0
    ),
)


async def both() -> list[str]:
    return list(await asyncio.gather(
        geo.prompt("Capital of France?"), geo.prompt("Capital of Italy?")
    ))


@workflow(name="capitals", durable=True)
async def capitals(ctx: WorkflowContext, where: str) -> list[str]:
    if where == "steps":  # two steps at once, a prompt in each
        return list(await asyncio.gather(
            ctx.step("france", lambda: geo.prompt("Capital of France?")),
            ctx.step("italy", lambda: geo.prompt("Capital of Italy?")),
        ))
    return await ctx.step("both", both)  # two prompts at once inside one step
"""

# Runs (or joins) the run with this id and prints its output.
RUN = """
import asyncio, json, sys
import flows

async def main():
    result = await flows.capitals.run_with_id(sys.argv[1], sys.argv[2])
    print(json.dumps({"output": result.output}))

asyncio.run(main())
"""


def capital(request: Any) -> str:
    return "Paris" if "France" in request.last_user_text() else "Rome"


@pytest.fixture
def fake() -> Iterator[tuple[FakeAnthropicAPI, LoopbackServer]]:
    # A batch stays in progress (for more retrieves than a test makes) until the test
    # ends it; each retrieve is counted in its `polls`.
    api = FakeAnthropicAPI(capital, batch_polls=1_000_000)
    with api.serve() as server:
        yield api, server


@pytest.fixture
def project(
    tmp_path: Path,
    database: str,  # noqa: F811 - the fixture imported above
    fake: tuple[FakeAnthropicAPI, LoopbackServer],
) -> Iterator[Project]:
    made = Project.make(
        tmp_path,
        FLOWS,
        database,
        fake[1].base_url,
        GS_TEST_LOG=str(tmp_path / "unused.log"),
        # No grace: Project.kill returns once the killed process's liveness lock is
        # gone, and no live process here ever loses its lock.
        GROUNDSWELL_DBOS_TAKEOVER_GRACE_S="0",
        GROUNDSWELL_BATCH_FIRST_POLL="0.05",
        GROUNDSWELL_BATCH_MAX_POLL="0.2",
    )
    yield made
    fake[0].batches.end()  # lets a process still waiting go
    made.stop(kill=True)


def tickets(url: str, run_id: str) -> int:
    """How many batch tickets the run ``run_id`` has checkpointed (committed rows)."""
    return recorded(url, run_id, "batch geo %")


@pytest.mark.parametrize("where", ["steps", "one step"])
def test_a_run_killed_while_its_batch_is_pending_waits_for_that_batch_after_recovery(
    project: Project, fake: tuple[FakeAnthropicAPI, LoopbackServer], where: str
) -> None:
    api = fake[0]
    url = project.env["DBOS_SYSTEM_DATABASE_URL"]
    run_id = f"capitals-{where.replace(' ', '-')}"
    proc = project.start("-c", RUN, run_id, where)
    until(lambda: tickets(url, run_id) == 2, "both tickets checkpointed")
    (batch,) = api.batches
    until(lambda: batch.polls > 0, "the first process polling the batch")
    project.kill(proc)  # while the batch is still in progress
    assert batch.processing_status == "in_progress"
    polled = batch.polls

    recovering = project.start("-c", RECOVER)
    # The new process waits for the recorded batch: it polls it, sending nothing new.
    until(lambda: batch.polls > polled, "the recovering process polling the batch")
    api.batches.end()
    out, err = recovering.communicate(timeout=120)
    assert recovering.returncode == 0, err[-4000:]
    (recovered,) = json.loads(out.strip().splitlines()[-1])

    assert recovered["status"] == "completed"
    assert recovered["output"] == ["Paris", "Rome"]
    # One batch created in all, with both requests: the recovery sent nothing again.
    assert len(api.batches) == 1
    assert sorted(r.last_user_text() for r in batch.requests) == [
        "Capital of France?",
        "Capital of Italy?",
    ]
    assert all(r.headers.get("x-tenant-token") == "tenant-secret" for r in batch.requests)
    tree = EventTree.from_json(recovered["tree"])
    calls = tree.find(type="model_call")
    assert len(calls) == 2
    for call in calls:
        assert call.status.value == "completed"
        assert call.payload["batch"]["id"] == batch.id
        assert call.payload["batch"]["custom_id"] in batch.custom_ids
        assert call.metrics.get("recovered")  # the ticket came from the checkpoint
    # The checkpoints hold the batch id, the custom id and the namespace: never the
    # headers, which may hold secrets (the recovery made them from the request again).
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT output FROM dbos.operation_outputs "
            "WHERE workflow_uuid = %s AND function_name LIKE 'batch geo %%'",
            (run_id,),
        ).fetchall()
    raw = [base64.b64decode(row[0]) for row in rows]
    assert len(raw) == 2 and not any(b"tenant-secret" in r for r in raw)
    recorded = [pickle.loads(r)["output"] for r in raw]
    assert sorted(t["custom_id"] for t in recorded) == sorted(batch.custom_ids)
    assert all(
        t == {"batch_id": batch.id, "custom_id": t["custom_id"], "beta": False} for t in recorded
    )
    # Running it again under its id returns the recorded run: no batch sent.
    again = project.run("-c", RUN, run_id, where)
    assert again["output"] == ["Paris", "Rome"] and len(api.batches) == 1
