"""The examples run offline and build the trees they promise."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
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


def test_every_example_script_runs_offline_and_prints_a_tree() -> None:
    env = {k: v for k, v in __import__("os").environ.items() if k != "ANTHROPIC_API_KEY"}
    for script in sorted(EXAMPLES.glob("[0-9][0-9]_*.py")):
        out = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
        )
        assert out.returncode == 0, f"{script.name}: {out.stderr}"
        assert out.stdout.startswith("✓ workflow"), script.name


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
