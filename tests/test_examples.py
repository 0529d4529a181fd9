"""The examples run offline and build the trees they promise."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from groundswell.evals import Report, compare
from groundswell.testing import FakeAnthropicAPI, FunctionModel, error
from groundswell.tree.tree import EventTree

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # Registered first, as an import would: pydantic resolves string annotations through it.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def test_basic_workflow_tree_shape() -> None:
    example = load("01_basic_workflow")
    result = await example.report.run("a b\nc")
    assert result.output == {"lines": 2, "words": 3}
    root = result.tree.root
    assert [c.name for c in root.children] == ["split", "line-0", "line-1"]
    for line_step in root.children[1:]:
        (child,) = line_step.children
        assert child.name == "summarize-line"
        assert [s.name for s in child.children] == ["count", "shout"]
    assert root.events[0]["type"] == "state_snapshot"


async def test_agents_in_a_workflow_tree_shape() -> None:
    example = load("02_agents_in_a_workflow")
    result = await example.review.run("a diff")
    assert isinstance(result.output, example.Verdict)
    assert result.state["summary"] == "Rounds the order total to cents."
    shapes = [
        [f"{n.type.value}:{n.name}" for n in result.tree.walk(step.id)]
        for step in result.tree.root.children
    ]
    assert shapes == [
        ["step:summarize", "prompt:summarizer", "model_call:claude-sonnet-4-6"],
        ["step:judge", "prompt:judge", "model_call:claude-sonnet-4-6"],
    ]


async def test_reflection_example_reflects_once_at_each_level() -> None:
    example = load("09_reflection")
    result = await example.plan_migration.run("a task")
    assert result.output["days"] == [3, 9] and result.output["title"] == "Migration plan"
    root = result.tree.root
    assert [f"{c.type.value}:{c.name}:{c.status.value}" for c in root.children] == [
        "step:prices:failed",
        "reflection:prices:completed",
        "step:prices:completed",
        "step:estimate:completed",
        "step:title:completed",
    ]
    for step_name, agent in (("estimate", "estimator"), ("title", "writer")):
        (step,) = [c for c in root.children if c.name == step_name]
        assert [f"{c.type.value}:{c.name}:{c.status.value}" for c in step.children] == [
            f"prompt:{agent}:failed",
            f"reflection:{agent}:completed",
            f"prompt:{agent}:completed",
        ]
        (ask,) = step.children[1].children
        assert ask.name == f"{agent}.reflection"
    levels = [n.payload["level"] for n in result.tree.find(type="reflection")]
    assert levels == ["workflow", "agent", "prompt"]
    assert result.state["retried_after"].startswith("The pricing service timed out")
    assert example.calls["pricing"] == 2


def _shape(node: object) -> list[str]:
    return [f"{c.type.value}:{c.name}:{c.status.value}" for c in node.children]  # type: ignore[attr-defined]


async def test_agent_spawning_a_workflow_mounts_it_under_the_tool_call() -> None:
    example = load("05_agent_spawns_workflow")
    result = await example.sales_question.run("How much?")
    assert result.output == "EMEA sold 300 over two quarters."
    (prompt,) = result.tree.find(type="prompt", name="planner")
    assert [c.name for c in prompt.children if c.type.value == "tool_call"] == [
        "list_mount_points",
        "request_spawn_workflow",
    ]
    (spawned,) = result.tree.find(type="workflow", name="report")
    assert result.tree.get_node(spawned.parent_id).name == "request_spawn_workflow"
    assert _shape(spawned) == ["step:collect:completed", "step:total:completed"]


async def test_prompt_replacement_leaves_one_live_prompt() -> None:
    example = load("06_dynamic_prompt_replacement")
    result = await example.tagline.run("Groundswell")
    assert len(result.output) <= example.LIMIT
    (step,) = result.tree.find(type="step", name="write")
    assert _shape(step) == [
        "prompt:writer:revised",
        "prompt:writer:revised",
        "prompt:writer:completed",
    ]


async def test_introspection_example_reports_its_place() -> None:
    example = load("10_introspection")
    result = await example.release.run("1.4.0")
    assert result.output.startswith("I run in step 'audit' at depth 3 (checks < verify < release)")
    assert "tests=412 passed, lint=clean" in result.output
    (prompt,) = result.tree.find(type="prompt", name="auditor")
    assert [c.name for c in prompt.children if c.type.value == "tool_call"] == [
        name for name, _ in example.LOOK
    ]


async def test_people_in_the_loop_example_decides_its_waits_and_records_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = load("11_people_in_the_loop")
    result = await example.run_desk()
    assert result.output == (
        "refunded 30 EUR on A-1; B-2 not refunded (over 500 EUR goes to finance); "
        "refunded 200 EUR on C-3.\nTo the customer: Sorry for the wait!"
    )
    seen = capsys.readouterr().out.splitlines()
    assert seen[0] == "person sees the question 'What should we tell the customer?'"
    assert sorted(seen[1:]) == [
        "person sees: support wants to refund 250 EUR on C-3",
        "person sees: support wants to refund 900 EUR on B-2",
    ]
    (prompt,) = result.tree.find(type="prompt", name="support")
    calls = [c for c in prompt.children if c.type.value == "tool_call"]
    assert [(c.status.value, c.payload.get("approval")) for c in calls] == [
        ("completed", None),
        ("failed", "rejected"),
        ("completed", "approved"),
    ]
    assert calls[2].payload["approved_input"] == {"order": "C-3", "amount": 200}
    waits = result.tree.find(type="wait")
    assert [(w.payload["kind"], w.payload["answered_by"]) for w in waits] == [
        ("question", "ada"),
        ("approval", "ada"),
        ("approval", "ada"),
    ]


async def test_one_agent_mounts_in_each_workflow_and_shares_its_cache() -> None:
    example = load("03_one_agent_many_workflows")
    triage, digest, escalate = await example.run_all()
    assert triage.output == "billing-team"
    assert digest.output == {"billing": 1, "outage": 1, "account": 1}
    assert escalate.output == ["paged on-call: The dashboard is down with a 500 error"]
    for result in (triage, digest, escalate):
        # Every classifier prompt sits under a step of its own workflow's tree.
        for prompt in result.tree.find(type="prompt", name="classifier"):
            parent = result.tree.get_node(prompt.parent_id)
            assert parent.type.value == "step" and parent.name.startswith("classify")
    assert _shape(escalate.tree.root) == [
        "step:classify-0:completed",
        "step:classify-1:completed",
        "step:page-1:completed",
        "step:classify-2:completed",
    ]
    prompts = [n for r in (triage, digest, escalate) for n in r.tree.find(type="prompt")]
    calls = [n for r in (triage, digest, escalate) for n in r.tree.find(type="model_call")]
    # Three distinct tickets, so three model calls; the four repeats are cache hits.
    assert len(prompts) == 7 and len(calls) == 3
    assert sorted(n.metrics["cache"] for n in prompts) == ["hit"] * 4 + ["miss"] * 3
    assert triage.tree.find(type="prompt")[0].metrics["cache"] == "miss"


async def test_nested_workflows_mount_three_deep_and_keep_the_failed_child() -> None:
    example = load("04_nested_workflows")
    result = await example.deploy.run("2.1.0")
    assert result.status.value == "completed"
    assert result.output["regions"] == {
        "eu-west": "eu-west: live",
        "us-east": "us-east: live",
        "ap-south": "failed at deploy/rollout/verify/health-check",
    }
    root = result.tree.root
    assert _shape(root) == [
        "step:build:completed",
        "workflow:rollout:completed",
        "workflow:rollout:completed",
        "workflow:rollout:failed",
    ]
    assert _shape(root.children[0]) == ["workflow:build:completed"]
    failed = root.children[3]
    assert _shape(failed) == ["step:upload:completed", "step:verify:failed"]
    assert _shape(failed.children[1]) == ["workflow:health-check:failed"]
    (check,) = failed.children[1].children
    assert check.error is not None
    assert check.error["type"] == "RuntimeError"
    assert check.error["message"] == "ap-south answered 503 after the rollout"
    assert len(result.tree.find(type="workflow")) == 8


async def test_agent_loop_example_reports_tokens_and_cache_hits_from_the_tree() -> None:
    example = load("07_agent_loops")
    result = await example.copy_loop.run("observability")
    assert result.output.endswith("It tests offline.")
    assert [r["score"] for r in result.state.values()] == [6, 8, 10]
    steps = [c.name for c in result.tree.root.children]
    assert steps == [
        name
        for n in (1, 2, 3)
        for name in (f"draft-{n}", f"check-{n}.0", f"check-{n}.1", f"score-{n}")
    ]
    checks = result.tree.find(type="prompt", name="fact-checker")
    assert [n.metrics["cache"] for n in checks] == ["miss", "miss"] + ["hit"] * 4
    assert all(not n.children for n in checks[2:])  # a hit makes no model call
    lines = example.report(result.tree).splitlines()
    assert lines[0].split()[:4] == ["agent", "prompts", "model", "calls"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["fact-checker"][:3] == ["6", "2", "4"]
    assert rows["writer"][:3] == ["3", "3", "0"] and rows["critic"][:3] == ["3", "3", "0"]
    tokens_in = sum(n.metrics["usage"]["input_tokens"] for n in result.tree.find(type="model_call"))
    assert sum(int(r[3]) for r in rows.values()) == tokens_in > 0


async def test_tools_mcp_hooks_and_skills_example_runs_every_kind_of_tool() -> None:
    example = load("08_tools_mcp_hooks_skills")
    example.audit.clear()
    result = await example.release_notes.run("v2.0.0")
    assert result.output == (
        "## 2.1.0-beta\n- Cache hits show in the tree\n- Fix a crash on empty logs\n"
    )
    (prompt,) = result.tree.find(type="prompt", name="release-writer")
    assert _shape(prompt) == [
        "mcp_connect:tickets:completed",
        "mcp_connect:versions:completed",
        "model_call:claude-sonnet-4-6:completed",
        "tool_call:read_skill:completed",
        "tool_call:git_log:completed",
        "model_call:claude-sonnet-4-6:completed",
        "mcp_call:mcp__tickets__lookup:completed",
        "mcp_call:mcp__tickets__lookup:completed",
        "mcp_call:mcp__versions__next_version:completed",
        "model_call:claude-sonnet-4-6:completed",
        "tool_call:publish:failed",
        "model_call:claude-sonnet-4-6:completed",
    ]
    # The stdio server saw RELEASE_CHANNEL from the agent's env, not os.environ.
    assert "RELEASE_CHANNEL" not in os.environ
    (skill,) = result.tree.find(type="tool_call", name="read_skill")
    assert "one bullet per ticket" in str(skill.payload["output"])
    (publish,) = result.tree.find(type="tool_call", name="publish")
    assert publish.error is not None and "dry run" in publish.error["message"]
    # The first turn's two calls run side by side: their hooks may see them in either order.
    assert "publish" not in example.audit
    assert sorted(example.audit[:2]) == ["git_log", "read_skill"]


CALLS_THE_API = sorted(
    p.name for p in EXAMPLES.glob("[0-9][0-9]_*.py") if "auto_client(" in p.read_text()
)


@pytest.mark.parametrize("script", CALLS_THE_API)
def test_an_example_whose_api_calls_fail_prints_the_failed_tree_and_one_error_line(
    script: str,
) -> None:
    # The real client (ANTHROPIC_API_KEY is set) against an API that refuses every call.
    with FakeAnthropicAPI(FunctionModel(lambda request: error(401))).serve() as api:
        env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": api.base_url}
        out = subprocess.run(
            [sys.executable, script], cwd=EXAMPLES, env=env, capture_output=True, text=True
        )
    assert out.returncode == 1, out.stderr
    # (The tree may follow lines the example printed as it ran.)
    assert re.search(r"^✗ workflow \S+ .*failed", out.stdout, re.M), out.stdout
    assert "ModelAPIError" in out.stdout  # the failing call is in the tree, marked failed
    assert "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1].startswith("error: workflow "), out.stderr


def test_evals_example_passes_its_baseline_and_gates_the_careless_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = load("12_evals")
    baseline, hasty = asyncio.run(example.evaluate(tmp_path))
    # The careful desk passes every case, on every evaluator (the judge included).
    assert len(baseline.cases) == 12 and baseline.pass_rate == 1.0
    refund = baseline.case("refund")
    assert [s.name for s in refund.runs[0].scores] == [
        "equals_expected",
        "no_failed_nodes",
        "max_model_turns",
        "max_cost",
        "judge",
        "tools_called",
        "regex",
    ]
    assert refund.runs[0].output == "Refunded 25 EUR on A-101."
    # The judge's prompt is a node of the case's evaluation tree, next to the run's own.
    judged = EventTree.load(refund.runs[0].eval_trace)
    assert [n.name for n in judged.find(type="prompt")] == ["judge"]
    assert Report.load(tmp_path / "baseline.json") == baseline

    # The careless prompt: every case about an order regressed, the two that name none did not.
    comparison = compare(hasty, baseline)
    orders = [c.name for c in baseline.cases if c.name not in ("no-order-number", "greeting")]
    assert [c.name for c in comparison.regressed] == orders
    assert [c.name for c in comparison.unchanged] == ["no-order-number", "greeting"]
    assert hasty.case("refund").explain().splitlines() == [
        "judge: It reassures the customer without any fact from the shop's systems.",
        "tools_called: not called: lookup_order, refund (called: none)",
        "regex: /(?i)refunded 25 EUR/ does not match 'Done! Your refund for A-101 is on its way.'",
    ]

    # The CLI's gate fails on it, naming the regressed cases; its traces go where told.
    code, said = example.gate(tmp_path)
    assert code == 1
    assert said == f"groundswell: 10 cases regressed: {', '.join(orders)}"
    assert len(list((tmp_path / "gate").glob("*.eval.jsonl"))) == 12

    # The script itself exits 0, shows the regressions and the gate's exit code.
    capsys.readouterr()
    assert example.main() == 0
    out = capsys.readouterr().out
    assert "12/12 passed" in out
    assert "  refund            regressed  1.00 → 0.60" in out.splitlines()
    assert out.rstrip().endswith("exit code 1")
    assert not list(EXAMPLES.glob(".groundswell")), "the example wrote into the repository"
