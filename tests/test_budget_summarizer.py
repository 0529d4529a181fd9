"""The ``summarize`` strategy's `Summarizer`: ``target_size`` and ``preserve``, through the real
SDK against the fake API (the requests the fake received are what the models saw)."""

from __future__ import annotations

from typing import Any

import pytest

from groundswell import ConfigurationError, NodeType, Summarizer, TokenBudget
from groundswell.testing import FakeAnthropicAPI

from .test_budget import INSTRUCTION, Reader, budget_for, ids, reader_agent


def errors_in(messages: list[dict[str, Any]]) -> list[str]:
    return [
        str(b["content"])
        for m in messages
        if m["role"] == "user" and not isinstance(m["content"], str)
        for b in m["content"]
        if b.get("type") == "tool_result" and b.get("is_error")
    ]


async def test_the_summary_is_asked_for_at_its_target_size_and_preserved_errors_stay_word_for_word() -> (
    None
):
    model = Reader(pages=7, fail={2})
    fake = FakeAnthropicAPI(model)
    options = Summarizer(target_size=120, preserve=["errors"])
    result = await reader_agent(fake, budget_for(4, strategy="summarize", summarizer=options)).run(
        INSTRUCTION
    )
    assert result.output == "The report is about Greek letters."
    assert model.summaries, "the summarizer was never asked"
    for asked in model.summaries:
        assert asked.body["max_tokens"] == 120
        wishes = asked.last_user_text()
        assert "Write about 120 tokens, no more." in wishes
        assert "Keep every error (tool errors and their messages) word for word." in wishes
    # Turn 2's failed call outlives every summary, word for word, beside the latest turns.
    last = model.main[-1].messages
    assert errors_in(last) == ["ValueError: no such page"]
    assert "t2" in ids(last) and "t3" not in ids(last)
    budgets = result.tree.find(type="budget")
    assert all(b.payload["preserved_turns"] == 1 for b in budgets if "fallback" not in b.payload)
    (summary, *_) = result.tree.find(type="summary")
    assert summary.type is NodeType.SUMMARY
    assert summary.payload["target_size"] == 120 and summary.payload["preserve"] == ["errors"]

    # Without preserve the failed call is summarized away like the rest.
    model = Reader(pages=7, fail={2})
    fake = FakeAnthropicAPI(model)
    plain = budget_for(4, strategy="summarize", summarizer=Summarizer(target_size=120))
    await reader_agent(fake, plain).run(INSTRUCTION)
    assert errors_in(model.main[-1].messages) == []
    assert "Keep every error" not in model.summaries[0].last_user_text()


async def test_last_n_turns_in_preserve_sets_how_many_latest_turns_stay() -> None:
    async def kept_turns(summarizer: Any) -> list[int]:
        fake = FakeAnthropicAPI(Reader(pages=7))
        budget = budget_for(4, strategy="summarize", summarizer=summarizer)
        result = await reader_agent(fake, budget).run(INSTRUCTION)
        return [b.payload["kept_turns"] for b in result.tree.find(type="budget")]

    assert set(await kept_turns(Summarizer(preserve=["last_1_turns"]))) == {1}
    assert max(await kept_turns(None)) > 1  # keep_last_turns=3, as many as fit


async def test_a_summarizer_given_as_a_dict_of_its_fields_uses_its_model() -> None:
    budget = TokenBudget(
        max_total=2_000,
        strategy="summarize",
        summarizer={"model": "claude-haiku-4-5", "target_size": 300},
    )
    assert budget.summarizer == Summarizer(model="claude-haiku-4-5", target_size=300)
    model = Reader(pages=7)
    fake = FakeAnthropicAPI(model)
    await reader_agent(fake, budget_for(4, strategy="summarize", summarizer=budget.summarizer)).run(
        INSTRUCTION
    )
    assert {r.model for r in model.summaries} == {"claude-haiku-4-5"}
    assert {r.body["max_tokens"] for r in model.summaries} == {300}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Summarizer(target_size=5), "target_size must be an int >= 16"),
        (lambda: Summarizer(preserve="errors"), "preserve must be a list such as"),
        (lambda: Summarizer(preserve=["everything"]), "preserve: unknown item 'everything'"),
        (lambda: Summarizer(model=3), "model must be a groundswell.Agent or a model name"),
        (
            lambda: TokenBudget(max_total=100, summarizer={"size": 3}),
            "summarizer has unknown fields size",
        ),
    ],
)
def test_bad_summarizer_settings_are_refused_naming_the_field(build: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()


async def test_turns_a_too_large_summary_crowds_out_are_summarized_too_never_lost() -> None:
    from groundswell.testing import text

    from .test_budget import turn_size

    class Wordy(Reader):
        """Its first summary of each squeeze runs about a turn and a half long."""

        def __call__(self, request: Any) -> Any:
            reply = super().__call__(request)
            if self.summaries and self.summaries[-1] is request and len(self.summaries) == 1:
                return text("Summary 1: " + "word " * int(turn_size() * 1.5))
            return reply

    model = Wordy(pages=6)
    fake = FakeAnthropicAPI(model)
    options = Summarizer(target_size=40, preserve=["last_3_turns"])
    result = await reader_agent(fake, budget_for(4, strategy="summarize", summarizer=options)).run(
        INSTRUCTION
    )
    assert result.output == "The report is about Greek letters."
    (first, *_) = [b for b in result.tree.find(type="budget") if "summary_covers" in b.payload]
    # The wordy summary left room for fewer kept turns: the one it crowded out was
    # summarized in a second call, together with the others, and none went unsaid.
    assert len(model.summaries) >= 2
    assert first.children[0].type is NodeType.SUMMARY and first.children[1].type is NodeType.SUMMARY
    crowded = first.payload["summary_covers"][-1]
    assert f"Page {crowded + 1}" in model.summaries[1].last_user_text()
    assert first.payload["summarized_turns"] == len(first.payload["summary_covers"])
    assert "dropped_turns" not in first.payload
    after = model.main[len(model.main) - 1].messages
    kept = {int(i[1:]) for i in ids(after)}
    assert crowded + 1 not in kept
