"""``context_ttl`` and ``context_retention`` through the real SDK against the fake API: each
test reads the requests the fake received, which are exactly what the model would have seen."""

from __future__ import annotations

from typing import Any

import pytest

from groundswell import (
    Agent,
    ConfigurationError,
    PromptOverrides,
    Tool,
    WorkflowContext,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, thinking, tool_use


def read_page(n: int) -> str:
    """Read one page of the report."""
    if n < 0:
        raise ValueError(f"page {n} does not exist")
    return f"Page {n}: " + "lorem ipsum " * 20


def results_of(request: MessagesRequest) -> dict[str, str]:
    """tool_use_id -> the content the request sends for it."""
    return {b["tool_use_id"]: str(b["content"]) for b in request.tool_results()}


def expired(request: MessagesRequest) -> list[str]:
    return [i for i, content in results_of(request).items() if "expired" in content]


def pages(count: int, **kw: Any) -> list[Reply]:
    return [tool_use("read_page", {"n": n}, id=f"t{n}", **kw) for n in range(1, count + 1)]


async def test_a_tool_result_is_sent_for_context_ttl_turns_then_replaced_by_a_note() -> None:
    fake = FakeAnthropicAPI([*pages(4), text("Done.")])
    agent = Agent(name="reader", tools=[read_page], client=fake.client(), context_ttl=2)
    result = await agent.run("Read pages 1 to 4.")

    # t1 answers turn 1: requests 2 and 3 carry it, request 4 only the note.
    assert [expired(r) for r in fake.requests] == [[], [], [], ["t1"], ["t1", "t2"]]
    note = results_of(fake.requests[3])["t1"]
    assert note == (
        "[This read_page result expired after 2 turns and was removed to keep the context "
        "small. Call read_page again with the same input if you need it.]"
    )
    assert results_of(fake.requests[4])["t3"].startswith("Page 3:")
    # Each expiry is an event on the prompt; the tool call's node keeps the whole result.
    events = [e for e in result.node.events if e["type"] == "tool_result_expired"]
    assert [(e["tool"], e["tool_use_id"], e["context_ttl"], e["turn"]) for e in events] == [
        ("read_page", "t1", 2, 4),
        ("read_page", "t2", 2, 5),
    ]
    first_call = result.tree.find(type="tool_call")[0]
    assert str(first_call.payload["output"]).startswith("Page 1:")
    # The conversation handed back is the one sent: a continuation starts from it.
    assert "expired" in str(result.messages[2]["content"][0]["content"])


async def test_a_tools_own_context_ttl_wins_over_the_agents_and_a_call_can_set_one() -> None:
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    script = [
        tool_use("read_page", {"n": 1}, id="p1"),
        tool_use("lookup", {"key": "a"}, id="l1"),
        tool_use("read_page", {"n": 2}, id="p2"),
        tool_use("lookup", {"key": "b"}, id="l2"),
        text("Done."),
    ]
    fake = FakeAnthropicAPI(script)
    agent = Agent(
        name="mixed",
        tools=[Tool(read_page, context_ttl=1), lookup],
        client=fake.client(),
        context_ttl=3,
    )
    await agent.run("Go.")
    # read_page's results live one turn, lookup's three (the agent's).
    assert [expired(r) for r in fake.requests] == [[], [], ["p1"], ["p1"], ["p1", "p2"]]

    fake = FakeAnthropicAPI(script)
    plain = Agent(name="plain", tools=[read_page, lookup], client=fake.client())
    await plain.run("Go.", PromptOverrides(context_ttl=1))
    assert [expired(r) for r in fake.requests] == [[], [], ["p1"], ["p1", "l1"], ["p1", "l1", "p2"]]


async def test_without_a_context_ttl_nothing_expires_and_failed_results_never_do() -> None:
    fake = FakeAnthropicAPI([*pages(3), text("Done.")])
    await Agent(name="keeper", tools=[read_page], client=fake.client()).run("Read.")
    assert all(expired(r) == [] for r in fake.requests)

    fake = FakeAnthropicAPI([tool_use("read_page", {"n": -1}, id="bad"), *pages(3), text("Done.")])
    agent = Agent(name="errors", tools=[read_page], client=fake.client(), context_ttl=1)
    await agent.run("Read.")
    last = results_of(fake.requests[-1])
    assert last["bad"] == "ValueError: page -1 does not exist"  # the error stays
    assert expired(fake.requests[-1]) == ["t1", "t2"]


async def test_an_expiry_is_a_rewrite_to_prompt_caching_so_no_cache_write_is_paid_for_it() -> None:
    def fetch(n: int) -> str:
        """Fetch a long document."""
        return f"Document {n}. " + "The quick brown fox jumps over the lazy dog. " * 60

    handbook = "Rule: answer precisely. " * 250  # past the minimum cacheable length

    def run_with(ttl: int | None) -> tuple[FakeAnthropicAPI, Agent]:
        fake = FakeAnthropicAPI(
            [tool_use("fetch", {"n": n}, id=f"d{n}") for n in range(1, 6)] + [text("Done.")]
        )
        agent = Agent(
            name="fetcher", tools=[fetch], system=handbook, client=fake.client(), context_ttl=ttl
        )
        return fake, agent

    fake, agent = run_with(None)
    await agent.run("Fetch five documents.")
    marked = ["cache_control" in r.body for r in fake.requests]
    assert marked == [False, False, True, True, True, True]  # the default: from turn 3 on

    fake, agent = run_with(2)
    result = await agent.run("Fetch five documents.")
    marked = ["cache_control" in r.body for r in fake.requests]
    # Turns 4 to 6 each expire a result: their prefix is new, so nothing is written.
    assert marked == [False, False, True, False, False, False]
    writes = [
        c.metrics["usage"].get("cache_creation_input_tokens", 0)
        for c in result.tree.find(type="model_call")
    ]
    assert writes[3:] == [0, 0, 0]


async def test_expiry_waits_while_thinking_is_pinned_and_then_drops_the_void_thinking() -> None:
    # Turns 1 and 2 think; their tool loop may not change before turn 2's thinking,
    # so turn 3's expiries wait; from turn 4 (no thinking pending) they happen, and
    # turn 2's thinking, now after a change, goes. The fake API checks every signature.
    script = [
        thinking("First page first.", tool_use("read_page", {"n": 1}, id="t1")),
        thinking("Then the second.", tool_use("read_page", {"n": 2}, id="t2")),
        tool_use("read_page", {"n": 3}, id="t3"),
        tool_use("read_page", {"n": 4}, id="t4"),
        text("Done."),
    ]
    fake = FakeAnthropicAPI(script)
    agent = Agent(
        name="thinker",
        tools=[read_page],
        client=fake.client(max_retries=0),
        context_ttl=1,
        thinking={"type": "enabled", "budget_tokens": 1024},
        max_tokens=2048,
    )
    result = await agent.run("Read four pages.")
    assert result.output == "Done."
    assert [expired(r) for r in fake.requests] == [[], [], [], ["t1", "t2"], ["t1", "t2", "t3"]]
    (deferred,) = [e for e in result.node.events if e["type"] == "context_ttl_deferred"]
    assert deferred["tool_use_ids"] == ["t1"] and "thinking" in deferred["reason"]
    kinds = [
        [b["type"] for b in m["content"]]
        for m in fake.requests[3].messages
        if m["role"] == "assistant"
    ]
    # Turn 1's thinking is before the first change and stays; turn 2's is after it.
    assert kinds == [["thinking", "tool_use"], ["tool_use"], ["tool_use"]]


async def test_output_only_retention_sends_a_historys_questions_and_answers_only() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use("read_page", {"n": 1}, id="t1", text="Let me read it."),
            text("Page 1 is about lorem ipsum."),
            text("It has twenty repetitions."),
        ]
    )
    agent = Agent(name="talker", tools=[read_page], client=fake.client())
    first = await agent.run("What is on page 1?")
    assert len(first.messages) == 4  # question, tool call, result, answer

    second = await agent.run(
        "How long is it?",
        PromptOverrides(context_retention="output_only"),
        message_history=first.messages,
    )
    sent = fake.requests[-1].messages
    assert sent == [
        {"role": "user", "content": "What is on page 1?"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Page 1 is about lorem ipsum."}],
        },
        {"role": "user", "content": "How long is it?"},
    ]
    assert second.messages[:2] == sent[:2]  # what was sent, handed on
    (event,) = [e for e in second.node.events if e["type"] == "context_retention"]
    assert (event["messages_before"], event["messages_after"]) == (4, 2)

    # On the agent, for every continued conversation; "full" per call sends it all again.
    fake.add(text("Twenty."), text("Yes."))
    keeper = Agent(name="talker", client=fake.client(), context_retention="output_only")
    await keeper.run("And?", message_history=first.messages)
    assert len(fake.requests[-1].messages) == 3
    await keeper.run(
        "Sure?", PromptOverrides(context_retention="full"), message_history=first.messages
    )
    assert len(fake.requests[-1].messages) == 5


async def test_between_steps_only_what_a_step_returns_reaches_the_next() -> None:
    fake = FakeAnthropicAPI(
        [*pages(2), text("<summary>Two pages of lorem ipsum.</summary>"), text("Filed.")]
    )
    reader = Agent(name="reader", tools=[read_page], client=fake.client())
    writer = Agent(name="writer", client=fake.client())

    @workflow
    async def research(ctx: WorkflowContext) -> str:
        found = await ctx.step("read", lambda: reader.prompt("Read pages 1 and 2."))
        return await ctx.step("file", lambda: writer.prompt(f"File this: {found}"))

    await research.run()
    assert fake.requests[-1].messages == [
        {"role": "user", "content": "File this: <summary>Two pages of lorem ipsum.</summary>"}
    ]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Agent(context_ttl=0), "context_ttl must be a number of model turns >= 1"),
        (lambda: Tool(read_page, context_ttl=True), "context_ttl must be a number of model turns"),
        (lambda: PromptOverrides(context_ttl=1.5), "context_ttl must be a number of model turns"),
        (
            lambda: Agent(context_retention="summary"),
            "context_retention must be 'full' (the whole message_history is sent) or 'output_only'",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(build: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


async def test_a_toolsets_tools_expire_by_their_own_context_ttl_and_others_never() -> None:
    import groundswell

    manager = groundswell.get_plugin_manager()

    class Pages:
        @groundswell.hookimpl
        def register_tool_providers(self) -> list[groundswell.ToolProvider]:
            return [
                groundswell.ToolProvider(
                    name="short_pages", factory=lambda: [Tool(read_page, context_ttl=1)]
                ),
                groundswell.ToolProvider(name="pages", factory=lambda: [read_page]),
            ]

    manager.register(Pages(), name="pages-provider")
    try:
        fake = FakeAnthropicAPI([*pages(3), text("Done.")])
        await Agent(name="brief", tools=["short_pages"], client=fake.client()).run("Read.")
        assert expired(fake.requests[-1]) == ["t1", "t2"]

        fake = FakeAnthropicAPI([*pages(3), text("Done.")])
        result = await Agent(name="whole", tools=["pages"], client=fake.client()).run("Read.")
        assert all(expired(r) == [] for r in fake.requests)
        assert not [e for e in result.node.events if e["type"].startswith("context_ttl")]
    finally:
        manager.unregister("pages-provider")
