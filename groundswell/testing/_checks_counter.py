"""The token counter checker: requests counted directly and for a budgeted agent."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from ..agent import Agent
from ..budget.token_budget import TokenBudget
from ..budget.tokens import Counter, CountRequest
from ..cache.guard import shown
from ..hookspecs import TokenCounter
from ..plugins.manager import get_plugin_manager
from ._checks import CALL_TIMEOUT_S, Findings, error, object_to_check, settle, subject
from ._fake import FakeAnthropicAPI
from ._replies import text

__all__ = ["check_counter"]


async def check_counter(counter: Any) -> None:
    """Check a token counter against `groundswell.budget.tokens.Counter`; raise `ProtocolViolation`.

    ``counter`` is the counter, its factory, its `TokenCounter` record or a
    registered name. ``count`` must be async and return an ``int`` >= 0 for
    requests of text, content blocks, tools and a system prompt, count a
    longer request as no fewer tokens, give the same answers concurrently, and
    serve a budgeted agent without ``budget_counter_error`` events.
    """
    findings = Findings(subject(counter), "token counter")
    if isinstance(counter, str):
        counter = get_plugin_manager().lookup(TokenCounter, counter)
    made, _ = object_to_check(counter, TokenCounter, "token counter", "count", findings)
    findings.subject = subject(made)
    if not isinstance(made, Counter):
        raise findings.stop(
            "it has no count(request) method; define async def count(self, request)"
        )
    fake = FakeAnthropicAPI([])
    client = fake.client(max_retries=0)
    short = [{"role": "user", "content": "Hello"}]
    long: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Oslo? " * 20},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Oslo"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny in Oslo"},
        ]},
    ]  # fmt: skip
    tool = {"name": "lookup", "description": "Weather.", "input_schema": {"type": "object"}}
    requests = [
        CountRequest("claude-sonnet-4-6", short, None, (), client),
        CountRequest("claude-sonnet-4-6", long, [{"type": "text", "text": "Be brief."}], [tool],
                     client),
    ]  # fmt: skip

    async def count(request: CountRequest) -> int | None:
        try:
            made_count: Any = made.count(request)
        except Exception as exc:
            findings.add(f"count(request) raised {error(exc)}")
            return None
        if not inspect.isawaitable(made_count):
            findings.add("count is not async; define it as async def count(self, request)")
            tokens = made_count
        else:
            try:
                tokens = await settle(made_count, CALL_TIMEOUT_S)
            except Exception as exc:
                findings.add(f"count(request) raised {error(exc)}")
                return None
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            findings.add(
                f"count returned {shown(tokens)}; it must return the input tokens as an int >= 0"
            )
            return None
        return tokens

    alone = [await count(r) for r in requests]
    if None not in alone:
        if alone[1] < alone[0]:  # type: ignore[operator]
            findings.add(
                f"a longer request counted fewer tokens ({alone[1]}) than 'Hello' ({alone[0]})"
            )
        together = await asyncio.gather(*(count(r) for r in requests * 3))
        if list(together) != alone * 3:
            findings.add("counting the same requests at once gave other answers than one by one")
    await _counted_prompt(made, findings)
    findings.raise_any()


async def _counted_prompt(counter: Any, findings: Findings) -> None:
    fake = FakeAnthropicAPI(lambda request: text("Counted."))
    agent = Agent(
        name="counter-check",
        client=fake.client(max_retries=0),
        token_budget=TokenBudget(max_total=200_000, counter=counter),
    )
    result = await agent.run("How many tokens is this?")
    for event in result.node.events:
        if event["type"] == "budget_counter_error":
            findings.add(f"in a budgeted prompt the counter failed: {event['error']}")
