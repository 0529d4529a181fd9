"""Remote MCP servers on the API's MCP connector: the request the current MCP-client beta takes.

Each request is checked against the installed SDK's own beta request types
(`BetaRequestMCPServerURLDefinitionParam`, `BetaMCPToolsetParam`, the tool
union and ``AnthropicBetaParam``), strictly and with no unknown keys, and its
``anthropic-beta`` header is checked as sent.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from anthropic.types import AnthropicBetaParam
from anthropic.types.beta import (
    BetaMCPToolConfigParam,
    BetaMCPToolDefaultConfigParam,
    BetaMCPToolsetParam,
    BetaRequestMCPServerURLDefinitionParam,
    BetaToolUnionParam,
)
from pydantic import TypeAdapter

from groundswell import Agent, ConfigurationError, Prompt, TokenBudget
from groundswell.mcp.bridge import LEGACY_MCP_CLIENT_BETA, MCP_CLIENT_BETA, remote_request
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, text

ANY_TOOL: TypeAdapter[Any] = TypeAdapter(BetaToolUnionParam)


def exactly(kind: Any, value: dict[str, Any]) -> None:
    """``value`` is a ``kind`` (an SDK TypedDict): strictly valid, and no key it does not name."""
    TypeAdapter(kind).validate_python(value, strict=True)
    unknown = set(value) - kind.__required_keys__ - kind.__optional_keys__
    assert not unknown, f"{kind.__name__} has no key(s) {sorted(unknown)}"


DOCS = {
    "type": "url",
    "name": "docs",
    "url": "https://mcp.example.com/mcp",
    "authorization_token": "tok-remote-77",
}
TICKETS = {"type": "url", "name": "tickets", "url": "https://tickets.example.com/mcp"}


def agent_for(fake: FakeAnthropicAPI, **settings: Any) -> Agent:
    return Agent(name="remote", client=fake.client(), **settings)


def betas_of(request: MessagesRequest) -> list[str]:
    return request.headers["anthropic-beta"].split(",")


def check_against_sdk(request: MessagesRequest) -> list[dict[str, Any]]:
    """Validate the request's MCP parts with the SDK's types; return its toolsets."""
    for server in request.body["mcp_servers"]:
        exactly(BetaRequestMCPServerURLDefinitionParam, server)
    toolsets = [t for t in request.tools if t.get("type") == "mcp_toolset"]
    for toolset in toolsets:
        exactly(BetaMCPToolsetParam, toolset)
        ANY_TOOL.validate_python(toolset, strict=True)  # a tool the request's `tools` takes
        if "default_config" in toolset:
            exactly(BetaMCPToolDefaultConfigParam, toolset["default_config"])
        for config in (toolset.get("configs") or {}).values():
            exactly(BetaMCPToolConfigParam, config)
    named = {s["name"] for s in request.body["mcp_servers"]}
    assert {t["mcp_server_name"] for t in toolsets} <= named  # each names a declared server
    return toolsets


def test_the_beta_is_one_the_sdk_names() -> None:
    literal = next(a for a in typing.get_args(AnthropicBetaParam) if typing.get_origin(a))
    assert MCP_CLIENT_BETA in typing.get_args(literal)
    assert LEGACY_MCP_CLIENT_BETA in typing.get_args(literal)


async def test_a_remote_server_is_sent_with_the_beta_header_and_its_toolset() -> None:
    fake = FakeAnthropicAPI([text("ok")])
    result = await agent_for(fake, mcps=[DOCS]).run("search the docs")
    assert result.output == "ok"
    (request,) = fake.requests
    assert request.path.startswith("/v1/messages")
    assert betas_of(request) == [MCP_CLIENT_BETA]
    assert request.body["mcp_servers"] == [DOCS]
    assert check_against_sdk(request) == [{"type": "mcp_toolset", "mcp_server_name": "docs"}]


async def test_other_betas_and_tools_stay_and_every_server_gets_a_toolset() -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    fake = FakeAnthropicAPI([text("ok")])
    agent = agent_for(fake, mcps=[DOCS, TICKETS], tools=[add], betas=["skills-2025-10-02"])
    await agent.prompt("x")
    (request,) = fake.requests
    assert betas_of(request) == ["skills-2025-10-02", MCP_CLIENT_BETA]
    assert [t.get("name") or t["mcp_server_name"] for t in request.tools] == [
        "add",
        "docs",
        "tickets",
    ]
    assert len(check_against_sdk(request)) == 2


async def test_tool_configuration_becomes_the_toolsets_configs() -> None:
    only_search = {**TICKETS, "tool_configuration": {"allowed_tools": ["search"]}}
    off = {**DOCS, "tool_configuration": {"enabled": False}}
    fake = FakeAnthropicAPI([text("ok")])
    await agent_for(fake, mcps=[only_search, off]).prompt("x")
    (request,) = fake.requests
    # The current beta takes tool settings on the toolset, not on the server.
    assert all("tool_configuration" not in s for s in request.body["mcp_servers"])
    assert check_against_sdk(request) == [
        {
            "type": "mcp_toolset",
            "mcp_server_name": "tickets",
            "default_config": {"enabled": False},
            "configs": {"search": {"enabled": True}},
        },
        {"type": "mcp_toolset", "mcp_server_name": "docs", "default_config": {"enabled": False}},
    ]


async def test_your_own_toolsets_in_tools_are_sent_as_written() -> None:
    fake = FakeAnthropicAPI([text("ok")])
    docs = {"type": "mcp_toolset", "mcp_server_name": "docs", "default_config": {"enabled": False}}
    tickets = {"type": "mcp_toolset", "mcp_server_name": "tickets"}
    # Two nameless entries never count as a name clash.
    await agent_for(fake, mcps=[DOCS, TICKETS], tools=[docs, tickets]).prompt("x")
    (request,) = fake.requests
    assert check_against_sdk(request) == [docs, tickets]
    assert betas_of(request) == [MCP_CLIENT_BETA]


@pytest.mark.parametrize("mcps", [[TICKETS], []], ids=["other-server", "no-server"])
async def test_a_toolset_for_a_server_you_did_not_give_is_refused(mcps: list[Any]) -> None:
    fake = FakeAnthropicAPI([text("never sent")])
    agent = agent_for(fake, mcps=mcps, tools=[{"type": "mcp_toolset", "mcp_server_name": "docs"}])
    with pytest.raises(
        ConfigurationError,
        match=r"agent 'remote': tools\[0\]: mcp_toolset names "
        r"the MCP server 'docs'.*add \{'type': 'url', 'name': 'docs'",
    ):
        await agent.prompt("x")
    assert fake.requests == []


def test_a_toolset_already_in_tools_is_not_sent_twice() -> None:
    mine = {
        "type": "mcp_toolset",
        "mcp_server_name": "docs",
        "default_config": {"defer_loading": True},
    }
    servers, toolsets, betas = remote_request([DOCS, TICKETS], None, [mine])
    assert servers == [DOCS, TICKETS] and betas == [MCP_CLIENT_BETA]
    assert toolsets == [{"type": "mcp_toolset", "mcp_server_name": "tickets"}]


@pytest.mark.parametrize("beta", [LEGACY_MCP_CLIENT_BETA, "mcp-client-2026-09-15"])
async def test_an_mcp_client_beta_you_name_is_used_instead(beta: str) -> None:
    fake = FakeAnthropicAPI([text("ok")])
    await agent_for(fake, mcps=[DOCS], betas=[beta]).prompt("x")
    (request,) = fake.requests
    assert betas_of(request) == [beta]
    toolsets = check_against_sdk(request)
    # The first beta predates toolsets; later ones take them like the default.
    assert len(toolsets) == (0 if beta == LEGACY_MCP_CLIENT_BETA else 1)


async def test_a_prompts_own_remote_servers_get_the_beta_too() -> None:
    fake = FakeAnthropicAPI([text("ok"), text("plain")])
    agent = agent_for(fake)
    await agent.prompt(Prompt(user="x", mcps=[TICKETS]))
    await agent.prompt("no servers")
    with_servers, without = fake.requests
    assert betas_of(with_servers) == [MCP_CLIENT_BETA]
    check_against_sdk(with_servers)
    assert "anthropic-beta" not in without.headers and "mcp_servers" not in without.body


async def test_the_anthropic_counter_counts_remote_servers_on_the_beta_endpoint() -> None:
    fake = FakeAnthropicAPI([text("ok")])
    budget = TokenBudget(max_total=50_000, counter="anthropic")
    await agent_for(fake, mcps=[DOCS], token_budget=budget).prompt("x")
    (count,) = fake.count_token_requests
    # The standard count_tokens takes neither mcp_servers nor an mcp_toolset tool.
    assert MCP_CLIENT_BETA in betas_of(count)
    assert count.body["mcp_servers"] == [DOCS]
    assert [t for t in count.body["tools"] if t.get("type") == "mcp_toolset"] == [
        {"type": "mcp_toolset", "mcp_server_name": "docs"}
    ]


async def test_without_remote_servers_the_counter_uses_the_standard_endpoint() -> None:
    fake = FakeAnthropicAPI([text("ok")])
    budget = TokenBudget(max_total=50_000, counter="anthropic")
    await agent_for(fake, token_budget=budget).prompt("x")
    (count,) = fake.count_token_requests
    assert "anthropic-beta" not in count.headers and "mcp_servers" not in count.body
