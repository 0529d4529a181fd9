"""MCP server configs and the request shapes of remote servers.

`check_toolsets` and `remote_request` give the request fields the API's MCP
connector takes under the MCP-client beta; `check_config_keys` and
`check_stdio` refuse a server config Groundswell would misread (a typo'd key,
a command holding its arguments) when an agent or prompt is built;
`register_mcp_secrets` keeps tokens and env values out of every output.
Connecting servers is `groundswell.mcp.bridge`'s.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..scrubbing.scrubber import argv_secrets
from ..scrubbing.serialize import register_secret
from .client import CLIENT_KEYS

__all__ = [
    "CALL_TIMEOUT",
    "CONNECT_TIMEOUT",
    "LEGACY_MCP_CLIENT_BETA",
    "MCP_CLIENT_BETA",
    "check_config_keys",
    "check_stdio",
    "check_toolsets",
    "default_call_timeout",
    "register_mcp_secrets",
    "remote_request",
]

# Seconds a local MCP server gets to start and list its tools (config key "timeout").
CONNECT_TIMEOUT = 30.0
#: Seconds one call to a local MCP server's tool may take (config key "call_timeout");
#: ``GROUNDSWELL_MCP_CALL_TIMEOUT`` changes it for every server that sets none.
CALL_TIMEOUT = 60.0
CALL_TIMEOUT_ENV = "GROUNDSWELL_MCP_CALL_TIMEOUT"
#: The MCP-client beta remote servers are sent with (``mcp_servers`` plus an
#: ``mcp_toolset`` entry in ``tools`` for each), unless ``betas`` names another.
MCP_CLIENT_BETA = "mcp-client-2025-11-20"
#: The first MCP-client beta: no ``mcp_toolset``; ``tool_configuration`` on the server.
LEGACY_MCP_CLIENT_BETA = "mcp-client-2025-04-04"


def check_toolsets(
    tools: Iterable[Any],
    mcps: Iterable[Any],
    owner: str,
    betas: Sequence[str] | None = None,
) -> None:
    """Every ``mcp_toolset`` in ``tools`` must name a remote server of ``mcps``.

    And the request's MCP-client beta must take toolsets: `LEGACY_MCP_CLIENT_BETA`
    does not. Raises `ConfigurationError` otherwise: the API refuses such a request.
    """
    remote = {m.get("name") for m in mcps if isinstance(m, Mapping) and m.get("type") == "url"}
    legacy = _mcp_beta(betas) == LEGACY_MCP_CLIENT_BETA
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or tool.get("type") != "mcp_toolset":
            continue
        if legacy:
            raise ConfigurationError(
                f"{owner}: tools[{i}]: mcp_toolset needs the MCP-client beta {MCP_CLIENT_BETA!r} "
                f"(or a later one), but betas names {LEGACY_MCP_CLIENT_BETA!r}, which has no "
                f"toolsets; drop {LEGACY_MCP_CLIENT_BETA!r} from betas (Groundswell then adds "
                f"{MCP_CLIENT_BETA!r}), or drop the toolset and give the server a "
                f"'tool_configuration' instead"
            )
        server = tool.get("mcp_server_name")
        if server not in remote:
            known = ", ".join(repr(n) for n in sorted(map(str, remote))) or "none"
            raise ConfigurationError(
                f"{owner}: tools[{i}]: mcp_toolset names the MCP server {server!r}, which is not a "
                f"remote server of this prompt (remote servers in mcps: {known}); add "
                f"{{'type': 'url', 'name': {server!r}, 'url': ...}} to mcps, or drop the toolset"
            )


def remote_request(
    remote: Sequence[Mapping[str, Any]],
    betas: Sequence[str] | None,
    tools: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The request's ``mcp_servers``, the ``mcp_toolset`` tools to add, and its ``betas``.

    Remote servers need an MCP-client beta: `MCP_CLIENT_BETA` is added unless
    ``betas`` names one. Under it (and later ones) each server gets an
    ``mcp_toolset`` entry in ``tools`` (unless ``tools`` has one for it
    already), and a server's ``tool_configuration`` (``enabled``,
    ``allowed_tools``) becomes that toolset's ``default_config`` and
    ``configs``. Under `LEGACY_MCP_CLIENT_BETA` servers are sent as given.
    """
    chosen = _mcp_beta(betas)
    sent_betas = list(betas or ()) if chosen else [*(betas or ()), MCP_CLIENT_BETA]
    if chosen == LEGACY_MCP_CLIENT_BETA:
        return [dict(s) for s in remote], [], sent_betas
    configured = {t.get("mcp_server_name") for t in tools if t.get("type") == "mcp_toolset"}
    servers: list[dict[str, Any]] = []
    toolsets: list[dict[str, Any]] = []
    for item in remote:
        server = {k: v for k, v in item.items() if k != "tool_configuration"}
        servers.append(server)
        if server["name"] in configured:
            continue
        toolset: dict[str, Any] = {"type": "mcp_toolset", "mcp_server_name": server["name"]}
        config = item.get("tool_configuration") or {}
        allowed = config.get("allowed_tools")
        if config.get("enabled") is False:
            toolset["default_config"] = {"enabled": False}
        elif allowed is not None:
            toolset["default_config"] = {"enabled": False}
            toolset["configs"] = {name: {"enabled": True} for name in allowed}
        toolsets.append(toolset)
    return servers, toolsets, sent_betas


def _mcp_beta(betas: Sequence[str] | None) -> str | None:
    """The MCP-client beta ``betas`` names (the last one, if several), if any."""
    chosen = [str(b) for b in betas or () if str(b).startswith("mcp-client-")]
    return chosen[-1] if chosen else None


# The keys of a stdio server config: what `MCPBridge` reads (a remote server's are the SDK's).
_STDIO_KEYS = frozenset(
    {"type", "name", "command", "args", "env", "cwd", "timeout", "call_timeout"}
    | CLIENT_KEYS  # what the client offers the server (elicitation, sampling, roots)
)
# Spellings difflib does not bring close enough to the key meant.
_ALIASES = {
    "cmd": "command",
    "program": "command",
    "argv": "args",
    "arguments": "args",
    "environment": "env",
    "workdir": "cwd",
    "working_dir": "cwd",
    "directory": "cwd",
    "token": "authorization_token",
    "auth_token": "authorization_token",
}


@functools.cache
def _url_keys() -> frozenset[str]:
    """The keys of a remote server config: the SDK's server type's, and ``tool_configuration``."""
    from anthropic.types.beta import BetaRequestMCPServerURLDefinitionParam as Server

    # tool_configuration is on the type today; Groundswell moves it to the toolset either way.
    return Server.__required_keys__ | Server.__optional_keys__ | {"tool_configuration"}


def check_config_keys(name: str, kind: str, item: Mapping[str, Any]) -> None:
    """Refuse keys a ``kind`` config does not take: a typo would be dropped or sent to the API."""
    known = _STDIO_KEYS if kind == "stdio" else _url_keys()
    unknown = [k for k in item if k not in known]
    if not unknown:
        return
    # Keys only, never values: a misspelled token key was not registered as a secret.
    told = [f"{key!r:.40}{_key_hint(key, kind, known)}" for key in unknown]
    what = "stdio" if kind == "stdio" else "remote"
    raise ConfigurationError(
        f"{what} MCP server {name!r}: unknown key{'s' * (len(told) > 1)} {', '.join(told)}; "
        f"a {what} server takes {', '.join(repr(k) for k in sorted(known))}"
    )


def _key_hint(key: Any, kind: str, known: frozenset[str]) -> str:
    if not isinstance(key, str):
        return ""
    other = _url_keys() if kind == "stdio" else _STDIO_KEYS
    lowered = key.lower()
    guess = _ALIASES.get(lowered) if _ALIASES.get(lowered) in known else None
    # "enviroment" is far from "env" by difflib's measure, but starts with it.
    guess = guess or next(
        (k for k in sorted(known, key=len, reverse=True) if len(k) >= 3 and lowered.startswith(k)),
        None,
    )
    if guess is None:
        close = difflib.get_close_matches(lowered, sorted(known), n=1, cutoff=0.6)
        guess = close[0] if close else None
    if guess is not None and guess != key:
        return f" (did you mean {guess!r}?)"
    if key in other:
        if kind == "stdio":
            return " (a remote server's key: set 'type': 'url' for one)"
        return " (a stdio server's key: set 'type': 'stdio' for one)"
    return ""


def check_stdio(name: str, item: Mapping[str, Any]) -> None:
    """A stdio MCP server config: ``command`` a string, ``args`` strings, ``env`` string pairs."""
    command, args, env = item.get("command"), item.get("args", []), item.get("env") or {}
    cwd = item.get("cwd")
    if isinstance(command, list | tuple) and command and isinstance(command[0], str):
        # Only the program is shown: arguments may hold a token.
        raise ConfigurationError(
            f"stdio MCP server {name!r}: 'command' must be a string, got a "
            f"{type(command).__name__}; 'command' is the program, put its arguments in 'args': "
            f"{{'command': {command[0]!r}, 'args': [...]}}"
        )
    if not isinstance(command, str) or not command:
        raise ConfigurationError(f"stdio MCP server {name!r} needs a 'command' (a string)")
    program = _program_of(command, env.get("PATH") if isinstance(env, Mapping) else None)
    if program is not None:
        raise ConfigurationError(
            f"stdio MCP server {name!r}: 'command' holds a program and its arguments; 'command' "
            f"is the program, put its arguments in 'args': {{'command': {program!r}, "
            f"'args': [...]}}"
        )
    if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
        raise ConfigurationError(f"stdio MCP server {name!r}: 'args' must be a list of strings")
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ConfigurationError(f"stdio MCP server {name!r}: 'env' must map strings to strings")
    for key in ("timeout", "call_timeout"):
        value = item.get(key, CONNECT_TIMEOUT)
        if not _seconds(value):
            raise ConfigurationError(
                f"stdio MCP server {name!r}: {key!r} must be seconds > 0, got {value!r:.40}"
            )
    if cwd is not None and not isinstance(cwd, str | os.PathLike):
        raise ConfigurationError(
            f"stdio MCP server {name!r}: 'cwd' must be a directory path, got {type(cwd).__name__}"
        )
    if not _found(command, env.get("PATH"), cwd):
        raise ConfigurationError(_not_found(name, command))


def _found(command: str, path: str | None, cwd: Any) -> bool:
    """Whether ``command`` names a program the server's process can start (PATH as it will see it)."""
    if os.sep in command or (os.altsep and os.altsep in command):
        # A relative path is looked up in the server's cwd when it has one (as POSIX does).
        return os.path.exists(command) or (
            cwd is not None and os.path.exists(os.path.join(cwd, command))
        )
    return shutil.which(command, path=path) is not None


# How to get the programs MCP server configs usually start.
_INSTALL = {
    "uvx": "install uv (https://docs.astral.sh/uv/, e.g. `pip install uv`), or pip install "
    "the server and start it with this Python: {'command': sys.executable, 'args': ['-m', "
    "<its module>]} (mcp-server-time's is 'mcp_server_time')",
    "npx": "install Node.js (https://nodejs.org), which provides npx",
}
_INSTALL["uv"] = _INSTALL["uvx"]
_INSTALL["node"] = _INSTALL["npm"] = _INSTALL["npx"]


def _not_found(name: str, command: str) -> str:
    """The error for a ``command`` no program answers to, with how to get it."""
    program = command.split(maxsplit=1)[0] if command.strip() else command
    # Only the program is shown: what follows it may hold a token.
    said = f"the program {program!r}"
    if program != command:
        said += " ('command' holds its arguments too: put them in 'args')"
    fix = _INSTALL.get(program, "install it, or give its full path")
    where = "does not exist" if os.sep in program else "is not found on PATH"
    return f"stdio MCP server {name!r}: {said} {where}, so the server cannot start; {fix}"


def _seconds(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and value > 0


def default_call_timeout() -> float:
    """`CALL_TIMEOUT`, or ``GROUNDSWELL_MCP_CALL_TIMEOUT`` (seconds) when it is set.

    Raises `ConfigurationError` for a value that is not seconds > 0.
    """
    raw = os.environ.get(CALL_TIMEOUT_ENV, "").strip()
    if not raw:
        return CALL_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not _seconds(value):
        raise ConfigurationError(f"{CALL_TIMEOUT_ENV} must be seconds > 0, got {raw!r:.40}")
    return value


def _program_of(command: str, path: Any) -> str | None:
    """The program of a ``command`` that holds arguments too (``"uvx mcp-server-time"``), else None.

    Only when the whole string is no program and its first word is one: a
    path with a space in it stays a command.
    """
    first = command.split(maxsplit=1)[0] if command.strip() else ""
    if first == command.strip() or os.path.exists(command):
        return None
    search = path if isinstance(path, str) else None
    if shutil.which(command, path=search) is None and shutil.which(first, path=search):
        return first
    return None


def register_mcp_secrets(mcps: Sequence[Any]) -> None:
    """Remember the secrets of MCP configs, to scrub them everywhere.

    Tokens, ``env`` values, and the values of secret flags in a stdio server's
    ``args`` (``--api-key VALUE``, ``--token=VALUE``, ``-pVALUE``: a server
    may echo its command line to its stderr, which is logged and recorded).
    """
    for item in mcps:
        if isinstance(item, Mapping):
            args = item.get("args")
            flagged: list[str] = []
            if isinstance(args, list | tuple) and all(isinstance(a, str) for a in args):
                flagged = argv_secrets(args)  # other args: check_stdio refuses them
            for secret in [
                item.get("authorization_token"),
                *dict(item.get("env") or {}).values(),
                *flagged,
            ]:
                if secret:
                    register_secret(str(secret))
