"""Evals as a user meets them: datasets, evaluators, runs, reports and baselines.

Every case runs a real workflow whose agent talks through the real ``anthropic``
client to `FakeAnthropicAPI`; evaluators read the real tree. The plugin test
loads ``groundswell-eval-demo``, a third-party distribution kept under
``tests/data/evaluator_dist`` the way pip leaves an installed plugin.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import groundswell
from groundswell import Agent, ConfigurationError, PluginManager, WorkflowContext, evals, workflow
from groundswell.plugins.manager import reset_plugin_manager
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_use

DIST = Path(__file__).resolve().parent / "data" / "evaluator_dist"


def lookup_order(order: str) -> str:
    """Look an order up.

    Args:
        order: The order number.
    """
    return f"order {order} shipped on Monday"


def support_model(request: MessagesRequest) -> Reply:
    """Looks the order the customer names up, then quotes the result."""
    results = request.latest_tool_results()
    if not results:
        words = str(request.messages[0]["content"]).split()
        order = next((w.strip("?") for w in words if "-" in w), "none")
        return tool_use("lookup_order", {"order": order})
    return text(f"Hello! Your {results[0]['content']}.")


support = Agent(name="support", tools=[lookup_order])


@workflow(name="support")
async def support_flow(ctx: WorkflowContext, message: str) -> str:
    return await ctx.step("answer", lambda: support.prompt(message))


def cases(*names: str) -> list[evals.Case]:
    return [
        evals.Case(
            name=name,
            inputs={"message": f"Where is {name}?"},
            expected_output=f"Hello! Your order {name} shipped on Monday.",
        )
        for name in names
    ]


async def run_offline(dataset: Any, target: Any = support_flow, **kw: Any) -> evals.Report:
    kw.setdefault("client", FakeAnthropicAPI(support_model).client(max_retries=0))
    return await evals.run(dataset, target, **kw)


# -- datasets -------------------------------------------------------------------------


def test_a_yaml_dataset_loads_with_its_cases_evaluators_and_folder(tmp_path: Path) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(
        "evaluators: [no_failed_nodes]\n"
        "cases:\n"
        "  - name: late\n"
        "    inputs: {message: 'Where is A-1?'}\n"
        "    metadata: {topic: shipping}\n"
        "    evaluators: [{contains: A-1}]\n"
        "    trace: traces/late.jsonl\n"
    )
    dataset = evals.Dataset.load(path)
    assert dataset.name == "cases" and len(dataset) == 1
    case = dataset.case("late")
    assert case.metadata == {"topic": "shipping"} and case.evaluators == [{"contains": "A-1"}]
    assert dataset.trace_path(case) == tmp_path / "traces" / "late.jsonl"
    assert dataset.evaluators == ["no_failed_nodes"]


def test_a_dataset_round_trips_through_yaml_and_json(tmp_path: Path) -> None:
    dataset = evals.Dataset(name="d", cases=cases("A-1", "B-2"), evaluators=["no_failed_nodes"])
    for suffix in (".yaml", ".json"):
        saved = dataset.save(tmp_path / f"d{suffix}")
        again = evals.Dataset.load(saved)
        assert again.cases == dataset.cases and again.evaluators == dataset.evaluators
    assert json.loads((tmp_path / "d.json").read_text())["cases"][0]["name"] == "A-1"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("cases: [{name: a, input: {}}]", "cases.0.input: Extra inputs are not permitted"),
        ("cases: [{name: a}, {name: a}]", "case names must be unique, 'a'"),
        ("- just a list", "a dataset is a mapping with a 'cases' list, got list"),
        ("cases: [{name: a", "is not valid YAML"),
    ],
)
def test_a_broken_dataset_file_says_what_is_wrong(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=message.replace(".", r"\.")):
        evals.Dataset.load(path)


def test_a_missing_dataset_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="groundswell eval capture"):
        evals.Dataset.load(tmp_path / "nope.yaml")


def test_inputs_are_checked_against_the_targets_signature_before_any_model_is_asked() -> None:
    fake = FakeAnthropicAPI(support_model)
    dataset = evals.Dataset(
        cases=[
            evals.Case(name="typo", inputs={"mesage": "hi"}),
            evals.Case(name="ok", inputs={"message": "hi"}),
        ]
    )
    with pytest.raises(ConfigurationError) as caught:
        dataset.check(support_flow)
    text_ = str(caught.value)
    assert "case 'typo'" in text_ and "mesage: Extra inputs are not permitted" in text_
    assert "message: Field required" in text_ and "case 'ok'" not in text_
    assert fake.requests == []


async def test_a_plain_functions_typed_parameters_check_the_inputs() -> None:
    async def add(a: int, b: int = 1) -> int:
        return a + b

    with pytest.raises(ConfigurationError, match="a: Input should be a valid integer"):
        evals.Dataset(cases=[evals.Case(name="x", inputs={"a": "many"})]).check(add)
    report = await evals.run(
        evals.Dataset(cases=[evals.Case(name="x", inputs={"a": 2}, expected_output=3)]),
        add,
        trace_dir=None,
    )
    assert report.cases[0].passed and report.target == "add"


# -- evaluators -------------------------------------------------------------------------


class Answer(BaseModel):
    order: str
    days: int


def context(output: Any, expected: Any = None) -> evals.EvaluatorContext:
    return evals.EvaluatorContext(
        name="c",
        inputs={},
        metadata={},
        expected_output=expected,
        output=output,
        duration=0.5,
        tree=groundswell.EventTree(),
    )


async def score(evaluator: Any, output: Any, expected: Any = None) -> evals.Score:
    from groundswell.evals.evaluators import score_of

    return await score_of(evaluator, context(output, expected))


async def test_deterministic_evaluators_pass_and_fail_with_reasons() -> None:
    assert (await score(evals.EqualsExpected(), "a", "a")).passed
    failed = await score(evals.EqualsExpected(), "a", "b")
    assert not failed.passed and failed.reason == "expected 'b', got 'a'"
    # A model output equals the plain data a YAML file holds.
    model = Answer(order="A-1", days=2)
    assert (await score(evals.EqualsExpected(), model, {"order": "A-1", "days": 2})).passed
    assert (await score(evals.Equals(3), 3)).passed
    assert (await score(evals.Contains("a-1", case_sensitive=False), "Order A-1")).passed
    miss = await score(evals.Contains("B-2"), "Order A-1")
    assert miss.reason == "'B-2' is not in the output 'Order A-1'"
    assert (await score(evals.Regex(r"\bA-\d\b"), "Order A-1 left")).passed
    assert (await score(evals.ValidatesAs(Answer), '{"order": "A-1", "days": 2}')).passed
    wrong = await score(evals.ValidatesAs(Answer), {"order": "A-1", "days": "soon"})
    assert (
        wrong.reason
        == "not a Answer: days: Input should be a valid integer, unable to parse string as an integer"
    )


async def test_custom_evaluators_are_functions_or_classes_sync_or_async() -> None:
    def short(ctx: evals.EvaluatorContext) -> bool:
        return len(ctx.output_text) < 10

    async def halfway(ctx: evals.EvaluatorContext) -> float:
        return 0.5

    class Shouting(evals.Evaluator):
        def evaluate(self, ctx: evals.EvaluatorContext) -> evals.Score:
            loud = ctx.output_text.isupper()
            return evals.Score(0.0 if loud else 1.0, not loud, "all caps" if loud else None)

    assert (await score(short, "hi")).passed
    assert (await score(halfway, "hi")) == evals.Score(0.5, True)
    assert (await score(Shouting(), "HI")).reason == "all caps"
    assert evals.evaluator_names()[:3] == ["contains", "equals", "equals_expected"]


async def test_an_evaluator_that_crashes_or_answers_nonsense_fails_its_score_only() -> None:
    def broken(ctx: evals.EvaluatorContext) -> bool:
        raise KeyError("price")

    def nonsense(ctx: evals.EvaluatorContext) -> Any:
        return "yes"

    crashed = await score(broken, "x")
    assert not crashed.passed and crashed.reason == "the evaluator raised KeyError: 'price'"
    assert "return a Score, a bool or a float in 0..1" in str((await score(nonsense, "x")).reason)
    assert (
        await score(lambda ctx: 3.0, "x")
    ).reason == "evaluator '<lambda>' answered 3.0, not a value in 0..1"


def test_evaluators_are_named_in_datasets_with_their_arguments() -> None:
    assert evals.from_spec("no_failed_nodes") == evals.NoFailedNodes()
    assert evals.from_spec({"contains": "A-1"}) == evals.Contains("A-1")
    assert evals.from_spec({"tool_calls": {"tool": "lookup_order", "max": 1}}) == evals.ToolCalls(
        "lookup_order", max=1
    )
    assert evals.from_spec({"tools_called": ["a", "b"]}).tools == ("a", "b")
    with pytest.raises(
        ConfigurationError, match=r"no evaluator named 'contain'; did you mean 'contains'\?"
    ):
        evals.from_spec({"contain": "x"})
    with pytest.raises(ConfigurationError, match="evaluator 'max_cost'"):
        evals.from_spec({"max_cost": {"dollars": 1}})
    with pytest.raises(ConfigurationError, match="one name with its arguments"):
        evals.from_spec({"contains": "a", "regex": "b"})
    with pytest.raises(ConfigurationError, match=r"evaluator 'judge': .* argument: 'rubric'"):
        evals.from_spec("judge")
    with pytest.raises(ConfigurationError, match="give it a rubric"):
        evals.from_spec({"judge": " "})


# -- running ---------------------------------------------------------------------------


async def test_a_run_scores_each_case_from_its_output_and_tree_and_saves_the_trees(
    tmp_path: Path,
) -> None:
    dataset = evals.Dataset(
        name="support",
        cases=cases("A-1", "B-2"),
        evaluators=[
            "equals_expected",
            {"tools_called": ["lookup_order"]},
            {"max_model_turns": 2},
            {"max_cost": 0.01},
            "no_failed_nodes",
        ],
    )
    report = await run_offline(dataset, trace_dir=tmp_path / "traces")
    assert [c.name for c in report.cases] == ["A-1", "B-2"]
    assert report.pass_rate == 1.0 and report.score == 1.0
    run = report.cases[0].runs[0]
    assert run.output == "Hello! Your order A-1 shipped on Monday."
    assert [s.name for s in run.scores] == [
        "equals_expected",
        "tools_called",
        "max_model_turns",
        "max_cost",
        "no_failed_nodes",
    ]
    assert run.cost_usd is not None and run.cost_usd > 0 and run.input_tokens > 0
    # Each run's tree and its evaluation's are saved; the evaluation's has one step each.
    tree = groundswell.EventTree.load(run.trace)  # type: ignore[arg-type]
    assert [n.name for n in tree.find(type="tool_call")] == ["lookup_order"]
    scored = groundswell.EventTree.load(run.eval_trace)  # type: ignore[arg-type]
    assert scored.root is not None and scored.root.name == "evaluate A-1"
    assert [n.name for n in scored.find(type="step")][:2] == ["equals_expected", "tools_called"]


async def test_a_case_that_goes_wrong_fails_with_each_reason(tmp_path: Path) -> None:
    dataset = evals.Dataset(
        cases=cases("A-1"),
        evaluators=[{"contains": "refund"}, {"tool_calls": {"max": 0}}, {"max_model_turns": 1}],
    )
    report = await run_offline(dataset, trace_dir=tmp_path)
    case = report.cases[0]
    assert not case.passed and case.score == 0.0
    assert case.explain().splitlines() == [
        "contains: 'refund' is not in the output 'Hello! Your order A-1 shipped on Monday.'",
        "tool_calls: tools called 1 times, more than 0",
        "max_model_turns: 2 model calls, more than 1",
    ]


async def test_a_target_that_fails_is_a_failed_case_with_its_tree(tmp_path: Path) -> None:
    @workflow(name="broken")
    async def broken(ctx: WorkflowContext, message: str) -> str:
        await ctx.step("think", lambda: support.prompt(message))
        raise RuntimeError("the database is down")

    report = await run_offline(evals.Dataset(cases=cases("A-1")), broken, trace_dir=tmp_path)
    run = report.cases[0].runs[0]
    assert run.error == "RuntimeError: the database is down"
    assert not run.passed and run.score == 0.0
    assert [s.name for s in run.scores] == ["equals_expected", "no_failed_nodes"]
    tree = groundswell.EventTree.load(run.trace)  # type: ignore[arg-type]
    assert tree.root is not None and tree.root.status == "failed"
    assert tree.find(type="tool_call")  # the part that ran is there to look at


async def test_repeat_gives_a_pass_rate_for_a_model_that_answers_differently(
    tmp_path: Path,
) -> None:
    answers = iter(["yes", "no", "yes", "yes"])
    coin = Agent(name="coin", client=FakeAnthropicAPI(lambda r: text(next(answers))).client())

    report = await evals.run(
        evals.Dataset(cases=[evals.Case(name="flip", inputs={"q": "?"}, expected_output="yes")]),
        evals.AgentTarget(coin, "Answer {q}"),
        repeat=4,
        concurrency=1,
        trace_dir=tmp_path,
    )
    case = report.cases[0]
    assert len(case.runs) == 4 and case.pass_rate == 0.75 and not case.passed
    saved = [Path(run.trace).name for run in case.runs if run.trace]
    assert saved == [
        "flip.1.jsonl",
        "flip.2.jsonl",
        "flip.3.jsonl",
        "flip.4.jsonl",
    ]
    assert "pass rate" in report.render() and "75%" in report.render()


async def test_cases_run_concurrently_each_on_its_own_client(tmp_path: Path) -> None:
    # client= puts only this run's agents on the fake; another task sees its own.
    report = await run_offline(
        evals.Dataset(cases=cases(*(f"C-{i}" for i in range(8)))),
        concurrency=8,
        trace_dir=tmp_path,
    )
    assert report.pass_rate == 1.0


async def test_wrong_run_options_are_refused_clearly() -> None:
    dataset = evals.Dataset(cases=cases("A-1"))
    with pytest.raises(ConfigurationError, match="repeat is how many runs per case"):
        await evals.run(dataset, support_flow, repeat=0)
    with pytest.raises(ConfigurationError, match="leave client= out"):
        await evals.run(dataset, support_flow, replay=True, client=FakeAnthropicAPI().client())
    with pytest.raises(ConfigurationError, match="these cases have none: A-1"):
        await evals.run(dataset, support_flow, replay=True)
    with pytest.raises(ConfigurationError, match="an agent alone is not an eval target"):
        await evals.run(dataset, support)


# -- the judge ---------------------------------------------------------------------------


async def test_the_judge_is_an_agent_whose_prompt_is_a_node_of_the_evaluation(
    tmp_path: Path,
) -> None:
    def judge_model(request: MessagesRequest) -> Reply:
        question = str(request.messages[0]["content"])
        polite = "Hello!" in question.split("<output>")[1]
        verdict = {"passed": polite, "score": 1.0 if polite else 0.2, "reason": "greets"}
        return text(json.dumps(verdict))

    judge_api = FakeAnthropicAPI(judge_model)
    judge = Agent(name="strict judge", client=judge_api.client())
    report = await run_offline(
        evals.Dataset(cases=cases("A-1")),
        evaluators=[evals.LLMJudge("The answer greets the customer.", agent=judge)],
        trace_dir=tmp_path,
    )
    run = report.cases[0].runs[0]
    assert run.scores[0] == evals.EvaluatorResult(
        name="judge", value=1.0, passed=True, reason="greets"
    )
    asked = str(judge_api.requests[0].messages[0]["content"])
    assert "<rubric>\nThe answer greets the customer.\n</rubric>" in asked
    assert '"message": "Where is A-1?"' in asked and "<expected_output>" in asked
    scored = groundswell.EventTree.load(run.eval_trace)  # type: ignore[arg-type]
    (prompt,) = scored.find(type="prompt")
    assert prompt.name == "strict judge" and prompt.status == "completed"
    assert scored.root is not None and scored.root.metrics["cost_usd"] > 0


# -- reports and baselines -----------------------------------------------------------------


async def test_a_report_saves_loads_and_compares_with_a_baseline(tmp_path: Path) -> None:
    dataset = evals.Dataset(cases=cases("A-1", "B-2", "C-3"), evaluators=["equals_expected"])
    baseline = await run_offline(dataset, trace_dir=tmp_path / "1")
    baseline.save(tmp_path / "baseline.json")

    def worse(request: MessagesRequest) -> Reply:  # B-2 now answered without looking
        if "B-2" in str(request.messages[0]["content"]):
            return text("I cannot check orders.")
        return support_model(request)

    dataset.cases.append(cases("D-4")[0])
    report = await run_offline(
        dataset, client=FakeAnthropicAPI(worse).client(), trace_dir=tmp_path / "2"
    )
    comparison = evals.compare(report, evals.Report.load(tmp_path / "baseline.json"))
    status = {c.name: c.status for c in comparison.cases}
    assert status == {"A-1": "unchanged", "B-2": "regressed", "C-3": "unchanged", "D-4": "new"}
    (b2,) = comparison.regressed
    assert b2.score_delta == -1.0 and b2.score_deltas == {"equals_expected": -1.0}
    assert b2.cost_delta is not None and b2.cost_delta < 0  # one model call instead of two
    rendered = comparison.render(width=120)
    assert "regressed" in rendered and "1 regressed" in rendered and "1 new" in rendered
    # Back the other way, B-2 improved and D-4 is gone.
    back = evals.compare(baseline, report)
    assert {c.name: c.status for c in back.cases}["B-2"] == "improved"
    assert {c.name: c.status for c in back.cases}["D-4"] == "removed"


def test_a_file_that_is_not_a_report_is_refused(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text('{"cases": 3}')
    with pytest.raises(ConfigurationError, match="is not an eval report"):
        evals.Report.load(tmp_path / "r.json")


# -- a third-party evaluator, installed --------------------------------------------------

_RETIRED: list[PluginManager] = []


@pytest.fixture
def evaldemo(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginManager]:
    """The process's plugins reloaded with groundswell-eval-demo installed."""
    monkeypatch.syspath_prepend(str(DIST))
    monkeypatch.delenv("GROUNDSWELL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("GROUNDSWELL_DISABLE_PLUGINS", raising=False)
    _RETIRED.append(groundswell.get_plugin_manager())
    reset_plugin_manager()
    yield groundswell.get_plugin_manager()
    _RETIRED.append(groundswell.get_plugin_manager())
    reset_plugin_manager()
    for module in [m for m in sys.modules if m.split(".")[0] == "groundswell_eval_demo"]:
        del sys.modules[module]


async def test_an_evaluator_installed_as_a_distribution_is_found_through_its_entry_point(
    evaldemo: PluginManager, tmp_path: Path
) -> None:
    info = {i.name: i for i in evaldemo.list_plugins()}["evaldemo"]
    assert (info.distribution, info.source, info.hooks) == (
        "groundswell-eval-demo",
        "entry point",
        ["register_evaluators"],
    )
    assert {"polite", "word_limit"} <= set(evals.evaluator_names())
    assert "groundswell_eval_demo.checks" not in sys.modules  # made only when named
    (tmp_path / "cases.yaml").write_text(
        "evaluators: [polite, {word_limit: 5}]\n"
        "cases: [{name: A-1, inputs: {message: 'Where is A-1?'}}]\n"
    )
    report = await run_offline(tmp_path / "cases.yaml", trace_dir=tmp_path / "t")
    scores = {s.name: s.passed for s in report.cases[0].runs[0].scores}
    assert scores == {"polite": True, "word_limit": False}  # the answer has 8 words


# -- what a review found --------------------------------------------------------------


class Refund(BaseModel):
    order: str
    amount: int


async def test_inputs_arrive_in_the_targets_types_not_as_written(tmp_path: Path) -> None:
    async def refund(request: Refund, times: int = 1) -> str:
        assert isinstance(request, Refund)
        return f"refunded {request.amount * times} EUR on {request.order}"

    (tmp_path / "cases.yaml").write_text(
        "cases:\n"
        "  - name: quoted\n"
        "    inputs: {request: {order: A-1, amount: '25'}, times: '2'}\n"
        "    expected_output: refunded 50 EUR on A-1\n"
    )
    report = await evals.run(tmp_path / "cases.yaml", refund, trace_dir=tmp_path / "t")
    assert report.cases[0].runs[0].output == "refunded 50 EUR on A-1"
    assert report.cases[0].passed and report.cases[0].runs[0].cost_usd == 0.0


async def test_names_and_outputs_are_shown_as_written_never_as_markup(tmp_path: Path) -> None:
    report = await evals.run(
        evals.Dataset(
            cases=[evals.Case(name="tags [red]", inputs={"x": "[/]"}, expected_output="?")]
        ),
        lambda x: x,
        trace_dir=tmp_path,
    )
    shown = report.render(width=200)
    assert "tags [red]" in shown and "got '[/]'" in shown
    evals.compare(report, report).render()  # no MarkupError either


async def test_secrets_never_reach_the_report_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok_live_abcdef1234567890"
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)

    async def leaky(question: str) -> str:
        raise RuntimeError(f"upstream refused token {secret}")

    report = await evals.run(
        evals.Dataset(cases=[evals.Case(name="q", inputs={"question": "?"})]),
        leaky,
        trace_dir=tmp_path,
    )
    report.save(tmp_path / "report.json")
    assert secret not in (tmp_path / "report.json").read_text()
    assert secret not in str(report.cases[0].runs[0].error)


async def test_repeated_runs_ask_the_model_each_time_even_with_a_cache(tmp_path: Path) -> None:
    answers = iter(["yes", "yes", "no"])
    fake = FakeAnthropicAPI(lambda r: text(next(answers)))
    cached = Agent(name="cached", client=fake.client(), enable_cache=True)
    report = await evals.run(
        evals.Dataset(cases=[evals.Case(name="c", inputs={"q": "?"}, expected_output="yes")]),
        evals.AgentTarget(cached, "Answer {q}"),
        repeat=3,
        concurrency=1,
        trace_dir=tmp_path,
    )
    assert len(fake.requests) == 3 and report.cases[0].pass_rate == pytest.approx(2 / 3)


def test_case_names_that_look_alike_get_files_of_their_own() -> None:
    from groundswell.evals.runner import unique_stems

    stems = unique_stems(["a b", "a/b", "A B", "x.eval", "x"])
    assert stems == {"a b": "a-b", "a/b": "a-b-2", "A B": "A-B-3", "x.eval": "x-eval", "x": "x"}


async def test_a_misspelt_case_evaluator_is_refused_before_any_case_runs() -> None:
    fake = FakeAnthropicAPI(support_model)
    dataset = evals.Dataset(cases=cases("A-1", "B-2"))
    dataset.cases[1].evaluators.append("no_faild_nodes")
    with pytest.raises(ConfigurationError, match="did you mean 'no_failed_nodes'"):
        await evals.run(dataset, support_flow, client=fake.client(), concurrency=1)
    assert fake.requests == []


async def test_an_evaluator_set_up_wrong_stops_the_run_instead_of_failing_cases(
    tmp_path: Path,
) -> None:
    def needs_setup(ctx: evals.EvaluatorContext) -> bool:
        raise ConfigurationError("judge has no API key")

    with pytest.raises(ConfigurationError, match="judge has no API key"):
        await run_offline(
            evals.Dataset(cases=cases("A-1")), evaluators=[needs_setup], trace_dir=tmp_path
        )


async def test_evaluators_given_in_code_may_be_written_as_in_a_dataset(tmp_path: Path) -> None:
    report = await run_offline(
        evals.Dataset(cases=cases("A-1")),
        evaluators=["no_failed_nodes", {"contains": "A-1"}, {"contains": "Monday"}],
        trace_dir=tmp_path,
    )
    names = [s.name for s in report.cases[0].runs[0].scores]
    assert names == ["no_failed_nodes", "contains", "contains #2"]
    assert report.cases[0].scores() == {"no_failed_nodes": 1.0, "contains": 1.0, "contains #2": 1.0}


async def test_literal_types_and_booleans_are_judged_by_their_type() -> None:
    from typing import Literal

    assert (await score(evals.ValidatesAs(Literal["refund", "escalate"]), "refund")).passed
    assert not (await score(evals.Equals(True), 1)).passed
    assert not (await score(evals.EqualsExpected(), False, 0)).passed


async def test_one_override_scope_entered_by_two_tasks_leaves_each_its_own() -> None:
    import asyncio

    from groundswell.agent.overrides import override_agents_here

    scope = override_agents_here(FakeAnthropicAPI().client())
    first_in, second_in = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        with scope:
            first_in.set()
            await second_in.wait()  # leaves while the second task is still inside

    async def second() -> None:
        await first_in.wait()
        with scope:
            second_in.set()
            await asyncio.sleep(0.01)

    await asyncio.gather(first(), second())
