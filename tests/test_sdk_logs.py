"""With DEBUG logging on, the SDK's own loggers write no secret while Groundswell is imported.

The `anthropic` SDK logs every request's options (the whole body) at DEBUG; its
HTTP client logs each exchange. The real client talks to the fake API here, and
every record those loggers emit is read back as a handler would format it.
"""

from __future__ import annotations

import logging

import pytest

import groundswell
from groundswell import Agent, ToolContext, register_secret
from groundswell.testing import FakeAnthropicAPI, text, tool_use

TOOL_SECRET = "vault-answer-5b8e1f9c2d7a"
ENV_SECRET = "env-token-0c4f9a7e3b1d"
MCP_TOKEN = "mcp-bearer-7d2e9f41c6a8"
OTHER_MCP_TOKEN = "mcp-other-3a9c7e5f1b2d"


def lookup(key: str, ctx: ToolContext) -> str:
    """Look a key up in the vault.

    Args:
        key: What to look up.
    """
    return f"{key}={TOOL_SECRET}; token in env: {ctx.env['SERVICE_TOKEN']}"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    for name in ("anthropic", "httpx2"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


async def test_sdk_debug_logs_never_show_a_secret(debug_logs: pytest.LogCaptureFixture) -> None:
    register_secret(TOOL_SECRET)
    fake = FakeAnthropicAPI([tool_use("lookup", {"key": "db"}), text("Found it.")])
    agent = Agent(
        name="vault",
        client=fake.client(max_retries=0),
        tools=[lookup],
        env={"SERVICE_TOKEN": ENV_SECRET},
        mcp_servers=[
            {
                "type": "url",
                "name": "remote",
                "url": "https://mcp.example.com/sse",
                "authorization_token": MCP_TOKEN,
            }
        ],
    )

    assert await agent.prompt("What is the db password?") == "Found it."

    # The secrets did reach the wire: the tool result went back to the model.
    sent = fake.requests[1].latest_tool_results()[0]["content"]
    assert TOOL_SECRET in sent and ENV_SECRET in sent
    assert fake.requests[0].body["mcp_servers"][0]["authorization_token"] == MCP_TOKEN
    records = [r for r in debug_logs.records if r.name.startswith(("anthropic", "httpx2"))]
    bodies = [r.getMessage() for r in records if r.getMessage().startswith("Request options")]
    assert len(bodies) == 2  # DEBUG was on: the SDK logged both request bodies
    assert "What is the db password?" in bodies[0] and "**********" in bodies[1]
    for record in records:
        shown = record.getMessage()
        for secret in (TOOL_SECRET, ENV_SECRET, MCP_TOKEN):
            assert secret not in shown, (record.name, shown[:200])
    assert all(secret not in debug_logs.text for secret in (TOOL_SECRET, ENV_SECRET, MCP_TOKEN))


def test_a_remote_mcp_servers_token_is_a_registered_secret() -> None:
    server = {
        "type": "url",
        "name": "docs",
        "url": "https://docs.example.com/mcp",
        "authorization_token": OTHER_MCP_TOKEN,
    }
    Agent(name="reader", mcp_servers=[server])

    # Wherever it turns up now (a log line, an error, a tool result), it is scrubbed.
    assert groundswell.scrub(f"connected with {OTHER_MCP_TOKEN}") == "connected with **********"


def test_structures_the_sdk_logs_lose_their_secret_named_values(
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("anthropic._base_client")  # where the SDK logs requests
    logger.debug("Request options: %s", {"headers": {"x-api-key": "plain-key-value-123456"}})
    assert debug_logs.records[-1].getMessage() == (
        "Request options: {'headers': {'x-api-key': '**********'}}"
    )
    logging.getLogger("httpx2").debug("%(method)s %(url)s", {"method": "GET", "url": "/v1?k=1"})
    assert debug_logs.records[-1].getMessage() == "GET /v1?k=1"  # the rest is as logged
