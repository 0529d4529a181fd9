"""Questions from an agent to a person: the ask_user tool, and an MCP server's request for
input (elicitation) answered through a question wait when nobody set on_elicitation.

A real Agent on the real anthropic client against the fake API; the MCP server is a real
in-process one that asks inside its tool call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest
from mcp.server.mcpserver import Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel

import groundswell
from groundswell import Agent, InvalidAnswer, NodeStatus, waits
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, auto_answer, text
from groundswell.testing import tool_use as call_tool
from groundswell.waits import Decision, Wait

# Every test here ends with no wait of its own left open (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_wait_left_open")


async def question() -> Wait:
    """The open question wait, once there is one."""

    async def poll() -> Wait:
        while True:
            found = [w for w in waits.pending() if w.kind == "question"]
            if found:
                return found[0]
            await asyncio.sleep(0.005)

    return await asyncio.wait_for(poll(), 5)


def calling(name: str, tool_input: dict[str, Any]) -> Any:
    """A model that calls one tool, then answers with the text of its result."""

    def respond(request: MessagesRequest) -> Reply:
        done = request.tool_results()
        if not done:
            return call_tool(name, tool_input, id="toolu_ask")
        content = done[-1]["content"]
        if not isinstance(content, str):
            content = "".join(b.get("text", "") for b in content)
        return text(f"heard: {content}")

    return respond


async def test_ask_user_waits_for_the_persons_typed_answer_and_returns_it() -> None:
    definition = groundswell.ask_user.definition()
    assert definition["name"] == "ask_user"
    assert "only when you cannot go on" in definition["description"]
    assert definition["input_schema"]["required"] == ["question"]
    fake = FakeAnthropicAPI(calling("ask_user", {"question": "Which city do you fly from?"}))
    agent = Agent(name="travel", tools=[groundswell.ask_user], client=fake.client())
    run = asyncio.create_task(agent.run("Book me a flight to Lisbon."))
    wait = await question()
    assert wait.request == {
        "question": "Which city do you fly from?",
        "schema": {"type": "string"},
        "agent": "travel",
        "tool_use_id": "toolu_ask",
    }
    assert [w.id for w in waits.pending()] == [wait.id]
    with pytest.raises(InvalidAnswer, match="asks for text"):
        waits.answer(wait.id, 42)
    waits.answer(wait.id, "Berlin", by="traveller")
    result = await run
    assert result.output == "heard: Berlin"
    assert fake.requests[1].tool_results()[0]["content"] == "Berlin"
    (call,) = result.tree.find(type="tool_call")
    (node,) = call.children
    assert (node.type, node.name, node.status) == ("wait", "question", NodeStatus.COMPLETED)
    assert (node.payload["answer"], node.payload["answered_by"]) == ("Berlin", "traveller")


async def test_ask_user_with_choices_takes_one_of_them_and_never_waits_for_approval() -> None:
    asked = {"question": "Window or aisle?", "choices": ["window", "aisle"]}
    fake = FakeAnthropicAPI(calling("ask_user", asked))
    # approval=True holds every tool call, but a question to a person is no action to approve.
    agent = Agent(name="travel", tools=[groundswell.ask_user], approval=True, client=fake.client())
    run = asyncio.create_task(agent.run("Pick my seat."))
    wait = await question()
    assert wait.request["schema"] == {"type": "string", "enum": ["window", "aisle"]}
    with pytest.raises(InvalidAnswer, match=r"'middle' is not one of the choices"):
        waits.answer(wait.id, "middle")
    waits.answer(wait.id, "Aisle")  # typed in another case: the choice as offered
    result = await run
    assert result.output == "heard: aisle"
    # One wait only: the question, with no approval before it.
    assert [n.name for n in result.tree.find(type="wait")] == ["question"]
    assert "approval" not in result.tree.find(type="tool_call")[0].payload


async def test_ask_user_is_answered_by_auto_answer_by_question_text() -> None:
    fake = FakeAnthropicAPI(calling("ask_user", {"question": "Your name?"}))
    agent = Agent(name="desk", tools=[groundswell.ask_user], client=fake.client())
    with auto_answer(answers={"Your name?": "Ada"}) as auto:
        result = await agent.run("Greet me by name.")
    assert result.output == "heard: Ada"
    assert [w.request["question"] for w, _ in auto.answered] == ["Your name?"]


# -- MCP elicitation through a wait ----------------------------------------------------------

front_desk = MCPServer("front_desk")


class Visitor(BaseModel):
    name: str
    badge: int


def ask_visitor() -> Elicit[Visitor]:
    return Elicit("Who is at the front desk?", Visitor)


@front_desk.tool()
async def check_in(
    visitor: Annotated[ElicitationResult[Visitor], Resolve(ask_visitor)],
) -> str:
    """Check the visitor at the front desk in."""
    if visitor.action == "accept":
        return f"checked in {visitor.data.name} with badge {visitor.data.badge}"
    return f"no check-in: the person chose {visitor.action}"


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_servers_request_for_input_becomes_a_question_and_the_answer_reaches_it() -> None:
    fake = FakeAnthropicAPI(calling("mcp__front_desk__check_in", {}))
    agent = Agent(name="reception", mcps=[front_desk], client=fake.client())
    run = asyncio.create_task(agent.run("Check the visitor in."))
    wait = await question()
    request = wait.request
    assert request["question"] == "Who is at the front desk?"
    assert (request["server"], request["mode"]) == ("front_desk", "form")
    assert request["mcp_call"] == "mcp__front_desk__check_in"
    assert request["schema"]["required"] == ["name", "badge"]
    with pytest.raises(InvalidAnswer, match="'badge' is required"):
        waits.answer(wait.id, {"name": "Grace"})
    waits.answer(wait.id, json.dumps({"name": "Grace", "badge": 7}), by="receptionist")
    result = await run
    assert result.output == "heard: checked in Grace with badge 7"
    (call,) = result.tree.find(type="mcp_call")
    wait_node = next(c for c in call.children if c.type == "wait")
    assert wait_node.name == "elicitation"
    assert wait_node.payload["answer"] == {"name": "Grace", "badge": 7}
    assert wait_node.payload["answered_by"] == "receptionist"
    (event,) = [e for e in call.events if e["type"] == "mcp_elicitation"]
    assert (event["handler"], event["action"]) == ("wait", "accept")


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_rejecting_a_servers_question_declines_it() -> None:
    fake = FakeAnthropicAPI(calling("mcp__front_desk__check_in", {}))
    agent = Agent(name="reception", mcps=[front_desk], client=fake.client())
    run = asyncio.create_task(agent.run("Check the visitor in."))
    wait = await question()
    waits.reject(wait.id, "nobody is there", by="receptionist")
    result = await run
    assert result.output == "heard: no check-in: the person chose decline"
    (call,) = result.tree.find(type="mcp_call")
    (event,) = [e for e in call.events if e["type"] == "mcp_elicitation"]
    assert (event["handler"], event["action"]) == ("wait", "decline")
    (node,) = result.tree.find(type="wait")
    assert (node.payload["decision"], node.payload["reason"]) == ("reject", "nobody is there")


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_auto_answer_answers_a_servers_question_and_a_handler_still_wins() -> None:
    fake = FakeAnthropicAPI(calling("mcp__front_desk__check_in", {}))
    agent = Agent(name="reception", mcps=[front_desk], client=fake.client())
    with auto_answer(answers={"Who is at the front desk?": {"name": "Ada", "badge": 1}}):
        result = await agent.run("Check the visitor in.")
    assert result.output == "heard: checked in Ada with badge 1"
    with auto_answer(lambda wait: Decision.reject("not now")):
        result = await agent.run("Check the visitor in.")
    assert result.output == "heard: no check-in: the person chose decline"
    # The old behaviour, declining unasked, is one handler away.
    fake = FakeAnthropicAPI(calling("mcp__front_desk__check_in", {}))
    unattended = Agent(
        name="kiosk",
        mcps=[front_desk],
        on_elicitation=lambda request: request.decline(),
        client=fake.client(),
    )
    result = await unattended.run("Check the visitor in.")
    assert result.output == "heard: no check-in: the person chose decline"
    assert result.tree.find(type="wait") == []


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_servers_question_nobody_answers_closes_with_the_call_that_asked() -> None:
    fake = FakeAnthropicAPI(calling("mcp__front_desk__check_in", {}))
    agent = Agent(name="reception", mcps=[front_desk], tool_timeout=0.3, client=fake.client())
    run = asyncio.create_task(agent.run("Check the visitor in."))
    wait = await question()
    result = await run
    assert wait.id not in [w.id for w in waits.pending()]
    (node,) = result.tree.find(type="wait")
    assert node.status is NodeStatus.CANCELLED
    (call,) = result.tree.find(type="mcp_call")
    assert call.payload["is_error"] and "did not finish within 0.3 s" in result.output
    with pytest.raises(groundswell.WaitClosed, match="cancelled"):
        waits.answer(wait.id, {"name": "late", "badge": 0})
