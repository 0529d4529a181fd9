"""The ``groundswell`` command: list plugins, run a workflow, render a saved tree.

Exit codes: 0 success; 1 the workflow run failed; 2 bad input (arguments,
modules, files); 3 a plugin error under ``GROUNDSWELL_STRICT_PLUGINS=1``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._serialize import jsonable
from .errors import GroundswellError, PluginError, WorkflowError
from .plugins import PluginManager
from .tree import EventTree, NodeStatus
from .workflow import Workflow, WorkflowResult

__all__ = ["main"]


class CLIError(Exception):
    """A one-line error for the user; printed without a traceback."""


def _cmd_plugins(args: argparse.Namespace) -> int:
    # Never strict here: showing what failed to load is this command's whole point.
    manager = PluginManager(strict=False)
    manager.load_entrypoints()
    manager.check()
    infos = manager.list_plugins()
    if args.json:
        print(json.dumps([vars(i) | {"ok": i.ok} for i in infos], indent=2))
        return 0
    for warning in manager.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not infos:
        print("no plugins loaded")
        return 0
    for info in infos:
        version = info.version or "-"
        mark = "ok" if info.ok else "ERROR"
        print(f"{info.name:<24} {version:<10} {mark:<6} {', '.join(info.hooks) or '(no hooks)'}")
        for error in info.errors:
            print(f"    error: {error}")
    return 0


def _load_trees(path: str) -> list[EventTree]:
    file = Path(path)
    if not file.is_file():
        raise CLIError(f"no such file: {path}")
    try:
        if file.suffix == ".json":
            return [EventTree.from_json(json.loads(file.read_text(encoding="utf-8")))]
        return EventTree.load_all(file)
    except (ValueError, KeyError, TypeError) as exc:
        raise CLIError(f"{path} is not a Groundswell trace: {exc}") from exc


def _cmd_tree(args: argparse.Namespace) -> int:
    trees = _load_trees(args.file)
    if args.json:
        data = [t.to_json() for t in trees]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        print("\n\n".join(t.render() for t in trees))
    return 0


def _resolve(target: str) -> Workflow[Any, Any]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise CLIError(f"expected module:workflow, got {target!r} (e.g. myapp.flows:review)")
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # SyntaxError, NameError... all mean "fix that module"
        raise CLIError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, attr):
        raise CLIError(f"module {module_name!r} has no attribute {attr!r}")
    obj = getattr(module, attr)
    if not isinstance(obj, Workflow):
        raise CLIError(
            f"{target} is a {type(obj).__name__}, not a Workflow (decorate it with @workflow)"
        )
    return obj


def _cmd_run(args: argparse.Namespace) -> int:
    wf = _resolve(args.target)
    result: WorkflowResult[Any] | None
    try:
        result = asyncio.run(wf.run(*args.args))
    except WorkflowError as exc:
        result = exc.result
        if result is None:
            raise
        if not args.json:
            print(f"error: {exc}", file=sys.stderr)
    if args.save:
        result.tree.save(args.save)
    if args.json:
        print(
            json.dumps(
                {
                    "status": result.status.value,
                    "output": jsonable(result.output),
                    "tree": result.tree.to_json(),
                },
                indent=2,
            )
        )
    else:
        print(result.tree.render())
        if result.status is NodeStatus.COMPLETED:
            print(f"\noutput: {result.output!r}")
    return 0 if result.status is NodeStatus.COMPLETED else 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``groundswell``."""
    parser = argparse.ArgumentParser(
        prog="groundswell", description="Orchestrate LLM agents; inspect runs and plugins."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("plugins", help="list installed plugins, their hooks and load errors")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_plugins)

    p = sub.add_parser("run", help="run a workflow: groundswell run module:workflow [ARGS...]")
    p.add_argument("target", help="module:workflow, e.g. myapp.flows:review")
    p.add_argument("args", nargs="*", help="positional arguments passed to the workflow (strings)")
    p.add_argument("--json", action="store_true", help='print {"status", "output", "tree"}')
    p.add_argument("--save", metavar="FILE", help="save the run's JSONL event log to FILE")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("tree", help="render a saved trace (.jsonl event log or .json tree)")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="print the tree as JSON")
    p.set_defaults(func=_cmd_tree)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``groundswell`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except PluginError as exc:
        # Strict mode (GROUNDSWELL_STRICT_PLUGINS=1) turned a plugin problem into an error.
        print(f"groundswell: plugin error: {exc}", file=sys.stderr)
        return 3
    except (CLIError, GroundswellError) as exc:
        print(f"groundswell: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
