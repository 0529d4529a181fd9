"""MCP sessions: ``async with agent:`` keeps local MCP servers running across prompts.

Real servers throughout: the published ``mcp-server-time`` and a stdio server
of our own that appends its pid to a file each time it starts (so starts are
counted by the server itself, not only by the tree), plus in-process ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer

from groundswell import Agent, EventTree, Prompt, ToolError, WorkflowContext, workflow
from groundswell.mcp.session import session_for
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_use

SERVER_SCRIPT = """
import os, sys
from mcp.server.mcpserver import MCPServer

with open(os.environ["STARTS_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")
print(f"counting server {os.getpid()} up", file=sys.stderr, flush=True)
server = MCPServer("counting")


@server.tool()
def echo(word: str) -> str:
    \"\"\"Echo a word.\"\"\"
    print(f"echo {word}", file=sys.stderr, flush=True)
    return word


@server.tool()
def crash() -> str:
    \"\"\"Stop the server at once.\"\"\"
    os._exit(3)


server.run()
"""


class Counting:
    """A stdio server config whose every start is one line in ``starts``."""

    def __init__(self, tmp_path: Path, name: str = "counting") -> None:
        script = tmp_path / "counting_server.py"
        script.write_text(SERVER_SCRIPT)
        self.log = tmp_path / f"{name}-starts.log"
        self.config = {
            "type": "stdio",
            "name": name,
            "command": sys.executable,
            "args": [str(script)],
            "env": {"STARTS_LOG": str(self.log)},
        }

    @property
    def pids(self) -> list[int]:
        return [int(p) for p in self.log.read_text().split()] if self.log.exists() else []


def echo_model(request: MessagesRequest) -> Reply:
    """Call the first tool named ...echo with the prompt's text, then answer with its result."""
    if request.tool_results():
        return text(str(request.tool_results()[0]["content"]))
    (name,) = [t["name"] for t in request.tools if t["name"].endswith("__echo")]
    return tool_use(name, {"word": request.last_user_text()})


def connects(*trees: EventTree) -> list[str]:
    return [f"{n.name}:{n.status.value}" for t in trees for n in t.find(type="mcp_connect")]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
async def test_ten_prompts_in_one_block_start_mcp_server_time_once() -> None:
    server = {
        "type": "stdio",
        "name": "time",
        "command": sys.executable,
        "args": ["-m", "mcp_server_time"],
    }

    def respond(request: MessagesRequest) -> Reply:
        if not request.tool_results():
            return tool_use("mcp__time__get_current_time", {"timezone": "Europe/Paris"})
        return text(request.tool_results()[0]["content"])

    clock = Agent(name="clock", mcps=[server], client=FakeAnthropicAPI(respond).client())
    async with clock:
        results = [await clock.run("What time is it in Paris?") for _ in range(10)]
    assert all(json.loads(r.output)["timezone"] == "Europe/Paris" for r in results)
    assert connects(*(r.tree for r in results)) == ["time:completed"]  # one start, ten prompts
    (start,) = results[0].tree.find(type="mcp_connect")
    assert start.parent_id == results[0].node.id  # under the prompt that needed it first
    assert start.payload["session"] == "clock"
    assert "mcp__time__get_current_time" in start.payload["output"]["tools"]
    assert all(not r.tree.find(type="mcp_connect") for r in results[1:])
    # Outside the block each prompt starts the server again, as before.
    again = [await clock.run("And now?") for _ in range(2)]
    assert connects(*(r.tree for r in again)) == ["time:completed", "time:completed"]


async def test_the_server_starts_once_and_stops_when_the_block_ends(tmp_path: Path) -> None:
    counting = Counting(tmp_path)
    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI(echo_model).client())
    async with agent as entered:
        assert entered is agent and session_for(agent) is not None
        outputs = [await agent.prompt(f"word{i}") for i in range(10)]
        (pid,) = counting.pids
        assert alive(pid)
    assert outputs == [f"word{i}" for i in range(10)]
    assert counting.pids == [pid] and not alive(pid)  # closed with the block
    assert session_for(agent) is None
    # Outside any block: a server per prompt, stopped after it.
    await agent.prompt("later")
    assert len(counting.pids) == 2 and not alive(counting.pids[-1])


async def test_prompts_running_at_once_share_one_start(tmp_path: Path) -> None:
    counting = Counting(tmp_path)
    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI(echo_model).client())
    async with agent:
        results = await asyncio.gather(*(agent.run(f"w{i}") for i in range(8)))
        # Tasks started inside the block are inside it too.
        late = await asyncio.create_task(agent.run("late"))
    assert [r.output for r in results] == [f"w{i}" for i in range(8)]
    assert late.output == "late"
    assert len(counting.pids) == 1
    assert connects(*(r.tree for r in [*results, late])) == ["counting:completed"]
    calls = [n for r in results for n in r.tree.find(type="mcp_call")]
    assert len(calls) == 8 and all(c.status.value == "completed" for c in calls)


async def test_stderr_goes_to_the_tree_and_the_log_never_the_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    counting = Counting(tmp_path)
    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI(echo_model).client())
    with caplog.at_level(logging.DEBUG, logger="groundswell.mcp"):  # stderr lines are DEBUG
        async with agent:
            result = await agent.run("hello")
            await asyncio.sleep(0.2)  # the reader thread logs the echo line
    (pid,) = counting.pids
    (start,) = result.tree.find(type="mcp_connect")
    assert f"counting server {pid} up" in start.payload["output"]["stderr"]
    logged = [r.getMessage() for r in caplog.records if r.name == "groundswell.mcp"]
    assert f"MCP server 'counting': counting server {pid} up" in logged
    assert "MCP server 'counting': echo hello" in logged
    assert capfd.readouterr().err == ""


async def test_a_server_that_fails_to_start_says_why_and_is_tried_again(tmp_path: Path) -> None:
    broken = {
        "type": "stdio",
        "name": "broken",
        "command": sys.executable,
        "args": ["-c", "import sys; sys.exit('no config file at /etc/broken.toml')"],
    }
    agent = Agent(name="a", mcps=[broken], client=FakeAnthropicAPI(echo_model).client())
    async with agent:
        for _ in range(2):
            with pytest.raises(ToolError) as info:
                await agent.run("x")
            message = str(info.value)
            assert message.startswith("MCP server 'broken' failed to start")
            assert message.endswith("its stderr ended with:\nno config file at /etc/broken.toml")


@pytest.mark.slow
async def test_a_server_that_never_answers_times_out_and_is_stopped() -> None:
    silent = {
        "type": "stdio",
        "name": "silent",
        "command": sys.executable,
        "args": ["-c", "import os, sys, time; print(os.getpid(), file=sys.stderr); time.sleep(60)"],
        "timeout": 1,
    }
    agent = Agent(name="a", mcps=[silent], client=FakeAnthropicAPI(echo_model).client())
    async with agent:
        with pytest.raises(ToolError) as info:
            await agent.run("x")
    head, _, pid = str(info.value).partition("its stderr ended with:\n")
    assert head.startswith("MCP server 'silent' did not answer within 1.0s")
    assert not alive(int(pid))


async def test_a_server_that_stops_mid_session_is_started_again_by_the_next_prompt(
    tmp_path: Path,
) -> None:
    counting = Counting(tmp_path)

    def model(request: MessagesRequest) -> Reply:
        if request.last_user_text() == "crash" and not request.tool_results():
            return tool_use("mcp__counting__crash", {})
        return echo_model(request)

    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI(model).client())
    async with agent:
        assert await agent.prompt("one") == "one"
        crashed = await agent.run("crash")
        assert "MCP server 'counting' has stopped" in crashed.output
        after = await agent.run("two")
    assert after.output == "two"
    assert len(counting.pids) == 2
    assert connects(crashed.tree, after.tree) == ["counting:completed"]


async def test_nested_blocks_share_the_outer_session_and_agents_have_their_own(
    tmp_path: Path,
) -> None:
    counting = Counting(tmp_path)
    fake = FakeAnthropicAPI(echo_model)
    first = Agent(name="first", mcps=[counting.config], client=fake.client())
    second = Agent(name="second", mcps=[counting.config], client=fake.client())
    async with first:
        outer = session_for(first)
        async with first:
            assert session_for(first) is outer
            await first.prompt("inner")
        assert session_for(first) is outer and outer is not None and not outer.closed
        await first.prompt("outer")
        assert len(counting.pids) == 1
        async with second:
            assert session_for(second) is not outer
            await second.prompt("other agent")
            assert len(counting.pids) == 2
        assert session_for(second) is None
    assert outer.closed and not any(alive(p) for p in counting.pids)


async def test_a_prompts_own_servers_are_kept_in_the_session_too(tmp_path: Path) -> None:
    counting = Counting(tmp_path)
    agent = Agent(name="a", client=FakeAnthropicAPI(echo_model).client())
    async with agent:
        for word in ("x", "y", "z"):
            assert await agent.prompt(Prompt(user=word, mcps=[counting.config])) == word
    assert len(counting.pids) == 1 and not alive(counting.pids[0])


async def test_in_process_servers_are_entered_once_per_session() -> None:
    entered: list[str] = []
    server = MCPServer("calc")

    @server.tool()
    def echo(word: str) -> str:
        """Echo."""
        entered.append(word)
        return word

    agent = Agent(name="a", mcps=[server], client=FakeAnthropicAPI(echo_model).client())
    async with agent:
        results = [await agent.run(w) for w in ("p", "q", "r")]
    assert [r.output for r in results] == ["p", "q", "r"] and entered == ["p", "q", "r"]
    assert connects(*(r.tree for r in results)) == ["calc:completed"]
    assert results[0].tree.find(type="mcp_connect")[0].payload["transport"] == "in_process"


async def test_a_workflow_keeps_its_agents_servers_for_the_whole_run(tmp_path: Path) -> None:
    counting = Counting(tmp_path)
    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI(echo_model).client())

    @workflow(name="words")
    async def words(ctx: WorkflowContext, items: list[str]) -> list[str]:
        async with agent:  # the servers live as long as this run's block
            return [await ctx.step(w, lambda w=w: agent.prompt(w)) for w in items]

    result = await words.run(["a", "b", "c"])
    assert result.output == ["a", "b", "c"]
    assert connects(result.tree) == ["counting:completed"] and len(counting.pids) == 1
    assert not alive(counting.pids[0])


async def test_leaving_the_block_in_another_task_still_stops_the_servers(
    tmp_path: Path,
) -> None:
    counting = Counting(tmp_path)
    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI(echo_model).client())
    await agent.__aenter__()
    await agent.prompt("x")
    (pid,) = counting.pids
    await asyncio.create_task(agent.__aexit__(None, None, None))
    assert not alive(pid)


def test_agents_session_needs_no_running_servers_to_be_built(tmp_path: Path) -> None:
    # Entering is cheap: nothing starts before a prompt needs it.
    counting = Counting(tmp_path)
    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI().client())

    async def enter_and_leave() -> Any:
        async with agent:
            return session_for(agent)

    session = asyncio.run(enter_and_leave())
    assert session is not None and session.closed and counting.pids == []


# -- prompts that outlive their block ---------------------------------------------------------


async def test_a_prompt_task_started_just_before_the_block_ends_still_finishes(
    tmp_path: Path,
) -> None:
    counting = Counting(tmp_path)
    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI(echo_model).client())
    async with agent:
        task = asyncio.create_task(agent.run("late"))
        await asyncio.sleep(0)  # the prompt has begun, its server is starting
    result = await task  # neither cancelled nor cut off from its server
    assert not task.cancelled() and result.output == "late"
    assert len(counting.pids) == 1 and not alive(counting.pids[0])  # stopped once it was done


async def test_a_prompt_waiting_for_the_model_keeps_the_server_after_the_block(
    tmp_path: Path,
) -> None:
    counting = Counting(tmp_path)
    asked = asyncio.Event()

    def slow_model(request: MessagesRequest) -> Reply:
        reply = echo_model(request)
        if not request.tool_results():
            asked.set()
            reply.delay = 0.5  # the model's turn is still running when the block ends
        return reply

    agent = Agent(name="a", mcps=[counting.config], client=FakeAnthropicAPI(slow_model).client())
    async with agent:
        task = asyncio.create_task(agent.run("patient"))
        await asyncio.wait_for(asked.wait(), 20)  # connected, waiting for the model
    # Leaving did not wait for the prompt, nor stop the server it is using.
    assert not task.done()
    (pid,) = counting.pids
    assert alive(pid)
    result = await task  # the model then calls the server's tool
    assert result.output == "patient"
    (call,) = result.tree.find(type="mcp_call")
    assert call.status.value == "completed"
    assert counting.pids == [pid] and not alive(pid)  # the last prompt out stopped it


async def test_a_prompt_awaited_only_after_its_block_does_not_deadlock(tmp_path: Path) -> None:
    counting = Counting(tmp_path)
    waiting, go = asyncio.Event(), asyncio.Event()

    async def wait_for_go() -> str:
        """Wait until the caller says go."""
        waiting.set()
        await go.wait()
        return "go"

    def model(request: MessagesRequest) -> Reply:
        if request.last_user_text() != "gated":
            return echo_model(request)
        called = request.tools_called()
        if not called:
            return tool_use("wait_for_go", {})
        if len(called) == 1:
            return tool_use("mcp__counting__echo", {"word": "after"})
        return text(str(request.tool_results()[-1]["content"]))

    agent = Agent(
        name="a",
        mcps=[counting.config],
        tools=[wait_for_go],
        client=FakeAnthropicAPI(model).client(),
    )
    async with asyncio.timeout(20):  # a block that waited for the prompt would hang here
        async with agent:
            task = asyncio.create_task(agent.run("gated"))
            await waiting.wait()  # its server is up, the prompt is in a tool call
        go.set()  # only code after the block lets the prompt go on
        result = await task
        # A prompt that starts after the block starts its own server, as outside any block.
        assert await agent.prompt("fresh") == "fresh"
    assert result.output == "after"
    assert len(counting.pids) == 2 and not any(alive(p) for p in counting.pids)
