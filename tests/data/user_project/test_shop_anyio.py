"""The same fake, under anyio's pytest plugin instead of pytest-asyncio."""

from __future__ import annotations

import pytest
from shop import clerk, quote

from groundswell.testing import FakeAnthropicAPI, json_reply, tool_use

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_override_under_anyio() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use("price", {"item": "pear"}),
            json_reply({"item": "pear", "quantity": 1, "total": 0.75}),
        ]
    )
    with clerk.override(client=fake.client()):
        assert (await quote.run("pear", 1)).output.total == 0.75


async def test_fake_agents_under_anyio(fake_agents: FakeAnthropicAPI) -> None:
    fake_agents.add(
        tool_use("price", {"item": "apple"}),
        json_reply({"item": "apple", "quantity": 2, "total": 1.0}),
    )
    assert (await quote.run("apple", 2)).output.total == 1.0
