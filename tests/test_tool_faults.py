"""Tools that exit, cancel themselves or never return are tool errors the model sees."""

from __future__ import annotations

import argparse
import asyncio
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
