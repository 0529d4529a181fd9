"""Running a dataset against a target: every case, N times each, scored and saved.

Each run of a case is a workflow run of the target (`groundswell.evals.targets`),
with the case's inputs as keyword arguments; its tree is saved. Then the
evaluators score it inside an ``evaluate <case>`` workflow of their own, one step
per evaluator (a judge's prompt is a node there), whose tree is saved too.
Cases run concurrently, at most ``concurrency`` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agent.overrides import override_agents_here
from ..errors import ConfigurationError, WorkflowError
from ..scrubbing.serialize import redact
from ..tree.tree import EventTree, NodeStatus, NodeType
from ..workflow.workflow import Workflow, WorkflowContext
from .dataset import Case, Dataset
from .evaluators import EqualsExpected, EvaluatorContext, Score, evaluator_name, score_of
from .registry import from_specs
from .report import CaseResult, CaseRun, EvaluatorResult, Report
from .targets import Target, as_target
from .tree_checks import NoFailedNodes

if TYPE_CHECKING:
    import anthropic

__all__ = ["run", "run_case", "unique_stems"]


async def run(
    dataset: Dataset | str | os.PathLike[str],
    target: Any,
    *,
    evaluators: Sequence[Any] = (),
    repeat: int = 1,
    concurrency: int = 4,
    replay: bool = False,
    client: anthropic.AsyncAnthropic | None = None,
    trace_dir: str | os.PathLike[str] | None = None,
    name: str | None = None,
) -> Report:
    """Run every case of ``dataset`` against ``target`` and score it; returns the `Report`.

    ``target``: a `Workflow`, an `AgentTarget(agent, template)` or a function
    taking the case's inputs as keyword arguments. ``evaluators`` apply to every
    case, after the dataset's and the case's own; with none anywhere, a case is
    scored by ``equals_expected`` and ``no_failed_nodes``. ``repeat`` runs each
    case that many times (a pass rate, for a model that answers differently
    each time). ``replay=True`` answers each case's model requests from its
    recorded ``trace``; ``client`` puts the target's agents on that client (say,
    a `groundswell.testing.FakeAnthropicAPI`'s); otherwise they use their own
    (the real API). Trees go to ``trace_dir`` (default
    ``.groundswell/evals/DATASET/TIME-ID``).
    """
    data = dataset if isinstance(dataset, Dataset) else Dataset.load(dataset)
    chosen = as_target(target)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ConfigurationError(f"repeat is how many runs per case (1 or more), got {repeat!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigurationError(f"concurrency is 1 or more, got {concurrency!r}")
    if replay and client is not None:
        raise ConfigurationError(
            "replay=True answers from each case's recorded trace; leave client= out"
        )
    data.check(chosen)
    if replay:
        _check_traces(data)
    shared = from_specs(data.evaluators) + from_specs(evaluators)
    # Every case's evaluators are made before any case runs: a misspelt one in the
    # last case must not cost the model calls of all the others.
    scored_by = {
        case.name: (shared + from_specs(case.evaluators)) or [EqualsExpected(), NoFailedNodes()]
        for case in data.cases
    }
    folder = Path(trace_dir) if trace_dir is not None else _default_folder(data)
    stems = unique_stems([case.name for case in data.cases])
    gate = asyncio.Semaphore(concurrency)

    async def one(case: Case, number: int) -> CaseRun:
        async with gate:
            stem = stems[case.name] if repeat == 1 else f"{stems[case.name]}.{number}"
            return await run_case(
                data,
                case,
                chosen,
                scored_by[case.name],
                client=client,
                replay=replay,
                trace_stem=folder / stem,
                # Repeated runs measure the model: an answer cache would answer all but one.
                fresh=repeat > 1,
            )

    runs = await asyncio.gather(
        *(one(case, number) for case in data.cases for number in range(1, repeat + 1))
    )
    results = []
    for index, case in enumerate(data.cases):
        results.append(
            CaseResult(
                name=case.name,
                inputs=redact(case.inputs),
                expected_output=redact(case.expected_output),
                metadata=redact(case.metadata),
                runs=list(runs[index * repeat : (index + 1) * repeat]),
            )
        )
    return Report(
        name=name or data.name or "dataset",
        target=chosen.name,
        cases=results,
        repeat=repeat,
        trace_dir=str(folder),
    )


async def run_case(
    dataset: Dataset,
    case: Case,
    target: Target,
    evaluators: Sequence[Any],
    *,
    client: anthropic.AsyncAnthropic | None = None,
    replay: bool = False,
    trace_stem: Path | None = None,
    fresh: bool = False,
) -> CaseRun:
    """One run of one case: the target's run, then its evaluation.

    The case's inputs are validated into the target's parameter types first (a
    YAML ``"25"`` for an ``int`` parameter arrives as ``25``, a mapping for a
    model parameter as the model). ``fresh=True`` turns the answer cache off.
    """
    arguments = target.arguments(case.inputs)
    if replay:
        from ..testing import FakeAnthropicAPI

        trace = dataset.trace_path(case)
        if trace is None:
            raise ConfigurationError(f"case {case.name!r} has no recorded trace to replay")
        client = FakeAnthropicAPI.from_trace(trace).client(max_retries=0)
    settings: dict[str, Any] = {"disable_cache": True} if fresh else {}
    scope = (
        override_agents_here(client, **settings)
        if client is not None or settings
        else contextlib.nullcontext()
    )
    started = time.perf_counter()
    error: BaseException | None = None
    output: Any = None
    with scope:
        try:
            result = await target.workflow.run(**arguments)
            tree, output = result.tree, result.output
        except WorkflowError as exc:
            error = exc.__cause__ or exc
            tree = exc.result.tree if exc.result is not None else _failed_tree(target, exc)
        except Exception as exc:  # refused before the run started (a configuration error)
            error, tree = exc, _failed_tree(target, exc)
    duration = time.perf_counter() - started
    ctx = EvaluatorContext(
        name=case.name,
        inputs=case.inputs,
        metadata=case.metadata,
        expected_output=case.expected_output,
        output=output,
        duration=duration,
        tree=tree,
        error=error,
        case=case,
    )
    scores, eval_tree = await _evaluate(case, ctx, evaluators)
    root = tree.root
    metrics = root.metrics if root is not None else {}
    usage = metrics.get("usage") or {}
    # What a run shows leaves the process (reports, terminals): scrubbed like traces.
    run = CaseRun(
        output=redact(output),
        error=None if error is None else redact(f"{type(error).__name__}: {error}"),
        scores=scores,
        duration_s=round(duration, 6),
        cost_usd=_cost(tree, metrics),
        input_tokens=int(usage.get("input_tokens", 0)),
        output_tokens=int(usage.get("output_tokens", 0)),
    )
    if trace_stem is not None:
        stem = str(trace_stem)
        # Off the event loop: other cases go on while a large tree is written.
        run.trace = str(await asyncio.to_thread(tree.save, stem + ".jsonl"))
        run.eval_trace = str(await asyncio.to_thread(eval_tree.save, stem + ".eval.jsonl"))
    return run


async def _evaluate(
    case: Case, ctx: EvaluatorContext, evaluators: Sequence[Any]
) -> tuple[list[EvaluatorResult], EventTree]:
    """Each evaluator's score, each as a step of an ``evaluate`` workflow (its tree too)."""
    names = _labels(evaluators)

    async def evaluate(wctx: WorkflowContext) -> list[Score]:
        scores = []
        for evaluator, label in zip(evaluators, names, strict=True):
            scores.append(await wctx.step(label, score_of(evaluator, ctx)))
        return scores

    try:
        result = await Workflow(evaluate, f"evaluate {case.name}").run()
    except WorkflowError as exc:  # an evaluator's configuration error (score_of lets it out)
        raise (exc.__cause__ or exc) from None
    assert result.output is not None
    named = [
        EvaluatorResult(name=label, value=s.value, passed=s.passed, reason=redact(s.reason))
        for label, s in zip(names, result.output, strict=True)
    ]
    return named, result.tree


def _labels(evaluators: Sequence[Any]) -> list[str]:
    """Each evaluator's name, numbered from the second of a name on (``contains #2``)."""
    seen: dict[str, int] = {}
    labels = []
    for evaluator in evaluators:
        name = evaluator_name(evaluator)
        seen[name] = seen.get(name, 0) + 1
        labels.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return labels


def _cost(tree: EventTree, metrics: dict[str, Any]) -> float | None:
    """The run's cost: 0 when no model was called (a function, a cached answer); None
    only when a model's price is unknown."""
    if not any(n.type == NodeType.MODEL_CALL for n in tree.walk()):
        return 0.0
    cost: float | None = metrics.get("cost_usd")
    return cost


def _failed_tree(target: Target, error: BaseException) -> EventTree:
    tree = EventTree()
    node = tree.start_node(NodeType.WORKFLOW, target.workflow.name)
    tree.end_node(node, NodeStatus.FAILED, error=error)
    return tree


def _check_traces(dataset: Dataset) -> None:
    missing = [c.name for c in dataset.cases if c.trace is None]
    if missing:
        raise ConfigurationError(
            f"replay answers from each case's recorded trace, and these cases have none: "
            f"{', '.join(missing)}; capture them from saved runs "
            "(groundswell eval capture TRACE... --into FILE) or run without replay"
        )
    absent = [
        str(path)
        for case in dataset.cases
        if (path := dataset.trace_path(case)) is not None and not path.exists()
    ]
    if absent:
        raise ConfigurationError(f"recorded traces not found: {', '.join(absent)}")


def _default_folder(dataset: Dataset) -> Path:
    # The second alone is not unique: two runs in one second must not share a folder.
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    return Path(".groundswell") / "evals" / _safe(dataset.name or "dataset") / stamp


def unique_stems(names: Sequence[str]) -> dict[str, str]:
    """A file name stem for each case name, distinct even where the file system folds case.

    Dots become dashes too, so that ``NAME.2.jsonl`` (a repeat) and
    ``NAME.eval.jsonl`` (an evaluation) never meet another case's file.
    """
    stems: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        base = re.sub(r"[^\w-]+", "-", name).strip("-") or "case"
        stem, number = base, 1
        while stem.casefold() in taken:
            number += 1
            stem = f"{base}-{number}"
        taken.add(stem.casefold())
        stems[name] = stem
    return stems


def _safe(name: str) -> str:
    """A dataset name as a folder name."""
    return re.sub(r"[^\w.-]+", "-", name).strip("-.") or "dataset"
