"""Evals in a pytest run: ``evals.cases`` for parametrize, ``evals.check`` per case."""

from __future__ import annotations

from pathlib import Path

import pytest

from groundswell import Agent, ConfigurationError, workflow
from groundswell.evals import Case, Contains, Dataset, EvalCase, capture, cases, check
from groundswell.testing import FakeAnthropicAPI, text

from .conftest import UNUSED_PYTEST_PLUGINS

pytest_plugins = ["pytester"]

CASES = """
name: capitals
evaluators: [no_failed_nodes]
cases:
  - name: france
    inputs: {question: "capital of France?"}
    evaluators: [{contains: Paris}]
  - name: japan
    inputs: {question: "capital of Japan?"}
    evaluators: [{contains: Tokyo}]
"""

TEST_FILE = """
from pathlib import Path

import pytest

from groundswell import Agent, evals, workflow
from groundswell.testing import FakeAnthropicAPI

ANSWERS = {"capital of France?": "Paris", "capital of Japan?": "Kyoto"}
fake = FakeAnthropicAPI(lambda request: ANSWERS[request.last_user_text()])
geo = Agent(name="geo", client=fake.client())


@workflow(name="ask")
async def ask(ctx, question: str) -> str:
    return await geo.prompt(question)


@pytest.mark.parametrize("case", evals.cases(Path(__file__).with_name("cases.yaml")))
async def test_capitals(case, tmp_path):
    run = await evals.check(case, ask, trace_dir=tmp_path)
    assert (tmp_path / f"{case.name}.jsonl").is_file()
    assert run.output == "Paris"
"""


def test_a_pytest_run_has_a_test_per_case_and_says_why_one_failed(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makefile(".yaml", cases=CASES)
    pytester.makepyfile(test_capitals=TEST_FILE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *UNUSED_PYTEST_PLUGINS.split(), "-W", "error", "-v"
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_capitals[[]france[]] PASSED*",
            "*test_capitals[[]japan[]] FAILED*",
            "*AssertionError: eval case 'japan' failed:",
            "*contains: *Tokyo* not in*Kyoto*",
            "*its tree: groundswell tree *japan.jsonl",
        ]
    )


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "cases.yaml"
    path.write_text(CASES)
    return path


def geo_agent(answers: dict[str, str]) -> Agent[str]:
    fake = FakeAnthropicAPI(lambda request: answers[request.last_user_text()])
    return Agent(name="geo", client=fake.client())


async def test_cases_know_their_dataset_and_are_named_for_their_case(dataset: Path) -> None:
    items = cases(dataset)
    assert [c.__name__ for c in items] == ["france", "japan"]
    assert all(isinstance(c, EvalCase) and c.dataset.name == "capitals" for c in items)
    assert items[1].case.inputs == {"question": "capital of Japan?"}


async def test_check_scores_with_the_dataset_evaluators_and_given_ones(dataset: Path) -> None:
    geo = geo_agent({"capital of France?": "Paris, France"})

    @workflow(name="ask")
    async def ask(ctx: object, question: str) -> str:
        return await geo.prompt(question)

    france = cases(dataset)[0]
    run = await check(france, ask)
    assert [s.name for s in run.scores] == ["no_failed_nodes", "contains"]
    with pytest.raises(AssertionError, match=r"(?s)eval case 'france' failed:.*Lyon"):
        await check(france, ask, evaluators=[Contains("Lyon")])


async def test_check_takes_a_plain_case_and_a_client_for_the_agents() -> None:
    geo = Agent(name="geo", client=FakeAnthropicAPI([text("unused")]).client())

    async def ask(question: str) -> str:
        return await geo.prompt(question)

    fake = FakeAnthropicAPI(lambda request: "Oslo")
    case = Case(name="norway", inputs={"question": "capital of Norway?"}, expected_output="Oslo")
    run = await check(case, ask, client=fake.client())
    assert run.output == "Oslo" and len(fake.requests) == 1
    with pytest.raises(AssertionError, match="expected 'Bergen', got 'Oslo'"):
        await check(
            case.model_copy(update={"expected_output": "Bergen"}), ask, client=fake.client()
        )


async def test_check_replays_a_captured_case_offline(tmp_path: Path) -> None:
    answers = {"capital of France?": "Paris"}
    geo = geo_agent(answers)

    @workflow(name="ask")
    async def ask(ctx: object, question: str) -> str:
        return await geo.prompt(question)

    result = await ask.run("capital of France?")
    saved = result.tree.save(tmp_path / "run.jsonl")
    (case,) = cases(capture([saved], into=tmp_path / "captured.yaml", target=ask))
    answers.clear()  # the agent's own model has no answer now; the recording does
    with pytest.raises(AssertionError, match="the target failed"):
        await check(case, ask)
    run = await check(case, ask, replay=True)
    assert run.output == "Paris"


async def test_check_refuses_what_it_cannot_run(dataset: Path) -> None:
    france = cases(dataset)[0]
    with pytest.raises(ConfigurationError, match="has no recorded trace to replay"):
        await check(france, lambda question: question, replay=True)
    with pytest.raises(ConfigurationError, match=r"takes a case from evals\.cases"):
        await check("france", lambda question: question)  # type: ignore[arg-type]
    # Inputs that do not fit the target fail before anything runs.
    with pytest.raises(ConfigurationError, match="case 'france'"):
        await check(france, lambda query: query)
    other = Dataset(cases=[Case(name="x", inputs={"question": "q"})])
    assert (await check(EvalCase(other, other.cases[0]), lambda question: question)).passed
