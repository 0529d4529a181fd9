"""`groundswell.evals.capture`: saved runs become cases that replay offline from their replies."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import yaml

from groundswell import Agent, ConfigurationError, WorkflowContext, WorkflowError, evals, workflow
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_use
from groundswell.tree.tree import EventTree

STATUS = {"A-1": "shipped", "B-2": "delayed", "C-3": "lost"}


def lookup(order: str) -> str:
    """Look up an order's status."""
    return STATUS.get(order, "unknown")


def shop_model(request: MessagesRequest) -> Reply:
    """Asks the tool about the order in the question, then answers with what it said."""
    order = re.search(r"[A-Z]-\d", request.last_user_text())
    results = request.latest_tool_results()
    if not results:
        return tool_use("lookup", {"order": order.group() if order else "?"})
    return text(f"Order {order.group() if order else '?'} is {results[0]['content']}.")


fake = FakeAnthropicAPI(shop_model)
support = Agent(
    name="support", tools=[lookup], system="You answer about orders.", client=fake.client()
)


@workflow
async def answer(ctx: WorkflowContext, order: str, tone: str = "plain") -> str:
    if not order:
        raise ValueError("no order number given")
    return await support.prompt(f"Where is order {order}? Answer in a {tone} tone.")


async def saved_run(path: Path, *args: str, **kwargs: str) -> Path:
    """Run ``answer`` and save its tree (a failed run's too) to ``path``."""
    try:
        result = await answer.run(*args, **kwargs)
        tree = result.tree
    except WorkflowError as exc:
        if exc.result is None:
            raise
        tree = exc.result.tree
    return tree.save(path)


async def test_captured_runs_replay_offline_and_pass(tmp_path: Path) -> None:
    traces = [
        await saved_run(tmp_path / "runs" / f"{order}.jsonl", order=order, tone=tone)
        for order, tone in [("A-1", "plain"), ("B-2", "warm"), ("C-3", "brisk")]
    ]
    into = tmp_path / "cases.yaml"

    dataset = evals.capture(traces, into=into)

    assert len(dataset) == 3
    names = [case.name for case in dataset]
    assert len(set(names)) == 3 and all(n.startswith("answer-") for n in names)
    first = dataset.cases[0]
    assert first.inputs == {"order": "A-1", "tone": "plain"}
    assert first.expected_output == "Order A-1 is shipped."
    assert first.metadata["source"] == str(traces[0])
    assert first.metadata["run_id"] == EventTree.load(traces[0]).root.id  # type: ignore[union-attr]
    assert first.trace == f"cases.traces/{first.name}.jsonl"
    assert (tmp_path / first.trace).exists()
    # The file says the same, with traces relative to it.
    saved = yaml.safe_load(into.read_text())
    assert [c["name"] for c in saved["cases"]] == names
    assert saved["cases"][1]["inputs"] == {"order": "B-2", "tone": "warm"}

    asked = len(fake.requests)
    assert asked >= 6  # the recorded runs asked the fake: a tool call and an answer each
    report = await evals.run(into, answer, replay=True, trace_dir=tmp_path / "t")

    assert [case.name for case in report.cases] == names
    for case in report.cases:
        assert case.passed, case
        [run] = case.runs
        assert {s.name for s in run.scores} == {"equals_expected", "no_failed_nodes"}
    assert report.cases[1].runs[0].output == "Order B-2 is delayed."
    replayed = EventTree.load(report.cases[1].runs[0].trace or "")
    assert [n.name for n in replayed.find(type="tool_call")] == ["lookup"]
    assert len(fake.requests) == asked  # every answer came from the recorded replies


async def test_capturing_the_same_trace_again_is_stable(tmp_path: Path) -> None:
    trace = await saved_run(tmp_path / "a.jsonl", order="A-1")
    first = evals.capture(trace, into=tmp_path / "cases.yaml")  # one trace alone
    again = evals.capture([trace, trace], into=tmp_path / "cases.yaml")
    assert [c.name for c in first] == [c.name for c in again] == ["answer"]


async def test_positional_inputs_need_a_target_to_be_named(tmp_path: Path) -> None:
    trace = await saved_run(tmp_path / "positional.jsonl", "B-2", "warm")
    into = tmp_path / "cases.yaml"

    with pytest.raises(ConfigurationError, match=r"positional .*pass target="):
        evals.capture([trace], into=into)
    assert not into.exists()

    dataset = evals.capture([trace], into=into, target=answer)
    assert dataset.cases[0].inputs == {"order": "B-2", "tone": "warm"}
    report = await evals.run(into, answer, replay=True, trace_dir=tmp_path / "t")
    assert report.cases[0].passed


async def test_a_target_that_takes_anything_cannot_name_positional_inputs(
    tmp_path: Path,
) -> None:
    trace = await saved_run(tmp_path / "positional.jsonl", "A-1")

    async def anything(*args: str) -> str:
        return "".join(args)

    with pytest.raises(ConfigurationError, match="takes any arguments"):
        evals.capture([trace], into=tmp_path / "cases.yaml", target=anything)
    # Keyword arguments need no naming: such a target is fine for them.
    named = await saved_run(tmp_path / "named.jsonl", order="A-1")
    dataset = evals.capture([named], into=tmp_path / "cases.yaml", target=anything)
    assert dataset.cases[0].inputs == {"order": "A-1"}


async def test_capturing_into_an_existing_dataset_adds_cases(tmp_path: Path) -> None:
    into = tmp_path / "cases.yaml"
    into.write_text(
        yaml.safe_dump(
            {
                "cases": [
                    {"name": "answer", "inputs": {"order": "Z-9"}, "metadata": {"by": "hand"}}
                ],
                "evaluators": ["no_failed_nodes"],
            }
        )
    )
    one = await saved_run(tmp_path / "one.jsonl", order="A-1")
    two = await saved_run(tmp_path / "two.jsonl", order="B-2")

    after_one = evals.capture([one], into=into)
    # "answer" was a hand-written case of another run: the captured one gets its own name.
    kept, captured = (case.name for case in after_one)
    assert kept == "answer"
    assert captured.startswith("answer-")
    assert after_one.cases[0].metadata == {"by": "hand"}

    # An evaluator added to the captured case by hand survives capturing its run again.
    data = yaml.safe_load(into.read_text())
    data["cases"][1]["evaluators"] = [{"contains": "shipped"}]
    into.write_text(yaml.safe_dump(data))

    after_two = evals.capture([two, one], into=into)
    assert len(after_two) == 3
    assert after_two.case(captured).evaluators == [{"contains": "shipped"}]
    assert after_two.case(captured).inputs == {"order": "A-1"}
    assert after_two.evaluators == ["no_failed_nodes"]
    assert "name" not in yaml.safe_load(into.read_text())  # the file's name stays implied

    cases = after_two.cases[1:]
    report = await evals.run(
        after_two.model_copy(update={"cases": cases}), answer, replay=True, trace_dir=tmp_path / "t"
    )
    assert all(case.passed for case in report.cases)


async def test_a_failed_run_is_skipped_and_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = await saved_run(tmp_path / "good.jsonl", order="A-1")
    bad = await saved_run(tmp_path / "bad.jsonl", order="")
    into = tmp_path / "cases.yaml"

    with caplog.at_level(logging.WARNING, logger="groundswell.evals"):
        dataset = evals.capture([good, bad], into=into)

    assert [c.inputs for c in dataset] == [{"order": "A-1"}]
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "failed" in warning and "no order number given" in warning and "bad.jsonl" in warning

    with pytest.raises(ConfigurationError, match="no completed workflow run"):
        evals.capture([bad], into=tmp_path / "only-bad.yaml")
    assert not (tmp_path / "only-bad.yaml").exists()


async def test_traces_are_read_from_directories_json_files_and_trees(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    await saved_run(folder / "1.jsonl", order="A-1")
    await saved_run(folder / "2.jsonl", order="B-2")
    tree = (await answer.run(order="C-3")).tree
    as_json = tmp_path / "tree.json"
    as_json.write_text(json.dumps(tree.to_json()))
    other = (await answer.run(order="A-1", tone="curt")).tree
    into = tmp_path / "cases.json"

    dataset = evals.capture([folder, as_json, other], into=into)

    assert [c.inputs["order"] for c in dataset] == ["A-1", "B-2", "C-3", "A-1"]
    assert dataset.cases[0].metadata["source"] == str(folder / "1.jsonl")
    assert json.loads(into.read_text())["cases"][2]["expected_output"] == "Order C-3 is lost."
    report = await evals.run(into, answer, replay=True, trace_dir=tmp_path / "t")
    assert all(case.passed for case in report.cases)


def test_bad_arguments_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"\.yaml, \.yml or \.json"):
        evals.capture([tmp_path / "x.jsonl"], into=tmp_path / "cases.txt")
    with pytest.raises(ConfigurationError, match="no trace at"):
        evals.capture([tmp_path / "missing.jsonl"], into=tmp_path / "cases.yaml")
    with pytest.raises(ConfigurationError, match="at least one"):
        evals.capture([], into=tmp_path / "cases.yaml")


async def test_a_run_recorded_truncated_is_skipped_and_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    long = "tides " * 2_000  # 12,000 characters: over what a tree keeps of a string
    writer = Agent(name="writer", client=FakeAnthropicAPI(lambda r: text(long)).client())

    @workflow
    async def essay(ctx: WorkflowContext, topic: str) -> str:
        return await writer.prompt(f"Write about {topic}.")

    @workflow
    async def gist(ctx: WorkflowContext, topic: str) -> str:
        return (await writer.prompt(f"Write about {topic}."))[:20]  # a short output

    whole = (await essay.run(topic="the sea")).tree
    assert len(whole.root.payload["output"]) < len(long)  # type: ignore[union-attr]
    short = (await gist.run(topic="the sea")).tree
    good = await saved_run(tmp_path / "good.jsonl", order="A-1")
    into = tmp_path / "cases.yaml"

    with caplog.at_level(logging.WARNING, logger="groundswell.evals"):
        dataset = evals.capture([whole, short, good], into=into)

    assert [c.inputs for c in dataset] == [{"order": "A-1"}]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "'essay'" in warnings[0] and "output was recorded truncated" in warnings[0]
    assert "'gist'" in warnings[1] and "model reply" in warnings[1]
    assert all("over 10000 characters" in w for w in warnings)
    assert "[truncated" not in into.read_text()


async def test_secrets_in_a_run_are_not_written_into_the_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok_live_abcdef1234567890"
    monkeypatch.setenv("MY_SERVICE_TOKEN", token)
    leaky = Agent(
        name="leaky",
        client=FakeAnthropicAPI(lambda r: text(f"Use token {token} to call it.")).client(),
    )

    @workflow
    async def setup(ctx: WorkflowContext, service: str, note: str) -> str:
        return await leaky.prompt(f"How do I call {service}?")

    tree = (await setup.run(service="billing", note=f"ours is {token}")).tree
    assert token in tree.root.payload["output"]  # type: ignore[union-attr]
    into = tmp_path / "cases.yaml"

    dataset = evals.capture([tree], into=into)

    written = into.read_text()
    assert token not in written
    assert token not in (tmp_path / dataset.cases[0].trace).read_text()  # type: ignore[operator]
    case = dataset.cases[0]
    assert case.inputs["service"] == "billing"
    assert token not in str(case.expected_output) and "Use token" in str(case.expected_output)
    assert token not in case.inputs["note"]
