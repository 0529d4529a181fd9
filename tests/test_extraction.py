"""Output extraction through the real SDK against the fake API."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    Extract,
    ExtractionError,
    NodeStatus,
    NodeType,
    Prompt,
    WorkflowContext,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, text

ANSWER = """<thinking>
The user wants a plan. Step one is obvious; step two needs the budget.
</thinking>
<ANSWER>
Ship the parser first.
</ANSWER>
<plan>{"steps": ["parser", "checker"], "weeks": 3}</plan>

Here is the code:

```python
def parse(text):
    return text.split()
```
"""


def agent_for(*replies: Any) -> tuple[Agent, FakeAnthropicAPI]:
    fake = FakeAnthropicAPI(list(replies))
    return Agent(name="planner", client=fake.client(max_retries=0)), fake


async def test_several_rules_fill_state_the_prompt_node_and_the_result() -> None:
    agent, _ = agent_for(text(ANSWER))
    prompt = Prompt(
        user="Plan the work",
        extract=[
            Extract(r"<answer>(.*?)</answer>", "answer"),
            Extract(r"<plan>(.*?)</plan>", "plan", format="json"),
            Extract(r"```python.*?```", "code", format="code"),
        ],
    )

    @workflow
    async def planning(ctx: WorkflowContext) -> str:
        await ctx.step("plan", lambda: agent.prompt(prompt))
        # The scratchpad pattern: only the extracted part is passed on.
        return str(ctx.state["answer"])

    result = await planning.run()
    assert result.output == "Ship the parser first."
    assert result.state["plan"] == {"steps": ["parser", "checker"], "weeks": 3}
    assert result.state["code"] == "def parse(text):\n    return text.split()"
    (node,) = result.tree.find(type=NodeType.PROMPT)
    assert node.payload["extracted"]["plan"]["weeks"] == 3
    assert node.payload["output"] == ANSWER  # the answer itself is untouched
    (extraction,) = node.children[1:]
    assert extraction.type is NodeType.EXTRACTION and extraction.status is NodeStatus.COMPLETED
    assert [r["store_as"] for r in extraction.payload["rules"]] == ["answer", "plan", "code"]
    assert extraction.payload["output"]["answer"] == "Ship the parser first."


async def test_outside_a_workflow_values_are_on_the_result() -> None:
    agent, _ = agent_for(text(ANSWER))
    prompt = Prompt(user="Plan", extract=Extract(r"<thinking>.*?</thinking>", "thoughts"))
    result = await agent.run(prompt)
    # No group: the whole match.
    assert result.extracted["thoughts"].startswith("<thinking>\nThe user wants a plan.")
    assert result.extracted["thoughts"].endswith("</thinking>")
    assert groundswell.current_tree() is None


async def test_multiple_collects_every_match_and_json_unwraps_fences() -> None:
    reply = (
        "<item>1</item> and <item>2</item>\n"
        '<config>\n```json\n{"debug": true}\n```\n</config>\n'
        "<tool>~~~\nrm -rf build\n~~~</tool>"
    )
    agent, _ = agent_for(text(reply))
    result = await agent.run(
        Prompt(
            user="List",
            extract=[
                Extract(r"<item>(.*?)</item>", "items", multiple=True, format="json"),
                Extract(r"<config>(.*?)</config>", "config", format="json"),
                Extract(r"<tool>(.*?)</tool>", "command", format="code"),
            ],
        )
    )
    assert result.extracted == {
        "items": [1, 2],
        "config": {"debug": True},
        "command": "rm -rf build",
    }


async def test_a_required_rule_that_finds_nothing_raises_and_fails_its_nodes() -> None:
    agent, _ = agent_for(text("I would rather not say."))
    prompt = Prompt(
        user="Decide", extract=Extract(r"<answer>(.*?)</answer>", "answer", required=True)
    )
    with pytest.raises(ExtractionError) as caught:
        await agent.run(prompt)
    error = caught.value
    assert error.store_as == "answer"
    assert error.raw == "I would rather not say."
    assert "required extraction 'answer' found nothing" in str(error)
    assert "<answer>(.*?)</answer>" in str(error)


async def test_required_failure_inside_a_workflow_is_on_the_tree() -> None:
    agent, _ = agent_for(text("no tags here"))
    prompt = Prompt(
        user="Decide", extract=Extract(r"<answer>(.*?)</answer>", "answer", required=True)
    )

    @workflow
    async def decide(ctx: WorkflowContext) -> Any:
        return await ctx.step("decide", lambda: agent.prompt(prompt))

    with pytest.raises(groundswell.WorkflowError) as caught:
        await decide.run()
    tree = caught.value.result.tree
    (extraction,) = tree.find(type=NodeType.EXTRACTION)
    assert extraction.status is NodeStatus.FAILED
    assert extraction.error and extraction.error["type"] == "ExtractionError"
    assert tree.get_node(extraction.parent_id).status is NodeStatus.FAILED
    assert "answer" not in caught.value.result.state


async def test_invalid_json_with_and_without_required() -> None:
    reply = "<plan>{steps: [parser]}</plan>"
    agent, _ = agent_for(text(reply))
    loose = Prompt(
        user="Plan", extract=Extract(r"<plan>(.*?)</plan>", "plan", format="json", default={})
    )

    @workflow
    async def planning(ctx: WorkflowContext) -> Any:
        ctx.state["plan"] = "stale from an earlier round"
        await ctx.step("plan", lambda: agent.prompt(loose))
        return ctx.state["plan"]

    result = await planning.run()
    assert result.output == {}  # the default replaces any stale value
    (extraction,) = result.tree.find(type=NodeType.EXTRACTION)
    (missed,) = [e for e in extraction.events if e["type"] == "extraction_missed"]
    assert missed["store_as"] == "plan"
    assert "not valid JSON" in missed["reason"]

    agent, _ = agent_for(text(reply))
    strict = Prompt(
        user="Plan",
        extract=Extract(r"<plan>(.*?)</plan>", "plan", format="json", required=True),
    )
    with pytest.raises(ExtractionError, match=r"'plan' matched, but the match is not valid JSON"):
        await agent.prompt(strict)


async def test_prompt_level_reflection_acts_on_an_extraction_error() -> None:
    fake = FakeAnthropicAPI([text("Ship the parser."), text("<answer>Ship the parser.</answer>")])
    agent = Agent(
        name="planner",
        client=fake.client(max_retries=0),
        reflection=groundswell.ReflectionConfig(strategy="feedback"),
    )
    prompt = Prompt(
        user="Decide",
        extract=Extract(r"<answer>(.*?)</answer>", "answer", required=True),
    )
    result = await agent.run(prompt)
    assert result.extracted == {"answer": "Ship the parser."}
    retry = fake.requests[1].messages
    assert retry[1] == {"role": "assistant", "content": "Ship the parser."}
    assert "required extraction 'answer' found nothing" in retry[2]["content"]


async def test_a_cache_hit_extracts_again() -> None:
    from groundswell_lru import LRUCache

    fake = FakeAnthropicAPI([text("<answer>yes</answer>")])
    agent = Agent(name="cached", client=fake.client(max_retries=0), cache=LRUCache())
    prompt = Prompt(user="Sure?", extract=Extract(r"<answer>(.*?)</answer>", "answer"))
    first = await agent.run(prompt)
    second = await agent.run(prompt)
    assert second.node.metrics["cache"] == "hit"
    assert first.extracted == second.extracted == {"answer": "yes"}
    assert len(fake.requests) == 1


class Verdict(BaseModel):
    approve: bool
    reason: str


async def test_structured_answers_are_searched_as_their_json() -> None:
    agent, _ = agent_for(text('{"approve": true, "reason": "tests pass (see CI-42)"}'))
    prompt = Prompt(
        user="Judge",
        response_format=Verdict,
        extract=Extract(r"\b(CI-\d+)", "ticket"),
    )
    result = await agent.run(prompt)
    assert isinstance(result.output, Verdict)
    assert result.extracted == {"ticket": "CI-42"}


def test_rules_are_checked_when_the_prompt_is_built() -> None:
    with pytest.raises(ConfigurationError, match="not a valid regular expression"):
        Extract(r"<answer>(.*?</answer>", "answer")
    with pytest.raises(ConfigurationError, match="format must be one of text, json, code"):
        Extract(r"x", "x", format="yaml")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="store_as must be a non-empty string"):
        Extract(r"x", "")
    with pytest.raises(ConfigurationError, match="two Extract rules store as 'x'"):
        Prompt(user="u", extract=[Extract("a", "x"), Extract("b", "x")])
    with pytest.raises(ConfigurationError, match=r"Prompt\.extract must be an Extract"):
        Prompt(user="u", extract="<answer>")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"Prompt\.extract items must be"):
        Prompt(user="u", extract=[{"pattern": "a"}])  # type: ignore[list-item]


def test_compiled_patterns_keep_their_flags_and_gain_dotall_ignorecase() -> None:
    rule = Extract(re.compile(r"^total: (\d+)$", re.MULTILINE), "total", format="json")
    assert rule.apply("lines\nTOTAL: 12\nmore") == 12
    assert rule.regex.flags & re.DOTALL and rule.regex.flags & re.IGNORECASE
    assert Extract(r"<a>(.*)</a>", "a").apply("<A>one\ntwo</A>") == "one\ntwo"
    assert Extract(r"<a>(.*)</a>", "a", default="none").apply("nothing") == "none"
    with pytest.raises(ExtractionError):
        Extract(r"<a>(.*)</a>", "a", required=True).apply("nothing")


async def test_a_structured_answer_extracts_the_same_live_and_from_the_cache() -> None:
    from groundswell_lru import LRUCache

    fake = FakeAnthropicAPI(lambda r: text('{\n  "approve": true,\n  "reason": "fine"\n}'))
    agent = Agent(name="judge", client=fake.client(max_retries=0), cache=LRUCache())
    prompt = Prompt(
        user="Judge",
        response_format=Verdict,
        extract=Extract(r'"reason":\s*"(.*?)"', "reason", required=True),
    )
    live = await agent.run(prompt)
    hit = await agent.run(prompt)
    assert hit.node.metrics["cache"] == "hit"
    assert live.extracted == hit.extracted == {"reason": "fine"}


def test_edge_cases_of_rules() -> None:
    with pytest.raises(ConfigurationError, match=r"must match text \(str\), not bytes"):
        Extract(re.compile(rb"<a>(.*)</a>"), "a")  # type: ignore[arg-type]
    with pytest.raises(ExtractionError, match="matched only blank text"):
        Extract(r"<answer>(.*?)</answer>", "answer", required=True).apply("<answer> </answer>")
    assert Extract(r"<answer>(.*?)</answer>", "answer").apply("<answer></answer>") == ""
    assert Extract(r"<i>(.*?)</i>", "items", multiple=True).apply("none") == []
    one_line = Extract(r"<c>(.*?)</c>", "c", format="json")
    assert one_line.apply('<c>```json {"a": 1}```</c>') == {"a": 1}
    assert Extract(r"<c>(.*?)</c>", "c", format="code").apply("<c>```x = 1```</c>") == "x = 1"
