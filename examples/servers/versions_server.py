"""A stdio MCP server for example 8: semantic version bumps, tagged by release channel.

Any program speaking MCP on stdin/stdout works as a stdio server; this one is
started by the agent as ``python versions_server.py``. It reads
``RELEASE_CHANNEL`` from its environment, which the agent's ``env`` sets.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("versions", log_level="WARNING")


@server.tool()
def next_version(current: str, change: str) -> str:
    """The version after ``current`` (like 2.0.0) for a change of kind feature or fix."""
    major, minor, patch = (int(p) for p in current.split("."))
    bumped = f"{major}.{minor + 1}.0" if change == "feature" else f"{major}.{minor}.{patch + 1}"
    channel = os.environ.get("RELEASE_CHANNEL", "stable")
    return bumped if channel == "stable" else f"{bumped}-{channel}"


if __name__ == "__main__":
    server.run("stdio")
