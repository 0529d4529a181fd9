"""A local MCP server's resources and prompts, as tools the agent may call.

When a server advertises resources, its connection adds a tool
``mcp__<server>__read_resource`` (input ``{"uri": ...}``) whose description
lists the resources and resource templates the server listed when it
started; when it advertises prompts, ``mcp__<server>__get_prompt`` (input
``{"name": ..., "arguments": {...}}``) listing its prompts and their
arguments. (A server that has a tool of that name itself keeps it: the added
one is then ``read_mcp_resource`` / ``get_mcp_prompt``.) They are listed and
called like the server's own tools: in the ``mcp_connect`` node's ``tools``,
each call an ``mcp_call`` node. A resource comes back as the server's
embedded resource content; a prompt as its messages, each headed by its role.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, EmbeddedResource, ListToolsResult, TextContent, Tool

from ..scrubbing.serialize import scrub
from .capabilities import GroundswellClient

__all__ = ["MAX_LISTED", "list_tools"]

logger = logging.getLogger("groundswell.mcp")

#: Resources, templates and prompts named in a tool's description; more are counted.
MAX_LISTED = 50
# Pages of a listing read at most (a paginator that never ends cannot hang a start).
_PAGES = 20
_LINE = 200


async def list_tools(client: Client) -> ListToolsResult:
    """The server's tools, then the tools for its resources and prompts (if it has them)."""
    listed = await client.list_tools()
    if not isinstance(client, GroundswellClient):
        return listed
    capabilities = client.server_capabilities
    taken = {tool.name for tool in listed.tools}
    added: list[Tool] = []
    if capabilities.resources is not None:
        tool = await _resource_tool(
            client, "read_mcp_resource" if "read_resource" in taken else "read_resource"
        )
        if tool is not None:
            added.append(tool)
    if capabilities.prompts is not None:
        tool = await _prompt_tool(
            client, "get_mcp_prompt" if "get_prompt" in taken else "get_prompt"
        )
        if tool is not None:
            added.append(tool)
    if not added:
        return listed
    return listed.model_copy(update={"tools": [*listed.tools, *added]})


async def _pages(fetch: Callable[[str | None], Awaitable[Any]], field: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_PAGES):
        page = await fetch(cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if cursor is None:
            break
    return items


async def _resource_tool(client: GroundswellClient, name: str) -> Tool | None:
    server = client.link.server
    try:
        resources = await _pages(lambda c: client.list_resources(cursor=c), "resources")
        templates = await _pages(
            lambda c: client.list_resource_templates(cursor=c), "resource_templates"
        )
    except MCPError as exc:  # it says it has resources, yet cannot list them: no tool
        logger.debug("MCP server %r did not list its resources: %s", server, exc)
        return None
    if not resources and not templates:  # nothing to read: no tool to spend tokens on
        return None
    lines = [f"Read a resource of the MCP server {server!r} by its URI."]
    if resources:
        lines.append("Its resources:")
        lines += _listed([_line(str(r.uri), r.name, r.description, r.mime_type) for r in resources])
    if templates:
        lines.append("Resource templates (fill in the {placeholders} to make a URI):")
        lines += _listed(
            [_line(t.uri_template, t.name, t.description, t.mime_type) for t in templates]
        )
    client.link.virtual[name] = _read
    return Tool(
        name=name,
        description="\n".join(lines),
        input_schema={
            "type": "object",
            "properties": {
                "uri": {"type": "string", "description": "The URI of the resource to read"}
            },
            "required": ["uri"],
        },
    )


async def _prompt_tool(client: GroundswellClient, name: str) -> Tool | None:
    server = client.link.server
    try:
        prompts = await _pages(lambda c: client.list_prompts(cursor=c), "prompts")
    except MCPError as exc:
        logger.debug("MCP server %r did not list its prompts: %s", server, exc)
        return None
    if not prompts:
        return None
    lines = [f"Get a prompt of the MCP server {server!r}: its messages, filled in. Its prompts:"]
    shown = []
    for prompt in prompts:
        args = ", ".join(f"{a.name}{'' if a.required else '?'}" for a in prompt.arguments or ())
        shown.append(_line(f"{prompt.name}({args})", None, prompt.description, None))
    lines += _listed(shown)
    lines.append("Arguments marked ? are optional; every argument value is a string.")
    client.link.virtual[name] = _get_prompt
    return Tool(
        name=name,
        description="\n".join(lines),
        input_schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [p.name for p in prompts]},
                "arguments": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "The prompt's arguments by name",
                },
            },
            "required": ["name"],
        },
    )


def _line(what: str, name: str | None, description: str | None, mime: str | None) -> str:
    text = f"- {what}"
    if name and name != what:
        text += f" ({name})"
    if description:
        text += f": {' '.join(description.split())}"
    if mime:
        text += f" [{mime}]"
    return text if len(text) <= _LINE else text[: _LINE - 1] + "…"


def _listed(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_LISTED:
        return lines
    return [*lines[:MAX_LISTED], f"- … and {len(lines) - MAX_LISTED} more"]


def _failed(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=scrub(message))], is_error=True)


async def _read(client: Client, arguments: dict[str, Any]) -> CallToolResult:
    uri = arguments.get("uri")
    if not isinstance(uri, str) or not uri:
        return _failed("read_resource needs 'uri': the URI of a resource, as a string")
    try:
        result = await client.read_resource(uri)
    except MCPError as exc:
        return _failed(f"could not read {uri!r}: {exc.error.message}")
    return CallToolResult(
        content=[EmbeddedResource(type="resource", resource=item) for item in result.contents]
    )


async def _get_prompt(client: Client, arguments: dict[str, Any]) -> CallToolResult:
    name, given = arguments.get("name"), arguments.get("arguments") or {}
    if not isinstance(name, str) or not name:
        return _failed("get_prompt needs 'name': the name of one of the server's prompts")
    if not isinstance(given, dict):
        return _failed("get_prompt's 'arguments' must be an object of argument names to strings")
    # The protocol takes strings only; a number or a flag the model gave is meant as its text.
    values = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in given.items()}
    try:
        result = await client.get_prompt(name, values)
    except MCPError as exc:
        return _failed(f"could not get the prompt {name!r}: {exc.error.message}")
    content: list[Any] = []
    if result.description:
        content.append(TextContent(type="text", text=f"{name}: {result.description}"))
    for message in result.messages:
        block = message.content
        if isinstance(block, TextContent):
            content.append(TextContent(type="text", text=f"[{message.role}]\n{block.text}"))
        else:
            content += [TextContent(type="text", text=f"[{message.role}]"), block]
    return CallToolResult(content=content)
