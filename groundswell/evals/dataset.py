"""Datasets of eval cases: inputs, an optional expected output, metadata, evaluators.

A dataset is a YAML or JSON file (``Dataset.load``) or built in code::

    cases:
      - name: late-order
        inputs: {message: "Where is order A-1?"}
        expected_output: null
        metadata: {topic: shipping}
        evaluators: [{contains: "A-1"}]
        trace: cases.traces/late-order.jsonl   # recorded replies (from `capture`)
    evaluators: [no_failed_nodes]            # for every case

A case has the fields of a pydantic-evals case (``name``, ``inputs``,
``expected_output``, ``metadata``, ``evaluators``); evaluators are named
Groundswell's way (``contains``, not ``Contains``).
``inputs`` are the target's keyword arguments; `Dataset.check` validates them
against the target's signature, so a typo in a dataset fails before any model
is asked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigurationError

__all__ = ["Case", "Dataset", "EvaluatorSpec"]

#: How an evaluator is written in a dataset: its registered name (``no_failed_nodes``),
#: or a one-key mapping of the name to its argument (``{contains: "A-1"}``) or to its
#: keyword arguments (``{max_cost: {usd: 0.01}}``).
EvaluatorSpec = str | dict[str, Any]


class Case(BaseModel):
    """One eval case: what the target is given, and what is expected of it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    #: The target's keyword arguments.
    inputs: dict[str, Any] = Field(default_factory=dict)
    #: What the target should return; ``None`` when only evaluators judge the output.
    expected_output: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: Evaluators for this case only, run after the dataset's own.
    evaluators: list[EvaluatorSpec] = Field(default_factory=list)
    #: A saved trace whose model replies the case replays offline (``--replay``);
    #: relative to the dataset file.
    trace: str | None = None


class Dataset(BaseModel):
    """A named list of cases with evaluators that apply to all of them."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    cases: list[Case] = Field(default_factory=list)
    evaluators: list[EvaluatorSpec] = Field(default_factory=list)
    #: The folder relative paths (a case's ``trace``) are read from; set by `load`.
    base_dir: Path | None = Field(default=None, exclude=True)

    def model_post_init(self, context: Any, /) -> None:
        names = [case.name for case in self.cases]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigurationError(
                f"dataset {self.name or '(unnamed)'}: case names must be unique, "
                f"{', '.join(map(repr, repeated))} appear more than once"
            )

    def __iter__(self) -> Iterator[Case]:  # type: ignore[override]
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def case(self, name: str) -> Case:
        """The case called ``name``."""
        for case in self.cases:
            if case.name == name:
                return case
        known = ", ".join(c.name for c in self.cases) or "none"
        raise KeyError(f"no case {name!r} in the dataset (cases: {known})")

    def trace_path(self, case: Case) -> Path | None:
        """Where ``case``'s recorded trace is, resolved against the dataset's folder."""
        if case.trace is None:
            return None
        path = Path(case.trace)
        return path if path.is_absolute() or self.base_dir is None else self.base_dir / path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dataset:
        """Read a dataset from a ``.yaml``/``.yml`` or ``.json`` file."""
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigurationError(
                f"no dataset at {file}; write one (docs/evals.md) or capture cases from saved "
                "traces: groundswell eval capture TRACE... --into FILE"
            ) from None
        try:
            data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise ConfigurationError(f"{file} is not valid {_format(file)}: {exc}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigurationError(
                f"{file}: a dataset is a mapping with a 'cases' list, got {type(data).__name__}"
            )
        data.setdefault("name", file.stem)
        try:
            dataset = cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigurationError(f"{file} is not a valid dataset:\n{_errors(exc)}") from exc
        dataset.base_dir = file.resolve().parent
        return dataset

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the dataset as YAML (``.yaml``/``.yml``) or JSON (``.json``)."""
        file = Path(path)
        data = self.model_dump(mode="json", exclude_defaults=True)
        data.setdefault("cases", [])
        if file.suffix == ".json":
            text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        else:
            text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
        return file

    def check(self, target: Any) -> None:
        """Validate every case's inputs against ``target``'s parameters (their types too).

        ``target`` is what `groundswell.evals.run` takes. Raises `ConfigurationError`
        naming each case and input that does not fit.
        """
        from .targets import as_target

        model = as_target(target).inputs_model
        if model is None:
            return
        problems: list[str] = []
        for case in self.cases:
            try:
                model.model_validate(case.inputs)
            except ValidationError as exc:
                problems.append(f"case {case.name!r}:\n{_errors(exc, indent='    ')}")
        if problems:
            raise ConfigurationError(
                f"dataset {self.name or '(unnamed)'}: inputs that do not fit the target's "
                "parameters (`inputs` are its keyword arguments):\n" + "\n".join(problems)
            )


def _format(file: Path) -> str:
    return "JSON" if file.suffix == ".json" else "YAML"


def _errors(exc: ValidationError, indent: str = "  ") -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        lines.append(f"{indent}{where}: {error['msg']}")
    return "\n".join(lines)
