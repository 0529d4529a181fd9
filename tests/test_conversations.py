"""Conversations: ``agent.run(..., message_history=previous.messages)`` continues one.

Every test drives the real SDK against the fake API and reads the requests it
received: what the model would have seen.
"""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

from groundswell import (
    Agent,
    ConfigurationError,
    NodeType,
    Prompt,
    ReflectionConfig,
    TokenBudget,
    TokenBudgetExceeded,
    Tool,
    WorkflowContext,
    workflow,
)
from groundswell.budget.token_budget import SUMMARIZER_SYSTEM
from groundswell.budget.tokens import CountRequest, estimate_message, estimate_request
from groundswell.testing import (
    FakeAnthropicAPI,
    MessagesRequest,
    Reply,
    json_reply,
    text,
    tool_use,
)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent_on(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", f"conv-{uuid.uuid4().hex[:8]}")  # the answer cache is process-wide
    return Agent(client=fake.client(max_retries=0), **kw)


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


def exchange(n: int, words: int = 5) -> list[dict[str, Any]]:
    """One earlier question and its answer, about ``words`` words each."""
    filler = " ".join(f"w{n}x{i}" for i in range(words))
    return [
        {"role": "user", "content": f"Question {n}: {filler}"},
        {"role": "assistant", "content": [{"type": "text", "text": f"Answer {n}: {filler}"}]},
    ]


def well_formed(messages: list[dict[str, Any]]) -> None:
    """What the API demands: a user turn first, roles alternating."""
    assert messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"], roles(messages)


# -- continuing a conversation ---------------------------------------------------------


async def test_a_result_holds_the_whole_conversation_and_continues_it() -> None:
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), "3", "6", "12"])
    agent = agent_on(fake, tools=[add])

    first = await agent.run("What is 1 + 2?")
    assert roles(first.messages) == ["user", "assistant", "user", "assistant"]
    assert first.messages[-1] == {"role": "assistant", "content": [{"type": "text", "text": "3"}]}

    second = await agent.run("And twice that?", message_history=first.messages)
    assert second.output == "6"
    sent = fake.requests[2].messages
    assert sent == [*first.messages, {"role": "user", "content": "And twice that?"}]
    assert second.messages == [
        *sent,
        {"role": "assistant", "content": [{"type": "text", "text": "6"}]},
    ]

    # prompt() takes it too, and a conversation goes on as long as you like.
    assert await agent.prompt("Twice again?", message_history=second.messages) == "12"
    assert fake.requests[3].messages[:-1] == second.messages
    assert len(fake.requests[3].messages) == 7


async def test_stream_continues_a_conversation() -> None:
    fake = FakeAnthropicAPI(["Paris.", "About 2.1 million."])
    agent = agent_on(fake)
    first = await agent.run("Capital of France?")
    events = [e async for e in agent.stream("Population?", message_history=first.messages)]
    assert events[-1].type == "result" and events[-1].result == "About 2.1 million."
    assert fake.requests[1].stream
    assert roles(fake.requests[1].messages) == ["user", "assistant", "user"]
    assert fake.requests[1].messages[0]["content"] == "Capital of France?"


async def test_an_empty_history_is_no_history() -> None:
    fake = FakeAnthropicAPI(["hi"])
    result = await agent_on(fake).run("Hello", message_history=[])
    assert fake.requests[0].messages == [{"role": "user", "content": "Hello"}]
    assert "message_history" not in result.node.payload


async def test_the_history_is_copied_not_changed() -> None:
    fake = FakeAnthropicAPI(["a", "b"])
    agent = agent_on(fake)
    first = await agent.run("one")
    history = list(first.messages)
    snapshot = json.loads(json.dumps(history))
    second = await agent.run("two", message_history=history)
    assert history == snapshot and len(history) == 2
    assert second.messages is not history


async def test_a_structured_answer_continues_as_its_json() -> None:
    class City(BaseModel):
        name: str

    fake = FakeAnthropicAPI(['{"name": "Paris"}', "Yes."])
    agent = agent_on(fake)
    first = await agent.run(Prompt(user="A city?", response_format=City))
    assert first.output == City(name="Paris")
    await agent.run("Is it big?", message_history=first.messages)
    assert fake.requests[1].messages[1]["content"][0]["text"] == '{"name": "Paris"}'


async def test_a_history_with_tool_calls_and_a_paused_turn_is_accepted() -> None:
    fake = FakeAnthropicAPI(["ok"])
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Search, then add."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "server_tool_use", "id": "srv1", "name": "web_search", "input": {}}
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Found it."}]},  # continued
        {"role": "user", "content": "Now add."},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a1", "name": "add", "input": {"a": 1, "b": 1}},
                {"type": "tool_use", "id": "a2", "name": "add", "input": {"a": 2, "b": 2}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a2", "content": "4"},
                {"type": "tool_result", "tool_use_id": "a1", "content": "2"},
            ],
        },
        {"role": "assistant", "content": "2 and 4."},
    ]
    await agent_on(fake).run("Thanks.", message_history=history)
    assert fake.requests[0].messages == [*history, {"role": "user", "content": "Thanks."}]


# -- a bad history is refused before anything is sent -----------------------------------


def _user(text: str = "q") -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str = "a") -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


_CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}],
}


@pytest.mark.parametrize(
    ("history", "says"),
    [
        ("hello", "must be a list of Messages API message dicts"),
        ({"role": "user", "content": "q"}, "must be a list"),
        ([_user(), "a"], r"message_history\[1\] must be a message dict"),
        ([{"role": "system", "content": "x"}, _assistant()], "role must be 'user' or 'assistant'"),
        (
            [{"role": "user", "content": "q", "name": "x"}, _assistant()],
            "keys a message does not take: name",
        ),
        (
            [_assistant(), _user(), _assistant()],
            r"must start with a user turn; \[0\] is 'assistant'",
        ),
        ([_user(), _user(), _assistant()], r"\[0\] and \[1\] are both user turns"),
        (
            [_user(), _assistant(), _user()],
            r"must end with an assistant turn .*\[2\] is a user turn",
        ),
        ([_user(""), _assistant()], r"\[0\]\.content must be a non-empty string or list"),
        ([_user(), {"role": "assistant", "content": []}], r"\[1\]\.content must be a non-empty"),
        (
            [_user(), {"role": "assistant", "content": ["a"]}],
            r"\[1\]\.content\[0\] must be a content block",
        ),
        ([_user(), _CALL], r"ends with tool calls \(tool_use ids t1\) that have no tool_result"),
        ([_user(), _CALL, _assistant()], r"\[1\] calls tools .* but \[2\] is not the user turn"),
        (
            [_user(), _CALL, {"role": "user", "content": "no results"}, _assistant()],
            r"\[2\] does not answer the tool calls of the turn before \(tool_use ids t1\)",
        ),
        (
            [
                _user(),
                _assistant(),
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}],
                },
                _assistant(),
            ],
            r"\[2\] has tool_result blocks for tool_use ids the turn before did not ask for: zz",
        ),
    ],
)
async def test_a_malformed_history_is_a_configuration_error(history: Any, says: str) -> None:
    fake = FakeAnthropicAPI(["never"])
    agent = agent_on(fake, name="talker")
    with pytest.raises(ConfigurationError, match=says) as caught:
        await agent.run("Go on.", message_history=history)
    assert str(caught.value).startswith("agent 'talker': message_history")
    with pytest.raises(ConfigurationError, match=says):
        await agent.prompt("Go on.", message_history=history)
    with pytest.raises(ConfigurationError, match=says):
        async for _ in agent.stream("Go on.", message_history=history):
            pass
    assert fake.requests == []


async def test_passing_the_result_instead_of_its_messages_says_so() -> None:
    fake = FakeAnthropicAPI(["a"])
    agent = agent_on(fake)
    first = await agent.run("q")
    with pytest.raises(ConfigurationError, match=r"e\.g\. result\.messages, not the result"):
        await agent.run("q2", message_history=first)  # type: ignore[arg-type]


# -- the tree, the cache, middleware ----------------------------------------------------------


async def test_the_prompt_node_records_how_many_messages_not_what_they_say() -> None:
    fake = FakeAnthropicAPI(["fine"])
    history = [_user("my password is hunter2-SECRET"), _assistant("noted SECRET-REPLY")]
    result = await agent_on(fake).run("How are you?", message_history=history)
    assert result.node.payload["message_history"] == 2
    assert result.node.payload["user"] == "How are you?"
    saved = json.dumps(result.tree.to_json())
    assert "hunter2" not in saved and "SECRET-REPLY" not in saved
    (call,) = result.tree.find(type=NodeType.MODEL_CALL)
    assert call.payload["request"]["messages"] == 3  # a count, as for every request


async def test_the_answer_cache_key_covers_the_history() -> None:
    fake = FakeAnthropicAPI(["one", "two", "three"])
    agent = agent_on(fake, enable_cache=True)
    history = [_user("Earlier question"), _assistant("Earlier answer")]
    other = [_user("Another question"), _assistant("Another answer")]

    assert await agent.prompt("Go on.", message_history=history) == "one"
    hit = await agent.run("Go on.", message_history=history)  # the same conversation: a hit
    assert hit.output == "one" and len(fake.requests) == 1
    assert hit.node.metrics["cache"] == "hit"
    # A hit's result still holds the whole conversation, so it can be continued.
    assert hit.messages == [*history, _user("Go on."), _assistant("one")]
    assert await agent.prompt("Go on.", message_history=other) == "two"
    assert await agent.prompt("Go on.") == "three"  # no history: another key again
    assert len(fake.requests) == 3


class _Reading(BaseModel):
    value: int
    unit: str = "C"


async def test_a_hit_continues_exactly_like_the_miss_it_replays() -> None:
    # The model's own words come back on a hit (not the answer written anew,
    # which would add the default unit and tell the model it said so).
    fake = FakeAnthropicAPI([json_reply({"value": 21}), "Warm.", "Still warm."])
    agent = agent_on(fake, enable_cache=True)
    ask = Prompt(user="Temperature?", response_format=_Reading)
    miss, hit = await agent.run(ask), await agent.run(ask)
    assert hit.node.metrics["cache"] == "hit" and hit.output == miss.output
    assert hit.messages == miss.messages
    assert hit.messages[-1]["content"] == [{"type": "text", "text": '{"value": 21}'}]
    # So going on from either is one conversation: the second is a hit.
    await agent.run("And tomorrow?", message_history=miss.messages)
    again = await agent.run("And tomorrow?", message_history=hit.messages)
    assert again.node.metrics["cache"] == "hit" and len(fake.requests) == 2


async def test_hooks_and_context_providers_see_the_new_user_turn() -> None:
    seen: dict[str, Any] = {}

    async def on_prompt(
        input_data: dict[str, Any], tool_use_id: Any, context: Any
    ) -> dict[str, Any]:
        seen["hook"] = input_data["prompt"]
        return {
            "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "CTX"}
        }

    def provider(request: Any) -> str:
        seen["provider"] = request.user
        return "Be brief."

    fake = FakeAnthropicAPI(["ok"])
    agent = agent_on(fake, hooks={"UserPromptSubmit": [{"hooks": [on_prompt]}]}, context=[provider])
    history = [_user("Old question"), _assistant("Old answer")]
    await agent.run("New question", message_history=history)
    # (Context providers run after the hooks, so they see what the hook added.)
    assert seen == {"hook": "New question", "provider": "New question\n\nCTX"}
    sent = fake.requests[0].messages
    assert sent[:2] == history
    assert sent[2] == {"role": "user", "content": "New question\n\nCTX"}


async def test_a_retried_attempt_sends_the_whole_history_again() -> None:
    class Number(BaseModel):
        value: int

    fake = FakeAnthropicAPI(["not json", '{"value": 7}'])
    agent = agent_on(fake, reflection=ReflectionConfig(strategy="feedback"))
    history = [_user("Pick a number."), _assistant("Seven.")]
    result = await agent.run(
        Prompt(user="As JSON?", response_format=Number), message_history=history
    )
    assert result.output == Number(value=7)
    for request in fake.requests:
        assert request.messages[:3] == [*history, _user("As JSON?")]
    assert result.messages[:3] == [*history, _user("As JSON?")]


async def test_history_works_inside_a_workflow_step() -> None:
    fake = FakeAnthropicAPI(["first", "second"])
    agent = agent_on(fake)

    @workflow(name="chat")
    async def chat(ctx: WorkflowContext) -> str:
        one = await ctx.step("one", lambda: agent.run("Hi"))
        return await ctx.step("two", lambda: agent.prompt("Again", message_history=one.messages))

    result = await chat.run()
    assert result.output == "second"
    assert roles(fake.requests[1].messages) == ["user", "assistant", "user"]
    (_, second) = result.tree.find(type=NodeType.PROMPT)
    assert second.payload["message_history"] == 2


# -- budgets ---------------------------------------------------------------------------------

INSTRUCTION = "What did we decide?"


def budget_holding(
    history: list[dict[str, Any]], keep: int, tools: list[Any] = (), **kw: Any
) -> TokenBudget:
    """A budget with room for the instruction, ``tools`` and the last ``keep`` exchanges
    of ``history``."""
    room = sum(estimate_message(m) for m in history[len(history) - 2 * keep :])
    room += estimate_message({"role": "user", "content": INSTRUCTION})
    if tools:
        definitions = [Tool(t).definition() for t in tools]
        room += estimate_request(CountRequest(model="m", messages=[], tools=definitions))
    return TokenBudget(max_total=room + 5 + 500, reserve_for_output=500, **kw)


async def test_a_budget_drops_the_oldest_history_turns_first() -> None:
    history = [m for n in range(1, 7) for m in exchange(n, words=40)]
    fake = FakeAnthropicAPI(["We decided on 6."])
    agent = agent_on(fake, max_tokens=500, token_budget=budget_holding(history, 2))
    result = await agent.run(INSTRUCTION, message_history=history)

    sent = fake.requests[0].messages
    well_formed(sent)
    assert sent == [*history[-4:], {"role": "user", "content": INSTRUCTION}]
    (node,) = result.tree.find(type=NodeType.BUDGET)
    assert node.payload["breakdown"]["history"] == sum(estimate_message(m) for m in history)
    removed = node.payload["removed"]
    assert [r["messages"] for r in removed] == [[0, 2], [2, 4], [4, 6], [6, 8]]
    assert removed[0]["kinds"] == ["history", "user_text", "assistant_text"]
    # The result's conversation is what was sent, then the answer.
    assert result.messages == [*sent, _assistant("We decided on 6.")]


async def test_a_budget_prunes_history_and_own_turns_together_keeping_the_instruction() -> None:
    history = [m for n in range(1, 5) for m in exchange(n, words=40)]
    replies = [tool_use("add", {"a": i, "b": i}, id=f"t{i}") for i in range(1, 5)] + ["done"]
    fake = FakeAnthropicAPI(replies)
    budget = budget_holding(history, 2, tools=[add])
    agent = agent_on(fake, max_tokens=500, token_budget=budget, tools=[add])
    result = await agent.run(INSTRUCTION, message_history=history)

    instruction = {"role": "user", "content": INSTRUCTION}
    for request in fake.requests:
        well_formed(request.messages)
        assert instruction in request.messages  # never dropped
        before = request.messages[: request.messages.index(instruction)]
        assert before == history[len(history) - len(before) :]  # the newest history kept
    # The tool turns are small, so all history goes first: only then tool turns.
    assert len(fake.requests[0].messages) == 5
    assert result.output == "done"
    assert roles(result.messages)[-1] == "assistant"


async def test_summarize_condenses_the_history_into_the_instruction() -> None:
    history = [m for n in range(1, 7) for m in exchange(n, words=40)]
    summaries: list[MessagesRequest] = []

    def model(request: MessagesRequest) -> Reply:
        if request.system == SUMMARIZER_SYSTEM:
            summaries.append(request)
            return text("We talked about six questions.")
        return text("Six.")

    fake = FakeAnthropicAPI(model)
    budget = budget_holding(history, 3, strategy="summarize", keep_last_turns=2)
    agent = agent_on(fake, max_tokens=500, token_budget=budget)
    result = await agent.run(INSTRUCTION, message_history=history)

    assert result.output == "Six."
    assert "Question 1" in summaries[0].messages[0]["content"]
    (main,) = [r for r in fake.requests if r.system != SUMMARIZER_SYSTEM]
    well_formed(main.messages)
    assert main.messages[:4] == history[-4:]  # the two latest exchanges kept
    instruction = json.dumps(main.messages[4])
    assert INSTRUCTION in instruction and "We talked about six questions." in instruction
    (node,) = result.tree.find(type=NodeType.BUDGET)
    assert node.payload["summarized_turns"] == 4


async def test_a_fail_budget_names_the_history_as_what_to_shorten() -> None:
    history = [m for n in range(1, 7) for m in exchange(n, words=40)]
    fake = FakeAnthropicAPI(["never"])
    agent = agent_on(fake, max_tokens=500, token_budget=budget_holding(history, 1, strategy="fail"))
    with pytest.raises(
        TokenBudgetExceeded, match="continue from a shorter message_history"
    ) as caught:
        await agent.run(INSTRUCTION, message_history=history)
    assert caught.value.breakdown["history"] > 0
    assert fake.requests == []


async def test_a_budget_under_its_limit_leaves_the_history_alone() -> None:
    history = [m for n in range(1, 3) for m in exchange(n)]
    fake = FakeAnthropicAPI(["ok"])
    agent = agent_on(fake, max_tokens=500, token_budget=TokenBudget(max_total=100_000))
    result = await agent.run(INSTRUCTION, message_history=history)
    assert fake.requests[0].messages == [*history, {"role": "user", "content": INSTRUCTION}]
    assert result.tree.find(type=NodeType.BUDGET) == []
    assert result.node.metrics["budget"]["checks"] == 1
