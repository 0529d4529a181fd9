"""Evals: datasets of cases, evaluators that read the answer and the tree, reports.

```python
from groundswell import evals

dataset = evals.Dataset.load("cases.yaml")        # or Dataset(cases=[evals.Case(...)])
report = await evals.run(dataset, support_flow)   # a workflow, AgentTarget or function
report.print()
report.save("report.json")
evals.compare(report, evals.Report.load("baseline.json")).print()
```

Evaluators: deterministic (`EqualsExpected`, `Equals`, `Contains`, `Regex`,
`ValidatesAs`), tree (`ToolsCalled`, `ToolCalls`, `NoFailedNodes`,
`MaxModelTurns`, `MaxCost`, `MaxDuration`) and `LLMJudge`; any function of an
`EvaluatorContext` too, and plugins add named ones (``register_evaluators``).
`capture` turns saved traces into cases that replay offline; `fork` reruns a
saved run from one of its nodes with a change. The command line:
``groundswell eval run``, ``capture`` and ``fork`` (docs/evals.md). In a test
run, one test per case: ``@pytest.mark.parametrize("case", evals.cases(path))``
and ``await evals.check(case, target)``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .capturing import capture
    from .dataset import Case, Dataset, EvaluatorSpec
    from .evaluators import (
        Contains,
        Equals,
        EqualsExpected,
        Evaluator,
        EvaluatorContext,
        Regex,
        Score,
        ValidatesAs,
    )
    from .fork_diff import NodeChange
    from .forking import Fork, fork
    from .judge import LLMJudge, Verdict
    from .pytest_support import EvalCase, cases, check
    from .registry import evaluator_names, from_spec
    from .report import (
        CaseChange,
        CaseResult,
        CaseRun,
        Comparison,
        EvaluatorResult,
        Report,
        compare,
    )
    from .runner import run
    from .targets import AgentTarget
    from .tree_checks import (
        MaxCost,
        MaxDuration,
        MaxModelTurns,
        NoFailedNodes,
        ToolCalls,
        ToolsCalled,
    )

# Loaded on first use, so that `groundswell eval` and `import groundswell.evals`
# cost a command that does not run an eval nothing.
_WHERE = {
    "capture": ".capturing",
    "Case": ".dataset",
    "Dataset": ".dataset",
    "EvaluatorSpec": ".dataset",
    "Contains": ".evaluators",
    "Equals": ".evaluators",
    "EqualsExpected": ".evaluators",
    "Evaluator": ".evaluators",
    "EvaluatorContext": ".evaluators",
    "Regex": ".evaluators",
    "Score": ".evaluators",
    "ValidatesAs": ".evaluators",
    "NodeChange": ".fork_diff",
    "Fork": ".forking",
    "fork": ".forking",
    "LLMJudge": ".judge",
    "Verdict": ".judge",
    "EvalCase": ".pytest_support",
    "cases": ".pytest_support",
    "check": ".pytest_support",
    "evaluator_names": ".registry",
    "from_spec": ".registry",
    "CaseChange": ".report",
    "CaseResult": ".report",
    "CaseRun": ".report",
    "Comparison": ".report",
    "EvaluatorResult": ".report",
    "Report": ".report",
    "compare": ".report",
    "run": ".runner",
    "AgentTarget": ".targets",
    "MaxCost": ".tree_checks",
    "MaxDuration": ".tree_checks",
    "MaxModelTurns": ".tree_checks",
    "NoFailedNodes": ".tree_checks",
    "ToolCalls": ".tree_checks",
    "ToolsCalled": ".tree_checks",
}

__all__ = [
    "AgentTarget",
    "Case",
    "CaseChange",
    "CaseResult",
    "CaseRun",
    "Comparison",
    "Contains",
    "Dataset",
    "Equals",
    "EqualsExpected",
    "EvalCase",
    "Evaluator",
    "EvaluatorContext",
    "EvaluatorResult",
    "EvaluatorSpec",
    "Fork",
    "LLMJudge",
    "MaxCost",
    "MaxDuration",
    "MaxModelTurns",
    "NoFailedNodes",
    "NodeChange",
    "Regex",
    "Report",
    "Score",
    "ToolCalls",
    "ToolsCalled",
    "ValidatesAs",
    "Verdict",
    "capture",
    "cases",
    "check",
    "compare",
    "evaluator_names",
    "fork",
    "from_spec",
    "run",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'groundswell.evals' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
