"""The shop's own tests: the module-level clerk on a fake, then on a replayed recording."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import shop
from shop import Quote, clerk, quote

from groundswell import WorkflowError
from groundswell.testing import FakeAnthropicAPI, json_reply, text, tool_use, use_fake

RECORDING = Path(__file__).parent / "traces" / "quote.jsonl"


async def test_the_clerk_quotes_with_a_scripted_fake() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use("price", {"item": "apple"}),
            json_reply({"item": "apple", "quantity": 3, "total": 1.5}),
        ]
    )
    with clerk.override(client=fake.client()):
        result = await quote.run("apple", 3)
    assert result.output == Quote(item="apple", quantity=3, total=1.5)
    assert fake.requests[1].latest_tool_results()[0]["content"] == "0.5"


async def test_override_also_changes_settings_and_ends_with_the_block() -> None:
    fake = FakeAnthropicAPI(["first", "second"])
    with clerk.override(client=fake.client(), model="claude-haiku-4-5", max_tokens=256):
        await clerk.prompt("Hi")
        with clerk.override(model="claude-opus-4-1"):  # nested: the innermost wins
            await clerk.prompt("Hi again")
    assert [(r.model, r.body["max_tokens"]) for r in fake.requests] == [
        ("claude-haiku-4-5", 256),
        ("claude-opus-4-1", 256),
    ]
    assert clerk.config["model"] != "claude-haiku-4-5"


async def test_concurrent_overrides_do_not_see_each_other() -> None:
    async def ask(answer: str) -> str:
        fake = FakeAnthropicAPI([text(answer, usage={"output_tokens": 1})])
        with clerk.override(client=fake.client()):
            await asyncio.sleep(0)  # let the other task set its own override
            return await clerk.prompt("Who are you?")

    assert await asyncio.gather(ask("one"), ask("two")) == ["one", "two"]


async def test_every_agent_on_one_fake(fake_agents: FakeAnthropicAPI) -> None:
    fake_agents.add(
        tool_use("price", {"item": "pear"}),
        json_reply({"item": "pear", "quantity": 2, "total": 1.5}),
    )
    result = await quote.run("pear", 2)
    assert result.output.total == 1.5
    assert [r.last_user_text() for r in fake_agents.requests] == ["Quote 2 x pear."] * 2


async def test_the_recorded_run_replays_offline() -> None:
    fake = FakeAnthropicAPI.from_trace(RECORDING)
    with use_fake(fake):
        result = await quote.run("apple", 3)
    assert result.output == Quote(item="apple", quantity=3, total=1.5)
    assert fake.remaining == 0 and fake.mismatches == []


async def test_a_changed_tool_result_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(shop.PRICES, "apple", 0.6)
    with use_fake(FakeAnthropicAPI.from_trace(RECORDING)), pytest.raises(WorkflowError) as caught:
        await quote.run("apple", 3)
    assert "tool result 1: recorded '0.5', now '0.6'" in str(caught.value)


async def test_a_changed_prompt_is_reported() -> None:
    with use_fake(FakeAnthropicAPI.from_trace(RECORDING)), pytest.raises(WorkflowError) as caught:
        await quote.run("pear", 3)
    message = str(caught.value)
    assert "differs from the recorded run" in message
    assert "user text: recorded 'Quote 3 x apple.', now 'Quote 3 x pear.'" in message
