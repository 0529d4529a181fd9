"""Reports and comparisons as rich tables (imported only when one is printed)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from .forking import Fork
    from .report import CaseChange, Comparison, Report

__all__ = [
    "print_comparison",
    "print_fork",
    "print_report",
    "render_comparison",
    "render_fork",
    "render_report",
]

_STATUS_STYLE = {
    "improved": "green",
    "regressed": "bold red",
    "unchanged": "dim",
    "new": "cyan",
    "removed": "yellow",
}


def _money(value: float | None) -> str:
    return "?" if value is None else f"${value:.6f}"


def _signed(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, "+" + fmt)


def report_table(report: Report) -> Table:
    repeat = report.repeat > 1
    # Names, outputs and reasons are the user's text: never read as rich markup.
    table = Table(
        title=f"eval {escape(report.name)} → {escape(report.target)}", title_justify="left"
    )
    table.add_column("case")
    table.add_column("result")
    if repeat:
        table.add_column("pass rate", justify="right")
    table.add_column("score", justify="right")
    table.add_column("cost", justify="right")
    table.add_column("time", justify="right")
    table.add_column("why not", overflow="fold")
    for case in report.cases:
        mark = "[green]✓ pass[/]" if case.passed else "[bold red]✗ fail[/]"
        row: list[Any] = [Text(case.name), mark]
        if repeat:
            row.append(f"{case.pass_rate:.0%}")
        why = "" if case.passed else case.explain().splitlines()[0]
        row += [f"{case.score:.2f}", _money(case.cost_usd), f"{case.duration_s:.2f}s", Text(why)]
        table.add_row(*row)
    passed = sum(c.passed for c in report.cases)
    table.caption = (
        f"{passed}/{len(report.cases)} passed · score {report.score:.2f} · "
        f"cost {_money(report.cost_usd)}"
    )
    table.caption_justify = "left"
    return table


def comparison_table(comparison: Comparison) -> Table:
    table = Table(
        title=f"eval {escape(comparison.report.name)} against baseline "
        f"{escape(comparison.baseline.name)}",
        title_justify="left",
    )
    for name, justify in (
        ("case", "left"),
        ("change", "left"),
        ("score", "right"),
        ("Δ score", "right"),
        ("Δ cost", "right"),
        ("Δ time", "right"),
        ("evaluators that moved", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for change in comparison.cases:
        table.add_row(
            Text(change.name),
            f"[{_STATUS_STYLE[change.status]}]{change.status}[/]",
            _score(change),
            _signed(change.score_delta, ".2f"),
            _signed(change.cost_delta, ".6f"),
            _signed(change.duration_delta, ".2f")
            + ("s" if change.duration_delta is not None else ""),
            Text(
                ", ".join(f"{k} {v:+.2f}" for k, v in change.score_deltas.items() if abs(v) > 1e-9)
            ),
        )
    counts = {s: 0 for s in _STATUS_STYLE}
    for change in comparison.cases:
        counts[change.status] += 1
    table.caption = (
        " · ".join(f"{n} {s}" for s, n in counts.items() if n)
        + f" · score {comparison.baseline.score:.2f} → {comparison.report.score:.2f}"
    )
    table.caption_justify = "left"
    return table


def _score(change: CaseChange) -> str:
    if change.score is None:
        return f"{change.baseline_score:.2f} →" if change.baseline_score is not None else ""
    if change.baseline_score is None:
        return f"{change.score:.2f}"
    return f"{change.baseline_score:.2f} → {change.score:.2f}"


def _render(table: Table, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False, color_system=None).print(table)
    return buffer.getvalue()


def render_report(report: Report, *, width: int = 100) -> str:
    return _render(report_table(report), width)


def render_comparison(comparison: Comparison, *, width: int = 100) -> str:
    return _render(comparison_table(comparison), width)


def print_report(report: Report, *, file: Any = None) -> None:
    Console(file=file, highlight=False).print(report_table(report))


def print_comparison(comparison: Comparison, *, file: Any = None) -> None:
    Console(file=file, highlight=False).print(comparison_table(comparison))


def render_fork(result: Fork, *, width: int = 120) -> str:
    """The original and forked trees side by side, then the changes, as plain text."""
    from rich.text import Text

    from .fork_diff import short

    changed = ", ".join(f"{k}={short(v, 40)}" for k, v in result.changes.items())
    table = Table(show_lines=False, expand=True)
    table.add_column(Text("original"), overflow="fold", ratio=1)
    table.add_column(Text(f"forked at {result.node_id[:8]} ({changed})"), overflow="fold", ratio=1)
    table.add_row(Text(result.original.render()), Text(result.forked.render()))
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, highlight=False, color_system=None)
    console.print(table)
    lines = [
        f"model calls: {result.replayed} replayed, {result.live} live",
        f"output: {short(result.output, 200)}"
        if result.error is None
        else f"failed: {type(result.error).__name__}: {result.error}",
    ]
    if result.changed:
        lines.append(f"{len(result.changed)} node(s) changed:")
        lines += [f"  {change}" for change in result.changed]
    else:
        lines.append("no node changed")
    return buffer.getvalue() + "\n".join(lines)


def print_fork(result: Fork, *, file: Any = None) -> None:
    console = Console(file=file, highlight=False)
    console.print(render_fork(result, width=console.width), markup=False, highlight=False)
