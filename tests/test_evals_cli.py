"""``groundswell eval``, run as a user runs it, against agents on a fake Anthropic API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from groundswell.cli import main
from groundswell.evals import Report

# An agent answers from a table in answers.json beside the module (read on every
# request), so a test changes its answers between two runs by rewriting the table.
AGENTS = """
import json
from pathlib import Path

import groundswell
from groundswell.testing import FakeAnthropicAPI

TABLE = Path(__file__).with_name("answers.json")


def answer(request):
    table = json.loads(TABLE.read_text())
    question = request.last_user_text().removeprefix("Answer: ")
    return table.get(question, "I do not know")


geo = groundswell.Agent(name="geo", client=FakeAnthropicAPI(answer).client())


@groundswell.workflow(name="ask")
async def ask(ctx, question: str) -> str:
    return await geo.prompt(question)


def shout(question: str) -> str:
    return question.upper()


not_a_target = 3
"""

CASES = """
name: capitals
cases:
  - name: france
    inputs: {question: "capital of France?"}
    expected_output: Paris
  - name: japan
    inputs: {question: "capital of Japan?"}
    expected_output: Tokyo
"""

RIGHT = {"capital of France?": "Paris", "capital of Japan?": "Tokyo"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "agents.py").write_text(AGENTS)
    (tmp_path / "answers.json").write_text(json.dumps(RIGHT))
    (tmp_path / "cases.yaml").write_text(CASES)
    monkeypatch.chdir(tmp_path)  # default trace folder: .groundswell/ under the project
    return tmp_path


def run_eval(*args: str) -> int:
    return main(["eval", "run", "cases.yaml", *args])


def test_a_passing_run_exits_0_prints_the_table_and_writes_the_report(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_eval("--target", "agents.py:ask", "--report", "out/report.json")
    out = capsys.readouterr().out
    assert code == 0
    assert "france" in out and "japan" in out and "2/2 passed" in out
    report = Report.load(project / "out" / "report.json")
    assert [c.name for c in report.cases] == ["france", "japan"]
    assert report.case("japan").runs[0].output == "Tokyo"
    assert report.score == 1.0
    # Each run's tree is saved where the report says.
    assert Path(report.cases[0].runs[0].trace or "").is_file()


def test_an_agent_with_a_prompt_template_and_a_function_are_targets_too(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_eval(
        *("--target", "agents.py:geo", "--prompt", "Answer: {question}"),
        *("--repeat", "2", "--traces", "runs"),
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "2/2 passed" in out and "pass rate" in out and "100%" in out
    assert sorted(p.name for p in (project / "runs").glob("*.jsonl")) == [
        *("france.1.eval.jsonl", "france.1.jsonl", "france.2.eval.jsonl", "france.2.jsonl"),
        *("japan.1.eval.jsonl", "japan.1.jsonl", "japan.2.eval.jsonl", "japan.2.jsonl"),
    ]
    # shout() answers "CAPITAL OF FRANCE?": every case fails, so the command does.
    assert run_eval("--target", "agents.py:shout") == 1
    captured = capsys.readouterr()
    assert "0/2 passed" in captured.out
    assert "2 of 2 cases failed: france, japan" in captured.err


def test_a_case_that_got_worse_than_the_baseline_fails_with_fail_on_regression(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_eval("--target", "agents.py:ask", "--report", "baseline.json") == 0
    (project / "answers.json").write_text(json.dumps(RIGHT | {"capital of Japan?": "Kyoto"}))
    capsys.readouterr()

    code = run_eval("--target", "agents.py:ask", "--baseline", "baseline.json")
    captured = capsys.readouterr()
    # A baseline without --fail-on-regression reports, and does not fail.
    assert code == 0
    assert "regressed" in captured.out

    code = run_eval(
        "--target", "agents.py:ask", "--baseline", "baseline.json", "--fail-on-regression"
    )
    captured = capsys.readouterr()
    assert code == 1
    rows = {line.split("│")[1].strip(): line for line in captured.out.splitlines() if "│" in line}
    assert "regressed" in rows["japan"] and "1.00 → 0.50" in rows["japan"]
    assert "unchanged" in rows["france"]
    assert "1 case regressed: japan" in captured.err


def test_a_new_case_that_fails_fails_the_regression_gate_too(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_eval("--target", "agents.py:ask", "--report", "baseline.json") == 0
    (project / "cases.yaml").write_text(
        CASES + "  - name: peru\n    inputs: {question: 'capital of Peru?'}\n"
        "    expected_output: Lima\n"
    )
    capsys.readouterr()
    code = run_eval(
        "--target", "agents.py:ask", "--baseline", "baseline.json", "--fail-on-regression"
    )
    assert code == 1
    assert "1 new case failed: peru" in capsys.readouterr().err


def test_the_report_is_written_before_anything_is_printed(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "answers.json").write_text(json.dumps({"capital of France?": "[/] Paris"}))
    run_eval("--target", "agents.py:ask", "--report", "out.json")
    saved = Report.load(project / "out.json")
    assert saved.case("france").runs[0].output == "[/] Paris"
    assert "[/] Paris" in capsys.readouterr().out  # shown as written, not read as markup


def test_min_score_is_the_gate_instead_of_every_case_passing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "answers.json").write_text(json.dumps(RIGHT | {"capital of Japan?": "Kyoto"}))
    # One case of two fails its equals_expected evaluator: the score is 0.75.
    assert run_eval("--target", "agents.py:ask", "--min-score", "0.7") == 0
    assert "1/2 passed · score 0.75" in capsys.readouterr().out
    assert run_eval("--target", "agents.py:ask", "--min-score", "0.8") == 1
    assert "the score 0.75 is below --min-score 0.8" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "agents.py:nowhere"], "'agents.py' has no attribute 'nowhere'; what it"),
        (["--target", "agents.py:not_a_target"], "is an int, not a workflow, agent or function"),
        (["--target", "missing.py:ask"], "no such file: missing.py"),
        (["--target", "agents.py:geo"], "agents.py:geo is an agent: give the prompt"),
        (["--target", "agents.py:ask", "--prompt", "Q: {question}"], "--prompt is for an agent"),
        (["--target", "agents.py:ask", "--baseline", "none.json"], "no report at none.json"),
        (["--target", "agents.py:ask", "--fail-on-regression"], "add --baseline FILE"),
        (["--target", "agents.py:ask", "--min-score", "5"], "--min-score is a score from 0 to 1"),
        (["--target", "agents.py:ask", "--repeat", "0"], "repeat is how many runs per case"),
    ],
)
def test_bad_usage_exits_2_with_one_clear_line(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert run_eval(*args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_missing_dataset_or_inputs_that_do_not_fit_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "run", "nope.yaml", "--target", "agents.py:ask"]) == 2
    assert "no dataset at nope.yaml" in capsys.readouterr().err
    # A typo in an input is found before any model is asked.
    (project / "typo.yaml").write_text("cases:\n  - name: a\n    inputs: {qestion: x}\n")
    assert main(["eval", "run", "typo.yaml", "--target", "agents.py:ask"]) == 2
    err = capsys.readouterr().err
    assert "case 'a'" in err and "qestion" in err and "Traceback" not in err


def test_the_installed_command_loads_a_module_target_from_the_current_folder(
    project: Path,
) -> None:
    script = Path(sys.executable).with_name("groundswell")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "groundswell.cli"]
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run(
        [*command, "eval", "run", "cases.yaml", "--target", "agents:ask", "--report", "r.json"],
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "2/2 passed" in done.stdout
    assert Report.load(project / "r.json").score == 1.0

    missing = subprocess.run(
        [*command, "eval", "run", "cases.yaml", "--target", "nomodule:ask"],
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith("groundswell: cannot import 'nomodule'")
    assert "Traceback" not in missing.stderr


def test_capture_turns_saved_runs_into_cases_that_replay_offline(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, question in enumerate(RIGHT):
        assert main(["run", "agents.py:ask", question, "--save", f"runs/{i}.jsonl"]) == 0
    capsys.readouterr()

    code = main(
        [
            *("eval", "capture", "runs/0.jsonl", "runs/1.jsonl"),
            *("--into", "captured.yaml", "--target", "agents.py:ask"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "wrote 2 cases (2 new) to captured.yaml" in out
    assert "captured.traces" in out

    # The model now answers wrong; replay answers each case from its recorded run.
    (project / "answers.json").write_text("{}")
    assert main(["eval", "run", "captured.yaml", "--target", "agents.py:ask", "--replay"]) == 0
    assert "2/2 passed" in capsys.readouterr().out
    assert main(["eval", "run", "captured.yaml", "--target", "agents.py:ask"]) == 1
    assert "2 of 2 cases failed" in capsys.readouterr().err


def test_capture_of_a_missing_trace_exits_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "capture", "nothing.jsonl", "--into", "captured.yaml"]) == 2
    err = capsys.readouterr().err
    assert "nothing.jsonl" in err and "Traceback" not in err


def test_fork_reruns_a_saved_run_from_its_prompt_with_a_new_system_prompt(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from groundswell import EventTree, NodeType

    assert main(["run", "agents.py:ask", "capital of France?", "--save", "run.jsonl"]) == 0
    (tree,) = EventTree.load_all(project / "run.jsonl")
    (prompt,) = [n for n in tree.walk() if n.type is NodeType.PROMPT]
    # From the fork on the run is live: the model now answers otherwise.
    (project / "answers.json").write_text(json.dumps({"capital of France?": "Lyon"}))
    capsys.readouterr()

    code = main(
        [
            *("eval", "fork", "run.jsonl", prompt.id[:8]),
            *("--target", "agents.py:ask", "--system", "Be brief."),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "original" in out and f"forked at {prompt.id[:8]}" in out
    assert "Be brief." in out and "Lyon" in out


def test_fork_at_a_node_the_trace_lacks_exits_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "agents.py:ask", "capital of France?", "--save", "run.jsonl"]) == 0
    capsys.readouterr()
    code = main(["eval", "fork", "run.jsonl", "zzzzzz", "--target", "agents.py:ask"])
    err = capsys.readouterr().err
    assert code == 2 and "zzzzzz" in err and "Traceback" not in err
