"""groundswell.evals.fork: rerun a saved run from one node with a change, the rest replayed."""

from __future__ import annotations

import io
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from groundswell import Agent, ConfigurationError, WorkflowContext, workflow
from groundswell.agent.overrides import override_agents_here
from groundswell.evals import Fork, fork
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, text, tool_use
from groundswell.tree.tree import EventTree


def answer(request: MessagesRequest) -> Any:
    """Look the step up first; then answer with the system prompt, the user text and the result."""
    results = request.latest_tool_results()
    if not results:
        return tool_use("lookup", {"key": request.last_user_text().split()[0]})
    return text(f"[{request.system}] {request.last_user_text()} -> {results[0]['content']}")


class Flow:
    """Three agents with a tool, one step each, every step building on the one before."""

    def __init__(self, first: str = "first", verb: str = "gather", client: Any = None) -> None:
        self.looked_up: list[str] = []

        def lookup(key: str) -> str:
            """Look a key up."""
            self.looked_up.append(key)
            return f"facts about {key}"

        one = Agent(name=first, system="Be thorough.", tools=[lookup], client=client)
        two = Agent(name="second", system="Be vague.", tools=[lookup], client=client)
        three = Agent(name="third", system="Summarize.", tools=[lookup], client=client)

        @workflow(name="research")
        async def research(ctx: WorkflowContext, topic: str) -> str:
            found = await ctx.step("gather", lambda: one.prompt(f"{verb} {topic}"))
            draft = await ctx.step("draft", lambda: two.prompt(f"draft {found}"))
            return await ctx.step("final", lambda: three.prompt(f"final {draft}"))

        self.workflow = research


@pytest.fixture
async def recorded(tmp_path: Path) -> tuple[Flow, EventTree, Path, str]:
    flow = Flow()
    fake = FakeAnthropicAPI(answer)
    with override_agents_here(fake.client()):
        result = await flow.workflow.run(topic="tides")
    assert len(fake.requests) == 6 and flow.looked_up == ["gather", "draft", "final"]
    path = result.tree.save(tmp_path / "run.jsonl")
    return flow, result.tree, path, result.output


def only(tree: EventTree, **attrs: Any) -> Any:
    [node] = tree.find(**attrs)
    return node


async def test_fork_at_a_prompt_replays_before_it_and_reruns_from_it(recorded: Any) -> None:
    flow, tree, path, original_output = recorded
    flow.looked_up.clear()
    draft = only(tree, type="prompt", name="second")
    live = FakeAnthropicAPI(answer)

    result = await fork(
        path, draft.id[:6], target=flow.workflow, client=live.client(), system="Be precise."
    )

    assert isinstance(result, Fork)
    # Only the forked prompt and the one after it reached the model: two turns each.
    assert [(r.system, r.last_user_text().split()[0]) for r in live.requests] == [
        ("Be precise.", "draft"),
        ("Be precise.", "draft"),
        ("Summarize.", "final"),
        ("Summarize.", "final"),
    ]
    assert (result.replayed, result.live) == (2, 4)
    # The first step's tool was answered from the recording, never run again.
    assert flow.looked_up == ["draft", "final"]
    assert "[Be precise.]" in result.output and "[Be vague.]" not in result.output
    assert result.output != original_output
    assert "[Be vague.]" in original_output

    changed = {c.path: c for c in result.changed}
    prompt = changed["workflow research / step draft / prompt second"]
    assert prompt.kind == "changed"
    assert "system: 'Be vague.' → 'Be precise.'" in prompt.differences
    assert any(
        d.startswith("user:")
        for d in changed["workflow research / step final / prompt third"].differences
    )
    assert any(d.startswith("output:") for d in changed["workflow research"].differences)
    assert not any("gather" in p for p in changed)  # before the fork: as recorded

    # The forked tree records what was replayed and where the change applied.
    forked_prompt = only(result.forked, type="prompt", name="second")
    assert forked_prompt.payload["system"] == "Be precise."
    assert any(e["type"] == "fork" for e in forked_prompt.events)
    gather_calls = [
        n
        for n in result.forked.find(type="model_call")
        if n.parent_id == only(result.forked, type="prompt", name="first").id
    ]
    assert len(gather_calls) == 2
    assert all(any(e["type"] == "replayed" for e in n.events) for n in gather_calls)
    assert result.original == tree

    shown = result.render(width=200)
    assert "original" in shown and "forked at" in shown
    assert shown.count("prompt second") >= 2
    assert "model calls: 2 replayed, 4 live" in shown
    assert "system: 'Be vague.' → 'Be precise.'" in shown
    printed = io.StringIO()
    result.print(file=printed)
    assert "model calls: 2 replayed, 4 live" in printed.getvalue()


async def test_fork_at_a_tool_call_gives_the_model_the_new_result(recorded: Any) -> None:
    flow, tree, _, _ = recorded
    flow.looked_up.clear()
    second = only(tree, type="prompt", name="second")
    [call] = [n for n in tree.find(type="tool_call") if n.parent_id == second.id]
    live = FakeAnthropicAPI(answer)

    result = await fork(
        tree, call.id, target=flow.workflow, client=live.client(), tool_result="no data"
    )

    # The request that asked for the tool was replayed; the first live one reads the new result.
    first = live.requests[0]
    assert first.system == "Be vague." and first.latest_tool_results()[0]["content"] == "no data"
    assert len(live.requests) == 3
    assert (result.replayed, result.live) == (3, 3)
    assert flow.looked_up == ["final"]  # the forked call did not run either
    assert "-> no data" in result.output  # the last step built on the changed draft
    assert "-> no data" in only(result.forked, type="prompt", name="second").payload["output"]
    changed = {c.path: c for c in result.changed}
    tool = changed["workflow research / step draft / prompt second / tool_call lookup"]
    assert "output: 'facts about draft' → 'no data'" in tool.differences


async def test_fork_accepts_a_model_change_and_new_user_text(recorded: Any) -> None:
    flow, tree, _, _ = recorded
    last = only(tree, type="prompt", name="third")
    live = FakeAnthropicAPI(answer)

    result = await fork(
        tree,
        last.id,
        target=flow.workflow,
        client=live.client(),
        model="claude-haiku-4-5",
        prompt="final recap",
    )

    assert [r.model for r in live.requests] == ["claude-haiku-4-5", "claude-haiku-4-5"]
    assert live.requests[0].last_user_text() == "final recap"
    assert (result.replayed, result.live) == (4, 2)
    assert result.output.startswith("[Summarize.] final recap ->")


async def test_a_rerun_that_leaves_the_recording_is_refused(recorded: Any) -> None:
    _, tree, _, _ = recorded
    changed_code = Flow(first="collector")  # the first step now has another agent
    last = only(tree, type="prompt", name="third")

    with pytest.raises(ConfigurationError, match="did not follow the recording") as caught:
        await fork(
            tree,
            last.id,
            target=changed_code.workflow,
            client=FakeAnthropicAPI(answer).client(),
            system="x",
        )
    assert "'first'" in str(caught.value) and "'collector'" in str(caught.value)


async def test_a_rerun_asking_what_was_not_recorded_is_refused(recorded: Any) -> None:
    _, tree, _, _ = recorded
    changed_code = Flow(verb="collect")  # the first prompt's text changed since the recording
    last = only(tree, type="prompt", name="third")

    with pytest.raises(ConfigurationError, match="did not follow the recording") as caught:
        await fork(
            tree,
            last.id,
            target=changed_code.workflow,
            client=FakeAnthropicAPI(answer).client(),
            system="x",
        )
    assert "'gather tides'" in str(caught.value) and "'collect tides'" in str(caught.value)
    assert changed_code.looked_up == []  # nothing ran past the point it left the recording


async def test_without_a_client_the_live_part_uses_the_agents_own(recorded: Any) -> None:
    _, tree, _, _ = recorded
    own = FakeAnthropicAPI(answer)
    flow = Flow(client=own.client())
    last = only(tree, type="prompt", name="third")

    result = await fork(tree, last.id, target=flow.workflow, system="Be terse.")

    assert [r.system for r in own.requests] == ["Be terse.", "Be terse."]
    assert result.output.startswith("[Be terse.] final")
    assert flow.looked_up == ["final"]


async def test_fork_refuses_what_it_cannot_do(recorded: Any) -> None:
    flow, tree, _, _ = recorded
    target = flow.workflow
    prompt = only(tree, type="prompt", name="second")
    call = tree.find(type="tool_call")[0]
    step = only(tree, type="step", name="draft")

    with pytest.raises(ConfigurationError, match=r"no node with id .*'zzzz'"):
        await fork(tree, "zzzz", target=target, system="x")
    with pytest.raises(
        ConfigurationError, match=r"tool_result= does not apply to .*prompt 'second'.*system="
    ):
        await fork(tree, prompt.id, target=target, tool_result="x")
    with pytest.raises(
        ConfigurationError, match=r"system= does not apply to .*tool_call 'lookup'.*tool_result="
    ):
        await fork(tree, call.id, target=target, system="x")
    with pytest.raises(ConfigurationError, match=r"cannot fork at .*step 'draft'"):
        await fork(tree, step.id, target=target, system="x")
    with pytest.raises(ConfigurationError, match=r"no change given for .*prompt 'second'"):
        await fork(tree, prompt.id, target=target)
    with pytest.raises(ConfigurationError, match="no trace file"):
        await fork("missing.jsonl", prompt.id, target=target, system="x")

    ids = [n.id for n in tree.walk()]
    shared = next(
        (a[:k] for k in (1, 2) for a in ids if sum(b.startswith(a[:k]) for b in ids) > 1), None
    )
    assert shared is not None
    with pytest.raises(ConfigurationError, match=r"nodes start with .*give more of the id"):
        await fork(tree, shared, target=target, system="x")


class Order(BaseModel):
    number: str
    items: int


async def test_recorded_inputs_are_converted_by_the_targets_parameters(tmp_path: Path) -> None:
    agent = Agent(name="clerk", system="Be brief.")

    @workflow(name="ship")
    async def ship(ctx: WorkflowContext, order: Order, copies: int, when: date) -> str:
        # Attribute access and date arithmetic: a dict or a str here would fail.
        note = f"{order.number} x{order.items * copies} by {when + timedelta(days=1)}"
        return await ctx.step("tell", lambda: agent.prompt(f"ship {note}"))

    echo = FakeAnthropicAPI(lambda r: text(f"[{r.system}] {r.last_user_text()}"))
    with override_agents_here(echo.client()):
        result = await ship.run(Order(number="A-1", items=2), 3, when=date(2026, 1, 1))
    path = result.tree.save(tmp_path / "ship.jsonl")
    prompt = only(result.tree, type="prompt", name="clerk")

    forked = await fork(path, prompt.id, target=ship, client=echo.client(), system="Be kind.")

    assert forked.error is None
    assert forked.output == "[Be kind.] ship A-1 x6 by 2026-01-02"

    @workflow(name="ship")
    async def stricter(
        ctx: WorkflowContext, order: Order, copies: int, when: date, rush: bool
    ) -> str:
        return "never runs"

    with pytest.raises(ConfigurationError, match=r"do not fit the target 'ship'.*rush") as caught:
        await fork(path, prompt.id, target=stricter, client=echo.client(), system="x")
    assert "Field required" in str(caught.value)

    @workflow(name="ship")
    async def shorter(ctx: WorkflowContext, order: Order) -> str:
        return "never runs"

    with pytest.raises(ConfigurationError, match=r"2 positional arguments, but it takes 1"):
        await fork(path, prompt.id, target=shorter, client=echo.client(), system="x")


async def test_a_model_change_shows_the_model_calls_as_changed(recorded: Any) -> None:
    flow, tree, _, _ = recorded
    last = only(tree, type="prompt", name="third")

    def naming_the_model(request: MessagesRequest) -> Any:
        if not request.latest_tool_results():
            return answer(request)  # asks for the tool, as recorded
        return text(f"{request.model} says hi")

    live = FakeAnthropicAPI(naming_the_model)
    result = await fork(
        tree, last.id, target=flow.workflow, client=live.client(), model="claude-haiku-4-5"
    )

    changed = {c.path: c for c in result.changed}
    assert not [c for c in result.changed if c.node_type == "model_call" and c.kind != "changed"]
    # Named by the original's model, matched by order: the two calls, each changed.
    [model] = {n.name for n in tree.find(type="model_call") if n.parent_id == last.id}
    assert model != "claude-haiku-4-5"
    calls = f"workflow research / step final / prompt third / model_call {model}"
    asked, answered = changed[calls], changed[f"{calls} #2"]
    assert any(d.startswith("model:") and "'claude-haiku-4-5'" in d for d in asked.differences)
    assert not any(d.startswith("text:") for d in asked.differences)  # the same tool call
    assert any(
        d.startswith("text:") and d.endswith("'claude-haiku-4-5 says hi'")
        for d in answered.differences
    )
    assert any(d.startswith("model:") for d in answered.differences)
