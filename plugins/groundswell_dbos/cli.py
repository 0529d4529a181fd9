"""``groundswell worker``: run queued durable workflows until stopped."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

__all__ = ["add_arguments"]


class _Stop(Exception):
    """A one-line error for the user."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's options (called by the ``register_cli_commands`` hook)."""
    parser.description = (
        "Take workflows from DBOS queues and run them, until Ctrl-C or SIGTERM. Start "
        "as many as you like, on any machines sharing the system database; when one "
        "dies, another takes its unfinished runs over."
    )
    parser.add_argument(
        "--queue",
        action="append",
        required=True,
        metavar="NAME",
        help="a queue to take work from (repeat for several)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="at most N runs from each queue at once on each worker (default: no limit)",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first, to check the workflows load (repeatable)",
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help="the DBOS system database (default: DBOS_SYSTEM_DATABASE_URL, else "
        "SQLite in ~/.groundswell); wins over configure() in the imported code",
    )
    parser.add_argument(
        "--executor-id",
        metavar="ID",
        help="this worker's id (default: host-pid-random); refused while a live process has it",
    )
    parser.add_argument(
        "--takeover-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="look for dead workers' runs every S seconds (default 5)",
    )
    parser.set_defaults(func=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    """Run the worker; returns the exit code."""
    try:
        return _run(args)
    except _Stop as exc:
        print(f"groundswell worker: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from groundswell import ConfigurationError

    try:
        import dbos  # noqa: F401
    except ImportError as exc:
        raise _Stop('needs DBOS: pip install "groundswell[durable]"') from exc
    if args.concurrency is not None and args.concurrency < 1:
        raise _Stop(f"--concurrency must be at least 1, got {args.concurrency}")
    if not args.takeover_interval > 0:
        raise _Stop(f"--takeover-interval must be seconds > 0, got {args.takeover_interval}")
    queues = [q.strip() for q in args.queue]
    if not all(queues):
        raise _Stop("--queue needs a name")
    sys.path.insert(0, str(Path.cwd()))  # workflows are imported as the parent named them
    from . import _runtime

    url = args.url or os.environ.get("DBOS_SYSTEM_DATABASE_URL")
    if url:
        # The database the worker was started on wins over one the imported code configures.
        _runtime.pin(system_database_url=url)
    for module in args.imports:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise _Stop(f"cannot import {module!r}: {type(exc).__name__}: {exc}") from exc

    from dbos import DBOS

    from ._engine import WORKFLOW_NAME
    from ._waiter import POLL_S

    try:
        _runtime.launch(listen=queues, executor=args.executor_id or _runtime.new_worker_id())
        for queue in queues:
            DBOS.register_queue(
                queue,
                worker_concurrency=args.concurrency,
                polling_interval_sec=POLL_S,
                on_conflict="always_update",
            )
    except ConfigurationError as exc:
        raise _Stop(str(exc)) from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    limit = f"{args.concurrency} at a time" if args.concurrency else "no limit"
    url = _runtime._redact_url(_runtime.settings()["system_database_url"])
    print(
        f"worker {_runtime.executor_id()} on {url}: queue(s) {', '.join(queues)} ({limit}); "
        "Ctrl-C to stop",
        flush=True,
    )
    takeover = _runtime.Takeover(WORKFLOW_NAME)
    while not stop.wait(args.takeover_interval):
        try:
            taken = takeover.check()
        except Exception as exc:  # the database blinked: try again next round
            print(f"worker: takeover check failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        for executor, count in taken.items():
            print(f"worker: executor {executor} is gone; {count} run(s) back on their queues")
    print("worker: stopping (runs in progress resume on another worker)", flush=True)
    _runtime.shutdown(timeout=5.0)
    return 0
