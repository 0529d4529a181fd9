"""Tool approval: a real Agent on the real anthropic client against the fake API, whose tool
calls wait for a person (groundswell.waits) or for auto_answer before they run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import groundswell
from groundswell import (
    Agent,
    Approval,
    ConfigurationError,
    NodeStatus,
    PromptResult,
    Tool,
    ToolCachePolicy,
    ToolCall,
    waits,
)
from groundswell.testing import FakeAnthropicAPI, auto_answer, text, tool_calls, tool_use
from groundswell.waits import Decision, Wait

# Every test here ends with no wait of its own left open (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_wait_left_open")


async def approvals(count: int = 1) -> list[Wait]:
    """The open approval waits, once ``count`` are open."""

    async def poll() -> list[Wait]:
        while True:
            found = [w for w in waits.pending() if w.kind == "approval"]
            if len(found) >= count:
                return found
            await asyncio.sleep(0.005)

    return await asyncio.wait_for(poll(), 5)


class Payments:
    """A tool that records every call it really gets."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def tool(self, **options: Any) -> Tool:
        async def send_payment(to: str, amount: int) -> str:
            """Send money.

            Args:
                to: Who gets it.
                amount: How much, in euros.
            """
            self.sent.append((to, amount))
            return f"sent {amount} EUR to {to}"

        return Tool(send_payment, **options)


def answer_with_last_result() -> Any:
    """A model that pays Ada 40 EUR, then repeats the tool result it got."""

    def respond(request: Any) -> Any:
        done = request.tool_results()
        if not done:
            return tool_use("send_payment", {"to": "Ada", "amount": 40}, id="toolu_pay")
        return text(f"result: {done[-1]['content']}")

    return respond


async def test_an_approved_call_runs_once_and_its_result_reaches_the_model() -> None:
    payments = Payments()
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(
        name="cashier", tools=[payments.tool(requires_approval=True)], client=fake.client()
    )
    run = asyncio.create_task(agent.run("Pay Ada 40 euros."))
    (wait,) = await approvals()
    assert wait.request == {
        "tool": "send_payment",
        "input": {"to": "Ada", "amount": 40},
        "agent": "cashier",
        "tool_use_id": "toolu_pay",
    }
    assert payments.sent == []  # nothing runs before the decision
    waits.approve(wait.id, by="ada@example.com")
    result = await run
    assert payments.sent == [("Ada", 40)]
    assert result.output == "result: sent 40 EUR to Ada"
    # The wait sits under the tool call, with who decided.
    (call,) = result.tree.find(type="tool_call")
    (node,) = call.children
    assert (node.type, node.name, node.status) == ("wait", "approval", NodeStatus.COMPLETED)
    assert node.payload["decision"] == "approve"
    assert node.payload["answered_by"] == "ada@example.com"
    assert call.payload["approval"] == "approved" and "approved_input" not in call.payload
    assert result.tree.path(node.id) == "cashier/send_payment/approval"


async def test_an_approval_with_edited_input_runs_the_tool_with_the_edit() -> None:
    payments = Payments()
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(
        name="cashier", tools=[payments.tool(requires_approval=True)], client=fake.client()
    )
    run = asyncio.create_task(agent.run("Pay Ada 40 euros."))
    (wait,) = await approvals()
    waits.approve(wait.id, input={"to": "Ada", "amount": 25}, by="ops")
    result = await run
    assert payments.sent == [("Ada", 25)]
    assert result.output == "result: sent 25 EUR to Ada"
    (call,) = result.tree.find(type="tool_call")
    # What the model asked for and what ran, side by side.
    assert call.payload["input"] == {"to": "Ada", "amount": 40}
    assert call.payload["approved_input"] == {"to": "Ada", "amount": 25}
    assert call.children[0].payload["input"] == {"to": "Ada", "amount": 25}


async def test_a_rejected_call_never_runs_and_the_model_gets_the_reason() -> None:
    payments = Payments()
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(
        name="cashier", tools=[payments.tool(requires_approval=True)], client=fake.client()
    )
    run = asyncio.create_task(agent.run("Pay Ada 40 euros."))
    (wait,) = await approvals()
    waits.reject(wait.id, "Ada was paid yesterday", by="ops")
    result = await run
    assert payments.sent == []
    (sent,) = fake.requests[1].tool_results()
    assert sent["tool_use_id"] == "toolu_pay" and sent["is_error"] is True
    assert "rejected this call of 'send_payment'" in sent["content"]
    assert "Their reason: Ada was paid yesterday" in sent["content"]
    (call,) = result.tree.find(type="tool_call")
    assert call.status is NodeStatus.FAILED and call.payload["approval"] == "rejected"
    (node,) = result.tree.find(type="wait")
    assert node.parent_id == call.id
    assert (node.payload["decision"], node.payload["reason"]) == (
        "reject",
        "Ada was paid yesterday",
    )


async def test_parallel_calls_of_one_turn_wait_together_and_are_decided_in_any_order() -> None:
    payments = Payments()
    fake = FakeAnthropicAPI(
        [
            tool_calls(
                ("send_payment", {"to": "Ada", "amount": 10}),
                ("send_payment", {"to": "Grace", "amount": 20}),
                ids=["toolu_ada", "toolu_grace"],
            ),
            text("Done."),
        ]
    )
    agent = Agent(name="cashier", tools=[payments.tool()], approval=True, client=fake.client())
    run = asyncio.create_task(agent.run("Pay both."))
    first, second = await approvals(2)
    assert [w.request["tool_use_id"] for w in (first, second)] == ["toolu_ada", "toolu_grace"]
    # The second is decided first; the first still waits meanwhile.
    waits.approve(second.id, by="ops")
    await asyncio.sleep(0.02)
    assert payments.sent == [("Grace", 20)]
    assert [w.id for w in waits.pending()] == [first.id]
    waits.reject(first.id, "not today", by="ops")
    result = await run
    assert payments.sent == [("Grace", 20)]
    ada, grace = fake.requests[1].tool_results()
    assert ada["is_error"] is True and "not today" in ada["content"]
    assert grace["content"] == "sent 20 EUR to Grace" and "is_error" not in grace
    decisions = [c.children[0].payload["decision"] for c in result.tree.find(type="tool_call")]
    assert decisions == ["reject", "approve"]


async def test_an_agent_policy_decides_per_call_by_its_input() -> None:
    payments = Payments()
    asked: list[ToolCall] = []

    async def large(call: ToolCall) -> bool:  # async policies are awaited
        asked.append(call)
        return int(call.input["amount"]) > 100

    fake = FakeAnthropicAPI(
        [
            tool_calls(
                ("send_payment", {"to": "Ada", "amount": 30}),
                ("send_payment", {"to": "Grace", "amount": 500}),
            ),
            text("Done."),
        ]
    )
    agent = Agent(name="cashier", tools=[payments.tool()], approval=large, client=fake.client())
    with auto_answer(approve=False, by="policy-test") as auto:
        result = await agent.run("Pay both.")
    assert [c.name for c in asked] == ["send_payment", "send_payment"]
    assert payments.sent == [("Ada", 30)]  # the small one ran unasked; the large one waited
    ((wait, decision),) = auto.answered
    assert wait.request["input"] == {"to": "Grace", "amount": 500}
    assert decision.kind == "reject" and decision.by == "policy-test"
    small, big = result.tree.find(type="tool_call")
    assert small.children == [] and "approval" not in small.payload
    assert big.children[0].payload["answered_by"] == "policy-test"


async def test_a_tools_own_requirement_holds_whatever_the_agent_policy_says() -> None:
    payments = Payments()
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(
        name="cashier",
        tools=[payments.tool(requires_approval=True)],
        approval=lambda call: False,
        client=fake.client(),
    )
    with auto_answer(approve=True) as auto:
        await agent.run("Pay Ada 40 euros.")
    assert len(auto.answered) == 1 and payments.sent == [("Ada", 40)]


async def test_nobody_deciding_in_time_applies_the_declared_outcome() -> None:
    payments = Payments()
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(
        name="cashier",
        tools=[payments.tool(requires_approval=True)],
        approval=Approval(timeout=0.05),  # "reject" by default
        client=fake.client(),
    )
    result = await agent.run("Pay Ada 40 euros.")
    assert payments.sent == []
    (sent,) = fake.requests[1].tool_results()
    assert sent["is_error"] is True
    assert "nobody approved it within 0.05 s" in sent["content"]
    (node,) = result.tree.find(type="wait")
    assert node.payload["timed_out"] is True and node.payload["answered_by"] == "deadline"
    assert node.payload["deadline"] is not None

    fake = FakeAnthropicAPI(answer_with_last_result())
    lenient = Agent(
        name="cashier",
        tools=[payments.tool()],
        approval=Approval(when=True, timeout=0.05, on_timeout="approve"),
        client=fake.client(),
    )
    result = await lenient.run("Pay Ada 40 euros.")
    assert payments.sent == [("Ada", 40)]
    assert result.output == "result: sent 40 EUR to Ada"


async def test_a_cached_result_is_not_served_without_approval() -> None:
    await groundswell.clear_tool_cache()
    payments = Payments()
    tool = payments.tool(requires_approval=True, cache=ToolCachePolicy(ttl=60))
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(name="cashier", tools=[tool], client=fake.client())
    try:
        with auto_answer(approve=True) as auto:
            await agent.run("Pay Ada 40 euros.")
            second = await agent.run("Pay Ada 40 euros.")
    finally:
        await groundswell.clear_tool_cache()
    assert payments.sent == [("Ada", 40)]  # the second answer came from the tool cache...
    assert len(auto.answered) == 2  # ...but only once a person approved that call too
    (call,) = second.tree.find(type="tool_call")
    assert "cache_hit" in [e["type"] for e in call.events]


async def test_a_policy_that_does_not_answer_true_or_false_fails_the_call_not_the_tool() -> None:
    payments = Payments()
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(
        name="cashier",
        tools=[payments.tool()],
        approval=lambda call: "maybe",  # type: ignore[arg-type,return-value]
        client=fake.client(),
    )
    result = await agent.run("Pay Ada 40 euros.")
    assert payments.sent == []
    assert "it must return True (needs approval) or False" in result.output


def test_approval_settings_are_checked_when_the_agent_is_built() -> None:
    with pytest.raises(ConfigurationError, match="requires_approval must be True or False"):
        Tool(lambda: None, name="t", requires_approval="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="agent 'a': approval must be True, False, a"):
        Agent(name="a", approval=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"on_timeout=\.\.\.\) must be 'reject' or"):
        Agent(name="a", approval=Approval(True, 5, "maybe"))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Approval: timeout must be a number"):
        Agent(name="a", approval=Approval(True, timeout=-1))
    with pytest.raises(ConfigurationError, match=r"Approval\(when=\.\.\.\) must be True"):
        Agent(name="a", approval=Approval("always"))  # type: ignore[arg-type]
    assert Agent(name="a", approval=False).config["approval"] is None
    assert Agent(name="a", approval=True).config["approval"] == Approval(True)


async def test_approval_waits_decided_by_auto_answer_with_a_decision_of_its_own() -> None:
    payments = Payments()
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(name="cashier", tools=[payments.tool()], approval=True, client=fake.client())

    def reviewer(wait: Wait) -> Decision:
        return Decision.approve({**wait.request["input"], "amount": 1})

    with auto_answer(reviewer, by="reviewer"):
        result: PromptResult[str] = await agent.run("Pay Ada 40 euros.")
    assert payments.sent == [("Ada", 1)]
    (node,) = result.tree.find(type="wait")
    assert node.payload["answered_by"] == "reviewer"


async def test_claude_sdk_notification_hooks_hear_that_a_call_waits_for_approval() -> None:
    from claude_agent_sdk import HookMatcher

    heard: list[dict[str, Any]] = []

    async def note(data: Any, tool_use_id: str | None, context: Any) -> Any:
        heard.append(dict(data))
        return {}

    payments = Payments()
    fake = FakeAnthropicAPI(answer_with_last_result())
    agent = Agent(
        name="cashier",
        tools=[payments.tool(requires_approval=True)],
        hooks={"Notification": [HookMatcher("permission_prompt", [note])]},
        client=fake.client(),
    )
    with auto_answer(approve=True):
        await agent.run("Pay Ada 40 euros.")
    (got,) = heard
    assert got["notification_type"] == "permission_prompt"
    assert got["message"] == "cashier needs your approval to use send_payment"
    assert got["title"] == "Waiting for a person to approve a tool call"


async def test_a_call_of_a_tool_the_agent_does_not_have_asks_nobody() -> None:
    fake = FakeAnthropicAPI([tool_use("wire_money", {"to": "Eve"}), text("Could not.")])
    agent = Agent(name="cashier", tools=[Payments().tool()], approval=True, client=fake.client())
    result = await agent.run("Wire money to Eve.")
    assert result.tree.find(type="wait") == []
    (sent,) = fake.requests[1].tool_results()
    assert sent["is_error"] is True and "no local handler for tool 'wire_money'" in sent["content"]


def test_a_tools_approval_cannot_be_switched_after_it_is_made() -> None:
    # An agent works out once which layers its tools need: a later switch would go
    # unseen by plain prompts, so the tool refuses it and says how to do it instead.
    def deploy(target: str) -> str:
        """Deploy to a target."""
        return target

    made = Tool(deploy)
    with pytest.raises(AttributeError, match=r"requires_approval is fixed .* make a new Tool"):
        made.requires_approval = True  # type: ignore[misc]
    assert Tool(deploy, requires_approval=True).requires_approval is True


async def test_an_edit_of_the_listed_input_keeps_the_secrets_it_was_shown_masked() -> None:
    # A person edits the input as pending() lists it, secrets masked: the values they
    # left alone reach the tool as the model gave them, and the tree never holds them.
    made: list[dict[str, str]] = []

    def create_user(name: str, password: str, role: str) -> str:
        """Create a user.

        Args:
            name: The login.
            password: The first password.
            role: The role.
        """
        made.append({"name": name, "password": password, "role": role})
        return "created"

    asked = {"name": "bob", "password": "Tr0ub4dor&3xyz", "role": "admin"}
    fake = FakeAnthropicAPI([tool_use("create_user", asked), text("done")])
    agent = Agent(
        name="ops", tools=[Tool(create_user, requires_approval=True)], client=fake.client()
    )
    run = asyncio.create_task(agent.run("Make bob."))
    (wait,) = await approvals()
    assert wait.request["input"]["password"] == "**********"
    waits.approve(wait.id, input=dict(wait.request["input"], role="viewer"), by="ops")
    result = await run
    assert made == [{"name": "bob", "password": "Tr0ub4dor&3xyz", "role": "viewer"}]
    assert "Tr0ub4dor&3xyz" not in json.dumps(result.tree.to_json())
