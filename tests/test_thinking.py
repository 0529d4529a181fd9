"""Thinking blocks go back to the API as they came, and nothing edits the history before them.

Everything runs through the real `anthropic` client against the fake API, which
signs the thinking blocks it sends and refuses, with the API's own 400 messages,
a request that sends one back changed, out of place, or after a change to what
came before it.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import anthropic
import pytest

from groundswell import (
    Agent,
    ConfigurationError,
    ModelAPIError,
    NodeStatus,
    NodeType,
    TokenBudget,
    TokenBudgetExceeded,
)
from groundswell.testing import (
    FakeAnthropicAPI,
    MessagesRequest,
    Reply,
    error,
    redacted_thinking,
    text,
    thinking,
    tool_use,
)

THINK = {"type": "enabled", "budget_tokens": 2048}
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def read_page(n: int) -> str:
    """Read one page of the report.

    Args:
        n: The page number, from 1.
    """
    return f"Page {n}. " + " ".join(WORDS[(n + i) % len(WORDS)] for i in range(150))


def thinking_blocks(request: MessagesRequest) -> list[tuple[int, dict[str, Any]]]:
    """Every thinking block a request sends, with the index of its message."""
    return [
        (i, block)
        for i, message in enumerate(request.messages)
        if message["role"] == "assistant" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] in ("thinking", "redacted_thinking")
    ]


def reader(pages: int) -> FakeAnthropicAPI:
    """A fake that thinks before each of ``pages`` page reads, then before its answer."""
    script: list[Reply] = [
        thinking(f"Page {n} next.", tool_use("read_page", {"n": n}, id=f"t{n}"))
        for n in range(1, pages + 1)
    ]
    script.append(thinking("I have read it all.", text("It is about Greek letters.")))
    return FakeAnthropicAPI(script)


def reader_agent(fake: FakeAnthropicAPI, **settings: Any) -> Agent:
    return Agent(
        name="reader",
        client=fake.client(max_retries=0),
        tools=[read_page],
        thinking=THINK,
        max_tokens=4096,
        **settings,
    )


# -- the tool loop ---------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["create", "stream"])
async def test_a_tool_loop_sends_every_thinking_block_back_with_its_signature(
    streaming: bool,
) -> None:
    fake = FakeAnthropicAPI(
        [
            thinking("Add 1 and 2 first.", tool_use("read_page", {"n": 1}, id="t1")),
            redacted_thinking(
                thinking("Now page 2.", tool_use("read_page", {"n": 2}, id="t2"), signature="s-2"),
                data="opaque-redacted-data",
            ),
            thinking("", tool_use("read_page", {"n": 3}, id="t3")),  # thinking display omitted
            thinking("Done.", text("It is about Greek letters.")),
        ]
    )
    agent = reader_agent(fake)
    if streaming:
        events = [event async for event in agent.stream("Read three pages.")]
        output = events[-1].result
    else:
        output = await agent.prompt("Read three pages.")

    assert output == "It is about Greek letters."
    assert len(fake.requests) == 4  # the fake refused none of them
    sent = [thinking_blocks(r) for r in fake.requests]
    assert sent[0] == []
    # Each request resends every earlier block exactly as the one before sent it.
    for before, after in itertools.pairwise(sent):
        assert after[: len(before)] == before
    final = sent[3]
    assert [(i, b["type"]) for i, b in final] == [
        (1, "thinking"),
        (3, "redacted_thinking"),
        (3, "thinking"),
        (5, "thinking"),
    ]
    first, redacted, scripted, empty = (b for _, b in final)
    assert first["thinking"] == "Add 1 and 2 first." and first["signature"]
    assert redacted == {"type": "redacted_thinking", "data": "opaque-redacted-data"}
    assert scripted == {"type": "thinking", "thinking": "Now page 2.", "signature": "s-2"}
    assert empty["thinking"] == "" and empty["signature"]
    # In place: first in their turn, before its tool call.
    for message in fake.requests[3].messages[1::2]:
        assert message["content"][0]["type"] in ("thinking", "redacted_thinking")
        assert message["content"][-1]["type"] == "tool_use"


async def test_a_continued_conversation_sends_its_history_thinking_back_unchanged() -> None:
    fake = reader(pages=2)
    fake.add(thinking("Short answer.", text("Greek letters, again.")))
    agent = reader_agent(fake)
    first = await agent.run("Read two pages.")
    history = first.messages
    assert len(thinking_blocks(fake.requests[-1])) == 2

    second = await agent.run("And in one line?", message_history=history)

    assert second.output == "Greek letters, again."
    sent = fake.requests[-1]
    assert sent.messages[: len(history)] == history  # thinking blocks and all
    assert len(thinking_blocks(sent)) == 3
    assert second.messages[: len(history)] == history


# -- what the fake refuses, as the API does ------------------------------------------------


async def first_tool_turn(
    fake: FakeAnthropicAPI, client: anthropic.AsyncAnthropic
) -> list[dict[str, Any]]:
    """A conversation one tool call long, as the API answered it: [user, assistant, results]."""
    user = {"role": "user", "content": "Read page 1."}
    reply = await client.messages.create(
        model="m", max_tokens=4096, messages=[user], thinking=THINK
    )
    assistant = {
        "role": "assistant",
        "content": [b.model_dump(exclude_none=True) for b in reply.content],
    }
    results = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": read_page(1)}],
    }
    return [user, assistant, results]


async def refusal(client: anthropic.AsyncAnthropic, messages: list[Any], **thinking: Any) -> str:
    """The fake's 400 message for ``messages`` (``"accepted"`` when it answers)."""
    try:
        await client.messages.create(
            model="m", max_tokens=4096, messages=messages, thinking={**THINK, **thinking}
        )
    except anthropic.BadRequestError as exc:
        refused = exc
    else:
        return "accepted"
    assert refused.status_code == 400
    body = refused.body["error"]  # type: ignore[index]
    assert body["type"] == "invalid_request_error"
    return str(body["message"])


async def test_the_fake_refuses_thinking_blocks_sent_back_changed() -> None:
    reply = thinking("Plan.", thinking("Page 1.", tool_use("read_page", {"n": 1}, id="t1")))
    fake = FakeAnthropicAPI([reply] + ["ok"] * 9)
    client = fake.client(max_retries=0)
    good = await first_tool_turn(fake, client)
    assert await refusal(client, good) == "accepted"

    moved = copy.deepcopy(good)
    moved[1]["content"][:2] = moved[1]["content"][1::-1]
    assert "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest" in (
        await refusal(client, moved)
    )
    partly = copy.deepcopy(good)
    del partly[1]["content"][1]
    assert "messages.1.content.1: `thinking` or `redacted_thinking` blocks in the latest" in (
        await refusal(client, partly)
    )

    missing = copy.deepcopy(good)
    missing[1]["content"] = missing[1]["content"][2:]
    assert (await refusal(client, missing)).startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with "
        "a thinking block"
    )
    edited = copy.deepcopy(good)
    edited[1]["content"][0]["thinking"] = "Plan B."
    assert await refusal(client, edited) == (
        "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest "
        "assistant message cannot be modified. These blocks must remain as they were in the "
        "original response."
    )

    changed_before = copy.deepcopy(good)
    changed_before[0]["content"] = "Read page 1, please."
    assert await refusal(client, changed_before) == (
        "messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound "
        "to a different conversation. Remove the block, or set "
        '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
    )
    binding = {"block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    assert await refusal(client, changed_before, **binding) == "accepted"

    # An earlier turn's block: forged, or edited, it is refused too.
    later = [*copy.deepcopy(good), {"role": "assistant", "content": "Read."}]
    later.append({"role": "user", "content": "Thanks."})
    later[1]["content"][0]["signature"] = "forged"
    assert await refusal(client, later) == (
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    )
    # Markers the API leaves out of the comparison change nothing.
    marked = copy.deepcopy(good)
    marked[0]["content"] = [
        {"type": "text", "text": "Read page 1.", "cache_control": {"type": "ephemeral"}}
    ]
    assert await refusal(client, marked) == "accepted"


async def test_the_fake_refuses_a_block_from_another_conversation() -> None:
    fake = FakeAnthropicAPI([thinking("Plan.", tool_use("read_page", {"n": 1}, id="t1")), "ok"])
    client = fake.client(max_retries=0)
    good = await first_tool_turn(fake, client)
    other = Agent(name="other", client=client, thinking=THINK, system="You are someone else.")
    with pytest.raises(ModelAPIError, match="bound to a different conversation"):
        await other.prompt(
            "Go on.", message_history=[*good, {"role": "assistant", "content": "ok"}]
        )


def test_thinking_replies_are_checked_when_scripted() -> None:
    with pytest.raises(ConfigurationError, match="thinking\\(\\) takes the thinking text"):
        thinking(42, text("hi"))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="'signature' is not a string"):
        Reply(
            [{"type": "thinking", "thinking": "x", "signature": 7}, {"type": "text", "text": "y"}]
        )
    with pytest.raises(ConfigurationError, match="an error has none"):
        thinking("x", error(500))  # type: ignore[arg-type]


# -- budgets -------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["sliding_window", "prune_oldest", "summarize"])
async def test_a_budget_refuses_to_cut_into_a_tool_loop_with_thinking(strategy: str) -> None:
    fake = reader(pages=4)
    # Room for the tools, the instruction and two page turns, not three.
    budget = TokenBudget(
        max_total=1_400, reserve_for_output=500, strategy=strategy, keep_last_turns=1
    )
    agent = reader_agent(fake, token_budget=budget)

    with pytest.raises(TokenBudgetExceeded) as caught:
        await agent.run("Read four pages.")

    message = str(caught.value)
    assert f"{strategy} may not make it fit" in message
    assert "holds thinking blocks" in message and "raise max_total" in message
    assert caught.value.breakdown["total"] > caught.value.breakdown["limit"]
    # Nothing was cut: every request sent kept each thinking block where it was.
    assert len(fake.requests) == 3
    for request in fake.requests:
        assert request.messages[0] == {"role": "user", "content": "Read four pages."}
    assert len(thinking_blocks(fake.requests[-1])) == 2

    # What the strategy would have sent (the oldest turn dropped), the API refuses.
    cut = copy.deepcopy(fake.requests[-1].messages)
    del cut[1:3]
    client = fake.client(max_retries=0)
    assert "bound to a different conversation" in await refusal(client, cut)


async def test_a_budget_drops_the_thinking_its_cut_made_stale() -> None:
    fake = reader(pages=2)
    fake.add(thinking("One line.", text("Greek letters.")), thinking("Again.", text("Letters.")))
    agent = reader_agent(fake)
    first = await agent.run("Read two pages.")
    second = await agent.run("And in one line?", message_history=first.messages)
    history = second.messages
    assert len(thinking_blocks(fake.requests[-1])) == 3
    # Room for the tools, the new instruction and the last exchange, not the tool loop.
    budget = TokenBudget(max_total=1_100, reserve_for_output=500)

    result = await reader_agent(fake, token_budget=budget).run("Shorter?", message_history=history)

    assert result.output == "Letters."
    sent = fake.requests[-1]  # the fake accepted it: no block went back after the cut
    assert sent.messages == [
        {"role": "user", "content": "And in one line?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Greek letters."}]},
        {"role": "user", "content": "Shorter?"},
    ]
    budgets = result.tree.find(type=NodeType.BUDGET)
    assert [b.status for b in budgets] == [NodeStatus.COMPLETED]
    # Sent without the cut, the same history is refused.
    cut = [m for m in history if m["content"] != "Read two pages."]
    assert "bound to a different conversation" in await refusal(
        fake.client(max_retries=0), [*cut[-2:], {"role": "user", "content": "Shorter?"}]
    )
