"""The published MCP reference servers the tests run, installed from npm and PyPI.

The npm servers (``@modelcontextprotocol/server-*``) go into ``.cache/mcp-servers``
at the pinned versions below, once (``npm install``); ``.ci/run`` installs them
before the suite (``python -m tests.published_mcp``). The PyPI ones
(``mcp-server-time``, ``mcp-server-git``) come with the dev extra.

Without ``node``/``npm`` (or without the registry) a test that needs a server
skips with a one-line reason; under ``GROUNDSWELL_REQUIRE_SERVICES=1`` (CI) it
fails instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PREFIX = ROOT / ".cache" / "mcp-servers"

#: package -> the pinned version the tests were written against.
NPM_SERVERS = {
    "@modelcontextprotocol/server-everything": "2026.8.31",
    "@modelcontextprotocol/server-filesystem": "2026.8.31",
    "@modelcontextprotocol/server-memory": "2026.8.31",
}


def _bin(package: str) -> Path:
    return PREFIX / "node_modules" / ".bin" / ("mcp-" + package.rsplit("/", 1)[1])


def install() -> str | None:
    """Install the npm servers if they are missing; the reason they cannot be, or None."""
    if all(_bin(p).exists() for p in NPM_SERVERS):
        return None
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return "node and npm are not installed (the published MCP servers run on Node.js)"
    PREFIX.mkdir(parents=True, exist_ok=True)
    wanted = [f"{p}@{v}" for p, v in NPM_SERVERS.items()]
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(PREFIX), *wanted],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        return "npm install of the published MCP servers timed out"
    if done.returncode != 0:
        return f"npm install of the published MCP servers failed: {done.stderr.strip()[-300:]}"
    return None


def npm_server(name: str, *args: str) -> dict[str, Any]:
    """The stdio config of a published npm server (``everything``, ``filesystem``,
    ``memory``), installing it on first use; skips the test when it cannot."""
    from .conftest import service_unavailable

    package = f"@modelcontextprotocol/server-{name}"
    if package not in NPM_SERVERS:
        raise ValueError(f"no pinned npm server {name!r}; known: {sorted(NPM_SERVERS)}")
    problem = install()
    if problem is not None:
        service_unavailable(problem)
    return {"name": name, "command": str(_bin(package)), "args": list(args)}


def pypi_server(module: str, *args: str) -> dict[str, Any]:
    """The stdio config of a published PyPI server run with this interpreter
    (``mcp_server_time``, ``mcp_server_git``)."""
    return {
        "name": module.removeprefix("mcp_server_"),
        "command": sys.executable,
        "args": ["-m", module, *args],
    }


if __name__ == "__main__":
    problem = install()
    if problem is not None:
        print(problem, file=sys.stderr)
        sys.exit(1 if os.environ.get("GROUNDSWELL_REQUIRE_SERVICES") == "1" else 0)
    print(f"published MCP servers ready in {PREFIX.relative_to(ROOT)}")
