"""Every stop reason, broken answer and Retry-After has one outcome (docs/agents.md's table).

Each row goes through the real ``anthropic`` client against the fake API,
streamed and not where the wire differs: the error a user catches, the node
left ``failed`` (never ``running``) and the event on it.
"""

from __future__ import annotations

import email.utils
import time
from typing import Any, get_args

import pytest
from anthropic.types import StopReason
from anthropic.types.beta import BetaStopReason

from groundswell import (
    Agent,
    ContextWindowExceeded,
    EventTree,
    GroundswellError,
    ModelAPIError,
    ModelRefused,
    NodeStatus,
    NodeType,
    OutputTruncated,
    Prompt,
    PromptOverrides,
    ReflectionConfig,
    WorkflowContext,
    WorkflowError,
    workflow,
)
from groundswell.agent.loop import MID_STREAM_RETRIES
from groundswell.testing import (
    FakeAnthropicAPI,
    Reply,
    error,
    raw_reply,
    text,
    tool_use,
)

ran: list[dict[str, Any]] = []


def write_file(path: str, body: str) -> str:
    """Write a file."""
    ran.append({"path": path, "body": body})
    return "written"


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    ran.clear()


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "writer")
    return Agent(client=fake.client(max_retries=kw.pop("max_retries", 2)), **kw)


async def ask(
    agent: Agent, *, stream: bool, overrides: PromptOverrides | None = None
) -> tuple[Any, EventTree]:
    """The answer to one prompt and its tree; a failure's tree rides on its WorkflowError."""

    @workflow
    async def flow(ctx: WorkflowContext) -> Any:
        if stream:
            return [e async for e in agent.stream("go", overrides)][-1].result
        return await agent.prompt("go", overrides)

    result = await flow.run()
    return result.output, result.tree


async def fails(
    agent: Agent, *, stream: bool, overrides: PromptOverrides | None = None
) -> tuple[BaseException, EventTree]:
    """The error one prompt raises, and its tree, with no node left running."""
    with pytest.raises(WorkflowError) as caught:
        await ask(agent, stream=stream, overrides=overrides)
    assert caught.value.result is not None
    tree = caught.value.result.tree
    assert all(n.status is not NodeStatus.RUNNING for n in tree.walk())
    cause = caught.value.__cause__
    assert cause is not None
    return cause, tree


def model_calls(tree: EventTree) -> list[Any]:
    return tree.find(type=NodeType.MODEL_CALL)


def events(node: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in node.events if e["type"] == kind]


both = pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
PARTIAL = {"type": "text", "text": "Let me write it."}
CUT_CALL = {
    "type": "tool_use",
    "id": "toolu_cut",
    "name": "write_file",
    "input": {"path": "notes.md"},
}


# -- every stop reason ------------------------------------------------------------------

# What a reply with a text block and each stop reason comes to, followed by text("next").
OUTCOMES: dict[str, Any] = {
    "end_turn": "partial",
    "stop_sequence": "partial",
    "tool_use": "partial",  # no tool_use block in it: nothing to run, the text is the answer
    "max_tokens": "partial",  # plain text: the answer, with a `truncated` event
    "pause_turn": "next",
    "compaction": "next",
    "refusal": ModelRefused,
    "model_context_window_exceeded": ContextWindowExceeded,
}


def test_every_stop_reason_the_sdk_knows_has_an_outcome_here() -> None:
    # A stop reason a newer SDK adds fails here, until the table (and the loop) say what it does.
    known = set(get_args(StopReason)) | set(get_args(BetaStopReason))
    assert known == set(OUTCOMES)


@pytest.mark.parametrize("stop_reason", sorted(OUTCOMES))
async def test_each_stop_reason_has_its_defined_outcome(stop_reason: str) -> None:
    fake = FakeAnthropicAPI(
        [Reply([{"type": "text", "text": "partial"}], stop_reason=stop_reason), text("next")]
    )
    expected = OUTCOMES[stop_reason]
    if isinstance(expected, str):
        output, _ = await ask(agent_for(fake), stream=False)
        assert output == expected
    else:
        exc, _ = await fails(agent_for(fake), stream=False)
        assert type(exc) is expected


@both
async def test_a_stop_reason_nobody_knows_is_an_error_not_an_answer(stream: bool) -> None:
    body = {
        "id": "msg_new",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "who knows"}],
        "stop_reason": "brand_new_reason",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    exc, tree = await fails(agent_for(FakeAnthropicAPI([raw_reply(body)])), stream=stream)
    assert isinstance(exc, ModelAPIError) and "brand_new_reason" in str(exc)
    assert "upgrade groundswell" in str(exc)
    (call,) = model_calls(tree)
    assert call.status is NodeStatus.FAILED
    assert events(call, "unknown_stop_reason")[0]["stop_reason"] == "brand_new_reason"


@both
async def test_plain_answers_and_tool_calls_go_on_as_before(stream: bool) -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use("write_file", {"path": "a.md", "body": "hi"}),
            text("done", stop_reason="stop_sequence"),
        ]
    )
    output, tree = await ask(agent_for(fake, tools=[write_file]), stream=stream)
    assert output == "done" and ran == [{"path": "a.md", "body": "hi"}]
    assert [c.status for c in model_calls(tree)] == [NodeStatus.COMPLETED] * 2


@both
async def test_pause_turn_and_compaction_send_the_reply_back_for_another_turn(
    stream: bool,
) -> None:
    fake = FakeAnthropicAPI(
        [
            Reply([{"type": "text", "text": "searching"}], stop_reason="pause_turn"),
            Reply([{"type": "text", "text": "summary"}], stop_reason="compaction"),
            text("finished"),
        ]
    )
    output, _ = await ask(agent_for(fake), stream=stream)
    assert output == "finished"
    last = fake.requests[2].messages
    assert [m["role"] for m in last] == ["user", "assistant", "assistant"]


# -- refusal ----------------------------------------------------------------------------


@both
async def test_a_refusal_is_model_refused_with_an_event_on_the_failed_model_call(
    stream: bool,
) -> None:
    fake = FakeAnthropicAPI([Reply([{"type": "text", "text": "I can't"}], stop_reason="refusal")])
    exc, tree = await fails(agent_for(fake), stream=stream)
    assert isinstance(exc, ModelRefused) and isinstance(exc, ModelAPIError)
    assert exc.stop_reason == "refusal" and exc.raw == "I can't"
    assert "refused" in str(exc) and "rephrase" in str(exc)
    (call,) = model_calls(tree)
    assert call.status is NodeStatus.FAILED and call.error["type"] == "ModelRefused"
    assert events(call, "refusal")
    assert call.payload["response"]["stop_reason"] == "refusal"
    (prompt,) = tree.find(type=NodeType.PROMPT)
    assert prompt.status is NodeStatus.FAILED


async def test_a_refusal_carries_the_apis_stop_details() -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": "Exploit code."}
    body = {**GOOD_BODY, "content": [], "stop_reason": "refusal", "stop_details": details}
    exc, tree = await fails(agent_for(FakeAnthropicAPI([raw_reply(body)])), stream=False)
    assert isinstance(exc, ModelRefused)
    assert (exc.category, exc.explanation) == ("cyber", "Exploit code.")
    assert "category cyber" in str(exc) and "Exploit code." in str(exc)
    (event,) = events(model_calls(tree)[0], "refusal")
    assert (event["category"], event["explanation"]) == ("cyber", "Exploit code.")


async def test_a_reflecting_agent_answers_after_a_refusal() -> None:
    fake = FakeAnthropicAPI([Reply([], stop_reason="refusal"), text("Here is a safe answer.")])
    agent = agent_for(fake, reflection=ReflectionConfig(strategy="feedback"))
    output, tree = await ask(agent, stream=False)
    assert output == "Here is a safe answer."
    first, second = tree.find(type=NodeType.PROMPT)
    assert first.status is NodeStatus.FAILED and second.status is NodeStatus.COMPLETED
    assert len(tree.find(type=NodeType.REFLECTION)) == 1
    # The retry tells the model why its first reply could not be used.
    assert "refused" in fake.requests[1].last_user_text()


# -- the context window -----------------------------------------------------------------


@both
async def test_a_full_context_window_is_context_window_exceeded(stream: bool) -> None:
    fake = FakeAnthropicAPI(
        [
            Reply(
                [{"type": "text", "text": "The long report begins"}],
                stop_reason="model_context_window_exceeded",
            )
        ]
    )
    exc, tree = await fails(
        agent_for(fake, enable_reflection=True), stream=stream
    )  # no reflection retries what cannot change
    assert isinstance(exc, ContextWindowExceeded) and exc.raw == "The long report begins"
    assert "context window" in str(exc) and "TokenBudget" in str(exc)
    assert len(fake.requests) == 1
    (call,) = model_calls(tree)
    assert call.status is NodeStatus.FAILED
    assert events(call, "context_window_exceeded")[0]["characters"] == 22


# -- max_tokens -------------------------------------------------------------------------


@both
async def test_max_tokens_inside_a_tool_call_is_output_truncated(stream: bool) -> None:
    fake = FakeAnthropicAPI([Reply([PARTIAL, CUT_CALL], stop_reason="max_tokens")])
    exc, tree = await fails(agent_for(fake, tools=[write_file], max_tokens=300), stream=stream)
    assert isinstance(exc, OutputTruncated)
    assert exc.tool_name == "write_file" and exc.max_tokens == 300 and exc.raw == PARTIAL["text"]
    assert "max_tokens=300" in str(exc) and "continue_on_max_tokens=True" in str(exc)
    assert ran == []  # the cut-off call never ran
    (call,) = model_calls(tree)
    assert call.status is NodeStatus.FAILED
    assert events(call, "output_truncated")[0] == {
        **events(call, "output_truncated")[0],
        "tool": "write_file",
        "max_tokens": 300,
    }


@both
async def test_continue_on_max_tokens_asks_for_another_turn(stream: bool) -> None:
    fake = FakeAnthropicAPI(
        [
            Reply([PARTIAL, CUT_CALL], stop_reason="max_tokens"),
            tool_use("write_file", {"path": "notes.md", "body": "short"}),
            text("written"),
        ]
    )
    agent = agent_for(fake, tools=[write_file], continue_on_max_tokens=True)
    output, tree = await ask(agent, stream=stream)
    assert output == "written" and ran == [{"path": "notes.md", "body": "short"}]
    # The cut-off call is dropped (it never ran), the text kept, and the model told.
    sent = fake.requests[1].messages
    assert sent[1] == {"role": "assistant", "content": [PARTIAL]}
    assert sent[2]["role"] == "user" and "max_tokens" in sent[2]["content"]
    first = model_calls(tree)[0]
    assert first.status is NodeStatus.COMPLETED
    assert events(first, "max_tokens_continue")[0]["tool"] == "write_file"


async def test_continue_on_max_tokens_set_on_the_prompt_overrides_applies() -> None:
    fake = FakeAnthropicAPI([Reply([CUT_CALL], stop_reason="max_tokens"), text("fine")])
    agent = agent_for(fake, tools=[write_file])
    output, _ = await ask(
        agent, stream=False, overrides=PromptOverrides(continue_on_max_tokens=True)
    )
    assert output == "fine"
    # Nothing but the call was in the cut-off reply: no empty assistant turn is sent.
    assert [m["role"] for m in fake.requests[1].messages] == ["user", "user"]


async def test_a_model_that_keeps_running_out_ends_at_max_turns() -> None:
    fake = FakeAnthropicAPI([Reply([CUT_CALL], stop_reason="max_tokens") for _ in range(3)])
    agent = agent_for(fake, tools=[write_file], continue_on_max_tokens=True, max_turns=3)
    exc, _ = await fails(agent, stream=False)
    assert "max_turns=3" in str(exc) and "raise max_tokens" in str(exc)


@both
async def test_max_tokens_on_plain_text_is_the_answer_with_a_truncated_event(
    stream: bool,
) -> None:
    fake = FakeAnthropicAPI([text("The answer is cut sh", stop_reason="max_tokens")])
    output, tree = await ask(agent_for(fake, max_tokens=5), stream=stream)
    assert output == "The answer is cut sh"
    (prompt,) = tree.find(type=NodeType.PROMPT)
    assert events(prompt, "truncated")[0]["max_tokens"] == 5


# -- broken streams and bodies ----------------------------------------------------------


async def test_a_stream_without_message_stop_is_retried_then_an_error() -> None:
    cut = Reply([{"type": "text", "text": "x" * 240}], cut_stream=True)
    fake = FakeAnthropicAPI([cut, text("whole")])
    output, tree = await ask(agent_for(fake), stream=True)
    assert output == "whole"
    failed, done = model_calls(tree)
    assert failed.status is NodeStatus.FAILED and done.status is NodeStatus.COMPLETED
    assert "message_stop" in failed.error["message"]

    fake.add(*[cut] * (MID_STREAM_RETRIES + 1))
    exc, tree = await fails(agent_for(fake), stream=True)
    assert isinstance(exc, ModelAPIError) and "message_stop" in str(exc)
    assert "after 112 characters" in str(exc)  # of 240: never taken for the whole answer
    calls = model_calls(tree)
    assert len(calls) == MID_STREAM_RETRIES + 1
    assert {c.status for c in calls} == {NodeStatus.FAILED}
    (prompt,) = tree.find(type=NodeType.PROMPT)
    assert len(events(prompt, "stream_retry")) == MID_STREAM_RETRIES


async def test_a_body_cut_in_two_is_a_typed_error() -> None:
    cut = Reply([{"type": "text", "text": "x" * 240}], cut_stream=True)
    exc, tree = await fails(agent_for(FakeAnthropicAPI([cut])), stream=False)
    assert isinstance(exc, ModelAPIError) and "not JSON" in str(exc)
    (call,) = model_calls(tree)
    assert call.status is NodeStatus.FAILED


GOOD_BODY: dict[str, Any] = {
    "id": "msg_x",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 2},
}


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD_BODY.items() if k != key}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (without("content"), "content is missing"),
        ({**GOOD_BODY, "content": "hi"}, "content is str"),
        ({**GOOD_BODY, "content": [{"type": "text"}]}, "text block 0 has no string text"),
        ({**GOOD_BODY, "content": [{"text": "hi"}]}, "content block 0"),
        (without("stop_reason"), "stop_reason is missing"),
        ({**GOOD_BODY, "stop_reason": 7}, "stop_reason is int"),
        (without("usage"), "usage is missing"),
        ({**GOOD_BODY, "usage": "lots"}, "usage is str"),
        ([GOOD_BODY], "content is missing"),
    ],
    ids=[
        "no-content",
        "string-content",
        "text-without-text",
        "block-without-type",
        "no-stop-reason",
        "int-stop-reason",
        "no-usage",
        "string-usage",
        "a-list",
    ],
)
async def test_a_malformed_body_is_a_typed_error_on_a_failed_node(body: Any, problem: str) -> None:
    fake = FakeAnthropicAPI([raw_reply(body)])
    exc, tree = await fails(agent_for(fake), stream=False)
    assert type(exc) is ModelAPIError and exc.status_code == 200
    assert "malformed" in str(exc) and problem in str(exc)
    (call,) = model_calls(tree)
    assert call.status is NodeStatus.FAILED and call.error["type"] == "ModelAPIError"


async def test_a_streamed_answer_without_a_stop_reason_is_malformed() -> None:
    fake = FakeAnthropicAPI([raw_reply(without("stop_reason"))])
    exc, tree = await fails(agent_for(fake), stream=True)
    assert isinstance(exc, ModelAPIError) and "stop_reason is missing" in str(exc)
    assert model_calls(tree)[0].status is NodeStatus.FAILED


@both
async def test_tool_input_that_is_not_an_object_is_an_error_result_for_the_model(
    stream: bool,
) -> None:
    call = {"type": "tool_use", "id": "toolu_bad", "name": "write_file", "input": "notes.md"}
    fake = FakeAnthropicAPI(
        [raw_reply({**GOOD_BODY, "content": [call], "stop_reason": "tool_use"}), text("sorry")]
    )
    output, tree = await ask(agent_for(fake, tools=[write_file]), stream=stream)
    assert output == "sorry" and ran == []
    (result,) = fake.requests[1].tool_results()
    assert result["is_error"] is True and result["tool_use_id"] == "toolu_bad"
    assert "must be a JSON object" in result["content"] and "did not run" in result["content"]
    (node,) = tree.find(type=NodeType.TOOL_CALL)
    assert node.status is NodeStatus.FAILED and node.payload["input"] == "notes.md"


# -- Retry-After ------------------------------------------------------------------------


@both
async def test_a_short_retry_after_is_waited_for_with_an_event(stream: bool) -> None:
    fake = FakeAnthropicAPI([error(429, retry_after=0.2), text("ok")])
    started = time.monotonic()
    output, tree = await ask(agent_for(fake), stream=stream)
    assert output == "ok" and time.monotonic() - started >= 0.2
    (call,) = model_calls(tree)
    (wait,) = events(call, "retry_wait")
    assert wait["seconds"] == 0.2 and wait["status"] == 429 and wait["attempt"] == 1
    assert call.status is NodeStatus.COMPLETED and len(fake.requests) == 2


@both
async def test_a_retry_after_beyond_max_retry_wait_fails_at_once(stream: bool) -> None:
    fake = FakeAnthropicAPI([error(429, retry_after=3600), text("never")])
    started = time.monotonic()
    exc, tree = await fails(agent_for(fake), stream=stream)
    assert time.monotonic() - started < 1
    assert isinstance(exc, ModelAPIError) and exc.status_code == 429
    assert exc.error_type == "rate_limit_error" and exc.retry_after == 3600
    assert "max_retry_wait=60" in str(exc) and "3600" in str(exc)
    assert type(exc.__cause__).__name__ == "RateLimitError"  # the SDK's own error
    assert len(fake.requests) == 1
    (call,) = model_calls(tree)
    assert call.status is NodeStatus.FAILED and not events(call, "retry_wait")


async def test_max_retry_wait_on_prompt_overrides_applies() -> None:
    fake = FakeAnthropicAPI([error(529, retry_after=0.2), text("ok")])
    exc, _ = await fails(
        agent_for(fake), stream=False, overrides=PromptOverrides(max_retry_wait=0.1)
    )
    assert isinstance(exc, ModelAPIError) and exc.status_code == 529
    assert "max_retry_wait=0.1" in str(exc)
    # The agent's own setting, and a Prompt's, apply the same way.
    fake.add(error(529, retry_after=0.2), text("ok"))
    assert await agent_for(fake, max_retry_wait=0.5).prompt("go") == "ok"
    fake.add(error(529, retry_after=0.2))
    with pytest.raises(ModelAPIError, match=r"max_retry_wait=0\.1"):
        await agent_for(fake).prompt(Prompt(user="go", max_retry_wait=0.1))


async def test_a_retry_after_date_counts_too() -> None:
    late = error(429)
    late.headers["retry-after"] = email.utils.formatdate(time.time() + 3600, usegmt=True)
    fake = FakeAnthropicAPI([late])
    with pytest.raises(ModelAPIError, match="max_retry_wait=60") as caught:
        await agent_for(fake).prompt("go")
    assert 3500 < (caught.value.retry_after or 0) <= 3600


async def test_without_retry_after_the_wait_backs_off_and_retries_stay_the_clients() -> None:
    fake = FakeAnthropicAPI([error(529), error(500), text("ok")])
    output, tree = await ask(agent_for(fake, max_retries=2), stream=False)
    assert output == "ok"
    first, second = events(model_calls(tree)[0], "retry_wait")
    assert 0.375 <= first["seconds"] <= 0.5 and 0.75 <= second["seconds"] <= 1.0
    assert (first["status"], second["status"]) == (529, 500)
    # The client's max_retries still counts the retries; 4xx other than 408/409/429 never.
    fake.add(error(529), error(529))
    exc, _ = await fails(agent_for(fake, max_retries=1), stream=False)
    assert isinstance(exc, ModelAPIError) and exc.status_code == 529
    assert fake.remaining == 0
    fake.add(error(400), text("never"))
    with pytest.raises(ModelAPIError, match="400"):
        await agent_for(fake).prompt("go")


async def test_the_server_can_forbid_a_retry() -> None:
    refused = error(529, retry_after=0.01)
    refused.headers["x-should-retry"] = "false"
    fake = FakeAnthropicAPI([refused, text("never")])
    with pytest.raises(ModelAPIError, match="529"):
        await agent_for(fake).prompt("go")
    assert len(fake.requests) == 1


def test_every_new_error_is_a_model_api_error() -> None:
    for kind in (ModelRefused, ContextWindowExceeded, OutputTruncated):
        assert issubclass(kind, ModelAPIError) and issubclass(kind, GroundswellError)


async def test_continue_keeps_a_server_tools_call_with_its_result_and_drops_the_cut_call() -> None:
    search = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "groundswell"},
    }
    found = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    fake = FakeAnthropicAPI(
        [Reply([PARTIAL, search, found, CUT_CALL], stop_reason="max_tokens"), text("done")]
    )
    agent = agent_for(fake, tools=[write_file], continue_on_max_tokens=True)
    output, _ = await ask(agent, stream=False)
    assert output == "done"
    sent = fake.requests[1].messages[1]["content"]
    assert [b["type"] for b in sent] == ["text", "server_tool_use", "web_search_tool_result"]


@both
async def test_a_reply_cut_off_while_thinking_is_no_answer_but_output_truncated(
    stream: bool,
) -> None:
    cut = Reply(
        [{"type": "thinking", "thinking": "Let me see...", "signature": "s"}],
        stop_reason="max_tokens",
    )
    fake = FakeAnthropicAPI([cut])
    exc, tree = await fails(agent_for(fake), stream=stream)
    assert isinstance(exc, OutputTruncated) and "still thinking" in str(exc)
    assert events(model_calls(tree)[0], "output_truncated")
