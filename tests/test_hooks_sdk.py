"""Claude Agent SDK hooks, event by event: where each fires and what its input holds.

Every row of the tables in the "Hooks" section of docs/tools.md names the test
that shows it; `test_docs_table_names_every_sdk_event_field_and_a_test` keeps
the tables, the installed ``claude_agent_sdk`` and these tests in step. Output
fields and failure handling: tests/test_hooks_sdk_outputs.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import sys
import time
import typing
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import HookContext, HookMatcher
from claude_agent_sdk import types as sdk

from groundswell import (
    Agent,
    EventTree,
    HookStopped,
    NodeType,
    Prompt,
    PromptBlocked,
    TokenBudget,
    TokenBudgetExceeded,
    Tool,
)
from groundswell.hooks.middleware import CANCELLED_DEADLINE
from groundswell.hooks.runner import HOOK_EVENTS, SILENT_EVENTS
from groundswell.model import batching
from groundswell.testing import FakeAnthropicAPI, error, text, tool_calls, tool_use

DOCS = Path(__file__).resolve().parent.parent / "docs" / "tools.md"
Hook = dict[str, list[Any]]


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "worker")
    return Agent(client=fake.client(max_retries=kw.pop("max_retries", 0)), **kw)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def record(seen: list[dict[str, Any]], answer: dict[str, Any] | None = None) -> Any:
    """A callback that keeps each input it gets and answers ``answer``."""

    async def hook(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        seen.append({**input_data, "_tool_use_id": tool_use_id, "_context": context})
        return answer if answer is not None else {}

    return hook


def gone(path: str) -> bool:
    return not Path(path).exists()


def remove_folder(path: str) -> None:
    Path(path).rmdir()


def spec(event: str, **fields: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, **fields}}


# -- a hooks= dict written for claude-agent-sdk ---------------------------------------


async def test_sdk_hooks_dict_works_unchanged() -> None:
    ran: list[str] = []

    async def check_bash_command(
        input_data: sdk.HookInput, tool_use_id: str | None, context: HookContext
    ) -> sdk.HookJSONOutput:
        if input_data["hook_event_name"] != "PreToolUse":
            return {}
        if "rm -rf" in input_data["tool_input"].get("command", ""):
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "Dangerous command blocked",
                }
            }
        return {}

    seen: list[tuple[str | None, HookContext]] = []

    async def log_use(
        input_data: sdk.HookInput, tool_use_id: str | None, context: HookContext
    ) -> sdk.HookJSONOutput:
        seen.append((tool_use_id, context))
        output: sdk.SyncHookJSONOutput = {
            "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "logged"}
        }
        return output

    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    hooks: dict[sdk.HookEvent, list[HookMatcher]] = {
        "PreToolUse": [HookMatcher(matcher="Bash", hooks=[check_bash_command], timeout=30)],
        "PostToolUse": [HookMatcher(hooks=[log_use])],
    }
    fake = FakeAnthropicAPI(
        [
            tool_calls(("Bash", {"command": "rm -rf /"}), ("Bash", {"command": "ls"})),
            text("done"),
        ]
    )
    agent = agent_for(fake, tools=[Tool(bash, name="Bash")], hooks=hooks)
    assert await agent.prompt("clean up") == "done"
    denied, listed = fake.requests[1].tool_results()
    assert denied["is_error"] and "Dangerous command blocked" in denied["content"]
    assert listed["content"] == "ran ls\n\nlogged" and ran == ["ls"]
    assert seen == [(listed["tool_use_id"], {"signal": None})]


# -- events -------------------------------------------------------------------------


async def test_event_pre_tool_use_fires_before_the_tool_with_its_input() -> None:
    seen: list[dict[str, Any]] = []
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}, id="toolu_1"), text("3")])
    hooks: Hook = {"PreToolUse": [HookMatcher("add", [record(seen)])]}
    await agent_for(fake, tools=[add], hooks=hooks).prompt("1+2")
    (got,) = seen
    assert got["tool_name"] == "add" and got["tool_input"] == {"a": 1, "b": 2}
    assert got["tool_use_id"] == got["_tool_use_id"] == "toolu_1"
    assert got["agent_type"] == "worker" and "agent_id" not in got  # the main agent


async def test_event_post_tool_use_sees_the_result_and_its_duration() -> None:
    seen: list[dict[str, Any]] = []
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    await agent_for(fake, tools=[add], hooks={"PostToolUse": [record(seen)]}).prompt("1+2")
    (got,) = seen
    assert got["tool_response"] == "3" and isinstance(got["duration_ms"], int)


async def test_event_post_tool_use_failure_sees_the_error() -> None:
    seen: list[dict[str, Any]] = []

    def broken() -> str:
        """Fail."""
        raise RuntimeError("disk full")

    fake = FakeAnthropicAPI([tool_use("broken", {}), text("sorry")])
    await agent_for(fake, tools=[broken], hooks={"PostToolUseFailure": [record(seen)]}).prompt("x")
    (got,) = seen
    assert got["error"] == "RuntimeError: disk full" and got["is_interrupt"] is False
    assert isinstance(got["duration_ms"], int)


async def test_event_post_tool_batch_fires_once_per_answered_turn() -> None:
    seen: list[dict[str, Any]] = []
    answer = spec("PostToolBatch", additionalContext="both sums are checked")
    fake = FakeAnthropicAPI(
        [tool_calls(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})), text("3 and 7")]
    )
    agent = agent_for(fake, tools=[add], hooks={"PostToolBatch": [record(seen, answer)]})
    assert await agent.prompt("sums") == "3 and 7"
    (got,) = seen
    assert [(c["tool_name"], c["tool_input"], c["tool_response"]) for c in got["tool_calls"]] == [
        ("add", {"a": 1, "b": 2}, "3"),
        ("add", {"a": 3, "b": 4}, "7"),
    ]
    last = fake.requests[1].messages[-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text"]
    assert last[-1]["text"] == "both sums are checked"


async def test_event_post_tool_batch_block_stops_the_run() -> None:
    answer = {"decision": "block", "reason": "enough tools"}
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("never")])
    agent = agent_for(fake, tools=[add], hooks={"PostToolBatch": [record([], answer)]})
    with pytest.raises(HookStopped, match="PostToolBatch hook stopped the run: enough tools"):
        await agent.prompt("x")
    assert len(fake.requests) == 1


async def test_event_permission_request_answers_an_ask() -> None:
    seen: list[dict[str, Any]] = []
    ask = spec("PreToolUse", permissionDecision="ask", permissionDecisionReason="writes money")

    async def approve(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        seen.append(input_data)
        if input_data["tool_input"]["a"] == 666:
            return spec("PermissionRequest", decision={"behavior": "deny", "message": "no"})
        return spec(
            "PermissionRequest",
            decision={"behavior": "allow", "updatedInput": {"a": 10, "b": 1}},
        )

    fake = FakeAnthropicAPI(
        [tool_calls(("add", {"a": 666, "b": 0}), ("add", {"a": 1, "b": 1})), text("ok")]
    )
    hooks: Hook = {"PreToolUse": [record([], ask)], "PermissionRequest": [approve]}
    await agent_for(fake, tools=[add], hooks=hooks).prompt("x")
    denied, allowed = fake.requests[1].tool_results()
    assert denied["is_error"] and "denied by a PermissionRequest hook: no" in denied["content"]
    assert allowed["content"] == "11"
    assert [s["tool_name"] for s in seen] == ["add", "add"]
    assert seen[0]["permission_suggestions"] == []


async def test_event_permission_request_unanswered_is_denied_with_a_notification() -> None:
    notes: list[dict[str, Any]] = []
    ask = spec("PreToolUse", permissionDecision="ask", permissionDecisionReason="risky")
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 1}), text("ok")])
    hooks: Hook = {"PreToolUse": [record([], ask)], "Notification": [record(notes)]}
    await agent_for(fake, tools=[add], hooks=hooks).prompt("x")
    (result,) = fake.requests[1].tool_results()
    assert result["is_error"] and "asked for approval (risky)" in result["content"]
    (note,) = notes
    assert note["notification_type"] == "permission_prompt"
    assert note["message"] == "Claude needs your permission to use add"


async def test_event_user_prompt_submit_adds_context_or_blocks() -> None:
    async def gate(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        if "secret" in input_data["prompt"]:
            return {"decision": "block", "reason": "no secrets"}
        return spec("UserPromptSubmit", additionalContext="Today is Monday.")

    fake = FakeAnthropicAPI([text("ok")])
    agent = agent_for(fake, hooks={"UserPromptSubmit": [gate]})
    await agent.prompt("What day?")
    assert fake.requests[0].messages[0]["content"] == "What day?\n\nToday is Monday."
    with pytest.raises(PromptBlocked, match="no secrets") as info:
        await agent.prompt("tell the secret")
    assert isinstance(info.value, HookStopped) and info.value.reason == "no secrets"


async def test_event_stop_gets_the_last_message_and_can_send_the_model_back() -> None:
    seen: list[dict[str, Any]] = []

    async def cite(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        seen.append(input_data)
        if input_data["stop_hook_active"]:
            return {}
        return {"decision": "block", "reason": "Cite a source."}

    fake = FakeAnthropicAPI([text("Paris"), text("Paris (atlas)")])
    result = await agent_for(fake, hooks={"Stop": [cite]}).run("Capital?")
    assert result.output == "Paris (atlas)"
    assert [(s["last_assistant_message"], s["stop_hook_active"]) for s in seen] == [
        ("Paris", False),
        ("Paris (atlas)", True),
    ]
    assert seen[0]["background_tasks"] == [] and seen[0]["session_crons"] == []
    assert fake.requests[1].messages[-1] == {"role": "user", "content": "Cite a source."}


def expert_tool(fake: FakeAnthropicAPI, **kw: Any) -> Any:
    expert = agent_for(fake, name="expert", **kw)

    async def ask_expert(q: str) -> str:
        """Ask the expert agent."""
        return await expert.prompt(q)

    return ask_expert


async def test_event_subagent_start_adds_context_to_the_sub_agent() -> None:
    seen: list[dict[str, Any]] = []
    answer = spec("SubagentStart", additionalContext="Be brief, expert.")
    fake = FakeAnthropicAPI([tool_use("ask_expert", {"q": "why"}), text("because"), text("done")])
    hooks: Hook = {"SubagentStart": [HookMatcher("expert", [record(seen, answer)])]}
    lead = agent_for(fake, name="lead", tools=[expert_tool(fake)], hooks=hooks)
    assert await lead.prompt("go") == "done"
    (got,) = seen
    assert got["agent_type"] == "expert" and got["agent_id"]
    assert fake.requests[1].messages[0]["content"] == "why\n\nBe brief, expert."


async def test_event_subagent_stop_can_send_the_sub_agent_back_and_gives_its_transcript() -> None:
    seen: list[dict[str, Any]] = []
    transcripts: list[EventTree] = []

    async def review(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        seen.append(input_data)
        transcripts.append(EventTree.load(input_data["agent_transcript_path"]))
        if input_data["stop_hook_active"]:
            return {}
        return {"decision": "block", "reason": "Give a reason."}

    fake = FakeAnthropicAPI(
        [tool_use("ask_expert", {"q": "why"}), text("because"), text("because X"), text("done")]
    )
    tool = expert_tool(fake)
    lead = agent_for(fake, name="lead", tools=[tool], hooks={"SubagentStop": [review]})
    result = await lead.run("go")
    assert result.output == "done"
    assert [(s["last_assistant_message"], s["stop_hook_active"]) for s in seen] == [
        ("because", False),
        ("because X", True),
    ]
    assert fake.requests[2].messages[-1] == {"role": "user", "content": "Give a reason."}
    assert fake.requests[3].tool_results()[0]["content"] == "because X"
    # The transcript is the sub-agent's subtree as it was: its prompt and model calls.
    assert transcripts[1].root is not None and transcripts[1].root.name == "expert"
    assert [n.type for n in transcripts[1].root.children] == [NodeType.MODEL_CALL] * 2
    assert gone(seen[1]["agent_transcript_path"])  # there while the hook runs, then deleted


async def test_event_pre_compact_fires_before_a_budget_compacts() -> None:
    seen: list[dict[str, Any]] = []
    history = [
        {"role": "user", "content": f"question {i} " + "word " * 300}
        if i % 2 == 0
        else {"role": "assistant", "content": f"answer {i} " + "word " * 300}
        for i in range(6)
    ]
    budget = TokenBudget(max_total=1_200, reserve_for_output=200, strategy="sliding_window")
    fake = FakeAnthropicAPI([text("ok")])
    agent = agent_for(fake, token_budget=budget, hooks={"PreCompact": [record(seen)]})
    result = await agent.run("short question", message_history=history)
    (got,) = seen
    assert got["trigger"] == "auto" and got["custom_instructions"] is None
    assert len(fake.requests[0].messages) < len(history) + 1  # compacted after the hook
    (node,) = result.tree.find(type=NodeType.BUDGET)
    assert node.status.value == "completed"


async def test_event_pre_compact_block_keeps_the_budget_from_compacting() -> None:
    history = [
        {"role": "user", "content": "question " + "word " * 400},
        {"role": "assistant", "content": "answer " + "word " * 400},
    ]
    budget = TokenBudget(max_total=600, reserve_for_output=100, strategy="sliding_window")
    hooks: Hook = {"PreCompact": [record([], {"decision": "block", "reason": "keep it all"})]}
    fake = FakeAnthropicAPI([text("never")])
    agent = agent_for(fake, token_budget=budget, hooks=hooks)
    with pytest.raises(TokenBudgetExceeded, match="PreCompact hook blocked sliding_window"):
        await agent.prompt("q", message_history=history)
    assert fake.requests == []


async def test_event_notification_fires_while_a_model_call_waits_to_retry() -> None:
    seen: list[dict[str, Any]] = []
    fake = FakeAnthropicAPI([error(429, retry_after=0.2), text("ok")])
    hooks: Hook = {"Notification": [HookMatcher("retry_wait", [record(seen)])]}
    assert await agent_for(fake, max_retries=2, hooks=hooks).prompt("x") == "ok"
    (got,) = seen
    assert got["notification_type"] == "retry_wait"
    assert got["message"] == "The model API answered 429; retry 1 in 0.2 s"
    assert got["title"] == "Waiting to retry the model call"


async def test_a_notification_hook_hears_that_the_call_waits_for_its_batch() -> None:
    seen: list[dict[str, Any]] = []
    fake = FakeAnthropicAPI([text("ok")])
    hooks: Hook = {"Notification": [HookMatcher("batch_wait", [record(seen)])]}
    before = batching.configure(window=0.01, first_poll=0.001)
    try:
        assert await agent_for(fake, batch=True, hooks=hooks).prompt("x") == "ok"
    finally:
        batching.configure(**vars(before))
    (got,) = seen
    assert got["notification_type"] == "batch_wait"
    assert got["message"] == f"The model call is waiting for Message Batch {fake.batches[0].id}"
    assert got["title"] == "Waiting for a Message Batch to answer the model call"


async def test_event_session_start_and_end_wrap_a_prompt() -> None:
    seen: list[dict[str, Any]] = []
    start = spec("SessionStart", additionalContext="The user is Ada.", sessionTitle="Greeting")
    hooks: Hook = {"SessionStart": [record(seen, start)], "SessionEnd": [record(seen)]}
    fake = FakeAnthropicAPI([text("Hi Ada"), text("Bye Ada")])
    agent = agent_for(fake, hooks=hooks)
    first = await agent.run("Hello")
    await agent.run("Bye", message_history=first.messages)
    assert [(s["hook_event_name"], s.get("source"), s.get("reason")) for s in seen] == [
        ("SessionStart", "startup", None),
        ("SessionEnd", None, "other"),
        ("SessionStart", "resume", None),
        ("SessionEnd", None, "other"),
    ]
    assert seen[0]["session_id"] == seen[1]["session_id"] == first.node.id
    assert seen[0]["model"] == "claude-sonnet-4-6"
    assert fake.requests[0].messages[0]["content"] == "Hello\n\nThe user is Ada."
    assert [e["title"] for e in first.node.events if e["type"] == "session_title"] == ["Greeting"]


async def test_event_session_end_fires_when_the_prompt_fails() -> None:
    seen: list[dict[str, Any]] = []
    fake = FakeAnthropicAPI([error(400, "bad request")])
    agent = agent_for(fake, hooks={"SessionEnd": [record(seen)]})
    with pytest.raises(Exception, match="bad request"):
        await agent.prompt("x")
    assert [s["reason"] for s in seen] == ["other"]


@pytest.mark.parametrize("event", sorted(SILENT_EVENTS))
async def test_silent_events_are_accepted_and_never_called(event: str) -> None:
    seen: list[dict[str, Any]] = []
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    agent = agent_for(fake, tools=[add], hooks={event: [HookMatcher(hooks=[record(seen)])]})
    assert await agent.prompt("1+2") == "3"
    assert seen == []


# -- inputs every event shares ------------------------------------------------------


async def test_input_common_fields() -> None:
    seen: list[dict[str, Any]] = []
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    agent = agent_for(fake, tools=[add], hooks={"PreToolUse": [record(seen)]})
    result = await agent.run(Prompt(user="1+2", effort="low"))
    (got,) = seen
    assert got["hook_event_name"] == "PreToolUse"
    assert got["session_id"] == got["prompt_id"] == result.node.id
    assert got["cwd"] == os.getcwd() and got["permission_mode"] == "default"
    assert got["effort"] == {"level": "low"}


async def test_input_transcript_path_is_the_prompt_so_far() -> None:
    trees: list[EventTree] = []

    async def read(input_data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        trees.append(EventTree.load(input_data["transcript_path"]))
        return {}

    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    result = await agent_for(fake, tools=[add], hooks={"PostToolUse": [read]}).run("1+2")
    (tree,) = trees
    assert tree.root is not None and tree.root.id == result.node.id
    assert [n.type for n in tree.root.children] == [NodeType.MODEL_CALL, NodeType.TOOL_CALL]


async def test_input_transcript_that_cannot_be_written_fails_no_prompt() -> None:
    seen: list[dict[str, Any]] = []

    def take_the_path(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
        path = Path(input_data["transcript_path"])
        path.unlink()
        path.mkdir()  # a folder where the transcript goes: the next write fails
        return {}

    hooks: Hook = {"SessionStart": [take_the_path], "PreToolUse": [record(seen)]}
    fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
    try:
        result = await agent_for(fake, tools=[add], hooks=hooks).run("1+2")
    finally:
        for got in seen:
            remove_folder(got["transcript_path"])
    assert result.output == "3"
    assert fake.requests[1].tool_results()[0]["content"] == "3"
    (got,) = seen  # the hook still ran, with the path
    assert got["transcript_path"].endswith(f"{result.node.id}.jsonl")
    (failed,) = [e for e in result.node.children[1].events if e["type"] == "hook_error"]
    assert failed["error"].startswith("could not write the transcript: IsADirectoryError")
    assert failed["hook"] == "PreToolUse" and failed["on_failure"] == "continue"


async def test_event_session_end_after_a_cancel_gets_a_short_deadline() -> None:
    entered = asyncio.Event()

    async def wait_forever(x: int) -> int:
        """Wait until cancelled.

        Args:
            x: Anything.
        """
        entered.set()
        await asyncio.Event().wait()
        return x

    ended: list[str] = []

    async def slow_end(input_data: Any, tool_use_id: str | None, context: Any) -> Any:
        ended.append(input_data["reason"])
        await asyncio.sleep(30)  # within its 60 s timeout, but a Ctrl-C must not wait
        return {}

    fake = FakeAnthropicAPI([tool_use("wait_forever", {"x": 1}), text("never")])
    agent = agent_for(fake, tools=[wait_forever], hooks={"SessionEnd": [slow_end]})
    task = asyncio.create_task(agent.prompt("go"))
    await asyncio.wait_for(entered.wait(), 10)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < CANCELLED_DEADLINE + 1.5
    assert ended == ["other"]


async def test_input_agent_id_on_tool_events_inside_a_sub_agent() -> None:
    seen: list[dict[str, Any]] = []
    fake = FakeAnthropicAPI(
        [tool_use("ask_expert", {"q": "sum"}), tool_use("add", {"a": 1, "b": 1}), text("2"),
         text("done")]
    )  # fmt: skip
    tool = expert_tool(fake, tools=[add], hooks={"PostToolUse": [record(seen)]})
    result = await agent_for(fake, name="lead", tools=[tool]).run("go")
    (got,) = seen
    (sub,) = result.tree.find(type=NodeType.PROMPT, name="expert")
    assert got["agent_id"] == sub.id and got["agent_type"] == "expert"


# -- the table in docs/tools.md -----------------------------------------------------


def _rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _keys(typed: Any) -> set[str]:
    return set(typed.__required_keys__ | typed.__optional_keys__)


def test_docs_table_names_every_sdk_event_field_and_a_test() -> None:
    docs = DOCS.read_text()
    section = docs[docs.index("\n## Hooks") :]
    rows = _rows(section)
    from . import test_hooks_sdk_outputs

    modules = [sys.modules[__name__], test_hooks_sdk_outputs]
    named = {t for row in rows for t in re.findall(r"`(test_\w+)`", row[-1])}
    assert named, "the Hooks tables name no tests"
    for test in named:
        assert any(hasattr(m, test) for m in modules), f"docs/tools.md names a missing {test}"
    cells = [" ".join(row[:-1]) for row in rows if re.search(r"`test_\w+`", row[-1])]
    listed = " ".join(cells)

    def documented(*names: str) -> bool:
        return any(all(f"`{n}`" in cell for n in names) for cell in cells)

    events = {
        name for literal in typing.get_args(sdk.HookEvent) for name in typing.get_args(literal)
    }
    for output in typing.get_args(sdk.HookSpecificOutput):
        hints = typing.get_type_hints(output)
        (event,) = typing.get_args(hints["hookEventName"])
        events.add(event)
        for key in _keys(output) - {"hookEventName"}:
            assert documented(event, key), f"no row for {event} output {key}"
    events.add("SessionEnd")
    assert events == set(HOOK_EVENTS)
    for event in events:
        assert f"`{event}`" in listed, f"no row for the {event} event"
    for key in _keys(sdk.SyncHookJSONOutput) | _keys(sdk.AsyncHookJSONOutput):
        assert documented(key), f"no row for the output field {key}"
    for hook_input in typing.get_args(sdk.HookInput):
        for key in _keys(hook_input):
            assert documented(key), f"no row for the input field {key}"
    for matcher_field in dataclasses.fields(HookMatcher):
        assert documented(matcher_field.name), f"no row for HookMatcher.{matcher_field.name}"
