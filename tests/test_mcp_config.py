"""MCP configs that cannot work are refused where they are written, saying how to fix them.

Misspelled keys, a remote server without its ``type``, a command holding its
arguments, and hand-written ``mcp_toolset`` entries the SDK's beta types (or
the chosen MCP-client beta) refuse: each is a `ConfigurationError` before any
request is sent or any server started.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from groundswell import Agent, ConfigurationError, Prompt
from groundswell.mcp.bridge import LEGACY_MCP_CLIENT_BETA
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_use

DOCS = {"type": "url", "name": "docs", "url": "https://mcp.example.com/mcp"}
TIME = {
    "type": "stdio",
    "name": "time",
    "command": sys.executable,
    "args": ["-m", "mcp_server_time"],
}


def refused(**settings: Any) -> str:
    with pytest.raises(ConfigurationError) as info:
        Agent(name="a", **settings)
    return str(info.value)


# -- hand-written mcp_toolset entries -------------------------------------------------------------


def test_a_bad_toolset_is_judged_by_the_beta_type_with_a_toolset_fix() -> None:
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "docs",
        "configs": {"search": {"enabled": "yes"}},
    }
    message = refused(mcps=[DOCS], tools=[toolset])
    assert "anthropic.types.beta.MessageCreateParams['tools'] items" in message
    assert "(configs.search.enabled: Input should be a valid boolean)" in message
    assert "an mcp_toolset is {'type': 'mcp_toolset', 'mcp_server_name': ..." in message
    # Not the advice for a custom tool, which it never was.
    assert "input_schema" not in message and "Input should be 'custom'" not in message


def test_a_bad_custom_tool_is_still_judged_by_the_standard_type() -> None:
    message = refused(tools=[{"name": "lookup", "input_schema": "an object"}])
    assert "anthropic.types.MessageCreateParams['tools'] items" in message
    assert "(input_schema: Input should be a valid dictionary)" in message
    assert "pass an Anthropic tool dict such as {'name': ..." in message


async def test_a_toolset_under_the_first_mcp_client_beta_is_refused_before_sending() -> None:
    fake = FakeAnthropicAPI([text("never sent")])
    agent = Agent(
        name="a",
        mcps=[DOCS],
        tools=[{"type": "mcp_toolset", "mcp_server_name": "docs"}],
        betas=[LEGACY_MCP_CLIENT_BETA],
        client=fake.client(),
    )
    with pytest.raises(ConfigurationError) as info:
        await agent.prompt("x")
    message = str(info.value)
    assert message.startswith("agent 'a': tools[0]: mcp_toolset needs the MCP-client beta")
    assert f"drop {LEGACY_MCP_CLIENT_BETA!r} from betas" in message
    assert fake.requests == []


# -- server configs -------------------------------------------------------------------------------


def test_a_remote_server_without_its_type_says_to_add_it() -> None:
    message = refused(mcps=[{"name": "d", "url": "https://x/mcp"}])
    assert "MCP server 'd' has a 'url' but no 'type': add 'type': 'url'" in message


@pytest.mark.parametrize(
    "command",
    [[sys.executable, "-m", "mcp_server_time"], f"{sys.executable} -m mcp_server_time"],
    ids=["list", "string-with-arguments"],
)
def test_a_command_holding_its_arguments_says_to_put_them_in_args(command: Any) -> None:
    message = refused(mcps=[{"type": "stdio", "name": "time", "command": command}])
    assert "'command' is the program, put its arguments in 'args'" in message
    assert f"{{'command': {sys.executable!r}, 'args': [...]}}" in message


SERVER = """#!{python}
from mcp.server.mcpserver import MCPServer

server = MCPServer("spaced")


@server.tool()
def echo(word: str) -> str:
    \"\"\"Echo a word.\"\"\"
    return word


server.run()
"""


async def test_a_program_whose_path_has_a_space_is_still_a_command(tmp_path: Path) -> None:
    folder = tmp_path / "my servers"
    folder.mkdir()
    program = folder / "echo server"
    program.write_text(SERVER.format(python=sys.executable))
    program.chmod(program.stat().st_mode | stat.S_IXUSR)

    def model(request: MessagesRequest) -> Reply:
        if request.tool_results():
            return text(str(request.tool_results()[0]["content"]))
        return tool_use("mcp__spaced__echo", {"word": "through"})

    server = {"type": "stdio", "name": "spaced", "command": str(program)}
    agent = Agent(name="a", mcps=[server], client=FakeAnthropicAPI(model).client())
    assert " " in str(program) and os.access(program, os.X_OK)
    assert await agent.prompt("x") == "through"


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (
            {**TIME, "enviroment": {"TZ": "Europe/Paris"}},
            "stdio MCP server 'time': unknown key 'enviroment' (did you mean 'env'?)",
        ),
        (
            {**TIME, "time_out": 5},
            "stdio MCP server 'time': unknown key 'time_out' (did you mean 'timeout'?)",
        ),
        (
            {**DOCS, "authorisation_token": "tok-typo-secret-4"},
            "remote MCP server 'docs': unknown key 'authorisation_token' "
            "(did you mean 'authorization_token'?)",
        ),
        (
            {**DOCS, "env": {"K": "v"}},
            "remote MCP server 'docs': unknown key 'env' (a stdio server's key",
        ),
    ],
    ids=["stdio-env", "stdio-timeout", "url-token", "url-stdio-key"],
)
def test_a_misspelled_config_key_is_refused_with_the_key_meant(
    config: dict[str, Any], said: str
) -> None:
    message = refused(mcps=[config])
    assert said in message
    assert "server takes " in message
    assert "tok-typo-secret-4" not in message  # keys are named, values never shown


def test_a_misspelled_key_on_a_prompts_server_is_refused_too() -> None:
    with pytest.raises(ConfigurationError, match=r"Prompt: mcps: .*unknown key 'cmd' \(did you"):
        Prompt(user="x", mcps=[{"type": "stdio", "name": "s", "cmd": "uvx"}])


async def test_every_key_a_remote_server_takes_is_sent() -> None:
    # The keys come from the SDK's type: a full config passes and reaches the API whole.
    server = {
        **DOCS,
        "authorization_token": "tok-ok-1",
        "tool_configuration": {"allowed_tools": ["search"]},
    }
    fake = FakeAnthropicAPI([text("ok")])
    await Agent(name="a", mcps=[server], client=fake.client()).prompt("x")
    (sent,) = fake.requests[0].body["mcp_servers"]
    assert sent == {k: v for k, v in server.items() if k != "tool_configuration"}
