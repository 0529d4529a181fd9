"""Waits for people in durable runs, across processes, on the real PostgreSQL.

A script starts a run and leaves once it waits; another process decides the
wait, through ``groundswell.waits`` or the ``groundswell`` commands, without
the run's code; a ``groundswell worker`` resumes the run. The processes share
one fresh database and one fake Anthropic API on a loopback port, and the
refund tool writes a line per call to a log, which shows how often and where
it really ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groundswell import Agent, EventTree, Tool
from groundswell.testing import (
    FakeAnthropicAPI,
    FunctionModel,
    LoopbackServer,
    MessagesRequest,
    tool_use,
)
from groundswell.testing import text as reply_text

from .test_durable import Project, database  # noqa: F401 - the fixture, used by name

pytestmark = pytest.mark.slow

FLOWS = """
import json
import os
from pathlib import Path

import anthropic
from pydantic import BaseModel

import groundswell
import groundswell_dbos
from groundswell import Agent, Tool, ToolContext, WorkflowContext, workflow

groundswell_dbos.configure(system_database_url=os.environ["DBOS_SYSTEM_DATABASE_URL"])
LOG = Path(os.environ["GS_TEST_LOG"])


def refund(order: str, amount: int, ctx: ToolContext) -> str:
    \"\"\"Refund an order.

    Args:
        order: The order number.
        amount: Euros to refund.
    \"\"\"
    line = {"order": order, "amount": amount, "key": ctx.idempotency_key, "pid": os.getpid()}
    with LOG.open("a") as f:
        f.write(json.dumps(line) + "\\n")
    return f"refunded {amount} EUR on {order}"


support = Agent(
    name="support",
    tools=[Tool(refund, requires_approval=True)],
    client=anthropic.AsyncAnthropic(
        api_key="test-key", base_url=os.environ["FAKE_URL"], max_retries=0
    ),
)


@workflow(name="refunds", durable=True)
async def refunds(ctx: WorkflowContext, order: str, amount: int) -> str:
    return await ctx.step("refund", lambda: support.prompt(f"Refund {amount} EUR on {order}"))


class Release(BaseModel):
    version: str
    notes: str


@workflow(name="release", durable=True)
async def release(ctx: WorkflowContext, service: str) -> str:
    plan = await ctx.step("plan", lambda: ctx.ask(f"Which version of {service}?", Release))
    return f"released {service} {plan.version}: {plan.notes}"


asker = Agent(
    name="asker",
    tools=[groundswell.ask_user],
    client=anthropic.AsyncAnthropic(
        api_key="test-key", base_url=os.environ["FAKE_URL"], max_retries=0
    ),
)


@workflow(name="regions", durable=True)
async def regions(ctx: WorkflowContext) -> str:
    return await ctx.step("ask", lambda: asker.prompt("Ask which region to deploy to"))


@workflow(name="nightly", durable=True)
async def nightly(ctx: WorkflowContext) -> int:
    return await ctx.ask("Batch size for tonight?", int, timeout=3, default=100)
"""

# Starts a run, prints its open waits once it waits, and leaves.
START = """
import asyncio, json, sys
import flows, groundswell_dbos

async def main():
    wf = getattr(flows, sys.argv[1])
    run = await groundswell_dbos.start(wf, *json.loads(sys.argv[2]), workflow_id=sys.argv[3])
    waits = await run.waiting(timeout=60)
    print(json.dumps([w.to_dict() for w in waits]))

asyncio.run(main())
"""

# Decides a wait from a process that has no workflow code: only the database's URL.
DECIDE = """
import asyncio, json, os, sys
import groundswell, groundswell_dbos

groundswell_dbos.configure(system_database_url=os.environ["DBOS_SYSTEM_DATABASE_URL"])

async def main():
    verb, wait_id, given = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    try:
        if verb == "approve":
            answered = await groundswell.waits.approve(wait_id, input=given, by="ada")
        elif verb == "reject":
            answered = await groundswell.waits.reject(wait_id, given, by="ada")
        else:
            answered = await groundswell.waits.answer(wait_id, given, by="ada")
    except groundswell.GroundswellError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return
    print(json.dumps({"decision": answered.decision.kind, "wait": answered.wait.to_dict()}))

asyncio.run(main())
"""

# DECIDE, ready before the wait opens: imported and configured, it reads the decision
# ("verb wait_id value") from its stdin and makes it at once. A decision that must land
# within a deadline does not wait for a process to start.
DECIDE_READY = DECIDE.replace(
    "verb, wait_id, given = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])",
    "verb, wait_id, given = sys.stdin.readline().split(maxsplit=2)\n    given = json.loads(given)",
).replace("asyncio.run(main())", "print('ready', flush=True)\nasyncio.run(main())")

# Waits for the run with this id (wherever it runs) and prints its result.
RESULT = """
import asyncio, json, sys
import flows
from groundswell import WorkflowError

async def main():
    wf = getattr(flows, sys.argv[1])
    try:
        result = await wf.run_with_id(sys.argv[3], *json.loads(sys.argv[2]))
    except WorkflowError as exc:
        result = exc.result
    print(json.dumps({"status": result.status.value, "output": result.output,
                      "tree": result.tree.to_json()}))

asyncio.run(main())
"""


def refund_model(request: MessagesRequest) -> Any:
    """The model: calls refund as the prompt says, then reports what the tool answered."""
    results = request.latest_tool_results()
    if request.last_user_text().startswith("Ask which region"):  # the asker agent
        if not results:
            return tool_use("ask_user", {"question": "Which region?", "choices": ["eu", "us"]})
        return reply_text(f"deploying to {results[0]['content']}")
    if not results:
        words = request.last_user_text().split()  # "Refund 30 EUR on A-1"
        return tool_use("refund", {"order": words[-1], "amount": int(words[1])})
    result = results[0]
    outcome = "error" if result.get("is_error") else "ok"
    return reply_text(f"{outcome}: {result['content']}")


@pytest.fixture
def fake() -> Iterator[tuple[FakeAnthropicAPI, LoopbackServer]]:
    api = FakeAnthropicAPI(FunctionModel(refund_model))
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
        GS_TEST_LOG=str(tmp_path / "refunds.log"),
        GROUNDSWELL_DBOS_POLL_S="0.1",
        # No grace: a worker takes over the run of a process that left at once; no live
        # process here ever loses its liveness lock.
        GROUNDSWELL_DBOS_TAKEOVER_GRACE_S="0",
    )
    yield made
    made.stop(kill=True)  # the processes are done with; a graceful stop only takes longer


def start_and_leave(project: Project, flow: str, args: list[Any], run_id: str) -> list[Any]:
    """Start a run in a process that leaves once the run waits; its waits as it saw them."""
    began = time.monotonic()
    waits = project.run("-c", START, flow, json.dumps(args), run_id, timeout=90)
    assert time.monotonic() - began < 60  # it left while the run waits
    return list(waits)


def join(project: Project, flow: str, args: list[Any], run_id: str) -> subprocess.Popen[str]:
    """A process that waits for the run ``run_id`` and prints its result (`output`).

    The run exists already, so the process only joins it, wherever it runs; it starts
    up while the test goes on.
    """
    return project.start("-c", RESULT, flow, json.dumps(args), run_id)


def listening(worker: subprocess.Popen[str]) -> None:
    """Return once ``worker`` (started with ``wait=False``) listens."""
    assert worker.stdout is not None
    line = worker.stdout.readline()  # printed once the worker listens
    assert line.startswith("worker "), line + (worker.stderr.read() if worker.stderr else "")


def output(proc: subprocess.Popen[str]) -> Any:
    """The JSON ``proc`` printed last, once it ended well."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def cli(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    url = project.env["DBOS_SYSTEM_DATABASE_URL"]
    return subprocess.run(
        [sys.executable, "-m", "groundswell.cli", *args, "--url", url],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def refunds_logged(project: Project) -> list[dict[str, Any]]:
    return [json.loads(line) for line in project.lines()]


async def without_approval(order: str, amount: int) -> str:
    """What the same agent answers when its tool needs no approval (a local run)."""

    def refund(order: str, amount: int) -> str:
        """Refund an order.

        Args:
            order: The order number.
            amount: Euros to refund.
        """
        return f"refunded {amount} EUR on {order}"

    plain = FakeAnthropicAPI(FunctionModel(refund_model))
    agent = Agent(name="support", tools=[Tool(refund)], client=plain.client())
    return str(await agent.prompt(f"Refund {amount} EUR on {order}"))


@pytest.mark.parametrize("how", ["approve", "reject", "edit"])
async def test_a_tool_call_decided_in_another_process_runs_once_where_a_worker_resumes_it(
    project: Project, how: str
) -> None:
    worker = project.worker("refunds", wait=False)  # starts up while the run starts
    (wait,) = start_and_leave(project, "refunds", ["A-1", 30], f"refund-{how}")
    listening(worker)
    assert wait["kind"] == "approval" and wait["run_id"] == f"refund-{how}"
    assert wait["request"]["tool"] == "refund"
    assert wait["request"]["input"] == {"order": "A-1", "amount": 30}
    assert refunds_logged(project) == []  # nothing ran while it waited
    joined = join(project, "refunds", ["A-1", 30], f"refund-{how}")

    if how == "approve":  # the Python API, in a process without the workflow's code
        decided = project.run("-c", DECIDE, "approve", wait["id"], "null")
        assert decided["decision"] == "approve" and decided["wait"]["id"] == wait["id"]
    elif how == "reject":  # the command line, reaching the runs through the database
        listed = cli(project, "pending", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [w["id"] for w in json.loads(listed.stdout)] == [wait["id"]]
        out = cli(project, "reject", wait["id"], "--reason", "refunded last week", "--by", "ada")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"rejected wait {wait['id']}")
    else:
        edit = json.dumps({"order": "A-1", "amount": 10})
        out = cli(project, "approve", wait["id"], "--input", edit, "--by", "ada")
        assert out.returncode == 0, out.stderr

    result = output(joined)

    assert result["status"] == "completed"
    ran = refunds_logged(project)
    if how == "reject":
        assert ran == []
        assert result["output"] == (
            "error: Tool call not run: the person reviewing tool calls rejected this call of "
            "'refund'. Their reason: refunded last week"
        )
    else:
        amount = 30 if how == "approve" else 10
        # Once, on the worker; the same answer a run without the wait gives.
        assert [(r["amount"], r["pid"]) for r in ran] == [(amount, worker.pid)]
        assert result["output"] == await without_approval("A-1", amount)
    tree = EventTree.from_json(result["tree"])
    (call,) = tree.find(type="tool_call")
    (node,) = tree.get_children(call.id)
    assert node.type.value == "wait" and node.payload["wait_id"] == wait["id"]
    assert node.payload["answered_by"] == "ada"
    assert node.payload["decision"] == ("reject" if how == "reject" else "approve")
    if how == "edit":
        assert call.payload["approved_input"] == {"order": "A-1", "amount": 10}
    # Decided once: a second decision is refused, naming how it closed.
    second = project.start("-c", DECIDE, "approve", wait["id"], "null")
    assert cli(project, "pending", "--json").stdout.strip() == "[]"
    again = output(second)
    assert again["error"] == "WaitClosed"
    assert "closed already" in again["message"]


def test_a_question_is_answered_from_another_process_with_a_typed_answer(
    project: Project,
) -> None:
    worker = project.worker("release", wait=False)  # starts up while the run starts
    (wait,) = start_and_leave(project, "release", ["billing"], "release-billing")
    listening(worker)
    joined = join(project, "release", ["billing"], "release-billing")
    assert wait["kind"] == "question"
    assert wait["request"]["question"] == "Which version of billing?"
    assert wait["request"]["schema"]["required"] == ["version", "notes"]

    # An answer that does not fit is refused to whoever gave it; the question stays open.
    refused = project.run("-c", DECIDE, "answer", wait["id"], json.dumps({"version": "2.1"}))
    assert refused["error"] == "InvalidAnswer"
    assert "'notes' is a required property" in refused["message"]
    answer = json.dumps('{"version": "2.1", "notes": "faster invoices"}')  # JSON text, as a form
    assert project.run("-c", DECIDE, "answer", wait["id"], answer)["decision"] == "answer"

    result = output(joined)

    assert result["output"] == "released billing 2.1: faster invoices"
    tree = EventTree.from_json(result["tree"])
    (node,) = tree.find(type="wait")
    assert node.payload["answer"] == {"version": "2.1", "notes": "faster invoices"}
    assert tree.path(node.id) == "release/plan/question"


def test_the_ask_user_tool_is_answered_from_another_process_with_the_cli(
    project: Project,
) -> None:
    worker = project.worker("regions", wait=False)  # starts up while the run starts
    (wait,) = start_and_leave(project, "regions", [], "regions-1")
    listening(worker)
    joined = join(project, "regions", [], "regions-1")
    assert wait["kind"] == "question" and wait["agent"] == "asker"
    assert wait["request"]["question"] == "Which region?"

    out = cli(project, "answer", wait["id"], "--text", "eu", "--by", "ada")
    assert out.returncode == 0, out.stderr

    result = output(joined)
    assert result["output"] == "deploying to eu"
    tree = EventTree.from_json(result["tree"])
    (node,) = tree.find(type="wait")
    assert node.payload["answer"] == "eu"
    assert tree.path(node.id) == "regions/ask/asker/ask_user/question"


@pytest.mark.parametrize("answered", [False, True])
def test_a_deadline_that_passed_while_no_process_ran_the_run_keeps_its_outcome(
    project: Project, answered: bool
) -> None:
    decider = None
    if answered:
        decider = subprocess.Popen(
            [sys.executable, "-c", DECIDE_READY],
            cwd=project.root,
            env=project.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        project.procs.append(decider)
    if decider is not None:  # started first: the answer must land within 3 s of the wait
        assert decider.stdout is not None and decider.stdout.readline() == "ready\n"
    (wait,) = start_and_leave(project, "nightly", [], f"nightly-{answered}")
    deadline = wait["deadline"]
    assert deadline == pytest.approx(wait["opened_at"] + 3)
    if decider is not None:  # in time, while no process runs the run
        out, err = decider.communicate(f"answer {wait['id']} 7\n", timeout=60)
        assert json.loads(out.strip().splitlines()[-1])["decision"] == "answer", err[-2000:]
    time.sleep(max(0.0, deadline - time.time()) + 0.5)
    resumed = time.time()
    joined = join(project, "nightly", [], f"nightly-{answered}")
    project.worker("nightly")  # resumes the run after its deadline

    result = output(joined)

    tree = EventTree.from_json(result["tree"])
    (node,) = tree.find(type="wait")
    assert node.payload["deadline"] == deadline  # recorded when it opened, not reset
    if answered:
        assert result["output"] == 7
        assert node.payload["answered_by"] == "ada" and "timed_out" not in node.payload
    else:
        # The declared outcome, at once: the deadline did not start again on the restart.
        assert result["output"] == 100
        assert node.payload["timed_out"] is True
        # The resumed run opened the wait again after the deadline and took the outcome
        # at once: the timeout did not start again.
        assert resumed < node.timestamp <= node.payload["answered_at"] < node.timestamp + 1
