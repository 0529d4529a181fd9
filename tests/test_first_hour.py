"""What a new user trips on in the first hour: each mistake gets an error that says the fix."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from groundswell import (
    Agent,
    ConfigurationError,
    EventTree,
    NodeType,
    PluginError,
    Prompt,
    PromptOverrides,
    Tool,
    ToolDefinitionError,
    ToolError,
    WorkflowError,
    workflow,
)
from groundswell.cli import main
from groundswell.plugins.manager import PluginManager
from groundswell.testing import FakeAnthropicAPI, text

# -- 1. Prompt and PromptOverrides say which keyword was meant -----------------------


def test_a_positional_prompt_is_refused_with_the_keyword_to_write() -> None:
    with pytest.raises(ConfigurationError) as refused:
        Prompt("Summarize this")  # type: ignore[call-overload]
    assert str(refused.value) == (
        "Prompt takes keyword arguments only, got 1 positional; name each one: "
        "Prompt(user='Summarize this')"
    )
    with pytest.raises(ConfigurationError, match=r"PromptOverrides takes keyword arguments only"):
        PromptOverrides("claude-haiku-4-5")  # type: ignore[misc]


@pytest.mark.parametrize(
    "build",
    [
        lambda: Agent(name="a", temprature=0.2),
        lambda: Prompt(user="Hi", temprature=0.2),
        lambda: PromptOverrides(temprature=0.2),
    ],
    ids=["Agent", "Prompt", "PromptOverrides"],
)
def test_a_misspelt_keyword_names_the_close_one_alike_everywhere(build: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"'temprature'.*did you mean temperature"):
        build()


def test_another_frameworks_names_point_to_ours() -> None:
    with pytest.raises(ConfigurationError, match=r"'output_type' .*did you mean response_format"):
        Prompt(user="Judge this", output_type=int)
    with pytest.raises(ConfigurationError, match=r"'instructions' .*did you mean system"):
        Prompt(user="Judge this", instructions="Be terse")
    with pytest.raises(
        ConfigurationError, match=r"set per prompt: Prompt\(user=\.\.\., response_format=\.\.\.\)"
    ):
        PromptOverrides(response_format=int)


# -- 2. enable_cache in overrides ---------------------------------------------------


async def test_enable_cache_is_overridden_by_either_spelling() -> None:
    fake = FakeAnthropicAPI([text("4")] * 6)
    cached = Agent(name="cached", enable_cache=True, client=fake.client())
    await cached.prompt("2 + 2?")
    await cached.prompt("2 + 2?")
    assert len(fake.requests) == 1  # the second was a cache hit
    with cached.override(enable_cache=False):
        await cached.prompt("2 + 2?")
    await cached.prompt("2 + 2?", PromptOverrides(enable_cache=False))
    assert len(fake.requests) == 3  # both skipped the cache

    plain = Agent(name="plain", client=fake.client())
    await plain.prompt("3 + 3?", PromptOverrides(enable_cache=True))
    await plain.prompt("3 + 3?", PromptOverrides(enable_cache=True))
    assert len(fake.requests) == 4  # turned on for these calls: the second was a hit

    with cached.override(disable_cache=True):  # the override wins, whichever spelling
        await cached.prompt("2 + 2?", PromptOverrides(enable_cache=True))
    assert len(fake.requests) == 5


def test_enable_and_disable_cache_that_contradict_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="say opposite things; give one of them"):
        PromptOverrides(enable_cache=True, disable_cache=True)
    with pytest.raises(ConfigurationError, match="enable_cache must be True or False"):
        PromptOverrides(enable_cache="no")


# -- 3. a workflow's ctx and its arguments --------------------------------------------


def test_a_workflow_without_ctx_is_refused_when_decorated() -> None:
    with pytest.raises(ConfigurationError) as refused:

        @workflow
        async def greet(name: str) -> str:  # forgot ctx
            return f"Hello {name}"

    assert str(refused.value) == (
        "workflow 'greet': its first parameter 'name' is a str, but the first argument is the "
        "WorkflowContext (ctx); a workflow function gets its WorkflowContext as the first "
        "argument: async def greet(ctx, ...)"
    )
    with pytest.raises(ConfigurationError, match="its function takes no parameter for ctx"):

        @workflow
        async def hello() -> str:
            return "Hello"


@workflow
async def greet(ctx: Any, name: str, *, loud: bool = False) -> str:
    return name.upper() if loud else name


@pytest.mark.parametrize(
    ("args", "kwargs", "wrong"),
    [
        ((), {}, "missing a required argument: 'name'"),
        (("Ada", "Lovelace"), {}, "too many positional arguments (2 given)"),
        (
            ("Ada",),
            {"lod": True},
            "got an unexpected keyword argument 'lod' (did you mean 'loud'?)",
        ),
    ],
)
async def test_a_workflow_called_with_wrong_arguments_says_what_it_takes(
    args: tuple[Any, ...], kwargs: dict[str, Any], wrong: str
) -> None:
    with pytest.raises(WorkflowError) as failed:
        await greet.run(*args, **kwargs)
    cause = failed.value.__cause__
    assert isinstance(cause, ConfigurationError)
    assert str(cause) == (
        f"workflow 'greet' was called with the wrong arguments: {wrong}; it takes "
        "(name: str, *, loud: bool = False) after ctx, which is passed for you "
        "(wf.run(...) takes the rest)"
    )
    assert (await greet.run("Ada", loud=True)).output == "ADA"


async def test_a_type_error_inside_a_workflow_is_left_as_it_is() -> None:
    @workflow
    async def adds(ctx: Any, n: int) -> int:
        return n + "1"  # type: ignore[operator]

    with pytest.raises(WorkflowError) as failed:
        await adds.run(1)
    assert isinstance(failed.value.__cause__, TypeError)
    assert "unsupported operand" in str(failed.value.__cause__)


# -- 4. a typo in GROUNDSWELL_DISABLE_PLUGINS -------------------------------------


def test_an_unknown_name_to_disable_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GROUNDSWELL_DISABLE_PLUGINS", "otle")
    with caplog.at_level(logging.WARNING, "groundswell.plugins"):
        PluginManager(strict=False).load_entrypoints()
    assert (
        "GROUNDSWELL_DISABLE_PLUGINS names 'otle', but no installed plugin has that name "
        "(did you mean 'otel'?); it turns nothing off (installed: "
    ) in caplog.text
    assert "lru" in caplog.text.split("installed: ")[1]


def test_an_unknown_name_to_disable_raises_under_strict_plugins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_DISABLE_PLUGINS", "otle")
    monkeypatch.setenv("GROUNDSWELL_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="GROUNDSWELL_DISABLE_PLUGINS names 'otle'"):
        PluginManager().load_entrypoints()


# -- 5. an MCP server whose program is not installed ---------------------------------


def test_an_mcp_program_that_is_not_installed_is_refused_when_the_agent_is_built(
    tmp_path: Path,
) -> None:
    empty = {"PATH": str(tmp_path)}  # the server's PATH: no uvx in it
    server = {"name": "time", "command": "uvx", "args": ["mcp-server-time"], "env": empty}
    with pytest.raises(ConfigurationError) as refused:
        Agent(name="clock", mcps=[server])
    message = str(refused.value)
    assert "stdio MCP server 'time': the program 'uvx' is not found on PATH" in message
    assert "install uv" in message and "'args': ['-m', <its module>]" in message
    # The program and its arguments in one string: both fixes are named.
    with pytest.raises(ConfigurationError, match=r"'uvx' \('command' holds its arguments too"):
        Agent(name="clock", mcps=[{"name": "time", "command": "uvx mcp-server-time", "env": empty}])
    with pytest.raises(ConfigurationError, match=r"install Node\.js"):
        Agent(name="web", mcps=[{"name": "web", "command": "npx", "args": ["x"], "env": empty}])

    program = tmp_path / "uvx"
    program.write_text("#!/bin/sh\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    Agent(name="clock", mcps=[server])  # on the server's PATH now: accepted


# -- 6. groundswell tree on garbage and on a log cut off mid-run ---------------------


def test_tree_on_a_garbage_line_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("notes.jsonl").write_text("these are my notes\n")
    assert main(["tree", "notes.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "notes.jsonl, line 1: not JSON" in err and "is the file empty" not in err


def test_tree_of_a_log_cut_off_mid_run_notes_it_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    tree = EventTree()
    root = tree.start_node(NodeType.WORKFLOW, "nightly")
    tree.start_node(NodeType.STEP, "fetch", root)  # the process died here
    tree.save("run.jsonl")
    with open("run.jsonl", "a") as log:
        log.write('{"kind": "node_end", "da')  # and mid-line
    assert main(["tree", "run.jsonl"]) == 0
    out, err = capsys.readouterr()
    assert "nightly" in out
    assert err == (
        "note: run 'nightly' did not finish in run.jsonl: its end is not in the log (the "
        "process stopped before writing it, or is still running)\n"
    )


# -- 7. tools a function cannot become ---------------------------------------------


class Connection:
    """Not something a model can send as JSON."""


def test_a_tool_parameter_of_no_json_type_gets_advice_a_tool_author_can_apply() -> None:
    def query(db: Connection, sql: str) -> str:
        return sql

    with pytest.raises(ConfigurationError) as refused:
        Agent(name="a", tools=[query])
    message = str(refused.value)
    assert message.startswith(
        "agent 'a': tool 'query': parameter 'db' has type Connection, which has no JSON schema"
    ) or message.startswith("tool 'query': parameter 'db' has type Connection")
    assert "ctx.deps" in message and "arbitrary_types_allowed" not in message
    assert isinstance(refused.value, ToolError)  # what it was before: still caught there


def test_a_lambda_tool_is_pointed_to_a_name() -> None:
    with pytest.raises(ToolDefinitionError, match=r"a lambda has no name .*Tool\(fn, name="):
        Tool(lambda order_id: order_id)
    assert Tool(lambda order_id: order_id, name="lookup_order").name == "lookup_order"


# -- 8. small things -----------------------------------------------------------------


def test_version_prints_the_installed_version() -> None:
    from groundswell import __version__

    done = subprocess.run(
        [sys.executable, "-m", "groundswell.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, f"groundswell {__version__}\n")


def test_plugins_has_column_headings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.split() == ["PLUGIN", "VERSION", "STATUS", "HOOKS"]


async def test_two_unnamed_agents_in_one_run_are_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeAnthropicAPI([text("ok")] * 8)
    one, two = Agent(client=fake.client()), Agent(client=fake.client())

    @workflow
    async def pair(ctx: Any) -> None:
        await one.prompt("a")
        await one.prompt("b")  # one unnamed agent alone is no trouble
        await two.prompt("c")

    with caplog.at_level(logging.WARNING, "groundswell.agent"):
        await pair.run()
        await pair.run()
    warned = [r.getMessage() for r in caplog.records if r.name == "groundswell.agent"]
    assert warned == [
        "two different agents prompt in run 'pair', both unnamed: their nodes in the tree "
        "are both called 'agent'; give each a name, e.g. Agent(name='researcher')"
    ]


def test_importing_groundswell_testing_leaves_the_sdk_until_a_fake_is_made() -> None:
    script = (
        "import sys, groundswell.testing as t\n"
        "from groundswell import Agent\n"
        "reply = t.text('hi')\n"
        "before = 'anthropic' in sys.modules\n"
        "t.FakeAnthropicAPI([reply]).client()\n"
        "print(before, 'anthropic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ANTHROPIC_API_KEY": ""},
    )
    assert done.stdout.split() == ["False", "True"], done.stderr
