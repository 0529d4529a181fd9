"""The bundled ``pii`` middleware, through the real anthropic client and the fake API."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from groundswell_pii import KINDS, PIIRedactor
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    EventNode,
    Middleware,
    NodeStatus,
    NodeType,
    PromptOverrides,
    PromptRun,
)
from groundswell.agent import ModelNext
from groundswell.testing import FakeAnthropicAPI, text, tool_use

EMAIL, CARD, PHONE = "ada@example.com", "4111 1111 1111 1111", "+1 415-555-2671"
IBAN, SSN = "DE89 3704 0044 0532 0130 00", "078-05-1120"

# Real-looking personal data, each in the form it is written in.
CAUGHT = [
    ("ada@example.com", "EMAIL"),
    ("first.last+tag@mail.example.co.uk", "EMAIL"),
    ("+1 415-555-2671", "PHONE"),
    ("+44 20 7946 0958", "PHONE"),
    ("+14155552671", "PHONE"),
    ("(415) 555-2671", "PHONE"),
    ("415.555.2671", "PHONE"),
    ("4111 1111 1111 1111", "CARD"),
    ("4242424242424242", "CARD"),
    ("5555-5555-5555-4444", "CARD"),
    ("3782 822463 10005", "CARD"),
    ("DE89 3704 0044 0532 0130 00", "IBAN"),
    ("GB82WEST12345698765432", "IBAN"),
    ("078-05-1120", "SSN"),
]

# Look-alikes that carry no personal data and must reach the model unchanged.
SURVIVE = [
    "version 1.2.3",
    "v2.10.0-beta.1",
    "Python 3.11.4",
    "10.0.0.1",
    "3.14159265358979",
    "2024-01-15",
    "2024-01-15T10:30:00Z",
    "2024-01-15T10:30:00.123456+00:00",
    "15/01/2024 12:30:45",
    "order #12345678",
    "ORD-2024-000123",
    "ORD-415-555-2671",
    "INV-2024-0042",
    "12345",
    "1,234,567.89",
    "550e8400-e29b-41d4-a716-446655440000",
    "1700000000000",
    "4111 1111 1111 1112",  # fails the Luhn check
    "DE12 3456 7890 1234 5678 90",  # fails the mod-97 check
    "XX82WEST12345698765432",  # no such IBAN country
    "user@localhost",
    "@property",
    "left-pad@1.3.0",
    "000-12-3456",  # never-issued SSN area
    "555-1234",
    "UTC+05:30",
    "ISBN 978-3-16-148410-0",
]


class Contact(BaseModel):
    email: str
    note: str


def lookup_customer(customer_id: str) -> dict[str, Any]:
    """Look up a customer by id."""
    return {
        "id": customer_id,
        "email": EMAIL,
        "iban": IBAN,
        "note": f"prefers phone {PHONE}; card on file {CARD}",
    }


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "support")
    return Agent(client=fake.client(), **kw)


def events(node: EventNode, kind: str = "pii_redacted") -> list[dict[str, Any]]:
    return [e for e in node.events if e["type"] == kind]


def tool_node(tree: groundswell.EventTree) -> EventNode:
    (node,) = tree.find(type=NodeType.TOOL_CALL)
    return node


# -- what the API receives ------------------------------------------------------------


@pytest.mark.parametrize(
    "system",
    [
        "Escalate to boss@corp.example.",
        [{"type": "text", "text": "Escalate to boss@corp.example."}],
    ],
    ids=["text", "blocks"],
)
async def test_the_request_the_api_receives_has_no_pii(system: Any) -> None:
    fake = FakeAnthropicAPI([text("Noted.")])
    agent = agent_for(fake, system=system, middleware=["pii"])
    user = f"I am {EMAIL}, card {CARD}, IBAN {IBAN}, SSN {SSN}, call {PHONE}."
    result = await agent.run(user)

    body = json.dumps(fake.requests[0].body)
    for value in (EMAIL, CARD, IBAN, SSN, PHONE, "boss@corp.example"):
        assert value not in body
    assert fake.requests[0].messages[0]["content"] == (
        "I am [EMAIL], card [CARD], IBAN [IBAN], SSN [SSN], call [PHONE]."
    )
    assert "Escalate to [EMAIL]." in json.dumps(fake.requests[0].system)
    (event,) = events(result.node)
    assert event["where"] == "request"
    assert event["counts"] == {"CARD": 1, "EMAIL": 2, "IBAN": 1, "PHONE": 1, "SSN": 1}


async def test_the_conversation_keeps_the_originals_for_other_layers() -> None:
    seen: list[dict[str, Any]] = []

    class Inner(Middleware):
        order = 500  # inside pii: sees the request as it is sent

        async def wrap_model_call(
            self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
        ) -> Any:
            seen.append(request)
            return await call_next(request)

    fake = FakeAnthropicAPI([text("Noted.")])
    agent = agent_for(fake, middleware=["pii", Inner()])
    result = await agent.run(f"Write to {EMAIL}")
    assert seen[0]["messages"][0]["content"] == "Write to [EMAIL]"
    # The agent's own conversation (and so every later turn's input) is untouched.
    assert result.messages[0]["content"] == f"Write to {EMAIL}"


async def test_each_message_is_redacted_and_counted_once_across_turns() -> None:
    fake = FakeAnthropicAPI([tool_use("lookup_customer", {"customer_id": "c-1"}), text("Done.")])
    agent = agent_for(fake, tools=[lookup_customer], middleware=["pii"])
    result = await agent.run(f"Help {EMAIL}")
    assert all(EMAIL not in json.dumps(r.body) for r in fake.requests)
    assert fake.requests[1].messages[0]["content"] == "Help [EMAIL]"
    assert "system" not in fake.requests[1].body
    (event,) = events(result.node)  # the second turn re-sent it, but counted nothing new
    assert event["counts"] == {"EMAIL": 1}


async def test_a_streamed_prompt_is_redacted_too() -> None:
    fake = FakeAnthropicAPI([text("Noted.")])
    agent = agent_for(fake, middleware=["pii"])
    kinds = [event.type async for event in agent.stream(f"Write to {EMAIL}")]
    assert kinds[-1] == "result" and fake.requests[0].stream
    assert fake.requests[0].messages[0]["content"] == "Write to [EMAIL]"


# -- tool results ----------------------------------------------------------------------


async def test_the_tool_result_the_model_sees_is_redacted() -> None:
    fake = FakeAnthropicAPI([tool_use("lookup_customer", {"customer_id": "c-1"}), text("Done.")])
    agent = agent_for(fake, tools=[lookup_customer], middleware=["pii"])
    result = await agent.run("Summarize customer c-1")

    (sent,) = fake.requests[1].tool_results()
    assert json.loads(sent["content"]) == {
        "id": "c-1",
        "email": "[EMAIL]",
        "iban": "[IBAN]",
        "note": "prefers phone [PHONE]; card on file [CARD]",
    }
    node = tool_node(result.tree)
    (event,) = events(node)
    assert event == {
        "type": "pii_redacted",
        "timestamp": event["timestamp"],
        "where": "tool_result",
        "counts": {"CARD": 1, "EMAIL": 1, "IBAN": 1, "PHONE": 1},
    }
    assert not events(result.node)  # the prompt itself held nothing to redact


async def test_the_tree_never_holds_the_raw_tool_output() -> None:
    # The pii layer wraps the tool call, and the tool node records what the layers
    # return: so the tree, its JSON and every sink see only the redacted result.
    fake = FakeAnthropicAPI([tool_use("lookup_customer", {"customer_id": "c-1"}), text("Done.")])
    agent = agent_for(fake, tools=[lookup_customer], middleware=["pii"])
    result = await agent.run("Summarize customer c-1")
    assert "[IBAN]" in tool_node(result.tree).payload["output"]
    dumped = json.dumps(result.tree.to_json())
    for value in (EMAIL, CARD, IBAN, PHONE):
        assert value not in dumped


def returns_text() -> str:
    """Contact details."""
    return f"mail {EMAIL}"


def returns_model() -> Contact:
    """Contact details."""
    return Contact(email=EMAIL, note="none")


def returns_blocks() -> list[dict[str, Any]]:
    """Contact details."""
    return [{"type": "text", "text": f"mail {EMAIL}"}]


def returns_lines() -> dict[str, str]:
    """Contact details, one per line (JSON escapes them as \\n)."""
    return {"note": f"call\n{PHONE}\nor mail\n{EMAIL}"}


def returns_number() -> int:
    """The card."""
    return 4242424242424242


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (returns_text, "mail [EMAIL]"),
        (returns_model, '{"email":"[EMAIL]","note":"none"}'),
        (returns_blocks, [{"type": "text", "text": "mail [EMAIL]"}]),
        (returns_lines, json.dumps({"note": "call\n[PHONE]\nor mail\n[EMAIL]"})),
        (returns_number, "[CARD]"),
    ],
    ids=["str", "pydantic", "blocks", "json-escapes", "int"],
)
async def test_every_kind_of_tool_result_is_redacted(tool: Any, expected: Any) -> None:
    fake = FakeAnthropicAPI([tool_use(tool.__name__, {}), text("Done.")])
    await agent_for(fake, tools=[tool], middleware=["pii"]).run("Go")
    (sent,) = fake.requests[1].tool_results()
    assert sent["content"] == expected


async def test_a_tool_error_is_redacted_too() -> None:
    def find_account(customer_id: str) -> str:
        """Find a customer's account."""
        raise LookupError(f"no account for {EMAIL}")

    fake = FakeAnthropicAPI([tool_use("find_account", {"customer_id": "c-7"}), text("Sorry.")])
    agent = agent_for(fake, tools=[find_account], middleware=["pii"])
    result = await agent.run("Find the account of c-7")
    (sent,) = fake.requests[1].tool_results()
    assert sent == {
        "type": "tool_result",
        "tool_use_id": sent["tool_use_id"],
        "content": "LookupError: no account for [EMAIL]",
        "is_error": True,
    }
    node = tool_node(result.tree)
    assert node.status is NodeStatus.FAILED
    assert events(node)[0]["where"] == "tool_error"
    assert EMAIL not in json.dumps(result.tree.to_json())


# -- opting in, configuration ------------------------------------------------------------


async def test_it_is_opt_in_only() -> None:
    record = groundswell.get_plugin_manager().agent_middleware()["pii"]
    assert (record.order, record.default) == (400, False)
    fake = FakeAnthropicAPI([text("a"), text("b")])
    agent = agent_for(fake)
    plain = await agent.run(f"Mail {EMAIL}")
    assert fake.requests[0].messages[0]["content"] == f"Mail {EMAIL}"
    assert not events(plain.node)
    # Per call, on an agent that does not have it.
    await agent.run(f"Mail {EMAIL}", PromptOverrides(middleware=["pii"]))
    assert fake.requests[1].messages[0]["content"] == "Mail [EMAIL]"


async def test_a_configured_instance_is_used_directly() -> None:
    redactor = PIIRedactor(
        kinds=["email"], extra_patterns={"EMPLOYEE_ID": r"\bE-\d{6}\b"}, replacement="<{kind}>"
    )
    fake = FakeAnthropicAPI([text("ok")])
    result = await agent_for(fake, middleware=[redactor]).run(
        f"Employee E-123456 ({EMAIL}, {PHONE})"
    )
    assert fake.requests[0].messages[0]["content"] == f"Employee <EMPLOYEE_ID> (<EMAIL>, {PHONE})"
    assert events(result.node)[0]["counts"] == {"EMAIL": 1, "EMPLOYEE_ID": 1}
    assert redactor.kinds == ("EMAIL", "EMPLOYEE_ID")
    assert PIIRedactor().kinds == KINDS == ("EMAIL", "PHONE", "CARD", "IBAN", "SSN")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kinds": ["EMIAL"]}, "unknown kind 'EMIAL'; built-in kinds: EMAIL, PHONE, CARD"),
        ({"kinds": "EMAIL"}, "kinds must be a list of kind names"),
        ({"kinds": ["EMAIL", "email"]}, "kind 'EMAIL' is named twice"),
        ({"kinds": []}, "nothing to redact"),
        ({"extra_patterns": {"X": "("}}, "extra_patterns['X'] is not a valid regex"),
        ({"extra_patterns": {"X": r"\d*"}}, "matches empty text"),
        ({"extra_patterns": {"two words": "x"}}, "kind names must be letters"),
        ({"extra_patterns": {"EMAIL": "x"}}, "also a built-in kind in kinds"),
        ({"extra_patterns": ["x"]}, "extra_patterns must map kind names to regexes"),
        ({"replacement": "[{name}]"}, "only field is {kind}"),
        ({"replacement": 5}, "replacement must be a string"),
    ],
)
def test_bad_configuration_is_a_clear_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        PIIRedactor(**kwargs)


# -- what is found and what is left alone ----------------------------------------------------


@pytest.mark.parametrize(("value", "kind"), CAUGHT)
@pytest.mark.parametrize("around", ["{}", "Contact: {}.", "({})", "x {}\ny", '"{}",'])
def test_personal_data_is_found_in_any_surroundings(value: str, kind: str, around: str) -> None:
    redacted, counts = PIIRedactor().redact_counts(around.format(value))
    assert redacted == around.format(f"[{kind}]") and counts == {kind: 1}


@pytest.mark.parametrize("value", SURVIVE)
def test_look_alikes_survive(value: str) -> None:
    assert PIIRedactor().redact(f"see {value}.") == f"see {value}."


async def test_look_alikes_reach_the_model_unchanged() -> None:
    fake = FakeAnthropicAPI([text("ok")])
    result = await agent_for(fake, middleware=["pii"]).run("\n".join(SURVIVE))
    assert fake.requests[0].messages[0]["content"] == "\n".join(SURVIVE)
    assert not events(result.node)


def test_a_valid_number_followed_by_more_digits_is_still_found() -> None:
    redactor = PIIRedactor()
    assert redactor.redact(f"{CARD} 22") == "[CARD] 22"
    assert redactor.redact("DE89370400440532013000 ANDY") == "[IBAN] ANDY"


def test_plugins_all_lists_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "groundswell.cli", "plugins", "--all"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("GROUNDSWELL_")},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    pii = lines.index(next(ln for ln in lines if ln.startswith("pii ")))
    assert " ok " in lines[pii] and "register_agent_middleware" in lines[pii]
    assert lines[pii + 1] == "    agent middleware: pii (400)"
