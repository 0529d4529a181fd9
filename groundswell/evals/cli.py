"""``groundswell eval``: run a dataset against a target, capture cases, fork a saved run.

- ``groundswell eval run CASES --target MODULE:NAME`` runs every case, prints the
  report (and the comparison with ``--baseline``), writes ``--report`` JSON.
- ``groundswell eval capture TRACE... --into FILE`` turns saved runs into cases.
- ``groundswell eval fork TRACE NODE --target MODULE:NAME`` reruns a saved run
  from one of its nodes with a change.

Errors in what was asked (a target that does not load, a missing file, a bad
option) raise `CLIError` or `ConfigurationError`, which ``groundswell`` prints
as one line and exits 2 for.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import math
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agent import Agent
from ..cli.run import CLIError, load_target_module
from ..tree.labels import printable
from ..workflow.workflow import Workflow

if TYPE_CHECKING:
    from rich.console import Console

    from .report import Comparison, Report

# The evals themselves (and rich) are imported when an eval command runs: every
# `groundswell` command builds this parser, and must not pay for them.

__all__ = ["COMMAND", "add_command", "load_target"]

COMMAND = "eval"

RUN_EXIT_CODES = """\
exit status:
  0  no gate below failed
  1  a gate failed (each one is said on stderr):
     - with neither --baseline nor --min-score: a case failed (as pytest fails on a failed test)
     - --min-score X: the overall score is below X (failed cases alone do not count)
     - --baseline FILE --fail-on-regression: a case regressed from the baseline,
       or a case the baseline does not have failed
       (with --baseline, a case failing as it did in the baseline does not count)
  2  bad usage: a target that does not load, a missing or invalid file, a bad option
"""


def add_command(sub: Any) -> None:
    """Add ``eval`` and its subcommands to ``sub`` (the ``groundswell`` subparsers)."""
    parser = sub.add_parser(
        COMMAND,
        help="run eval datasets against a target, capture cases from traces, fork a run",
        description="Evaluate agents and workflows on datasets of cases (docs/evals.md).",
    )
    commands = parser.add_subparsers(dest="eval_command", required=True, metavar="SUBCOMMAND")

    p = commands.add_parser(
        "run",
        help="run a dataset against a target: eval run CASES --target MODULE:NAME",
        description="Run every case of CASES (a .yaml or .json dataset) against the target, "
        "score it, print the report and, with --baseline, how each case changed.",
        epilog=RUN_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("cases", metavar="CASES", help="the dataset file (.yaml, .yml or .json)")
    _target_option(p)
    p.add_argument(
        "--prompt",
        metavar="TEMPLATE",
        help="for an agent target: the prompt, its {placeholders} filled from each case's "
        "inputs ('Answer: {question}')",
    )
    p.add_argument("--baseline", metavar="FILE", help="a report to compare with (--report wrote)")
    p.add_argument("--report", metavar="FILE", help="write the report as JSON to FILE")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="runs per case (default 1)")
    p.add_argument(
        "--concurrency", type=int, default=4, metavar="N", help="cases at once (default 4)"
    )
    p.add_argument(
        "--replay",
        action="store_true",
        help="answer the model requests from each case's recorded trace (offline)",
    )
    p.add_argument(
        "--traces",
        metavar="DIR",
        help="save the runs' trees in DIR (default .groundswell/evals/DATASET/TIME-ID)",
    )
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when a case regressed from --baseline (or a new case failed)",
    )
    p.add_argument(
        "--min-score",
        type=float,
        metavar="X",
        help="exit 1 when the overall score (0 to 1) is below X",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        metavar="X",
        help="with --baseline: how far a case's score may fall before it counts as regressed",
    )
    p.set_defaults(func=_cmd_run)

    p = commands.add_parser(
        "capture",
        help="turn saved traces into replayable cases: eval capture TRACE... --into FILE",
        description="Write one case per saved run, with its inputs, its output as the "
        "expected output and its recorded model replies, so `eval run --replay` runs offline.",
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="saved runs (.jsonl event logs)")
    p.add_argument("--into", required=True, metavar="FILE", help="the dataset to add cases to")
    _target_option(p, required=False)
    p.set_defaults(func=_cmd_capture)

    p = commands.add_parser(
        "fork",
        help="rerun a saved run from one of its nodes with a change",
        description="Rerun TRACE from NODE with a changed system prompt, model or prompt (at a "
        "prompt node) or tool result (at a tool call), and print both trees and what changed. "
        "Exit 1 when the forked run failed.",
    )
    p.add_argument("trace", metavar="TRACE", help="a saved run (.jsonl event log)")
    p.add_argument(
        "node", metavar="NODE", help="the node to fork at: its id, or a unique prefix of it"
    )
    _target_option(p)
    p.add_argument("--system", metavar="TEXT", help="the agent's system prompt instead")
    p.add_argument("--model", metavar="M", help="the model instead")
    p.add_argument("--prompt", metavar="TEXT", help="the prompt instead")
    p.add_argument("--tool-result", metavar="TEXT", help="the tool result instead")
    p.set_defaults(func=_cmd_fork)


def _target_option(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument(
        "--target",
        required=required,
        metavar="MODULE:NAME",
        help="a workflow, a function, or an agent (with --prompt): myapp.flows:review "
        "(imported from the current directory) or flows.py:review",
    )


def load_target(target: str, prompt: str | None = None) -> Any:
    """What ``--target`` (and ``--prompt``) name: a workflow, a function or an `AgentTarget`."""
    from .targets import AgentTarget

    module, attr = load_target_module(target, "name")
    where = target.rpartition(":")[0]
    if not hasattr(module, attr):
        raise CLIError(f"{where!r} has no attribute {attr!r}; {_targets_in(module)}")
    obj = getattr(module, attr)
    if isinstance(obj, Agent):
        if prompt is None:
            raise CLIError(
                f"{target} is an agent: give the prompt to send it, its {{placeholders}} "
                "filled from each case's inputs, e.g. --prompt 'Answer: {question}'"
            )
        return AgentTarget(obj, prompt)
    if prompt is not None:
        what = "has a prompt of its own" if isinstance(obj, AgentTarget) else "is not an agent"
        raise CLIError(f"--prompt is for an agent target, and {target} {what}")
    if not (isinstance(obj, Workflow | AgentTarget) or callable(obj)):
        kind = type(obj).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        raise CLIError(
            f"{target} is {article} {kind}, not a workflow, agent or function; "
            f"{_targets_in(module)}"
        )
    return obj


def _targets_in(module: Any) -> str:
    from .targets import AgentTarget

    names = sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (
            isinstance(value, Workflow | Agent | AgentTarget)
            or (inspect.isfunction(value) and value.__module__ == module.__name__)
        )
    )
    if not names:
        return "it defines no workflow, agent or function to evaluate"
    return f"what it defines: {', '.join(names)}"


def _console() -> Console:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:  # a pipe or a file gets whole rows, for grep
        console.width = 200
    return console


def _check_options(args: argparse.Namespace) -> None:
    if args.fail_on_regression and args.baseline is None:
        raise CLIError("--fail-on-regression compares with a baseline: add --baseline FILE")
    if args.tolerance != 0.0 and args.baseline is None:
        raise CLIError("--tolerance applies to the comparison: add --baseline FILE")
    if args.min_score is not None and not 0.0 <= args.min_score <= 1.0:
        raise CLIError(f"--min-score is a score from 0 to 1, got {args.min_score}")
    if not math.isfinite(args.tolerance) or args.tolerance < 0:
        raise CLIError(f"--tolerance is a score difference of 0 or more, got {args.tolerance}")


def _cmd_run(args: argparse.Namespace) -> int:
    from ._render import comparison_table, report_table
    from .report import Report, compare
    from .runner import run

    _check_options(args)
    # Everything a run needs is checked before the first case runs.
    baseline = Report.load(args.baseline) if args.baseline is not None else None
    target = load_target(args.target, args.prompt)
    report = asyncio.run(
        run(
            args.cases,
            target,
            repeat=args.repeat,
            concurrency=args.concurrency,
            replay=args.replay,
            trace_dir=args.traces,
        )
    )
    written = None
    if args.report is not None:  # saved first: the runs were paid for, whatever comes next
        try:
            written = report.save(args.report)
        except OSError as exc:
            raise CLIError(
                f"cannot write the report to {args.report}: {exc.strerror or exc}"
            ) from exc
    console = _console()
    console.print(report_table(report))
    comparison = None
    if baseline is not None:
        comparison = compare(report, baseline, tolerance=args.tolerance)
        console.print()
        console.print(comparison_table(comparison))
    console.print(f"traces: {report.trace_dir}", markup=False)
    if written is not None:
        console.print(f"report: {written}", markup=False)
    return _verdict(report, comparison, args)


def _verdict(report: Report, comparison: Comparison | None, args: argparse.Namespace) -> int:
    """The exit code, each reason for a 1 said on stderr."""
    reasons = []
    if comparison is not None and args.fail_on_regression and comparison.regressed:
        names = ", ".join(c.name for c in comparison.regressed)
        count = len(comparison.regressed)
        reasons.append(f"{count} case{'s' if count != 1 else ''} regressed: {names}")
    if comparison is not None and args.fail_on_regression:
        # A case the baseline does not have cannot regress, but failing it is no better.
        fresh = [c.name for c in comparison.cases if c.status == "new" and not _passed(report, c)]
        if fresh:
            count = len(fresh)
            reasons.append(
                f"{count} new case{'s' if count != 1 else ''} failed: {', '.join(fresh)}"
            )
    if args.min_score is not None and report.score < args.min_score:
        reasons.append(f"the score {report.score:.2f} is below --min-score {args.min_score:g}")
    if comparison is None and args.min_score is None:
        failed = [c.name for c in report.cases if not c.passed]
        if failed:
            reasons.append(
                f"{len(failed)} of {len(report.cases)} cases failed: {', '.join(failed)}"
            )
    for reason in reasons:
        print(f"groundswell: {printable(reason)}", file=sys.stderr)
    return 1 if reasons else 0


def _passed(report: Report, change: Any) -> bool:
    return report.case(change.name).passed


def _cmd_capture(args: argparse.Namespace) -> int:
    from .capturing import capture
    from .dataset import Dataset

    target = load_target(args.target) if args.target is not None else None
    into = Path(args.into)
    before = len(Dataset.load(into)) if into.is_file() else 0
    dataset = capture(args.traces, into=into, target=target)
    count, new = len(dataset), len(dataset) - before
    print(
        f"wrote {count} case{'s' if count != 1 else ''} ({new} new) to {into}, "
        f"their traces in {into.parent / (into.stem + '.traces')}",
    )
    return 0


def _cmd_fork(args: argparse.Namespace) -> int:
    from .forking import fork

    target = load_target(args.target)
    result = asyncio.run(
        fork(
            args.trace,
            args.node,
            target=target,
            system=args.system,
            model=args.model,
            prompt=args.prompt,
            tool_result=args.tool_result,
        )
    )
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 160
    print(result.render(width=width))
    if result.error is not None:
        print(
            f"groundswell: the forked run failed: {printable(str(result.error))}", file=sys.stderr
        )
        return 1
    return 0
