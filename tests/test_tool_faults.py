"""Tools that exit, cancel themselves or never return are tool errors the model sees."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from groundswell import Agent, ConfigurationError, NodeStatus, NodeType, Tool
from groundswell.testing import FakeAnthropicAPI, text, tool_use


def parse_flags(flags: str) -> str:
    """Parse command-line flags the way a CLI tool would.

    Args:
        flags: The flags, space-separated.
    """
    parser = argparse.ArgumentParser(prog="report", exit_on_error=False)
    parser.add_argument("--days", type=int, required=True)
    # argparse calls sys.exit(2) on a missing required flag, even with exit_on_error=False.
    return str(parser.parse_args(flags.split()).days)


async def exits_async(code: int) -> str:
    """Exit the process.

    Args:
        code: The exit code.
    """
    raise SystemExit(code)


def model_sees(fake: FakeAnthropicAPI, turn: int = 1) -> dict[str, Any]:
    (result,) = fake.requests[turn].tool_results()
    return result


async def test_a_tool_calling_sys_exit_is_a_tool_error_and_the_run_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake = FakeAnthropicAPI([tool_use("parse_flags", {"flags": "--verbose"}), text("no days")])
    agent = Agent(name="cli", tools=[parse_flags], client=fake.client(max_retries=0))
    result = await agent.run("How many days?")
    assert result.output == "no days"
    seen = model_sees(fake)
    assert seen["is_error"] is True and seen["content"].startswith("SystemExit: 2")
    (call,) = result.tree.find(type=NodeType.TOOL_CALL)
    assert call.status is NodeStatus.FAILED and call.error is not None
    assert call.error["type"] == "SystemExit"
    assert "required: --days" in capsys.readouterr().err  # argparse's own message, as usual


async def test_an_async_tool_raising_system_exit_leaves_concurrent_runs_alone() -> None:
    fakes = [
        FakeAnthropicAPI([tool_use("exits_async", {"code": 3}), text("done")]) for _ in range(5)
    ]
    agents = [
        Agent(name=f"a{i}", tools=[exits_async], client=f.client()) for i, f in enumerate(fakes)
    ]
    outputs = await asyncio.gather(*(a.prompt("go") for a in agents))
    assert outputs == ["done"] * 5
    assert all(model_sees(f)["content"] == "SystemExit: 3" for f in fakes)


def test_a_process_whose_tool_exits_keeps_running(tmp_path: Any) -> None:
    # The real thing: before, the SystemExit ended the host process mid-run.
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            """
            import argparse, asyncio
            from groundswell import Agent
            from groundswell.testing import FakeAnthropicAPI, text, tool_use

            def report(flags: str) -> str:
                '''Run the report CLI.'''
                parser = argparse.ArgumentParser(prog="report")
                parser.add_argument("--days", type=int, required=True)
                return str(parser.parse_args(flags.split()).days)

            fake = FakeAnthropicAPI([tool_use("report", {"flags": ""}), text("survived")])
            agent = Agent(name="app", tools=[report], client=fake.client())
            print(asyncio.run(agent.prompt("go")))
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("survived")


async def test_a_tools_own_cancellation_is_a_tool_error() -> None:
    async def waits() -> str:
        """Wait for something that gets cancelled."""
        inner = asyncio.ensure_future(asyncio.sleep(10))
        asyncio.get_running_loop().call_soon(inner.cancel)
        return str(await inner)

    fake = FakeAnthropicAPI([tool_use("waits", {}), text("went on")])
    agent = Agent(name="w", tools=[waits], client=fake.client())
    assert await agent.prompt("go") == "went on"
    assert model_sees(fake)["content"].startswith("CancelledError")


async def test_cancelling_the_run_still_cancels_a_running_tool() -> None:
    started = asyncio.Event()

    async def forever() -> str:
        """Never finish."""
        started.set()
        await asyncio.sleep(3600)
        return "never"

    fake = FakeAnthropicAPI([tool_use("forever", {}), text("unreached")])
    agent = Agent(name="c", tools=[forever], client=fake.client())
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(fake.requests) == 1


async def test_a_tool_over_its_timeout_is_an_error_the_model_sees_and_the_node_records() -> None:
    async def slow() -> str:
        """Take far too long."""
        await asyncio.sleep(3600)
        return "late"

    fake = FakeAnthropicAPI([tool_use("slow", {}), text("gave up on it")])
    agent = Agent(name="t", tools=[Tool(slow, timeout=0.05)], client=fake.client())
    result = await agent.run("go")
    assert result.output == "gave up on it"
    seen = model_sees(fake)
    assert seen["is_error"] and "did not finish within 0.05 s" in seen["content"]
    (call,) = result.tree.find(type=NodeType.TOOL_CALL)
    assert call.status is NodeStatus.FAILED and call.payload["timeout_s"] == 0.05
    assert [e["type"] for e in call.events] == ["tool_timeout"]


async def test_the_agent_tool_timeout_bounds_a_blocking_sync_tool() -> None:
    release = threading.Event()

    def blocks() -> str:
        """Block the thread it runs in."""
        release.wait(30)
        return "unblocked"

    fake = FakeAnthropicAPI([tool_use("blocks", {}), text("moved on")])
    agent = Agent(name="b", tools=[blocks], tool_timeout=0.1, client=fake.client())
    try:
        assert await agent.prompt("go") == "moved on"
        assert "did not finish within 0.1 s" in model_sees(fake)["content"]
    finally:
        release.set()  # the worker thread cannot be stopped; let it finish


async def test_a_tools_own_timeout_beats_the_agents() -> None:
    async def quick() -> str:
        """Answer soon."""
        await asyncio.sleep(0.01)
        return "quick answer"

    fake = FakeAnthropicAPI([tool_use("quick", {}), text("ok")])
    agent = Agent(
        name="q", tools=[Tool(quick, timeout=30)], tool_timeout=0.001, client=fake.client()
    )
    assert await agent.prompt("go") == "ok"
    assert model_sees(fake)["content"] == "quick answer"


async def test_a_tools_own_timeout_error_is_an_ordinary_tool_error() -> None:
    def flaky() -> str:
        """Time out on its own."""
        raise TimeoutError("upstream took too long")

    fake = FakeAnthropicAPI([tool_use("flaky", {}), text("ok")])
    agent = Agent(name="f", tools=[flaky], tool_timeout=30, client=fake.client())
    result = await agent.run("go")
    assert model_sees(fake)["content"] == "TimeoutError: upstream took too long"
    (call,) = result.tree.find(type=NodeType.TOOL_CALL)
    assert "timeout_s" in call.payload and call.events == []


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5", True])
def test_a_bad_timeout_is_refused_when_the_tool_or_agent_is_built(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="timeout must be a number of seconds > 0"):
        Tool(parse_flags, timeout=bad)
    with pytest.raises(ConfigurationError, match="timeout must be a number of seconds > 0"):
        Agent(name="x", tool_timeout=bad)


async def test_no_timeout_costs_nothing_and_changes_nothing() -> None:
    fake = FakeAnthropicAPI([tool_use("parse_flags", {"flags": "--days 3"}), text("3 days")])
    agent = Agent(name="n", tools=[parse_flags], client=fake.client())
    result = await agent.run("go")
    assert result.output == "3 days" and model_sees(fake)["content"] == "3"
    (call,) = result.tree.find(type=NodeType.TOOL_CALL)
    assert "timeout_s" not in call.payload


# -- KeyboardInterrupt from a tool, and a real Ctrl-C -----------------------------------
#
# In a subprocess each: before, a tool's KeyboardInterrupt ended the host process (it
# would end this test session too).

INTERRUPTING_TOOLS = """
import asyncio, json
from groundswell import Agent, NodeType
from groundswell.testing import FakeAnthropicAPI, text, tool_calls

def sync_stop(job: str) -> str:
    '''Stop a job (runs in a worker thread, where no Ctrl-C can arrive).'''
    raise KeyboardInterrupt(f"sync {job}")

async def async_stop(job: str) -> str:
    '''Stop a job.'''
    raise KeyboardInterrupt(f"async {job}")

failures = []

def on_failure(input_data, tool_use_id, context):
    failures.append(input_data["error"])

fake = FakeAnthropicAPI(
    [tool_calls(("sync_stop", {"job": "a"}), ("async_stop", {"job": "b"})), text("both failed")]
)
agent = Agent(
    name="app",
    tools=[sync_stop, async_stop],
    hooks={"PostToolUseFailure": [on_failure]},
    client=fake.client(max_retries=0),
)
result = asyncio.run(agent.run("stop both"))
calls = result.tree.find(type=NodeType.TOOL_CALL)
print(json.dumps({
    "output": result.output,
    "status": result.node.status,
    "seen": fake.requests[1].tool_results(),
    "nodes": [[c.name, c.status, c.error["type"]] for c in calls],
    "failures": sorted(failures),
}))
print("alive")
"""


def run_script(
    tmp_path: Any, source: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_tool_raising_keyboard_interrupt_is_a_tool_error_and_the_process_lives(
    tmp_path: Any,
) -> None:
    out = run_script(tmp_path, INTERRUPTING_TOOLS)
    assert out.returncode == 0, out.stderr
    report, alive = out.stdout.strip().splitlines()
    assert alive == "alive"
    seen = json.loads(report)
    assert seen["output"] == "both failed" and seen["status"] == "completed"
    assert [(r["content"], r.get("is_error")) for r in seen["seen"]] == [
        ("KeyboardInterrupt: sync a", True),
        ("KeyboardInterrupt: async b", True),
    ]
    assert seen["nodes"] == [
        ["sync_stop", "failed", "KeyboardInterrupt"],
        ["async_stop", "failed", "KeyboardInterrupt"],
    ]
    # The hooks see it as the tool failure it is.
    assert seen["failures"] == ["KeyboardInterrupt: async b", "KeyboardInterrupt: sync a"]


BUSY_TOOL = """
import asyncio, os, signal, sys, threading, time, _thread
from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI, text, tool_use

async def crunch() -> str:
    '''Crunch numbers without ever awaiting (so a signal lands inside the tool).'''
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pass
    return "finished"

fake = FakeAnthropicAPI([tool_use("crunch", {}), text("survived")])
agent = Agent(name="app", tools=[crunch], client=fake.client(max_retries=0))
"""


def test_a_real_ctrl_c_inside_an_async_tool_still_stops_the_run(tmp_path: Any) -> None:
    # Without asyncio.run's handler, Python's default one raises KeyboardInterrupt
    # wherever the main thread is: here, inside the tool. That one is the user's.
    out = run_script(
        tmp_path,
        BUSY_TOOL
        + """
# A process started where SIGINT is ignored (a background job, some CI runners) inherits
# that, and then interrupt_main() does nothing: give it Python's usual handler, as a
# program run from a terminal has.
signal.signal(signal.SIGINT, signal.default_int_handler)
threading.Timer(0.5, _thread.interrupt_main).start()  # as a Ctrl-C does
loop = asyncio.new_event_loop()
print(loop.run_until_complete(agent.prompt("go")))
""",
    )
    assert out.returncode != 0 and "survived" not in out.stdout
    assert out.stderr.rstrip().endswith("KeyboardInterrupt"), out.stderr[-2000:]


def test_a_signal_handler_that_exits_still_stops_the_run(tmp_path: Any) -> None:
    # A SIGTERM handler calling sys.exit() (a common way to shut a service down): its
    # SystemExit lands in the tool, but it is the process's, not the tool's.
    out = run_script(
        tmp_path,
        BUSY_TOOL
        + """
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
print(asyncio.run(agent.prompt("go")))
""",
    )
    assert out.returncode == 7, out.stderr[-2000:]
    assert "survived" not in out.stdout
