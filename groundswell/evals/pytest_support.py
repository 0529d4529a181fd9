"""Evals in a test run: one pytest test per case, failing with why the case failed.

```python
import pytest
from groundswell import evals

@pytest.mark.parametrize("case", evals.cases("tests/cases.yaml"))
async def test_support(case):
    await evals.check(case, support_flow)
```

`cases` reads a dataset into `EvalCase` items, which pytest names after their
cases (``test_support[late-order]``). `check` runs one case as `evals.run`
would, with the dataset's evaluators, and raises `AssertionError` with
`CaseResult.explain` when it does not pass. Nothing here imports pytest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .dataset import Case, Dataset
from .evaluators import EqualsExpected
from .registry import from_specs
from .report import CaseResult, CaseRun
from .runner import run_case
from .targets import as_target
from .tree_checks import NoFailedNodes

if TYPE_CHECKING:
    from collections.abc import Sequence

    import anthropic

__all__ = ["EvalCase", "cases", "check"]


@dataclass(frozen=True)
class EvalCase:
    """One case of a dataset, as `cases` gives it to ``pytest.mark.parametrize``."""

    dataset: Dataset
    case: Case

    @property
    def name(self) -> str:
        return self.case.name

    @property
    def __name__(self) -> str:
        # pytest names a parameter by its __name__ when it has one: test_x[<case name>].
        return self.case.name

    def __repr__(self) -> str:
        return f"EvalCase({self.dataset.name or 'dataset'}:{self.case.name})"


def cases(dataset: Dataset | str | os.PathLike[str]) -> list[EvalCase]:
    """Every case of ``dataset`` (a `Dataset` or a .yaml/.json file), for ``parametrize``."""
    data = dataset if isinstance(dataset, Dataset) else Dataset.load(dataset)
    return [EvalCase(data, case) for case in data.cases]


async def check(
    case: EvalCase | Case,
    target: Any,
    *,
    evaluators: Sequence[Any] = (),
    client: anthropic.AsyncAnthropic | None = None,
    replay: bool = False,
    trace_dir: str | os.PathLike[str] | None = None,
) -> CaseRun:
    """Run ``case`` against ``target`` once; raise `AssertionError` saying why if it fails.

    Scored as `groundswell.evals.run` scores it: the dataset's evaluators, then
    ``evaluators``, then the case's own (``equals_expected`` and
    ``no_failed_nodes`` when there are none). ``replay=True`` answers from the
    case's recorded trace, ``client`` puts the target's agents on that client,
    and ``trace_dir`` saves the run's tree there (pytest's ``tmp_path``, say).
    Returns the `CaseRun` of a case that passed.
    """
    __tracebackhide__ = True  # pytest shows the failure at the test's line, not in here
    if isinstance(case, EvalCase):
        dataset, one = case.dataset, case.case
    elif isinstance(case, Case):
        dataset, one = Dataset(cases=[case]), case
    else:
        raise ConfigurationError(
            "evals.check() takes a case from evals.cases(path) (or an evals.Case), got "
            f"{type(case).__name__}"
        )
    if replay and client is not None:
        raise ConfigurationError(
            "check(replay=True) answers from the case's recorded trace; leave client= out"
        )
    chosen = as_target(target)
    # Only this case's inputs: another case's typo fails that case's test, not this one.
    Dataset(name=dataset.name, cases=[one]).check(chosen)
    if replay:
        trace = dataset.trace_path(one)
        if trace is None or not trace.exists():
            where = "has no recorded trace" if trace is None else f"has no trace at {trace}"
            raise ConfigurationError(
                f"case {one.name!r} {where} to replay; capture it from a saved run "
                "(groundswell eval capture TRACE --into FILE) or check without replay"
            )
    own = from_specs(dataset.evaluators) + list(evaluators) + from_specs(one.evaluators)
    stem = Path(trace_dir) / _file_name(one.name) if trace_dir is not None else None
    run = await run_case(
        dataset,
        one,
        chosen,
        own or [EqualsExpected(), NoFailedNodes()],
        client=client,
        replay=replay,
        trace_stem=stem,
    )
    result = CaseResult(name=one.name, inputs=one.inputs, runs=[run])
    if not result.passed:
        saved = f"\nits tree: groundswell tree {run.trace}" if run.trace else ""
        raise AssertionError(f"eval case {one.name!r} failed:\n{result.explain()}{saved}")
    return run


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-.") or "case"
