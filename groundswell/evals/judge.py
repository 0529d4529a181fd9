"""An LLM judge: a Groundswell agent scores the output against a rubric.

The judge is an ordinary `Agent` (its own prompt node, cache and budget), and
its answer is a typed `Verdict`. The runner judges each case run inside an
``evaluate`` workflow of its own, saved next to the case's tree, so a judged
run is as observable and replayable as any other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from ..agent import Agent
from ..errors import ConfigurationError
from ..prompt.prompt import Prompt
from .evaluators import Evaluator, EvaluatorContext, Score

__all__ = ["JUDGE_SYSTEM", "LLMJudge", "Verdict"]

JUDGE_SYSTEM = (
    "You grade the output of an AI system against a rubric. Read the rubric, the "
    "input the system was given and its output (and the expected output, when there "
    "is one). Decide whether the output meets the rubric, give a score from 0 (not "
    "at all) to 1 (fully), and say in one or two sentences why. Judge only what the "
    "rubric asks."
)


class Verdict(BaseModel):
    """The judge's answer."""

    passed: bool = Field(description="Whether the output meets the rubric.")
    score: float = Field(ge=0.0, le=1.0, description="How well it meets it, 0 to 1.")
    reason: str = Field(description="Why, in one or two sentences.")


_judges: dict[str | None, Agent[Any]] = {}


def _default_judge(model: str | None) -> Agent[Any]:
    judge = _judges.get(model)
    if judge is None:
        options: dict[str, Any] = {"model": model} if model else {}
        judge = _judges[model] = Agent(
            name="judge", system=JUDGE_SYSTEM, max_tokens=1024, enable_cache=True, **options
        )
    return judge


@dataclass(frozen=True)
class LLMJudge(Evaluator):
    """Ask a model whether the output meets ``rubric``; its `Verdict` is the score.

    ``agent`` is a judge of your own (its model, client, cache, budget); by default
    an agent named ``judge`` with ``model`` (or the default model).
    ``include_input`` and ``include_expected`` say what the judge is shown besides
    the output.
    """

    rubric: str
    model: str | None = None
    agent: Agent[Any] | None = field(default=None, compare=False)
    include_input: bool = True
    include_expected: bool = True
    name: ClassVar[str] = "judge"

    def __post_init__(self) -> None:
        if not isinstance(self.rubric, str) or not self.rubric.strip():
            raise ConfigurationError("judge evaluator: give it a rubric (what a good output does)")
        if self.agent is not None and not isinstance(self.agent, Agent):
            raise ConfigurationError(
                f"judge evaluator: agent must be a groundswell.Agent, got "
                f"{type(self.agent).__name__}"
            )

    @property
    def judge(self) -> Agent[Any]:
        """The agent that judges."""
        return self.agent if self.agent is not None else _default_judge(self.model)

    async def evaluate(self, ctx: EvaluatorContext) -> Score:
        if ctx.error is not None:
            return Score(0.0, False, f"the run failed ({type(ctx.error).__name__}): not judged")
        verdict = await self.judge.prompt(Prompt(user=self.question(ctx), response_format=Verdict))
        return Score(verdict.score, verdict.passed, verdict.reason)

    def question(self, ctx: EvaluatorContext) -> str:
        """What the judge is asked about one run."""
        parts = [f"<rubric>\n{self.rubric}\n</rubric>"]
        if self.include_input:
            parts.append(f"<input>\n{_shown(ctx.inputs)}\n</input>")
        if self.include_expected and ctx.expected_output is not None:
            parts.append(f"<expected_output>\n{_shown(ctx.expected_output)}\n</expected_output>")
        parts.append(f"<output>\n{ctx.output_text}\n</output>")
        return "\n\n".join(parts)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json(indent=2)
    return json.dumps(value, indent=2, default=str, ensure_ascii=False)
