"""What Groundswell's MCP client offers local servers: elicitation, sampling and roots.

A stdio server config may set ``on_elicitation`` (a handler for the server's
requests for input), ``sampling`` (``True`` or an `Agent` that answers its
``sampling/createMessage``) and ``roots`` (directories it may use);
``Agent(on_elicitation=...)`` answers for every server of the agent.
`client_options` checks those keys when an agent or prompt is built and
gives the `ClientOptions` a connection is made with; `Elicitation` is what a
handler gets. The client itself (the callbacks, progress and log
notifications) is `groundswell.mcp.capabilities`'s, imported only when a
server starts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from mcp.types import ElicitResult

    from ..agent import PromptRun

__all__ = [
    "CLIENT_KEYS",
    "ClientOptions",
    "Elicitation",
    "check_elicitation_handler",
    "client_options",
    "current_prompt",
    "prompt_scope",
]

#: The keys of a stdio server config that set what the client offers the server.
CLIENT_KEYS = frozenset({"on_elicitation", "sampling", "roots"})


@dataclass(frozen=True)
class Elicitation:
    """A server's request for input (MCP ``elicitation/create``), as ``on_elicitation`` gets it.

    ``mode`` is ``"form"`` (answer with content fitting ``schema``, a flat
    JSON schema of strings, numbers, booleans and enums) or ``"url"`` (the
    user should open ``url``; answer whether they agreed to). ``tool`` is the
    ``mcp__<server>__<tool>`` call the server asked during, when known. A
    handler returns ``request.accept({...})``, ``request.decline()`` or
    ``request.cancel()`` (or the same as a dict, ``{"action": "accept",
    "content": {...}}``).
    """

    server: str
    message: str
    mode: Literal["form", "url"] = "form"
    schema: dict[str, Any] | None = None
    url: str | None = None
    tool: str | None = None

    def accept(self, content: Mapping[str, Any] | None = None) -> ElicitResult:
        """The answer that gives the server ``content`` (checked against `schema`)."""
        from mcp.types import ElicitResult

        return ElicitResult(action="accept", content=dict(content) if content is not None else None)

    def decline(self) -> ElicitResult:
        """The answer that refuses the request."""
        from mcp.types import ElicitResult

        return ElicitResult(action="decline")

    def cancel(self) -> ElicitResult:
        """The answer that dismisses the request without a choice."""
        from mcp.types import ElicitResult

        return ElicitResult(action="cancel")


@dataclass(frozen=True)
class ClientOptions:
    """What the client offers one local server, from its config (all off by default).

    ``roots`` holds ``(uri, name)`` pairs. ``key`` tells options apart: a
    session shares a server only between prompts whose options are the same.
    """

    on_elicitation: Callable[[Elicitation], Any] | None = field(default=None, repr=False)
    sampling: Any = field(default=None, repr=False)  # True, an Agent, or None (off)
    roots: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        handler = id(self.on_elicitation) if self.on_elicitation is not None else None
        sampling = self.sampling if self.sampling in (None, True) else id(self.sampling)
        return (handler, sampling, self.roots)


def check_elicitation_handler(handler: Any, owner: str) -> None:
    """``on_elicitation`` must be a callable (or ``None``)."""
    if handler is not None and not callable(handler):
        raise ConfigurationError(
            f"{owner}: on_elicitation must be a function taking a groundswell.Elicitation and "
            f"returning request.accept({{...}}), request.decline() or request.cancel(), "
            f"got {type(handler).__name__}"
        )


def client_options(name: str, item: Mapping[str, Any]) -> ClientOptions:
    """The `ClientOptions` of a stdio server config, its keys checked (`ConfigurationError`)."""
    owner = f"stdio MCP server {name!r}"
    handler = item.get("on_elicitation")
    check_elicitation_handler(handler, owner)
    sampling = item.get("sampling")
    if sampling is False:
        sampling = None
    # An Agent is told by what it has (this layer sits below the agent loop).
    is_agent = callable(getattr(sampling, "prompt", None)) and hasattr(sampling, "config")
    if sampling is not None and sampling is not True and not is_agent:
        raise ConfigurationError(
            f"{owner}: 'sampling' must be True (the calling agent's model answers the "
            f"server's sampling requests), an Agent (that agent answers them) or False, "
            f"got {type(sampling).__name__}"
        )
    return ClientOptions(handler, sampling, _roots(owner, item.get("roots"), item.get("cwd")))


def _roots(owner: str, roots: Any, cwd: Any) -> tuple[tuple[str, str], ...]:
    if roots is None:
        return ()
    if isinstance(roots, str | bytes | os.PathLike) or not isinstance(roots, list | tuple):
        raise ConfigurationError(
            f"{owner}: 'roots' must be a list of directories (paths or file:// URIs), "
            f"got {type(roots).__name__}"
        )
    found: list[tuple[str, str]] = []
    for i, root in enumerate(roots):
        if not isinstance(root, str | os.PathLike) or not os.fspath(root):
            raise ConfigurationError(
                f"{owner}: roots[{i}] must be a directory path or a file:// URI, "
                f"got {type(root).__name__}"
            )
        text = os.fspath(root)
        if not isinstance(text, str):
            raise ConfigurationError(f"{owner}: roots[{i}] must be a str path, not bytes")
        scheme = urlsplit(text).scheme if "://" in text else ""
        if scheme and scheme != "file":
            raise ConfigurationError(
                f"{owner}: roots[{i}] is a {scheme}:// URI; MCP roots are directories: "
                f"give a path or a file:// URI"
            )
        if scheme == "file":
            uri = text
            label = Path(urlsplit(text).path).name or text
        else:
            # Relative to the server's cwd, as the server itself would read it.
            base = Path(os.fspath(cwd)) if isinstance(cwd, str | os.PathLike) else Path.cwd()
            path = (base / text).resolve()
            uri, label = path.as_uri(), path.name or str(path)
        found.append((uri, label))
    return tuple(found)


_prompt: ContextVar[PromptRun | None] = ContextVar("groundswell_mcp_prompt", default=None)


@contextlib.contextmanager
def prompt_scope(run: PromptRun) -> Iterator[None]:
    """Make ``run`` the prompt whose MCP calls start here (for its stream and its agent)."""
    token = _prompt.set(run)
    try:
        yield
    finally:
        _prompt.reset(token)


def current_prompt() -> PromptRun | None:
    """The prompt whose MCP servers the calling code uses, if any."""
    return _prompt.get()


def elicitation_handler(options: ClientOptions, run: PromptRun | None) -> tuple[Any, str | None]:
    """The handler for a server's request (its own, else its agent's) and where it came from."""
    if options.on_elicitation is not None:
        return options.on_elicitation, "server"
    agent_handler = run.settings.get("on_elicitation") if run is not None else None
    if agent_handler is not None:
        return agent_handler, "agent"
    return None, None
