"""`groundswell run --fake`: a module whose agents are built without `client=` runs offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from groundswell import EventTree

FLOWS = """
from pydantic import BaseModel
from groundswell import Agent, Prompt, WorkflowContext, workflow


class Verdict(BaseModel):
    approve: bool
    reason: str


judge = Agent(name="judge", system="You review diffs.")  # no client=: the real API
parrot = Agent(name="parrot")


@workflow(name="review")
async def review(ctx: WorkflowContext, diff: str) -> dict:
    ask = Prompt(user=f"Approve? {diff}", response_format=Verdict)
    verdict = await ctx.step("judge", lambda: judge.prompt(ask))
    return verdict.model_dump()


@workflow(name="repeat")
async def repeat(ctx: WorkflowContext, words: str) -> str:
    return await ctx.step("parrot", lambda: parrot.prompt(words))
"""


def gs_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, in a reader's environment: no key, no base URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "GROUNDSWELL_"))}
    return subprocess.run(
        [sys.executable, "-m", "groundswell.cli", "run", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    (tmp_path / "flows.py").write_text(FLOWS)
    return tmp_path


def test_without_fake_an_agent_without_client_needs_a_key(flows: Path) -> None:
    out = gs_run(flows, "flows.py:review", "+x", "--json")
    assert out.returncode == 1
    record = json.loads(out.stdout)
    assert record["status"] == "failed"
    assert "agent 'judge' has no API key" in out.stdout


def test_fake_runs_module_level_agents_on_the_schema_aware_fake(flows: Path) -> None:
    out = gs_run(flows, "flows.py:review", "+x", "--fake", "--json")

    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["status"] == "completed"
    assert set(record["output"]) == {"approve", "reason"}  # JSON that fits the schema
    tree = EventTree.from_json(record["tree"])
    assert [n.name for n in tree.find(type="model_call")] == ["claude-sonnet-4-6"]


def test_fake_echo_answers_each_prompt_with_its_own_text(flows: Path) -> None:
    out = gs_run(flows, "flows.py:repeat", "hello there", "--fake", "echo")

    assert out.returncode == 0, out.stderr
    assert "output: 'hello there'" in out.stdout
    assert "✓ prompt parrot" in out.stdout


def test_fake_names_its_modes_when_given_another(flows: Path) -> None:
    out = gs_run(flows, "flows.py:repeat", "hi", "--fake=canned")

    assert out.returncode == 2
    assert "argument --fake: invalid choice: 'canned' (choose from 'schema', 'echo')" in out.stderr
