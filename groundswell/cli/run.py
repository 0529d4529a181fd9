"""What ``groundswell run`` needs besides running: finding the workflow, building its
arguments from the command line, putting its agents on a fake (``--fake``), and choosing
which failed nodes' tracebacks to print.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import ConfigurationError
from ..scrubbing.scrubber import scrub
from ..tree.labels import printable
from ..tree.node import EventNode, NodeStatus
from ..tree.tracebacks import format_traceback
from ..tree.tree import EventTree
from ..workflow.inputs import input_model
from ..workflow.workflow import Workflow

__all__ = [
    "FAKE_MODES",
    "CLIError",
    "failure_origins",
    "fake_agents",
    "load_target_module",
    "resolve_workflow",
    "traceback_lines",
    "workflow_call",
]


class CLIError(Exception):
    """A one-line error for the user; printed without a traceback."""


# -- finding the workflow -----------------------------------------------------------


def resolve_workflow(target: str) -> Workflow[Any, Any]:
    """The workflow ``module:name``, ``file.py:name`` or ``path/to/file.py:name`` names."""
    module, attr = load_target_module(target)
    where = target.rpartition(":")[0]
    if not hasattr(module, attr):
        raise CLIError(f"{where!r} has no attribute {attr!r}; {_workflows_in(module)}")
    obj = getattr(module, attr)
    if not isinstance(obj, Workflow):
        kind = type(obj).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        raise CLIError(
            f"{target} is {article} {kind}, not a Workflow (decorate it with @workflow); "
            f"{_workflows_in(module)}"
        )
    return obj


def load_target_module(target: str, what: str = "workflow") -> tuple[ModuleType, str]:
    """The module ``module:name`` or ``path/to/file.py:name`` names, loaded, and the name.

    A module is imported with the current directory on ``sys.path``; a file is
    loaded as ``python FILE`` would (its folder on ``sys.path``). ``what`` names
    the kind of object expected, for the error message.
    """
    # The last colon: a Windows path (C:\\flows.py:review) has one of its own.
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise CLIError(
            f"expected module:{what} or file.py:{what}, got {target!r} "
            "(e.g. myapp.flows:review or flows.py:review)"
        )
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    return (_load_file(where) if is_file else _import(where)), attr


def _import(name: str) -> ModuleType:
    sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name)
    except Exception as exc:  # SyntaxError, NameError... all mean "fix that module"
        raise CLIError(f"cannot import {name!r}: {type(exc).__name__}: {exc}") from exc


def _load_file(where: str) -> ModuleType:
    """``where`` loaded as a module, its folder first on ``sys.path`` (as ``python file.py``)."""
    path = Path(where).resolve()
    if path.is_dir():
        raise CLIError(f"{where} is a directory; give a .py file in it")
    if not path.is_file():
        raise CLIError(f"no such file: {where}")
    # Named for the file, not "__main__": its `if __name__ == "__main__":` block must not run.
    name = path.stem if path.stem.isidentifier() else "_groundswell_run_target"
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) != str(path):
        name = f"_groundswell_run_{abs(hash(str(path)))}"  # never shadow another module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"cannot load {where} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # sibling imports work, as they would for python FILE
    sys.modules[name] = module  # pickling, dataclasses and typing look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CLIError(f"cannot import {where!r}: {type(exc).__name__}: {exc}") from exc
    return module


def _workflows_in(module: ModuleType) -> str:
    names = sorted(k for k, v in vars(module).items() if isinstance(v, Workflow))
    if not names:
        return "it defines no workflows (decorate an async def with @workflow)"
    return f"its workflows: {', '.join(names)}"


# -- --fake: every agent on an offline fake ---------------------------------------------

# What `run --fake MODE` answers with; `--fake` alone is "schema".
FAKE_MODES = {
    "schema": "JSON that fits each prompt's response_format, else a short text",
    "echo": "each prompt's last user message back, as text",
}


def fake_agents(mode: str | None) -> contextlib.AbstractContextManager[object]:
    """Every agent in the process on a `groundswell.testing.FakeAnthropicAPI` while the
    run goes (``mode`` from `FAKE_MODES`), whatever client it was built with; nothing
    for ``None``."""
    if mode is None:
        return contextlib.nullcontext()
    if mode not in FAKE_MODES:
        raise CLIError(f"--fake takes {' or '.join(FAKE_MODES)}, got {mode!r}")
    from ..testing import FakeAnthropicAPI, use_fake

    # The fake's own model answers "schema"; "echo" hands each prompt back.
    fake = FakeAnthropicAPI() if mode == "schema" else FakeAnthropicAPI(_echo)
    return use_fake(fake)


def _echo(request: Any) -> str:
    return str(request.last_user_text())


# -- the workflow's arguments -------------------------------------------------------

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def workflow_call(
    wf: Workflow[Any, Any], words: Sequence[str], input_text: str | None, pairs: Sequence[str]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The ``(args, kwargs)`` to run ``wf`` with: positional ``words``, ``--input`` and ``--arg``.

    Checked against the workflow's own parameters (``ctx`` is not one) and, when
    they are annotated, converted to their types (`Workflow.validate_input`).
    ``--arg`` wins over the same name in ``--input``.
    """
    keyword = _input_object(input_text) if input_text is not None else {}
    raw: dict[str, str] = {}  # --arg values as typed, for a parameter that wants a string
    for pair in pairs:
        name, equals, text = pair.partition("=")
        name = name.strip()
        if not equals or not name:
            raise CLIError(f"--arg expects NAME=VALUE, got {pair!r} (e.g. --arg qty=3)")
        keyword[name], raw[name] = _json_or_text(text), text
    params = list(inspect.signature(wf.executor).parameters.values())[1:]  # after ctx
    values = _bind(wf, params, list(words), keyword)
    values = _convert(wf, params, values, raw)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, param in enumerate(params):
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(words[len(args) :])
        elif param.name not in values or param.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        elif (
            param.kind in _POSITIONAL
            and len(args) == i
            and (i < len(words) or param.kind is inspect.Parameter.POSITIONAL_ONLY)
        ):
            args.append(values[param.name])
        else:
            kwargs[param.name] = values[param.name]
    named = {p.name for p in params if p.kind not in _VARIADIC}
    kwargs.update((k, v) for k, v in values.items() if k not in named)  # into **kwargs
    return tuple(args), kwargs


def _input_object(text: str) -> dict[str, Any]:
    source = "--input"
    if text.startswith("@"):
        source = f"--input {text}"
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise CLIError(f"{source}: cannot read {text[1:]}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(
            f"{source} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            """give an object of arguments, e.g. --input '{"qty": 3}', or --input @args.json"""
        ) from None
    except RecursionError:
        raise CLIError(f"{source}: the JSON is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise CLIError(
            f"{source} must be a JSON object of argument names, got {_json_kind(data)} "
            """(e.g. --input '{"qty": 3}')"""
        )
    return data


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else f"a {type(value).__name__}"


def _json_or_text(text: str) -> Any:
    """``text`` parsed as JSON when it is JSON (``3``, ``true``, ``[1, 2]``), else the text."""

    def refuse(constant: str) -> Any:
        raise ValueError(constant)  # NaN and Infinity are not JSON; keep them as text

    try:
        return json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return text


def _describe(params: list[inspect.Parameter]) -> str:
    shown = [
        ("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "")
        + p.name
        + ("" if p.default is p.empty else f"={p.default!r}")
        for p in params
    ]
    return ", ".join(shown) if shown else "none"


def _bind(
    wf: Workflow[Any, Any],
    params: list[inspect.Parameter],
    words: list[str],
    keyword: dict[str, Any],
) -> dict[str, Any]:
    """Every argument by parameter name; `CLIError` for one too many, unknown or missing."""
    label = f"workflow {wf.name!r}"
    takes = f"its parameters: {_describe(params)}"
    positional = [p for p in params if p.kind in _POSITIONAL]
    if len(words) > len(positional) and not any(p.kind is p.VAR_POSITIONAL for p in params):
        count = f"{len(positional)} argument{'s' if len(positional) != 1 else ''}"
        if positional:
            count += f" ({', '.join(p.name for p in positional)})"
        keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        hint = f"; give {keyword_only[0]} as --arg {keyword_only[0]}=VALUE" if keyword_only else ""
        raise CLIError(f"{label} takes {count}, but {len(words)} were given{hint}")
    values: dict[str, Any] = {p.name: w for p, w in zip(positional, words, strict=False)}
    by_name = {p.name: p for p in params if p.kind not in _VARIADIC}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    for name, value in keyword.items():
        if name in values:
            raise CLIError(
                f"{label}: argument {name!r} is given twice, positionally and by --arg/--input"
            )
        if name not in by_name and not takes_any:
            raise CLIError(
                f"{label} has no parameter {name!r}; {takes} (check the --arg or --input names)"
            )
        values[name] = value
    missing = [
        p.name
        for p in params
        if p.kind not in _VARIADIC and p.default is p.empty and p.name not in values
    ]
    if missing:
        listed = ", ".join(repr(m) for m in missing)
        raise CLIError(
            f"{label} is missing argument{'s' if len(missing) > 1 else ''} {listed}; {takes} "
            f"(give them in order after the workflow, or as --arg {missing[0]}=VALUE)"
        )
    return values


def _convert(
    wf: Workflow[Any, Any],
    params: list[inspect.Parameter],
    values: dict[str, Any],
    raw: dict[str, str],
) -> dict[str, Any]:
    """``values`` converted to the parameters' annotations, where pydantic can check them."""
    if any(p.kind in _VARIADIC for p in params):
        return values  # *args and **kwargs have no fields to check
    try:
        input_model(wf.executor)
    except Exception:  # an annotation pydantic cannot check (an Agent...): pass them as they are
        return values
    try:
        checked = wf.validate_input(values)
    except ConfigurationError:
        # `--arg name=42` for a `name: str`: the text as typed is what was meant.
        as_typed = values | {k: v for k, v in raw.items() if k in values}
        if as_typed == values:
            raise
        # Still wrong: report against the text as typed, so a `str` parameter that took
        # it is not blamed alongside the argument that is really wrong.
        checked = wf.validate_input(as_typed)
    return {name: checked[name] for name in values}


# -- tracebacks ---------------------------------------------------------------------


def _frames(node: EventNode) -> list[tuple[Any, Any, Any]]:
    error = node.error if isinstance(node.error, dict) else {}
    frames = error.get("traceback")
    if not isinstance(frames, list):
        return []
    return [
        (f.get("file"), f.get("line"), f.get("function")) for f in frames if isinstance(f, dict)
    ]


def _explains(below: EventNode, above: EventNode) -> bool:
    """Whether ``below``'s failure is ``above``'s: the same exception passing up, or
    an error that names it (the `WorkflowError` of a nested run that failed)."""
    low, high = below.error or {}, above.error or {}
    inner = _frames(below)
    if not inner:
        return False
    outer = _frames(above)
    if low.get("type") == high.get("type") and outer[len(outer) - len(inner) :] == inner:
        return True  # frames only grow as an exception passes up: below's are above's tail
    message = low.get("message")
    return bool(message) and f"{low.get('type')}: {message}" in str(high.get("message", ""))


def failure_origins(tree: EventTree) -> list[EventNode]:
    """The failed nodes where a failure started, in walk order.

    A failed node is left out when a failed node below it explains it (the same
    exception passing up; a nested run's `WorkflowError` naming it), and, when it
    has no traceback, when any node below it failed.
    """
    failed = [n for n in tree.walk() if n.status is NodeStatus.FAILED and n.error]
    explained: set[str] = set()
    below_failed: set[str] = set()
    for node in failed:
        for ancestor in tree.get_ancestors(node.id):
            below_failed.add(ancestor.id)
            if ancestor.status is NodeStatus.FAILED and _explains(node, ancestor):
                explained.add(ancestor.id)
    return [n for n in failed if n.id not in explained and (_frames(n) or n.id not in below_failed)]


def traceback_lines(tree: EventTree) -> Iterator[str]:
    """The lines ``--traceback`` prints for ``tree``: each origin's path, then its traceback."""
    origins = failure_origins(tree)
    if not origins:
        yield "no node failed"
        return
    for i, node in enumerate(origins):
        if i:
            yield ""
        yield f"✗ {node.type.value} {printable(tree.path(node.id))}"
        text = format_traceback(node.error or {})
        if text is None:
            error = node.error or {}
            reason = scrub(f"{error.get('type', 'error')}: {error.get('message', '')}")
            text = f"{reason}\n(no traceback recorded)"
        yield from (printable(line) for line in text.splitlines())
