"""A node's one-line label: the line ``render()`` and the renderer draw for it."""

from __future__ import annotations

from typing import Any

from ..scrubbing.scrubber import scrub
from .node import EventNode, NodeStatus, NodeType, is_number, metrics_of

#: How much of an error message a tree line shows; longer ones end in "…".
MESSAGE_WIDTH = 80

_MARKS = {
    NodeStatus.COMPLETED: "✓",
    NodeStatus.FAILED: "✗",
    NodeStatus.CANCELLED: "⊘",
    NodeStatus.REVISED: "↺",
    NodeStatus.RUNNING: "…",
    NodeStatus.PENDING: "·",
    NodeStatus.WAITING: "⧖",
}


_STATUS_STYLE = {
    NodeStatus.COMPLETED: "green",
    NodeStatus.FAILED: "bold red",
    NodeStatus.CANCELLED: "yellow",
    NodeStatus.REVISED: "magenta",
    NodeStatus.RUNNING: "cyan",
    NodeStatus.PENDING: "dim",
    NodeStatus.WAITING: "bold blue",
}


def label_parts(node: EventNode) -> list[tuple[str, str]]:
    """A node's one-line label as ``(text, style)`` pieces (style names are rich's).

    The pieces of its line in ``tree.render()``: status mark, type, name, then
    duration, status, attempt, tokens, cost and budget gauge when it has them. For
    code that draws a tree its own way (a web page, say) and should read like the CLI.
    """
    status = node.status
    parts = [
        (_MARKS[status], _STATUS_STYLE[status]),
        (node.type.value, "dim"),
        (scrub(node.name), "bold"),
    ]
    # Metrics may come from a file written by anything: draw only well-typed ones.
    metrics = metrics_of(node)
    duration = metrics.get("duration")
    if is_number(duration):
        parts.append((f"{duration * 1000:.1f}ms", "blue"))
    if status is not NodeStatus.COMPLETED:
        parts.append((status.value, _STATUS_STYLE[status]))
    attempt = metrics.get("attempt")
    if isinstance(attempt, int) and node.type in (NodeType.STEP, NodeType.PROMPT):
        parts.append((f"attempt {attempt}", "yellow" if attempt > 1 else "dim"))
    usage = metrics.get("usage")
    if isinstance(usage, dict) and usage:
        tokens = f"{usage.get('input_tokens', 0)}→{usage.get('output_tokens', 0)} tok"
        cached = usage.get("cache_read_input_tokens")
        if cached:
            tokens += f" ({cached} cached)"
        written = usage.get("cache_creation_input_tokens")
        if written:
            tokens += f" (+{written} to cache)"
        parts.append((tokens, "cyan"))
    share = metrics.get("prompt_cache_share")
    if is_number(share) and share and node.type is not NodeType.MODEL_CALL:
        parts.append((f"{share:.0%} from cache", "cyan"))
    if "cost_usd" in metrics:
        cost = metrics["cost_usd"]
        if is_number(cost):
            parts.append((usd(cost), "green"))
        elif cost is None:  # a model without a known price (groundswell.set_prices)
            parts.append(("$?", "dim"))
    budget = metrics.get("budget")
    if isinstance(budget, dict) and node.type is NodeType.PROMPT:
        parts.extend(budget_gauge(budget))
    before, after = metrics.get("tokens_before"), metrics.get("tokens_after")
    if isinstance(before, int):
        shrunk = f"{before}→{after} tok" if isinstance(after, int) else f"{before} tok"
        parts.append((shrunk, "cyan"))
    if "cache" in metrics:
        hit = metrics["cache"] == "hit"
        parts.append(("⚡ cache hit" if hit else "cache miss", "bold magenta" if hit else "dim"))
    if metrics.get("recovered"):
        parts.append(("↺ recovered", "bold green"))
    if node.error:
        error = node.error if isinstance(node.error, dict) else {"message": node.error}
        message = printable(scrub(str(error.get("message", ""))))
        if len(message) > MESSAGE_WIDTH:  # the whole message stays in the JSON
            message = message[: MESSAGE_WIDTH - 1] + "…"
        parts.append((f"{error.get('type', 'error')}: {message}", "red"))
    # Names, messages and metrics may come from anywhere (a file, a model): a label
    # stays one line of plain text, whatever control characters they hold.
    return [(printable(text), style) for text, style in parts]


_CELLS = 10
_GAUGE = {
    "ok": ("", "green"),
    "warning": (" ⚠ near the limit", "yellow"),
    "over": (" ⚠ over the limit", "bold red"),
}


def budget_gauge(stats: dict[str, Any]) -> list[tuple[str, str]]:
    """A prompt's ``metrics["budget"]`` as a label gauge: its peak input against the limit,
    ``budget ████████░░ 82% (8,200/10,000 tok) ⚠ near the limit``."""
    peak, limit = stats.get("peak_tokens"), stats.get("limit")
    if not (is_number(peak) and is_number(limit) and limit > 0):
        return []  # a budget with only max_usd, or a file written by something else
    threshold = stats.get("threshold")
    share = peak / limit
    warn = threshold if is_number(threshold) else 0.8
    state = "over" if share > 1 else "warning" if share >= warn else "ok"
    filled = min(_CELLS, round(share * _CELLS))
    note, style = _GAUGE[state]
    bar = "█" * filled + "░" * (_CELLS - filled)
    return [(f"budget {bar} {share:.0%} ({peak:,}/{limit:,} tok){note}", style)]


def usd(amount: float) -> str:
    """A cost as a label shows it: ``$0.0123``, with more digits below a cent."""
    if amount >= 100:
        return f"${amount:,.2f}"
    return f"${amount:.4f}" if amount >= 0.01 or amount == 0 else f"${amount:.6f}"


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with control and invisible characters written as escapes (``\\x1b``, ``\\n``).

    For one-line output: a name or message can then neither break the line,
    forge tree lines, nor send terminal escape sequences.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def label_separator(index: int) -> str:
    """What goes before piece ``index`` of a label: mark, type and name read as one phrase."""
    return " " if index < 3 else "  "


def label(node: EventNode) -> str:
    """A node's one-line label as plain text (a line of ``EventTree.render``)."""
    return "".join(
        (label_separator(i) if i else "") + text for i, (text, _) in enumerate(label_parts(node))
    )
