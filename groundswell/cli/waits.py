"""``groundswell pending``, ``approve``, ``reject`` and ``answer``: people's side of the waits.

They list and decide the open waits of the process that serves them, through
`groundswell.waits.client` (over HTTP by default). The table is drawn by the
caller (``cli.py``, where ``rich`` is imported).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..scrubbing.scrubber import scrub
from ..tree.labels import printable
from ..waits.client import DEFAULT_URL, TOKEN_ENV, URL_ENV, WaitsClient, connect
from ..waits.core import Answered, Wait
from .run import CLIError

__all__ = ["COMMANDS", "add_commands"]

COMMANDS = ("pending", "approve", "reject", "answer")
#: Draws a table: ``table(columns, rows)``.
Table = Callable[[list[str], list[list[str]]], None]
COLUMNS = ["ID", "KIND", "AGENT", "WAITING FOR", "OPENED", "DEADLINE"]


def add_commands(sub: Any, table: Table) -> None:
    """Add the four commands to ``sub`` (the ``groundswell`` subparsers)."""
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument(
        "--url",
        help=f"where the waits are served (default: {URL_ENV}, else {DEFAULT_URL})",
    )
    server.add_argument(
        "--token",
        help=f"bearer token (default: {TOKEN_ENV}; `groundswell history token` issues them)",
    )
    who = argparse.ArgumentParser(add_help=False)
    who.add_argument(
        "--by",
        metavar="NAME",
        help="who decides, recorded on the wait (over HTTP: on whose behalf the token decides)",
    )

    p = sub.add_parser(
        "pending",
        parents=[server],
        help="list the open waits (questions, approvals) of a running process",
        description="List the open waits the token may see, oldest first.",
    )
    p.add_argument("--kind", help="only waits of this kind (approval, question, ...)")
    p.add_argument("--agent", help="only this agent's waits")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.set_defaults(func=lambda args: _pending(args, table))

    p = sub.add_parser(
        "approve", parents=[server, who], help="approve an approval wait: groundswell approve ID"
    )
    p.add_argument("wait_id", metavar="ID", help="the wait's id (groundswell pending lists them)")
    p.add_argument(
        "--input",
        metavar="JSON",
        help="""the tool input to use instead, a JSON object ('{"path": "b.txt"}') or @FILE.json""",
    )
    p.set_defaults(func=_approve)

    p = sub.add_parser(
        "reject",
        parents=[server, who],
        help="reject an approval wait: groundswell reject ID --reason TEXT",
    )
    p.add_argument("wait_id", metavar="ID", help="the wait's id (groundswell pending lists them)")
    p.add_argument("--reason", required=True, help="why (the agent is told)")
    p.set_defaults(func=_reject)

    p = sub.add_parser(
        "answer",
        parents=[server, who],
        help="answer a question wait: groundswell answer ID --json JSON (or --text TEXT)",
    )
    p.add_argument("wait_id", metavar="ID", help="the wait's id (groundswell pending lists them)")
    value = p.add_mutually_exclusive_group(required=True)
    value.add_argument(
        "--json",
        metavar="JSON",
        dest="value_json",
        help="""the answer as JSON ('"yes"', '3', '{"version": "2.1"}') or @FILE.json""",
    )
    value.add_argument("--text", help="the answer as text, as typed (for a question asking text)")
    p.set_defaults(func=_answer)


def _client(args: argparse.Namespace) -> WaitsClient:
    return connect(args.url, token=args.token)


def _pending(args: argparse.Namespace, table: Table) -> int:
    client = _client(args)
    try:
        waits = client.pending(kind=args.kind, agent=args.agent)
    finally:
        client.close()
    if args.json:
        print(json.dumps([w.to_dict() for w in waits], indent=2, ensure_ascii=False))
        return 0
    if not waits:
        print(f"no open waits at {scrub(client.url)}")
        return 0
    now = time.time()
    table(COLUMNS, [_row(wait, now) for wait in waits])
    return 0


def _row(wait: Wait, now: float) -> list[str]:
    deadline = "-" if wait.deadline is None else f"in {_span(wait.deadline - now)}"
    cells = [
        wait.id,
        wait.kind,
        wait.agent or "-",
        _waiting_for(wait),
        f"{_span(now - wait.opened_at)} ago",
        deadline,
    ]
    return [printable(cell) for cell in cells]


def _waiting_for(wait: Wait) -> str:
    request = wait.request
    if isinstance(request.get("question"), str):
        return _short(request["question"], 80)
    if isinstance(request.get("tool"), str):
        given = json.dumps(request.get("input"), ensure_ascii=False, separators=(",", ":"))
        return _short(f"{request['tool']} {given}", 80)
    return _short(json.dumps(request, ensure_ascii=False, separators=(",", ":")), 80)


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _span(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _json_value(text: str, flag: str, example: str) -> Any:
    source = flag
    if text.startswith("@"):
        source = f"{flag} {text}"
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise CLIError(f"{source}: cannot read {text[1:]}: {exc.strerror or exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(
            f"{source} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"e.g. {flag} {example}"
        ) from None
    except RecursionError:
        raise CLIError(f"{source}: the JSON is nested too deeply to read") from None


def _decided(answered: Answered) -> int:
    decision, wait = answered.decision, answered.wait
    past = {"approve": "approved", "reject": "rejected"}.get(decision.kind, "answered")
    about = f" ({_waiting_for(wait)})" if wait.request else ""
    print(printable(f"{past} wait {wait.id}{about}, by {decision.by or 'someone'}"))
    return 0


def _approve(args: argparse.Namespace) -> int:
    given = None
    if args.input is not None:
        given = _json_value(args.input, "--input", """'{"path": "b.txt"}'""")
        if not isinstance(given, dict):
            raise CLIError(
                f"--input must be a JSON object of the tool's arguments, got "
                f'{type(given).__name__} (e.g. --input \'{{"path": "b.txt"}}\')'
            )
    client = _client(args)
    try:
        return _decided(client.approve(args.wait_id, input=given, by=args.by))
    finally:
        client.close()


def _reject(args: argparse.Namespace) -> int:
    if not args.reason.strip():
        raise CLIError("--reason must say why, in words (the agent is told)")
    client = _client(args)
    try:
        return _decided(client.reject(args.wait_id, args.reason, by=args.by))
    finally:
        client.close()


def _answer(args: argparse.Namespace) -> int:
    if args.text is not None:
        value: Any = args.text
    else:
        value = _json_value(args.value_json, "--json", """'"yes"' or '{"version": "2.1"}'""")
    client = _client(args)
    try:
        return _decided(client.answer(args.wait_id, value, by=args.by))
    finally:
        client.close()
