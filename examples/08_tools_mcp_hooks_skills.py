"""Example 8: tools, MCP servers (in-process and stdio), hooks and skills.

A release-notes agent gets everything an agent can use:

- a Python function as a tool (``git_log``; its schema comes from the
  signature and docstring) and a ``publish`` tool;
- an in-process MCP server (``tickets``) and a stdio MCP server (``versions``,
  ``servers/versions_server.py`` started as a subprocess) that reads
  ``RELEASE_CHANNEL`` from the agent's ``env``, never from ``os.environ``;
- hooks in the Claude Agent SDK's shape: ``PreToolUse`` denies ``publish``
  (a dry run), ``PostToolUse`` keeps an audit log;
- a local skill folder (``skills/release-notes/SKILL.md``), read on demand
  through the ``read_skill`` tool.

Every tool and MCP call is a node under the prompt, hooks' decisions included.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

from groundswell import Agent, Skill, WorkflowContext, WorkflowError, workflow
from groundswell.testing import FunctionModel, MessagesRequest, auto_client, text, tool_calls

HERE = Path(__file__).resolve().parent


# In-process: no subprocess, same event loop. (MCPServer sets up logging at its log_level.)
tickets = MCPServer("tickets", log_level="WARNING")


@tickets.tool()
def lookup(ticket: str) -> str:
    """The title of a ticket, e.g. GS-12."""
    return {"GS-12": "Cache hits show in the tree", "GS-15": "Fix a crash on empty logs"}[ticket]


def git_log(since: str) -> list[str]:
    """Commit subjects since a tag.

    Args:
        since: A tag such as v2.0.0.
    """
    return ["feat: cache marks in render() (GS-12)", "fix: empty trace logs (GS-15)"]


def publish(notes: str) -> str:
    """Publish the release notes."""
    raise RuntimeError("never reached in this example: the PreToolUse hook denies it")


audit: list[str] = []


async def dry_run(
    input_data: dict[str, Any], tool_use_id: str | None, context: Any
) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "dry run: publishing is switched off",
        }
    }


async def log_call(
    input_data: dict[str, Any], tool_use_id: str | None, context: Any
) -> dict[str, Any]:
    audit.append(input_data["tool_name"])
    return {}


STEPS = [
    [("read_skill", {"name": "release-notes"}), ("git_log", {"since": "v2.0.0"})],
    [
        ("mcp__tickets__lookup", {"ticket": "GS-12"}),
        ("mcp__tickets__lookup", {"ticket": "GS-15"}),
        ("mcp__versions__next_version", {"current": "2.0.0", "change": "feature"}),
    ],
]


def offline_model(request: MessagesRequest) -> Any:
    """Offline stand-in: follow the skill's steps, try to publish, then answer."""
    turn = len(request.tools_called())
    if turn == 0:
        return tool_calls(*STEPS[0])
    if turn == 2:
        return tool_calls(*STEPS[1])
    results = [r["content"] for r in request.tool_results()]
    version, titles = results[4], results[2:4]
    notes = f"## {version}\n" + "".join(f"- {t}\n" for t in titles)
    if turn == 5:
        return tool_calls(("publish", {"notes": notes}))
    return text(notes)


writer = Agent(
    name="release-writer",
    system="You write release notes. Use your skill and tools.",
    tools=[git_log, publish],
    mcps=[
        tickets,
        {
            "type": "stdio",
            "name": "versions",
            "command": sys.executable,
            "args": [str(HERE / "servers" / "versions_server.py")],
        },
    ],
    skills=[Skill(HERE / "skills" / "release-notes")],
    hooks={
        "PreToolUse": [{"matcher": "publish", "hooks": [dry_run]}],
        "PostToolUse": [{"hooks": [log_call]}],
    },
    env={"RELEASE_CHANNEL": "beta"},  # reaches tools and the stdio server only
    client=auto_client(FunctionModel(offline_model)),
)


@workflow(name="release-notes")
async def release_notes(ctx: WorkflowContext, tag: str) -> str:
    return await ctx.step("write", lambda: writer.prompt(f"Write the release notes since {tag}."))


async def main() -> int:
    try:
        result = await release_notes.run("v2.0.0")
    except WorkflowError as exc:  # e.g. the API cannot be reached: show how far the run got
        print(exc.result.tree.render())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result.tree.render())
    print(f"\n{result.output}")
    print(f"audit log (PostToolUse): {audit}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
