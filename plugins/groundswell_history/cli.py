"""``groundswell history serve``, ``groundswell history token AGENT_ID``, ``groundswell serve``
and ``groundswell ui``."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from groundswell import ConfigurationError

from . import load_api, load_serve
from .store import HistoryStore, default_url, groundswell_home, safe_url

__all__ = ["configure", "configure_serve", "configure_ui"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``history`` subcommands to ``parser``."""
    sub = parser.add_subparsers(dest="history_command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve", help="serve the history API (sessions, introspection, retries, failures, usage)"
    )
    serve.add_argument(
        "--url",
        help="SQLAlchemy URL of the history store (default: GROUNDSWELL_HISTORY_URL, "
        "else ~/.groundswell/history.db)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8765, help="port to listen on (8765)")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="server log level (info)",
    )
    serve.set_defaults(func=_serve)
    token = sub.add_parser(
        "token", help="print the bearer token of one agent (or, with --operator, an operator's)"
    )
    token.add_argument("agent_id", metavar="AGENT_ID", nargs="?", help="the agent's name")
    token.add_argument(
        "--operator",
        metavar="NAME",
        nargs="?",
        const="operator",
        help="issue an operator token instead, which opens every agent's sessions "
        "(NAME shows in the query log; default 'operator')",
    )
    token.set_defaults(func=_token)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {port}")
    return port


def _existing_store(url: str) -> HistoryStore:
    """The store at ``url``; a SQLite file must exist already (serving never creates one)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # not a URL at all: HistoryStore names the problem
        return HistoryStore(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:"):
        path = Path(database)
        if not database.startswith("file:") and not path.is_file():
            raise ConfigurationError(
                f"no history store at {safe_url(url)!r}: {path} does not exist (check --url; "
                "agents with Agent(history=True) create the store when they first record)"
            )
    return HistoryStore(url)


def _token(args: argparse.Namespace) -> int:
    from .auth import issue_operator_token, issue_token

    if args.operator is not None:
        if args.agent_id is not None:
            raise ConfigurationError(
                "give AGENT_ID for an agent's token or --operator for an operator's, not both"
            )
        if not args.operator.strip():
            raise ConfigurationError("--operator NAME must not be empty")
        print(issue_operator_token(args.operator))
        return 0
    if args.agent_id is None:
        raise ConfigurationError(
            "say whose token: groundswell history token AGENT_ID "
            "(or groundswell history token --operator)"
        )
    if not args.agent_id.strip():
        raise ConfigurationError("AGENT_ID must not be empty")
    print(issue_token(args.agent_id))
    return 0


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError:
        raise ConfigurationError(
            'serving needs uvicorn: pip install "groundswell[history]"'
        ) from None
    return uvicorn


def _check_port(host: str, port: int) -> None:
    """Fail with one clear line when the address is taken, before loading anything."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise ConfigurationError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} "
            "(is another server using the port? choose one with --port)"
        ) from None


def _log_to_stderr(level: str) -> None:
    # The query log goes where uvicorn's own log goes: stderr, at the chosen level.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    history_logger = logging.getLogger("groundswell.history")
    history_logger.addHandler(handler)
    history_logger.setLevel(level.upper())


def _serve(args: argparse.Namespace) -> int:
    api = load_api()
    uvicorn = _uvicorn()
    _check_port(args.host, args.port)
    # Open the store (which reaches its database) before serving anything, so
    # an unusable URL is one clear line instead of a server with nothing behind it.
    app = api.create_app(_existing_store(args.url or default_url()))
    _log_to_stderr(args.log_level)
    print(
        f"history API on http://{args.host}:{args.port} (store {safe_url(app.state.store.url)}); "
        "OpenAPI at /openapi.json",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def configure_serve(parser: argparse.ArgumentParser) -> None:
    """Add ``groundswell serve``'s arguments to ``parser``."""
    parser.description = (
        "Serve the waits API (/api/waits) and the history API on one app. Waits live in the "
        "process that runs the workflows: to answer theirs, serve from that process "
        "(groundswell_history.serving()); this command serves the waits of its own process."
    )
    parser.add_argument(
        "--url",
        help="SQLAlchemy URL of the history store (default: GROUNDSWELL_HISTORY_URL, else "
        "~/.groundswell/history.db when it exists; without a store, no history API)",
    )
    _server_options(parser, log_level="info")
    parser.set_defaults(func=_serve_all)


def _serve_all(args: argparse.Namespace) -> int:
    serve = load_serve()
    _uvicorn()  # missing: the extra to install, said before anything else
    _check_port(args.host, args.port)
    store = _store_if_any(args.url)
    try:
        app = serve.serve_app(store)
        _log_to_stderr(args.log_level)
        where = f"http://{args.host}:{args.port}"
        history = (
            f"history API (store {safe_url(store.url)})"
            if store is not None
            else "no history API (no store yet: give --url, or record with Agent(history=True))"
        )
        print(
            f"groundswell serve on {where}: waits API (/api/waits), dev UI (/ui), {history}; "
            "OpenAPI at /openapi.json",
            file=sys.stderr,
            flush=True,
        )
        _run_server(serve, app, args)
    finally:
        if store is not None:
            store.close()
    return 0


def configure_ui(parser: argparse.ArgumentParser) -> None:
    """Add ``groundswell ui``'s arguments to ``parser``."""
    parser.description = (
        "Serve the dev UI (runs from the trace folder and from this process, each run's tree, "
        "timeline and node details, live runs, waits to answer, a form to start workflows) on "
        "the app `groundswell serve` serves, and print its URL (with an operator token)."
    )
    parser.add_argument(
        "--trace-dir",
        metavar="DIR",
        help="the folder of JSONL traces to list (default: GROUNDSWELL_TRACE_DIR)",
    )
    parser.add_argument(
        "--workflow",
        metavar="MODULE:NAME",
        action="append",
        default=[],
        help="a workflow the UI's form may start (module:name or file.py:name); repeat for more",
    )
    parser.add_argument(
        "--url",
        help="SQLAlchemy URL of a history store to serve its API too (default: "
        "GROUNDSWELL_HISTORY_URL, else ~/.groundswell/history.db when it exists)",
    )
    _server_options(parser, log_level="warning")
    parser.set_defaults(func=_ui)


def _ui(args: argparse.Namespace) -> int:
    serve = load_serve()
    _uvicorn()  # missing: the extra to install, said before anything else
    from .auth import issue_operator_token
    from .ui_launch import load_workflow

    trace_dir = args.trace_dir or os.environ.get("GROUNDSWELL_TRACE_DIR")
    if args.trace_dir and not Path(args.trace_dir).expanduser().is_dir():
        raise ConfigurationError(
            f"--trace-dir {args.trace_dir}: no such folder (runs write there when "
            "GROUNDSWELL_TRACE_DIR names it)"
        )
    workflows = [load_workflow(target) for target in args.workflow]
    _check_port(args.host, args.port)
    store = _store_if_any(args.url)
    try:
        app = serve.serve_app(store, trace_dir=trace_dir, workflows=workflows)
        _log_to_stderr(args.log_level)
        host = f"[{args.host}]" if ":" in args.host else args.host
        # The token goes after '#': browsers never send that part, so no log shows it.
        link = f"http://{host}:{args.port}/ui/#token={issue_operator_token('ui')}"
        folder = f"traces from {trace_dir}" if trace_dir else "no trace folder (--trace-dir)"
        print(
            f"groundswell ui: {folder}; {len(workflows)} workflow(s) to run; open\n  {link}",
            file=sys.stderr,
            flush=True,
        )
        _run_server(serve, app, args)
    finally:
        if store is not None:
            store.close()
    return 0


def _server_options(parser: argparse.ArgumentParser, *, log_level: str) -> None:
    """``--host``, ``--port`` and ``--log-level``, as ``serve`` and ``ui`` share them."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (127.0.0.1: this machine only; others need TLS in front)",
    )
    parser.add_argument("--port", type=_port, default=8765, help="port to listen on (8765)")
    parser.add_argument(
        "--log-level",
        default=log_level,
        choices=["critical", "error", "warning", "info", "debug"],
        help=f"server log level ({log_level})",
    )


def _store_if_any(url: str | None) -> HistoryStore | None:
    """The store ``--url`` (else GROUNDSWELL_HISTORY_URL) names, else the default one when
    it exists; ``None`` when there is none (no history API then)."""
    url = url or os.environ.get("GROUNDSWELL_HISTORY_URL")
    if url:
        return _existing_store(url)
    if (groundswell_home() / "history.db").is_file():
        return _existing_store(default_url())
    return None


def _run_server(serve: Any, app: Any, args: argparse.Namespace) -> None:
    """Serve ``app`` until stopped, warning first when the address is not this machine's."""
    if not serve.is_loopback(args.host):
        print(
            f"warning: listening on {args.host}, reachable from other machines: bearer "
            "tokens cross the network in clear text unless TLS is in front",
            file=sys.stderr,
            flush=True,
        )
    _uvicorn().run(app, host=args.host, port=args.port, log_level=args.log_level)
