"""Tool calls in durable runs: checkpointed when the tool returns, not run again on recovery.

A run's process is killed with SIGKILL right after a tool's checkpoint
committed, at every kind of point a run of ten tool calls has, and recovered by
a new process each time: every tool with a side effect ran once in all. A tool
with ``checkpoint=False`` runs again on recovery, with the same idempotency key.
Real processes, the real PostgreSQL and one fake Anthropic API on a loopback
port, which holds back the model's next answer so that the test kills the
process at a known point.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from groundswell import EventTree
from groundswell.testing import (
    FakeAnthropicAPI,
    FunctionModel,
    LoopbackServer,
    MessagesRequest,
    tool_use,
)
from groundswell.testing import text as reply_text

from .test_durable import RECOVER, Project, database  # noqa: F401 - the fixture, used by name

pytestmark = pytest.mark.slow

FLOWS = """
import json
import os
from pathlib import Path

import anthropic

import groundswell_dbos
from groundswell import Agent, Tool, ToolContext, WorkflowContext, workflow

groundswell_dbos.configure(system_database_url=os.environ["DBOS_SYSTEM_DATABASE_URL"])
LOG = Path(os.environ["GS_TEST_LOG"])


def note(tool: str, n: int, ctx: ToolContext) -> None:
    line = {"tool": tool, "n": n, "key": ctx.idempotency_key, "pid": os.getpid()}
    with LOG.open("a") as f:
        f.write(json.dumps(line) + "\\n")


def charge(n: int, ctx: ToolContext) -> str:
    \"\"\"Charge the customer's card for payment n (a side effect).

    Args:
        n: Which payment.
    \"\"\"
    note("charge", n, ctx)
    return f"charged payment {n}"


def balance(n: int, ctx: ToolContext) -> str:
    \"\"\"Read the balance after payment n (a cheap read).

    Args:
        n: Which payment.
    \"\"\"
    note("balance", n, ctx)
    return f"balance after {n}: {100 - n}"


payer = Agent(
    name="payer",
    tools=[charge, Tool(balance, checkpoint=False)],
    max_turns=30,
    client=anthropic.AsyncAnthropic(
        api_key="test-key", base_url=os.environ["FAKE_URL"], max_retries=0
    ),
)


@workflow(name="payments", durable=True)
async def payments(ctx: WorkflowContext, tool: str, count: int) -> str:
    return await ctx.step("pay", lambda: payer.prompt(f"Call {tool} {count} times"))
"""

# Runs (or joins) the run with this id and prints its output.
RUN = """
import asyncio, json, sys
import flows

async def main():
    result = await flows.payments.run_with_id(sys.argv[1], *json.loads(sys.argv[2]))
    print(json.dumps({"output": result.output}))

asyncio.run(main())
"""


class Model:
    """The model: calls the tool the prompt names as often as it says, one call a turn.

    While ``hold`` is the number of tool results a request carries, its answer
    waits: the process that asked stays right after that tool call.
    """

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.hold: int | None = None
        self.held: list[int] = []

    def set_hold(self, at: int | None) -> None:
        with self.changed:
            self.hold = at
            self.changed.notify_all()

    def __call__(self, request: MessagesRequest) -> Any:
        words = request.messages[0]["content"].split()  # "Call charge 10 times"
        tool, count = words[1], int(words[2])
        results = request.tool_results()
        with self.changed:
            if self.hold == len(results):
                self.held.append(len(results))
                self.changed.wait_for(lambda: self.hold != len(results), timeout=120)
        if len(results) < count:
            return tool_use(tool, {"n": len(results) + 1})
        return reply_text(f"done after {len(results)} calls: {results[-1]['content']}")


@pytest.fixture
def model() -> Iterator[Model]:
    made = Model()
    yield made
    made.set_hold(None)  # lets a held answer go


@pytest.fixture
def fake(model: Model) -> Iterator[tuple[FakeAnthropicAPI, LoopbackServer]]:
    api = FakeAnthropicAPI(FunctionModel(model))
    with api.serve() as server:
        yield api, server


@pytest.fixture
def project(
    tmp_path: Path,
    database: str,  # noqa: F811 - the fixture imported above
    fake: tuple[FakeAnthropicAPI, LoopbackServer],
    model: Model,
) -> Iterator[Project]:
    made = Project.make(
        tmp_path,
        FLOWS,
        database,
        fake[1].base_url,
        GS_TEST_LOG=str(tmp_path / "tools.log"),
        # No grace: the tests kill a process with Project.kill, which returns once its
        # liveness lock is gone, and no live process here ever loses its lock.
        GROUNDSWELL_DBOS_TAKEOVER_GRACE_S="0",
    )
    yield made
    model.set_hold(None)
    made.stop(kill=True)


def checkpoints(url: str, run_id: str, tool: str) -> int:
    """How many calls of ``tool`` the run ``run_id`` has checkpointed (committed rows)."""
    return recorded(url, run_id, f"tool {tool} %")


def recorded(url: str, run_id: str, name: str) -> int:
    """How many operations of the run ``run_id`` whose name is ``LIKE name`` DBOS has
    committed."""
    with psycopg.connect(url) as conn:
        tables = conn.execute("SELECT to_regclass('dbos.operation_outputs')").fetchone()
        if not tables or tables[0] is None:  # DBOS has yet to create its tables
            return 0
        row = conn.execute(
            "SELECT count(*) FROM dbos.operation_outputs "
            "WHERE workflow_uuid = %s AND function_name LIKE %s",
            (run_id, name),
        ).fetchone()
    return int(row[0]) if row else 0


def until(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def logged(project: Project) -> list[dict[str, Any]]:
    return [json.loads(line) for line in project.lines()]


# Where the run's process is killed: after tool call 1 (the first process), 2 (a
# recovery, replaying one checkpoint), 3 (a recovery of a recovered run, replaying
# checkpoints of two dead processes) and 10 (after the last call: what is left is
# only the model's final answer). Every other point is one of these: after call k,
# 4 <= k <= 9, is the kill after call 3 with more checkpoints replayed. The
# process killed after call 10 recovered the run after call 3 and made calls 4 to
# 10 live: a recovered run going on for several calls is covered too.
KILLS = (1, 2, 3, 10)


def test_a_run_killed_right_after_tool_calls_1_2_3_and_10_charges_each_payment_once(
    project: Project, model: Model
) -> None:
    url = project.env["DBOS_SYSTEM_DATABASE_URL"]
    pids: list[int] = []
    for k in KILLS:
        model.set_hold(k)  # the model's answer to the k-th tool result waits
        if k == 1:
            proc = project.start("-c", RUN, "pay-10", '["charge", 10]')
        else:  # a new process finishes the dead one's run: the calls before come back
            proc = project.start("-c", RECOVER)
        until(lambda k=k: checkpoints(url, "pay-10", "charge") == k, f"charge {k} checkpointed")
        project.kill(proc)  # right after the k-th call's checkpoint committed
        pids.append(proc.pid)
        assert [line["n"] for line in logged(project)] == list(range(1, k + 1))
    model.set_hold(None)

    (recovered,) = project.run("-c", RECOVER)

    assert recovered["status"] == "completed"
    assert recovered["output"] == "done after 10 calls: charged payment 10"
    ran = logged(project)
    # Ten payments, each charged once: by the process that was killed right after
    # it, calls 4 to 10 by the one killed after the tenth; none by the last one.
    assert Counter(line["n"] for line in ran) == Counter(range(1, 11))
    assert [line["pid"] for line in ran] == pids[:3] + [pids[3]] * 7
    keys = [line["key"] for line in ran]
    assert len(set(keys)) == 10 and all(key.startswith("pay-10:") for key in keys)
    tree = EventTree.from_json(recovered["tree"])
    calls = tree.find(type="tool_call")
    assert len(calls) == 10
    assert all(c.status.value == "completed" and c.metrics.get("recovered") for c in calls)
    assert [c.payload["output"] for c in calls] == [f"charged payment {n}" for n in range(1, 11)]


def test_a_tool_that_opts_out_of_checkpoints_runs_again_with_the_same_idempotency_key(
    project: Project, model: Model
) -> None:
    model.set_hold(1)
    proc = project.start("-c", RUN, "peek-1", '["balance", 1]')
    until(lambda: model.held == [1], "the tool returned and the model was asked again")
    project.kill(proc)
    model.set_hold(None)

    (recovered,) = project.run("-c", RECOVER)

    assert recovered["output"] == "done after 1 calls: balance after 1: 99"
    first, again = logged(project)
    assert first["n"] == again["n"] == 1 and first["pid"] != again["pid"]  # it ran again
    assert first["key"] == again["key"]  # and said so to the service it calls
    assert first["key"].startswith("peek-1:")
    assert checkpoints(project.env["DBOS_SYSTEM_DATABASE_URL"], "peek-1", "balance") == 0
