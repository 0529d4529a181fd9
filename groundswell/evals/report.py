"""Eval reports: each case's scores, cost and duration; and a comparison with a baseline.

A `Report` is plain data (JSON with `Report.save`, read back with
`Report.load`), printed as a table with `Report.print`. `compare(report,
baseline)` says which cases improved, regressed or stayed the same, with the
score, cost and duration deltas; `Comparison.regressed` is what CI fails on.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import ConfigurationError
from ..scrubbing.serialize import redact

__all__ = [
    "CaseChange",
    "CaseResult",
    "CaseRun",
    "Comparison",
    "EvaluatorResult",
    "Report",
    "compare",
]


class EvaluatorResult(BaseModel):
    """One evaluator's score for one run."""

    name: str
    value: float
    passed: bool
    reason: str | None = None


class CaseRun(BaseModel):
    """One run of one case."""

    output: Any = None
    #: The target's error (type and message), when it failed.
    error: str | None = None
    scores: list[EvaluatorResult] = Field(default_factory=list)
    duration_s: float = 0.0
    #: Dollars, from the price table; None when a model's price is unknown.
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    #: The saved tree of the run, and of its evaluation (the judge's prompts).
    trace: str | None = None
    eval_trace: str | None = None

    @property
    def passed(self) -> bool:
        """Whether the target answered and every evaluator passed."""
        return self.error is None and all(s.passed for s in self.scores)

    @property
    def score(self) -> float:
        """The mean of the evaluators' values (0 when the run failed)."""
        if self.error is not None:
            return 0.0
        return statistics.fmean(s.value for s in self.scores) if self.scores else 1.0


class CaseResult(BaseModel):
    """Every run of one case."""

    name: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    expected_output: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    runs: list[CaseRun] = Field(default_factory=list)

    @property
    def pass_rate(self) -> float:
        """The share of runs that passed."""
        return sum(r.passed for r in self.runs) / len(self.runs) if self.runs else 0.0

    @property
    def passed(self) -> bool:
        """Every run passed."""
        return bool(self.runs) and all(r.passed for r in self.runs)

    @property
    def score(self) -> float:
        """The mean score of its runs."""
        return statistics.fmean(r.score for r in self.runs) if self.runs else 0.0

    @property
    def cost_usd(self) -> float | None:
        """The mean cost of a run (None when one of them is unknown)."""
        costs = [r.cost_usd for r in self.runs]
        if not costs or any(c is None for c in costs):
            return None
        return statistics.fmean(c for c in costs if c is not None)

    @property
    def duration_s(self) -> float:
        """The mean duration of a run."""
        return statistics.fmean(r.duration_s for r in self.runs) if self.runs else 0.0

    def scores(self) -> dict[str, float]:
        """Each evaluator's mean value over the runs."""
        values: dict[str, list[float]] = {}
        for run in self.runs:
            for score in run.scores:
                values.setdefault(score.name, []).append(score.value)
        return {name: statistics.fmean(v) for name, v in values.items()}

    def explain(self) -> str:
        """Why the case did not pass (each failed run's error or failed evaluators)."""
        lines = []
        for number, run in enumerate(self.runs, 1):
            prefix = f"run {number}: " if len(self.runs) > 1 else ""
            if run.error is not None:
                lines.append(f"{prefix}the target failed: {run.error}")
            for score in run.scores:
                if not score.passed:
                    lines.append(f"{prefix}{score.name}: {score.reason or 'failed'}")
        return "\n".join(lines) or "passed"


class Report(BaseModel):
    """The result of running a dataset against a target."""

    name: str
    target: str
    cases: list[CaseResult] = Field(default_factory=list)
    repeat: int = 1
    #: Where the runs' trees were saved.
    trace_dir: str | None = None

    @property
    def score(self) -> float:
        """The mean case score."""
        return statistics.fmean(c.score for c in self.cases) if self.cases else 0.0

    @property
    def pass_rate(self) -> float:
        """The share of cases whose runs all passed."""
        return sum(c.passed for c in self.cases) / len(self.cases) if self.cases else 0.0

    @property
    def cost_usd(self) -> float | None:
        """What all the runs cost together (None when a price is unknown)."""
        total = 0.0
        for case in self.cases:
            for run in case.runs:
                if run.cost_usd is None:
                    return None
                total += run.cost_usd
        return total

    def case(self, name: str) -> CaseResult:
        """The result of the case called ``name``."""
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(f"no case {name!r} in report {self.name!r}")

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the report as JSON (scrubbed of secrets, as every output is)."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        data = redact(self.model_dump(mode="json"))
        file.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return file

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Report:
        """Read a report `save` wrote."""
        file = Path(path)
        try:
            return cls.model_validate(json.loads(file.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise ConfigurationError(
                f"no report at {file}; write one with `groundswell eval run ... --report {file}`"
            ) from None
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"{file} is not an eval report: {exc}") from exc

    def render(self, *, width: int = 100) -> str:
        """The report as the table `print` shows, as text."""
        from ._render import render_report

        return render_report(self, width=width)

    def print(self, *, file: Any = None) -> None:
        """Print the report as a table (in colour on a terminal)."""
        from ._render import print_report

        print_report(self, file=file)


Status = Literal["improved", "regressed", "unchanged", "new", "removed"]


class CaseChange(BaseModel):
    """How one case changed from the baseline."""

    name: str
    status: Status
    score: float | None = None
    baseline_score: float | None = None
    pass_rate: float | None = None
    baseline_pass_rate: float | None = None
    cost_usd: float | None = None
    baseline_cost_usd: float | None = None
    duration_s: float | None = None
    baseline_duration_s: float | None = None
    #: Each evaluator's change of mean value (new evaluators are left out).
    score_deltas: dict[str, float] = Field(default_factory=dict)

    @property
    def score_delta(self) -> float | None:
        if self.score is None or self.baseline_score is None:
            return None
        return self.score - self.baseline_score

    @property
    def cost_delta(self) -> float | None:
        if self.cost_usd is None or self.baseline_cost_usd is None:
            return None
        return self.cost_usd - self.baseline_cost_usd

    @property
    def duration_delta(self) -> float | None:
        if self.duration_s is None or self.baseline_duration_s is None:
            return None
        return self.duration_s - self.baseline_duration_s


class Comparison(BaseModel):
    """A report compared with a baseline report, case by case."""

    report: Report
    baseline: Report
    cases: list[CaseChange]
    tolerance: float = 0.0

    def _named(self, status: Status) -> list[CaseChange]:
        return [c for c in self.cases if c.status == status]

    @property
    def regressed(self) -> list[CaseChange]:
        return self._named("regressed")

    @property
    def improved(self) -> list[CaseChange]:
        return self._named("improved")

    @property
    def unchanged(self) -> list[CaseChange]:
        return self._named("unchanged")

    @property
    def score_delta(self) -> float:
        return self.report.score - self.baseline.score

    def render(self, *, width: int = 100) -> str:
        """The comparison as the table `print` shows, as text."""
        from ._render import render_comparison

        return render_comparison(self, width=width)

    def print(self, *, file: Any = None) -> None:
        """Print the comparison as a table."""
        from ._render import print_comparison

        print_comparison(self, file=file)


def compare(report: Report, baseline: Report, *, tolerance: float = 0.0) -> Comparison:
    """``report`` against ``baseline``: each case improved, regressed, unchanged, new or removed.

    A case regressed when its score fell by more than ``tolerance`` or its pass
    rate fell; it improved when its score rose by more than ``tolerance`` or its
    pass rate rose (and neither fell).
    """
    if tolerance < 0:
        raise ConfigurationError(
            f"compare(): tolerance is a score difference >= 0, not {tolerance}"
        )
    before = {c.name: c for c in baseline.cases}
    changes: list[CaseChange] = []
    for case in report.cases:
        old = before.get(case.name)
        change = CaseChange(
            name=case.name,
            status="new",
            score=case.score,
            pass_rate=case.pass_rate,
            cost_usd=case.cost_usd,
            duration_s=case.duration_s,
        )
        if old is not None:
            change.baseline_score = old.score
            change.baseline_pass_rate = old.pass_rate
            change.baseline_cost_usd = old.cost_usd
            change.baseline_duration_s = old.duration_s
            now, then = case.scores(), old.scores()
            change.score_deltas = {k: now[k] - then[k] for k in now if k in then}
            change.status = _status(case, old, tolerance)
        changes.append(change)
    names = {c.name for c in report.cases}
    for old in baseline.cases:
        if old.name not in names:
            changes.append(
                CaseChange(
                    name=old.name,
                    status="removed",
                    baseline_score=old.score,
                    baseline_pass_rate=old.pass_rate,
                    baseline_cost_usd=old.cost_usd,
                    baseline_duration_s=old.duration_s,
                )
            )
    return Comparison(report=report, baseline=baseline, cases=changes, tolerance=tolerance)


def _status(case: CaseResult, old: CaseResult, tolerance: float) -> Status:
    delta = case.score - old.score
    tolerance += 1e-9  # means of the same values may differ in the last bit
    if delta < -tolerance or case.pass_rate < old.pass_rate:
        return "regressed"
    if delta > tolerance or case.pass_rate > old.pass_rate:
        return "improved"
    return "unchanged"
