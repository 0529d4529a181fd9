"""Token budgets through the real SDK against the fake API: every strategy, warnings,
precedence, counters. Each test reads the requests the fake API received, which are
exactly what the model would have seen."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest

import groundswell
from groundswell import (
    Agent,
    ConfigurationError,
    NodeStatus,
    NodeType,
    PluginManager,
    PromptOverrides,
    TokenBudget,
    TokenBudgetExceeded,
    TokenCounter,
    WorkflowContext,
    hookimpl,
    workflow,
)
from groundswell.budget.token_budget import SUMMARIZER_SYSTEM
from groundswell.budget.tokens import (
    CountRequest,
    estimate_message,
    estimate_request,
    estimate_tokens,
    get_counter,
)
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_use

INSTRUCTION = "Read every page of the report and tell me what it says."
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def page(n: int, words: int = 120) -> str:
    """A page of about ``words`` tokens, different for every n."""
    return f"Page {n}. " + " ".join(WORDS[(n + i) % len(WORDS)] for i in range(words))


def read_page(n: int) -> str:
    """Read one page of the report.

    Args:
        n: The page number, from 1.
    """
    if n < 0:
        raise ValueError("no such page")
    return page(n)


class Reader:
    """A scripted model reading pages 1..pages, then answering; summaries on request."""

    def __init__(
        self, pages: int, *, say: dict[int, str] | None = None, fail: set[int] = frozenset()
    ) -> None:
        self.pages, self.say, self.fail = pages, say or {}, fail
        self.summaries: list[MessagesRequest] = []
        self.main: list[MessagesRequest] = []

    def __call__(self, request: MessagesRequest) -> Reply:
        if request.system == SUMMARIZER_SYSTEM:
            self.summaries.append(request)
            return text(f"Summary {len(self.summaries)}: the first pages were read.")
        self.main.append(request)
        # The latest turn always survives a budget, so its id says how far reading got.
        done = max((int(i[1:]) for i in ids(request.messages)), default=0)
        if done >= self.pages:
            return text("The report is about Greek letters.")
        n = done + 1
        return tool_use(
            "read_page", {"n": -n if n in self.fail else n}, id=f"t{n}", text=self.say.get(n)
        )


def turns_of(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """(instruction messages, turns): each turn an assistant message and what follows."""
    head: list[dict[str, Any]] = []
    turns: list[list[Any]] = []
    for m in messages:
        if m["role"] == "assistant":
            turns.append([m])
        elif turns:
            turns[-1].append(m)
        else:
            head.append(m)
    return head, turns


def ids(messages: list[dict[str, Any]]) -> list[str]:
    """The tool_use ids in a request, in order."""
    return [
        b["id"]
        for m in messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    ]


def assert_well_formed(messages: list[dict[str, Any]]) -> None:
    """What the real API demands: a user turn first, roles alternating, and every
    tool_result answering a tool_use of the message right before it."""
    assert messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"], [m["role"] for m in messages]
    for i, m in enumerate(messages):
        if m["role"] != "user" or isinstance(m["content"], str):
            continue
        results = [b["tool_use_id"] for b in m["content"] if b.get("type") == "tool_result"]
        if results:
            asked = [b["id"] for b in messages[i - 1]["content"] if b.get("type") == "tool_use"]
            assert results == asked


def tools_tokens(agent: Agent) -> int:
    """Tokens of the agent's tool definitions as the estimator counts them."""
    probe = CountRequest(model="m", messages=[], tools=[_read_page_tool()])
    return estimate_request(probe)


def _read_page_tool() -> dict[str, Any]:
    return groundswell.Tool(read_page).definition()


def size(messages: list[dict[str, Any]]) -> int:
    return sum(estimate_message(m) for m in messages)


def reader_agent(fake: FakeAnthropicAPI, budget: TokenBudget | None = None, **kw: Any) -> Agent:
    return Agent(
        name="reader",
        client=fake.client(max_retries=0),
        tools=[read_page],
        max_tokens=500,
        token_budget=budget,
        **kw,
    )


def turn_size() -> int:
    """Estimated tokens of one read_page turn (all pages are about equal)."""
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "read_page", "input": {"n": 1}}],
    }
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": page(1)}],
    }
    return size([call, result])


def budget_for(turns: float, **kw: Any) -> TokenBudget:
    """A budget whose input limit holds the instruction, the tools and ``turns`` turns."""
    fixed = tools_tokens(None) + estimate_message({"role": "user", "content": INSTRUCTION})  # type: ignore[arg-type]
    return TokenBudget(
        max_total=fixed + int(turns * turn_size()) + 500, reserve_for_output=500, **kw
    )


# -- strategies ------------------------------------------------------------------------


async def test_sliding_window_keeps_the_instruction_and_the_latest_turns_that_fit() -> None:
    model = Reader(pages=6)
    fake = FakeAnthropicAPI(model)
    budget = budget_for(2.5)
    result = await reader_agent(fake, budget).run(INSTRUCTION)

    assert result.output == "The report is about Greek letters."
    limit = budget.input_limit(500)
    for request in model.main:
        assert_well_formed(request.messages)
        assert request.messages[0] == {"role": "user", "content": INSTRUCTION}
        counted = estimate_request(
            CountRequest("m", request.messages, tools=request.tools, system=request.system)
        )
        assert counted <= limit
    # Turns pile up until a third no longer fits; from then on, exactly the latest two.
    assert [ids(r.messages) for r in model.main] == [
        [],
        ["t1"],
        ["t1", "t2"],
        ["t2", "t3"],
        ["t3", "t4"],
        ["t4", "t5"],
        ["t5", "t6"],
    ]
    budgets = result.tree.find(type=NodeType.BUDGET)
    assert [b.name for b in budgets] == ["sliding_window"] * 4
    first = budgets[0]
    assert first.status is NodeStatus.COMPLETED
    assert first.payload["removed"] == [
        {"messages": [1, 3], "tokens": turn_size(), "kinds": ["tool_use:read_page", "tool_result"]}
    ]
    assert first.metrics["tokens_before"] > limit >= first.metrics["tokens_after"]
    assert first.parent_id == result.node.id
    assert result.node.metrics["budget"]["enforcements"] == 4
    assert "budget sliding_window" in result.tree.render()


async def test_prune_oldest_drops_plain_turns_first_and_keeps_errors_decisions_and_the_last_three() -> (
    None
):
    # Turn 2 fails (an error), turn 4 states a plan (a decision): both outlive turns 1 and 3.
    model = Reader(pages=7, fail={2}, say={4: "I will now read the rest in order."})
    fake = FakeAnthropicAPI(model)
    result = await reader_agent(fake, budget_for(5.2, strategy="prune_oldest")).run(INSTRUCTION)

    last = model.main[-1].messages
    assert_well_formed(last)
    assert ids(last) == ["t2", "t4", "t5", "t6", "t7"]
    kept_error = [
        b
        for m in last
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("is_error")
    ]
    assert len(kept_error) == 1 and kept_error[0]["tool_use_id"] == "t2"
    removed = [
        r["kinds"] for b in result.tree.find(type=NodeType.BUDGET) for r in b.payload["removed"]
    ]
    assert all("tool_result:error" not in k and "assistant_text" not in k for k in removed)
    for request in model.main:
        assert_well_formed(request.messages)


async def test_prune_oldest_keeps_a_tool_error_before_the_models_ordinary_words() -> None:
    # Every turn has the model's words; turn 2's tool call fails. Text-only turns are
    # pruned oldest first, the error turn only if nothing else is left to drop.
    say = {n: f"Now I will read page {n} of the report." for n in range(1, 8)}
    model = Reader(pages=7, say=say, fail={2})
    fake = FakeAnthropicAPI(model)
    result = await reader_agent(fake, budget_for(5.2, strategy="prune_oldest")).run(INSTRUCTION)

    assert result.output == "The report is about Greek letters."
    last = model.main[-1].messages
    assert_well_formed(last)
    kept = ids(last)
    assert "t2" in kept and "t1" not in kept and "t3" not in kept
    assert kept[-3:] == ["t5", "t6", "t7"]  # keep_last_turns
    removed = [
        r["kinds"] for b in result.tree.find(type=NodeType.BUDGET) for r in b.payload["removed"]
    ]
    assert removed and all("assistant_text" in k for k in removed)
    assert all("tool_result:error" not in k for k in removed)
    for request in model.main:
        assert_well_formed(request.messages)


def test_prune_oldest_ranks_plain_turns_then_words_then_errors_and_instructions() -> None:
    from groundswell.budget.token_budget import ESSENTIAL, PLAIN, WORDS, prune_oldest, split_turns

    def turn(n: int, *, words: bool = False, failed: bool = False, told: bool = False) -> list[Any]:
        said = [{"type": "text", "text": "I will go on."}] if words else []
        call = {"type": "tool_use", "id": f"t{n}", "name": "read_page", "input": {"n": n}}
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": f"t{n}", "content": "x"}
        if failed:
            result["is_error"] = True
        answer: list[Any] = [result] + ([{"type": "text", "text": "Stop at 3."}] if told else [])
        return [
            {"role": "assistant", "content": [*said, call]},
            {"role": "user", "content": answer},
        ]

    messages: list[Any] = [{"role": "user", "content": INSTRUCTION}]
    shapes = [
        {"failed": True},
        {"words": True},
        {},
        {"told": True},
        {"words": True},
        {},
        {},
    ]
    for n, how in enumerate(shapes, 1):
        messages += turn(n, **how)
    head, turns = split_turns(messages, [10] * len(messages))
    assert head == 1
    assert [t.rank for t in turns] == [ESSENTIAL, WORDS, PLAIN, ESSENTIAL, WORDS, PLAIN, PLAIN]
    names = {id(t): f"t{i}" for i, t in enumerate(turns, 1)}

    def kept(room_turns: int) -> list[str]:
        return [names[id(t)] for t in prune_oldest(turns, room_turns * 20, keep_last=2)]

    assert kept(6) == ["t1", "t2", "t4", "t5", "t6", "t7"]  # the plain turn goes first
    assert kept(5) == ["t1", "t4", "t5", "t6", "t7"]  # then words, oldest first
    assert kept(4) == ["t1", "t4", "t6", "t7"]
    assert kept(3) == ["t4", "t6", "t7"]  # errors and instructions last, oldest first
    assert kept(1) == ["t6", "t7"]  # the last keep_last turns are never dropped


async def test_prune_oldest_never_drops_the_last_turns_it_promises_to_keep() -> None:
    model = Reader(pages=4)
    fake = FakeAnthropicAPI(model)
    with pytest.raises(TokenBudgetExceeded, match=r"last 3 turns it keeps \(keep_last_turns\)"):
        await reader_agent(fake, budget_for(2.5, strategy="prune_oldest")).run(INSTRUCTION)
    # With keep_last_turns=2 the same conversation fits.
    model = Reader(pages=4)
    fake = FakeAnthropicAPI(model)
    budget = budget_for(2.5, strategy="prune_oldest", keep_last_turns=2)
    await reader_agent(fake, budget).run(INSTRUCTION)
    assert ids(model.main[-1].messages) == ["t3", "t4"]


async def test_summarize_replaces_old_turns_with_a_summary_made_by_its_own_call() -> None:
    model = Reader(pages=6)
    fake = FakeAnthropicAPI(model)
    budget = budget_for(3.5, strategy="summarize", summarizer="claude-haiku-4-5")
    result = await reader_agent(fake, budget).run(INSTRUCTION)

    assert result.output == "The report is about Greek letters."
    assert model.summaries, "the summarizer was never asked"
    first_summary = model.summaries[0]
    assert first_summary.model == "claude-haiku-4-5"
    asked = first_summary.last_user_text()
    assert "[assistant calls tool read_page]" in asked and "Page 1." in asked
    # The next request starts with the instruction, now carrying the summary, then the
    # turns that were kept whole.
    after = next(r for r in model.main if isinstance(r.messages[0]["content"], list))
    assert_well_formed(after.messages)
    instruction, summary = after.messages[0]["content"]
    assert instruction == {"type": "text", "text": INSTRUCTION}
    assert summary["text"].startswith("<earlier_turns_summary>\nSummary 1:")
    assert "Page 1." not in str(after.messages[1:])
    # A later summary folds the earlier one in, and replaces it.
    if len(model.summaries) > 1:
        assert "Summary 1:" in model.summaries[1].last_user_text()
        final = model.main[-1].messages[0]["content"]
        assert sum("earlier_turns_summary" in b["text"] for b in final) == 1

    tree = result.tree
    summary_node = tree.find(type=NodeType.SUMMARY)[0]
    budget_node = tree.get_node(summary_node.parent_id)
    assert budget_node.type is NodeType.BUDGET and budget_node.name == "summarize"
    assert budget_node.parent_id == result.node.id
    (call,) = summary_node.children
    assert call.type is NodeType.PROMPT and call.name == "reader:summarizer"
    assert call.children[0].type is NodeType.MODEL_CALL
    assert summary_node.metrics["usage"]["output_tokens"] > 0
    assert summary_node.payload["output"].startswith("Summary 1:")
    assert budget_node.payload["summarized_turns"] >= 1
    assert budget_node.metrics["tokens_after"] <= budget.input_limit(500)


async def test_summarize_with_a_summarizer_agent_and_a_failing_summarizer() -> None:
    model = Reader(pages=5)
    fake = FakeAnthropicAPI(model)
    summarizer = Agent(name="cheap", model="claude-haiku-4-5", client=fake.client(max_retries=0))
    reader = reader_agent(fake, budget_for(2.5, strategy="summarize", summarizer=summarizer))
    # A given Agent is used as it is (its own model and system prompt); the
    # instructions travel in the user turn.
    result = await reader.run(INSTRUCTION)
    assert next(n.name for n in result.tree.find(type=NodeType.SUMMARY)) == "cheap"

    model = Reader(pages=5)
    fake = FakeAnthropicAPI(model)
    broken = FakeAnthropicAPI([])  # has no reply to give: every summary request fails
    reader = reader_agent(
        fake,
        budget_for(
            2.5,
            strategy="summarize",
            summarizer=Agent(name="down", client=broken.client(max_retries=0)),
        ),
    )
    result = await reader.run(INSTRUCTION)
    assert result.output == "The report is about Greek letters."
    failed = result.tree.find(type=NodeType.SUMMARY)[0]
    assert failed.status is NodeStatus.FAILED
    budget_node = result.tree.get_node(failed.parent_id)
    assert budget_node.payload["fallback"] == "sliding_window: the summarizer failed"
    assert any(e["type"] == "summarize_failed" for e in budget_node.events)
    assert_well_formed(model.main[-1].messages)


async def test_fail_raises_with_a_breakdown_and_sends_nothing_over_the_limit() -> None:
    model = Reader(pages=6)
    fake = FakeAnthropicAPI(model)
    budget = budget_for(2.5, strategy="fail")
    with pytest.raises(TokenBudgetExceeded) as caught:
        await reader_agent(fake, budget, system="You read reports.").run(INSTRUCTION)
    error = caught.value
    parts = error.breakdown
    assert set(parts) == {
        "system",
        "tools",
        "instruction",
        "assistant",
        "tool_results",
        "user",
        "total",
        "limit",
    }
    assert parts["limit"] == budget.input_limit(500)
    assert parts["total"] > parts["limit"]
    assert parts["total"] == sum(v for k, v in parts.items() if k not in ("total", "limit"))
    assert parts["system"] == estimate_tokens("You read reports.")
    assert parts["tool_results"] > parts["assistant"] > 0
    assert "largest part: tool_results" in str(error)
    assert len(model.main) == 3  # the third turn was never sent
    budget_node = groundswell.current_tree() or None
    assert budget_node is None  # outside any run


async def test_fail_marks_the_budget_and_prompt_nodes_failed_inside_a_workflow() -> None:
    model = Reader(pages=4)
    fake = FakeAnthropicAPI(model)
    reader = reader_agent(fake, budget_for(1.5, strategy="fail"))

    @workflow
    async def report(ctx: WorkflowContext) -> str:
        return await ctx.step("read", lambda: reader.prompt(INSTRUCTION))

    with pytest.raises(groundswell.WorkflowError) as caught:
        await report.run()
    tree = caught.value.result.tree
    (budget_node,) = tree.find(type=NodeType.BUDGET)
    assert budget_node.status is NodeStatus.FAILED
    assert budget_node.error and budget_node.error["type"] == "TokenBudgetExceeded"
    assert tree.get_node(budget_node.parent_id).status is NodeStatus.FAILED
    assert caught.value.node_path == "report/read"


async def test_warning_at_the_threshold_is_recorded_once_without_pruning() -> None:
    model = Reader(pages=3)
    fake = FakeAnthropicAPI(model)
    budget = budget_for(3.2, warning_threshold=0.5)
    result = await reader_agent(fake, budget).run(INSTRUCTION)
    warnings = [e for e in result.node.events if e["type"] == "budget_warning"]
    assert len(warnings) == 1
    warning = warnings[0]
    assert warning["limit"] == budget.input_limit(500)
    assert 0.5 <= warning["used"] <= 1.0
    assert warning["tokens"] >= 0.5 * warning["limit"]
    assert not result.tree.find(type=NodeType.BUDGET)
    assert ids(model.main[-1].messages) == ["t1", "t2", "t3"]
    # Below the threshold: no warning.
    model = Reader(pages=1)
    fake = FakeAnthropicAPI(model)
    result = await reader_agent(fake, budget_for(10, warning_threshold=0.9)).run(INSTRUCTION)
    assert not [e for e in result.node.events if e["type"] == "budget_warning"]


# -- where a budget is set ---------------------------------------------------------------


async def test_per_step_budgets_and_precedence() -> None:
    tight = budget_for(1.5)
    loose = budget_for(50)

    def run_reader(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
        return reader_agent(fake, **kw)

    model = Reader(pages=3)
    fake = FakeAnthropicAPI(model)
    plain = run_reader(fake)

    @workflow(token_budget=TokenBudget(max_total=100_000, per_step={"skim": tight}))
    async def report(ctx: WorkflowContext) -> None:
        await ctx.step("skim", lambda: plain.prompt(INSTRUCTION))
        await ctx.step("study", lambda: plain.prompt(INSTRUCTION))
        await ctx.step("quick", lambda: plain.prompt(INSTRUCTION), token_budget=tight)

    result = await report.run()
    by_step = {
        step.name: step.children[0].metrics["budget"]["enforcements"]
        for step in result.tree.find(type=NodeType.STEP)
    }
    assert by_step == {"skim": 2, "study": 0, "quick": 2}

    # PromptOverrides > the step's budget > the agent's own > the workflow's.
    model = Reader(pages=3)
    fake = FakeAnthropicAPI(model)
    own = run_reader(fake, budget=loose)

    @workflow(token_budget=tight)
    async def layered(ctx: WorkflowContext) -> None:
        await ctx.step("a", lambda: own.prompt(INSTRUCTION))
        await ctx.step("b", lambda: own.prompt(INSTRUCTION), token_budget=tight)
        await ctx.step(
            "c",
            lambda: own.prompt(INSTRUCTION, PromptOverrides(token_budget=loose)),
            token_budget=tight,
        )

    result = await layered.run()
    budgets = {
        s.name: s.children[0].metrics["budget"] for s in result.tree.find(type=NodeType.STEP)
    }
    assert {k: (v["source"], v["limit"]) for k, v in budgets.items()} == {
        "a": ("agent", loose.input_limit(500)),
        "b": ("step", tight.input_limit(500)),
        "c": ("prompt_overrides", loose.input_limit(500)),
    }
    assert [v["enforcements"] for v in budgets.values()] == [0, 2, 0]


async def test_per_step_entries_apply_to_nested_steps_and_name_their_source() -> None:
    tight = budget_for(1.5)
    model = Reader(pages=3)
    fake = FakeAnthropicAPI(model)
    agent = reader_agent(fake, TokenBudget(max_total=100_000, per_step={"outer": tight}))

    @workflow
    async def nested(ctx: WorkflowContext) -> None:
        async def outer() -> None:
            await ctx.step("inner", lambda: agent.prompt(INSTRUCTION))

        await ctx.step("outer", outer)

    result = await nested.run()
    (prompt,) = result.tree.find(type=NodeType.PROMPT)
    assert prompt.metrics["budget"]["source"] == "agent.per_step['outer']"
    assert prompt.metrics["budget"]["limit"] == tight.input_limit(500)
    (first, *_) = result.tree.find(type=NodeType.BUDGET)
    assert first.payload["source"] == "agent.per_step['outer']"


async def test_reserve_for_output_defaults_to_max_tokens() -> None:
    budget = TokenBudget(max_total=10_000)
    assert budget.input_limit(4096) == 10_000 - 4096
    assert TokenBudget(max_total=10_000, reserve_for_output=0).input_limit(4096) == 10_000
    model = Reader(pages=1)
    fake = FakeAnthropicAPI(model)
    result = await reader_agent(fake, budget).run(INSTRUCTION)
    assert result.node.metrics["budget"]["limit"] == 10_000 - 500


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_total": 0}, "max_total must be at least 1"),
        ({"max_total": "8k"}, "max_total must be an int"),
        ({"max_total": 100, "reserve_for_output": 100}, "must be less than max_total"),
        ({"max_total": 100, "strategy": "drop"}, "strategy must be one of sliding_window"),
        ({"max_total": 100, "warning_threshold": 1.5}, r"warning_threshold must be a fraction"),
        ({"max_total": 100, "per_step": {"a": 5}}, r"per_step\['a'\] must be a TokenBudget"),
        ({"max_total": 100, "keep_last_turns": 0}, "keep_last_turns must be an int >= 1"),
        ({"max_total": 100, "summarizer": 3}, "summarizer must be a groundswell.Agent"),
        ({"max_total": 100, "counter": 3}, "counter must be a registered counter name"),
    ],
)
def test_bad_budgets_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TokenBudget(**kwargs)


def test_token_budget_must_be_a_token_budget_everywhere() -> None:
    with pytest.raises(ConfigurationError, match="agent 'a': token_budget must be"):
        Agent(name="a", token_budget=8000)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="PromptOverrides: token_budget must be"):
        PromptOverrides(token_budget={"max_total": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="workflow 'w': token_budget must be"):
        groundswell.Workflow(_noop, name="w", token_budget=5)  # type: ignore[arg-type]


async def _noop(ctx: WorkflowContext) -> None:
    return None


async def test_a_bad_step_budget_is_named() -> None:
    @workflow
    async def wf(ctx: WorkflowContext) -> None:
        await ctx.step("s", lambda: None, token_budget=5)  # type: ignore[arg-type]

    with pytest.raises(groundswell.WorkflowError, match="step 's': token_budget must be"):
        await wf.run()


# -- counters ---------------------------------------------------------------------------


async def test_the_anthropic_counter_counts_with_the_api() -> None:
    model = Reader(pages=4)
    fake = FakeAnthropicAPI(model)
    budget = budget_for(2.5, counter="anthropic")
    result = await reader_agent(fake, budget).run(INSTRUCTION)
    # One count per model turn, of the request about to be sent (before any pruning).
    assert len(fake.count_token_requests) == len(model.main)
    pruned = 0
    for counted, sent in zip(fake.count_token_requests, model.main, strict=True):
        assert counted.body["tools"] == sent.tools
        assert counted.body["model"] == sent.model
        whole = counted.body["messages"]
        assert all(m in whole for m in sent.messages)
        pruned += len(whole) != len(sent.messages)
    assert pruned == len(result.tree.find(type=NodeType.BUDGET)) > 0
    first = result.tree.find(type=NodeType.BUDGET)[0]
    assert first.payload["counter"] == "anthropic"
    # The fake API counts a quarter token per character of JSON.
    assert first.metrics["tokens_before"] > budget.input_limit(500)
    assert result.node.metrics["budget"]["checks"] == len(model.main)


class BrokenCounter:
    async def count(self, request: CountRequest) -> int:
        raise RuntimeError("counting service down")


async def test_a_failing_counter_falls_back_to_the_estimate() -> None:
    model = Reader(pages=2)
    fake = FakeAnthropicAPI(model)
    budget = budget_for(10, counter=BrokenCounter())
    result = await reader_agent(fake, budget).run(INSTRUCTION)
    assert result.output == "The report is about Greek letters."
    errors = [e for e in result.node.events if e["type"] == "budget_counter_error"]
    assert len(errors) == len(model.main)
    assert errors[0]["error"] == "RuntimeError: counting service down"
    assert errors[0]["fallback"] == "estimate"


def test_counters_by_name_and_errors() -> None:
    assert set(groundswell.get_plugin_manager().token_counters()) >= {"estimate", "anthropic"}
    with pytest.raises(ConfigurationError, match="no token counter named 'tiktoken'"):
        get_counter("tiktoken")


async def test_the_env_variable_picks_the_default_counter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUNDSWELL_TOKEN_COUNTER", "anthropic")
    model = Reader(pages=1)
    fake = FakeAnthropicAPI(model)
    await reader_agent(fake, budget_for(10)).run(INSTRUCTION)
    assert len(fake.count_token_requests) == 2


def test_the_estimate_is_deterministic_and_counts_every_part() -> None:
    text_ = "The quick brown fox jumps over the lazy dog. " * 20
    assert estimate_tokens(text_) == estimate_tokens(text_)
    assert 150 <= estimate_tokens(text_) <= 250  # about 10 tokens a sentence
    assert estimate_tokens("") == 0 and estimate_tokens("a") == 1
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "x", "name": "search", "input": {"q": text_}}],
    }
    result: Mapping[str, Any] = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "x", "content": text_}],
    }
    assert estimate_message(call) > estimate_tokens(text_)
    assert estimate_message(result) > estimate_tokens(text_)
    with_all = CountRequest(
        "m", [call, result], system="Be brief.", tools=[{"name": "search", "input_schema": {}}]
    )
    without_tools = CountRequest("m", [call, result], system="Be brief.")
    assert estimate_request(with_all) - estimate_request(without_tools) > 300  # tool-use preamble
    assert estimate_tokens("日本語のテキストです") >= 8  # non-ASCII text is dense


class Lengths:
    async def count(self, request: CountRequest) -> int:
        return sum(len(str(m["content"])) for m in request.messages)


async def test_a_plugin_counter_is_used_by_name() -> None:
    class Plugin:
        @hookimpl
        def register_token_counters(self) -> TokenCounter:
            return TokenCounter(name="lengths", factory=Lengths)

    manager = groundswell.get_plugin_manager()
    name = manager.register(Plugin(), name="lengths-plugin")
    try:
        model = Reader(pages=1)
        fake = FakeAnthropicAPI(model)
        budget = TokenBudget(max_total=10_000, reserve_for_output=0, counter="lengths")
        result = await reader_agent(fake, budget).run(INSTRUCTION)
        checks = result.node.metrics["budget"]
        assert checks["last_tokens"] == len(str(model.main[-1].messages[0]["content"])) + len(
            str(model.main[-1].messages[1]["content"])
        ) + len(str(model.main[-1].messages[2]["content"]))
    finally:
        manager.unregister(name)
    assert isinstance(PluginManager().token_counters()["estimate"].factory(), object)


# -- what a review of the first version found ---------------------------------------------


def sequence(gene: str) -> str:
    """Fetch the DNA sequence of a gene."""
    return "ACGT" * 50_000


async def test_text_without_word_breaks_is_counted() -> None:
    fake = FakeAnthropicAPI([tool_use("sequence", {"gene": "X"}), text("Done.")])
    agent = Agent(
        name="bio",
        tools=[sequence],
        client=fake.client(max_retries=0),
        token_budget=TokenBudget(max_total=8_000, reserve_for_output=1_000, strategy="fail"),
    )
    with pytest.raises(TokenBudgetExceeded) as caught:
        await agent.run("Fetch X.")
    assert caught.value.breakdown["tool_results"] > 40_000
    assert "use a strategy that removes turns" in str(caught.value)
    assert "have the tools return less (one result cannot be cut)" in str(caught.value)
    assert len(fake.requests) == 1
    assert estimate_tokens("a" * 10_000) > 2_000
    assert estimate_tokens("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08") > 25


def test_a_budget_with_no_room_for_input_is_refused_with_the_fix() -> None:
    with pytest.raises(
        ConfigurationError, match=r"reserve_for_output \(unset, so max_tokens=4096\)"
    ):
        Agent(name="a", token_budget=TokenBudget(max_total=2_000))
    Agent(name="a", max_tokens=1_000, token_budget=TokenBudget(max_total=2_000))


async def test_a_step_budget_with_no_room_fails_the_prompt_clearly() -> None:
    fake = FakeAnthropicAPI([text("hi")])
    agent = Agent(name="a", client=fake.client(max_retries=0))

    @workflow
    async def wf(ctx: WorkflowContext) -> None:
        await ctx.step("s", lambda: agent.prompt("hi"), token_budget=TokenBudget(max_total=100))

    with pytest.raises(groundswell.WorkflowError, match="leaves no room for input"):
        await wf.run()
    assert not fake.requests


def summarizing(answer: str) -> tuple[Reader, FakeAnthropicAPI]:
    model = Reader(pages=6)

    def respond(request: MessagesRequest) -> Reply:
        if request.system == SUMMARIZER_SYSTEM:
            model.summaries.append(request)
            return text(answer)
        return model(request)

    return model, FakeAnthropicAPI(respond)


async def test_summarize_falls_back_when_the_summary_is_empty_or_too_long() -> None:
    model, fake = summarizing("")
    result = await reader_agent(fake, budget_for(3.5, strategy="summarize")).run(INSTRUCTION)
    assert result.output == "The report is about Greek letters."
    budgets = result.tree.find(type=NodeType.BUDGET)
    assert budgets[0].payload["fallback"] == "sliding_window: the summarizer failed"
    # A summarizer that failed is not asked again within the same prompt.
    assert len(model.summaries) == 1
    assert budgets[1].payload["fallback"] == (
        "sliding_window: the summarizer failed earlier in this prompt"
    )
    assert not any(isinstance(r.messages[0]["content"], list) for r in model.main)

    model, fake = summarizing("blah " * 3_000)
    result = await reader_agent(fake, budget_for(3.5, strategy="summarize")).run(INSTRUCTION)
    assert result.output == "The report is about Greek letters."
    first = result.tree.find(type=NodeType.BUDGET)[0]
    assert "left no room for the latest turn" in first.payload["fallback"]
    for request in model.main:
        assert_well_formed(request.messages)
        assert isinstance(request.messages[0]["content"], str)  # no oversized summary sent
    # The summarizer is asked for a summary that fits: max_tokens is capped.
    assert model.summaries[0].body["max_tokens"] < 500


async def test_the_summary_counts_in_the_prompts_usage() -> None:
    model = Reader(pages=6)
    fake = FakeAnthropicAPI(model)
    result = await reader_agent(fake, budget_for(3.5, strategy="summarize")).run(INSTRUCTION)
    summaries = result.tree.find(type=NodeType.SUMMARY)
    assert summaries
    calls = [n for n in result.node.children if n.type is NodeType.MODEL_CALL]
    main = sum(c.metrics["usage"]["input_tokens"] for c in calls)
    extra = sum(s.metrics["usage"]["input_tokens"] for s in summaries)
    assert result.usage["input_tokens"] == main + extra
    assert result.node.metrics["usage"] == result.usage


def test_the_estimate_memo_does_not_keep_texts_alive() -> None:
    import sys

    big = "word " * 100_000
    before = sys.getrefcount(big)
    estimate_tokens(big)
    assert sys.getrefcount(big) == before


def test_unknown_counter_names_are_refused_when_the_budget_is_built() -> None:
    with pytest.raises(ConfigurationError, match=r"no token counter named 'nope'; available: \["):
        TokenBudget(max_total=1_000, counter="nope")


async def test_the_response_schema_counts_towards_the_budget() -> None:
    from pydantic import BaseModel

    class Report(BaseModel):
        title: str
        findings: list[str]
        severity_by_finding: list[int]

    fake = FakeAnthropicAPI()  # answers to the schema
    agent = Agent(name="a", client=fake.client(max_retries=0), max_tokens=100)
    budget = TokenBudget(max_total=100_000, reserve_for_output=0)
    plain = await agent.run("Report", PromptOverrides(token_budget=budget))
    shaped = await agent.run(
        groundswell.Prompt(user="Report", response_format=Report),
        PromptOverrides(token_budget=budget),
    )
    grown = (
        shaped.node.metrics["budget"]["last_tokens"] - plain.node.metrics["budget"]["last_tokens"]
    )
    assert grown >= estimate_tokens(Report.model_json_schema()) > 20


def test_a_paused_turn_and_its_continuation_are_one_turn() -> None:
    from groundswell.budget.token_budget import split_turns

    messages = [
        {"role": "user", "content": "search the web"},
        {"role": "assistant", "content": [{"type": "text", "text": "searching"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "still searching"}]},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": [{"type": "text", "text": "found it"}]},
    ]
    head, turns = split_turns(messages, [10] * len(messages))
    assert head == 1
    assert [(t.start, t.end) for t in turns] == [(1, 4), (4, 5)]


async def test_the_error_names_the_right_fix() -> None:
    model = Reader(pages=3)
    fake = FakeAnthropicAPI(model)
    with pytest.raises(TokenBudgetExceeded) as caught:
        await reader_agent(fake, budget_for(0.5)).run(INSTRUCTION)
    message = str(caught.value)
    assert "sliding_window cannot make the request fit" in message
    assert "the instruction and the latest turn alone exceed" in message
    assert "largest part: tools" in message
    assert "send fewer or shorter tool definitions" in message
    assert "use a strategy that removes turns" not in message
