"""Capturing saved runs as eval cases that replay offline from their recorded replies.

```python
dataset = evals.capture(["runs/a.jsonl", "runs/"], into="cases.yaml", target=support_flow)
report = await evals.run("cases.yaml", support_flow, replay=True)
```

Each completed run (a tree whose root is a ``workflow`` node) becomes a `Case`:
its recorded arguments are the ``inputs``, its recorded output the
``expected_output``, and its tree is saved beside the dataset
(``cases.traces/<case>.jsonl``) as the case's ``trace``. A run that failed,
or never finished, is skipped with a warning on the ``groundswell.evals``
logger: its output is no answer to expect. So is a run whose output or a
model reply was recorded truncated (strings over `MAX_STRING` characters): its
case would expect, and replay, text the live run never gives. Inputs and
expected output are written scrubbed of secrets, as the saved trace is.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..scrubbing.serialize import MAX_STRING, redact
from ..tree.tree import EventTree, NodeStatus, NodeType
from .dataset import Case, Dataset
from .targets import Target, as_target

__all__ = ["capture"]

logger = logging.getLogger("groundswell.evals")

_SUFFIXES = (".yaml", ".yml", ".json")
# The mark `groundswell.scrubbing.serialize.jsonable` leaves on a string it cut to MAX_STRING.
_TRUNCATED = re.compile(r"…\[truncated \d+ chars\]\Z")


@dataclass
class _Run:
    """One completed run to capture: its tree, where it came from and its case."""

    tree: EventTree
    source: str
    run_id: str
    workflow: str
    inputs: dict[str, Any]
    output: Any
    name: str = ""


def capture(
    traces: Sequence[Any] | str | os.PathLike[str] | EventTree | dict[str, Any],
    *,
    into: str | os.PathLike[str],
    target: Any = None,
) -> Dataset:
    """Turn saved runs into cases of the dataset file ``into``; returns the saved dataset.

    ``traces``: trace files (``tree.save`` or a JSONL sink's log, or a
    ``.json`` file of ``tree.to_json()``), directories of them, `EventTree`
    objects or their ``to_json()`` dicts. Each completed workflow run becomes
    a case named for its workflow (with a short run id suffix when needed)
    whose ``trace`` is the run's tree, saved to ``<into stem>.traces/<name>.jsonl``
    beside ``into``. Failed or
    unfinished runs, and runs whose output or a model reply was recorded
    truncated, are skipped, with a warning. Secrets are scrubbed from what is
    written. ``target`` (what
    `groundswell.evals.run` takes) names positional arguments by its
    parameters. An existing ``into`` keeps its cases: a case captured from the
    same run is replaced, any other keeps its name.
    """
    file = Path(into)
    if file.suffix not in _SUFFIXES:
        raise ConfigurationError(
            f"capture(into=...) is the dataset file to write, a .yaml, .yml or .json file; "
            f"got {str(file)!r}"
        )
    if isinstance(traces, str | os.PathLike | EventTree | dict):
        sources: list[Any] = [traces]
    else:
        sources = list(traces)
    if not sources:
        raise ConfigurationError("capture() needs at least one saved trace to read")
    chosen = as_target(target) if target is not None else None
    runs = _dedupe([run for source in sources for run in _runs(source, chosen)])
    if not runs:
        raise ConfigurationError(
            f"no completed workflow run to capture in {', '.join(map(_describe, sources))} "
            "(see the warnings above for what was skipped)"
        )
    dataset = Dataset.load(file) if file.exists() else Dataset()
    _name(runs, dataset)
    folder = file.parent / f"{file.stem}.traces"
    captured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cases = {case.name: case for case in dataset.cases}
    for run in runs:
        saved = run.tree.save(folder / f"{run.name}.jsonl")
        earlier = cases.get(run.name)
        metadata = dict(earlier.metadata) if earlier is not None else {}
        metadata.update(source=run.source, run_id=run.run_id, captured_at=captured_at)
        cases[run.name] = Case(
            name=run.name,
            inputs=run.inputs,
            expected_output=run.output,
            metadata=metadata,
            # Evaluators written for a case survive capturing its run again.
            evaluators=earlier.evaluators if earlier is not None else [],
            trace=saved.relative_to(file.parent).as_posix(),
        )
    result = dataset.model_copy(update={"cases": list(cases.values())})
    # The file's stem names the dataset when it says nothing else; keep it saying nothing.
    written = result if result.name != file.stem else result.model_copy(update={"name": None})
    written.save(file)
    logger.info("captured %d run(s) into %s", len(runs), file)
    return Dataset.load(file)


def _runs(source: Any, target: Target | None) -> list[_Run]:
    """The completed workflow runs in ``source``; the others are skipped with a warning."""
    from ..testing import load_trees

    try:
        trees = load_trees(source, "capture()")
    except (TypeError, ValueError, OSError) as exc:
        raise ConfigurationError(f"cannot read traces from {_describe(source)}: {exc}") from exc
    runs = []
    for tree, name in trees:
        where = _where(source, name)
        root = tree.root
        if root is None:
            continue
        if root.type is not NodeType.WORKFLOW:
            logger.warning(
                "skipped a %s %r in %s: only workflow runs become cases",
                root.type.value,
                root.name,
                where,
            )
            continue
        if root.status is not NodeStatus.COMPLETED:
            why = (root.error or {}).get("message") if root.status is NodeStatus.FAILED else None
            logger.warning(
                "skipped run %s of workflow %r in %s: it %s%s; a case expects a completed "
                "run's output",
                root.id,
                root.name,
                where,
                "failed" if root.status is NodeStatus.FAILED else f"ended {root.status.value}",
                f" ({why})" if why else "",
            )
            continue
        cut = _truncated(tree)
        if cut:
            logger.warning(
                "skipped run %s of workflow %r in %s: its %s was recorded truncated (strings "
                "over %d characters are cut), so its case would expect and replay text the "
                "live run does not give",
                root.id,
                root.name,
                where,
                cut,
                MAX_STRING,
            )
            continue
        # Scrubbed as the saved trace beside the case is: the dataset file is an output too.
        recorded = redact(
            {"input": root.payload.get("input"), "output": root.payload.get("output")}
        )
        given = recorded["input"] if isinstance(recorded["input"], dict) else {}
        inputs = _inputs(given.get("args") or [], given.get("kwargs") or {}, target, root.name)
        runs.append(_Run(tree, where, root.id, root.name, inputs, recorded["output"]))
    return runs


def _truncated(tree: EventTree) -> str | None:
    """What of the run was recorded truncated (its output, a model reply), else None."""
    root = tree.root
    assert root is not None
    if _cut(root.payload.get("output")):
        return "output"
    for node in tree.walk():
        if node.type is NodeType.MODEL_CALL:
            # The reply's whole content is what replay answers with; its "text" is a preview.
            response = node.payload.get("response")
            if isinstance(response, dict) and _cut(response.get("content")):
                return f"model reply (model_call {node.id})"
    return None


def _cut(value: Any) -> bool:
    """Whether any string in JSON-like ``value`` ends with the truncation mark."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) > MAX_STRING and _TRUNCATED.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _inputs(
    args: list[Any], kwargs: dict[str, Any], target: Target | None, workflow: str
) -> dict[str, Any]:
    """A run's recorded arguments as keyword arguments, positional ones named by ``target``."""
    if not args:
        return dict(kwargs)
    if target is None:
        raise ConfigurationError(
            f"a run of workflow {workflow!r} was called with {len(args)} positional "
            "argument(s), and a case's inputs are keyword arguments: pass target= "
            "(on the command line --target module:workflow) so they are named by its parameters"
        )
    if target.inputs_model is None:
        raise ConfigurationError(
            f"a run of workflow {workflow!r} was called with positional arguments, and the "
            f"target {target.name!r} takes any arguments, so they cannot be named by its "
            "parameters; pass a target with named parameters (the workflow that was run)"
        )
    names = list(target.inputs_model.model_fields)
    if len(args) > len(names):
        raise ConfigurationError(
            f"a run of workflow {workflow!r} was called with {len(args)} positional "
            f"arguments, but the target takes {len(names)} ({', '.join(names) or 'none'}); "
            "is it the workflow that was run?"
        )
    named = dict(zip(names, args, strict=False))
    twice = sorted(set(named) & set(kwargs))
    if twice:
        raise ConfigurationError(
            f"a run of workflow {workflow!r}: the target's parameters {twice} name both a "
            "positional and a keyword argument; is it the workflow that was run?"
        )
    return named | kwargs


def _dedupe(runs: list[_Run]) -> list[_Run]:
    """Each run once (the same trace may be given twice, or a directory and a file in it)."""
    seen: dict[str, _Run] = {}
    for run in runs:
        seen.setdefault(run.run_id, run)
    return list(seen.values())


def _name(runs: list[_Run], dataset: Dataset) -> None:
    """Give each run its case's name: a run captured before keeps its name, others get new ones.

    A name is the workflow's, with the start of the run id added when another
    case has (or would have) that name.
    """
    by_run = {
        str(case.metadata.get("run_id")): case.name
        for case in dataset.cases
        if case.metadata.get("run_id")
    }
    taken = {case.name for case in dataset.cases}
    fresh = []
    for run in runs:
        if run.run_id in by_run:
            run.name = by_run[run.run_id]
        else:
            fresh.append(run)
    bases = [_safe(run.workflow) for run in fresh]
    for run, base in zip(fresh, bases, strict=True):
        if bases.count(base) == 1 and base not in taken:
            run.name = base
        else:
            sizes = (6, 10, len(run.run_id))
            suffixed = [_safe(f"{base}-{run.run_id[:size]}") for size in sizes]
            free = [name for name in suffixed if name not in taken]
            run.name = free[0] if free else _numbered(base, taken)
        taken.add(run.name)


def _numbered(base: str, taken: set[str]) -> str:
    number = 2
    while f"{base}-{number}" in taken:
        number += 1
    return f"{base}-{number}"


def _safe(name: str) -> str:
    """A name usable as a file name (a case's trace is saved under its name)."""
    return re.sub(r"[^\w.-]+", "-", name).strip("-.") or "run"


def _where(source: Any, name: str) -> str:
    """The file a tree was read from, or what it was."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        return str(path / name if path.is_dir() else path)
    return name


def _describe(source: Any) -> str:
    return str(source) if isinstance(source, str | os.PathLike) else type(source).__name__
