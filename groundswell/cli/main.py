"""The ``groundswell`` command: list plugins, run a workflow, render a saved tree,
list and run the examples, list and decide the open waits of a running process
(``pending``, ``approve``, ``reject``, ``answer``), run evals (``eval``), and
whatever commands plugins add (``register_cli_commands``).

Exit codes: 0 success; 1 the workflow run failed (or, for ``eval run``, a gate:
see its ``--help``); 2 bad input (arguments,
modules, files); 3 a plugin error under ``GROUNDSWELL_STRICT_PLUGINS=1``;
130 interrupted by Ctrl-C.
``rich`` is imported here, never by the library itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..errors import GroundswellError, PluginError
from ..evals.cli import COMMAND as EVAL_COMMAND
from ..evals.cli import add_command as add_eval_command
from ..hookspecs import AgentMiddleware
from ..plugins.loading import strict_plugins
from ..plugins.manager import PluginManager, get_plugin_manager
from ..scrubbing.serialize import redact, scrub
from ..tree._render import rich_tree
from ..tree.labels import printable
from ..tree.tree import EventTree, NodeStatus
from .examples import Example, examples_dir, find_examples
from .interrupt import (
    INTERRUPTED,
    Outcome,
    RunThreads,
    Tap,
    TapPlugin,
    Watch,
    drive,
    dump_record,
    quit_now,
    wait_for_threads,
)
from .run import (
    FAKE_MODES,
    CLIError,
    fake_agents,
    resolve_workflow,
    traceback_lines,
    workflow_call,
)
from .waits import COMMANDS as WAIT_COMMANDS
from .waits import add_commands as add_wait_commands

__all__ = ["main"]


def _cmd_plugins(args: argparse.Namespace) -> int:
    # Never strict here: showing what failed to load is this command's whole point.
    manager = PluginManager(strict=False)
    manager.load_entrypoints()
    manager.check()
    infos = manager.list_plugins(builtin=args.all)
    if args.all:
        infos = sorted([*infos, *manager.skipped.values()], key=lambda i: i.name)
    provides = manager.provides() if args.all else {}
    middleware = manager.agent_middleware() if args.all else {}

    def plugin_middleware(plugin: str) -> list[AgentMiddleware]:
        # In the order they wrap a prompt: outermost first.
        names = provides.get(plugin, {}).get("register_agent_middleware", [])
        return sorted((middleware[n] for n in names), key=lambda m: (m.order, m.name))

    if args.json:
        records = []
        for info in infos:
            record = vars(info) | {"ok": info.ok}
            if args.all:
                record["provides"] = provides.get(info.name, {})
                record["agent_middleware"] = [
                    {"name": m.name, "order": m.order, "default": m.default}
                    for m in plugin_middleware(info.name)
                ]
            records.append(record)
        print(json.dumps(records, indent=2))
        return 0
    for warning in manager.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not infos:
        print("no plugins loaded" + ("" if args.all else " (--all shows disabled ones)"))
        return 0
    print(f"{'PLUGIN':<24} {'VERSION':<10} {'STATUS':<6} HOOKS")
    for info in infos:
        version = info.version or ("(kernel)" if info.source == "builtin" else "-")
        mark = "off" if info.disabled else "ok" if info.ok else "ERROR"
        print(f"{info.name:<24} {version:<10} {mark:<6} {', '.join(info.hooks) or '(no hooks)'}")
        if info.disabled:
            print(f"    disabled: {info.disabled}")
        for hook, names in sorted(provides.get(info.name, {}).items()):
            if hook == "register_agent_middleware":
                names = [
                    f"{m.name} ({m.order}{', default' if m.default else ''})"
                    for m in plugin_middleware(info.name)
                ]
            print(f"    {hook.removeprefix('register_').replace('_', ' ')}: {', '.join(names)}")
        for error in info.errors:
            print(f"    error: {error}")
    return 0


def _selected_examples(wanted: Sequence[str]) -> list[Example]:
    examples = find_examples()
    if not examples:
        raise CLIError("no examples found; set GROUNDSWELL_EXAMPLES_DIR to a folder holding them")
    if not wanted:
        return examples
    chosen = []
    for word in wanted:
        match = [
            e
            for e in examples
            if (int(word) == e.number if word.isdigit() else e.name.startswith(word))
        ]
        if len(match) != 1:
            names = ", ".join(e.name for e in examples)
            what = "matches none" if not match else "matches several"
            raise CLIError(f"example {word!r} {what} of: {names}")
        chosen.append(match[0])
    return chosen


EXAMPLE_ACTIONS = ("list", "run", "path")


def _cmd_examples(args: argparse.Namespace) -> int:
    if args.action not in EXAMPLE_ACTIONS:
        # `groundswell examples 3` lists example 3, as `examples list 3` does.
        args.names, args.action = [args.action, *args.names], "list"
    if args.action == "path":
        folder = examples_dir()
        if folder is None:
            raise CLIError(
                "no examples found; set GROUNDSWELL_EXAMPLES_DIR to a folder holding them"
            )
        print(folder)
        return 0
    examples = _selected_examples(args.names)
    if args.action != "run":
        for example in examples:
            print(f"{example.number:>2}  {example.name:<36} {example.title}")
        print("\nrun them with: groundswell examples run [NUMBER|NAME ...]")
        return 0
    online = bool(os.environ.get("ANTHROPIC_API_KEY"))
    print(
        "using the real Anthropic API (ANTHROPIC_API_KEY is set)"
        if online
        else "offline: a fake Anthropic API answers (set ANTHROPIC_API_KEY to use the real one)"
    )
    failed = []
    for example in examples:
        print(f"\n== {example.name}: {example.title}", flush=True)
        if example.run() != 0:
            failed.append(example.name)
    print(f"\n{len(examples) - len(failed)} of {len(examples)} examples ran cleanly", end="")
    print(f"; failed: {', '.join(failed)}" if failed else "")
    return 1 if failed else 0


def _load_trees(path: str) -> list[EventTree]:
    file = Path(path)
    if file.is_dir():
        raise CLIError(f"{path} is a directory; give a .jsonl log or a .json tree in it")
    if not file.is_file():
        raise CLIError(f"no such file: {path}")
    try:
        if file.suffix == ".json":
            text = file.read_text(encoding="utf-8")
            trees = _trees_from_json(json.loads(text)) if text.strip() else []
        else:
            trees = EventTree.load_all(file)
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except RecursionError:
        raise CLIError(
            f"{path} is not a Groundswell trace: its JSON is nested too deeply"
        ) from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path} is not a Groundswell trace: {exc}") from exc
    # A .json tree without nodes is as empty as an empty .jsonl log.
    trees = [t for t in trees if t.root is not None]
    if not trees:
        raise CLIError(f"{path} holds no runs (is the file empty?)")
    return trees


def _trees_from_json(data: Any) -> list[EventTree]:
    """Trees from a .json file: one tree, a list of them (``tree --json``), or the
    ``{"status", "output", "tree"}`` record of ``run --json`` (or a list of those)."""
    items = data if isinstance(data, list) else [data]
    trees = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and "version" not in item and isinstance(item.get("tree"), dict):
            item = item["tree"]
        try:
            trees.append(EventTree.from_json(item))
        except (ValueError, KeyError, TypeError) as exc:
            if not isinstance(data, list):
                raise
            raise ValueError(f"item {i} of the list: {exc}") from exc
    return trees


def _console() -> Console:
    # soft_wrap: one tree line stays one line, however narrow the terminal.
    return Console(highlight=False, soft_wrap=True)


def _print_table(columns: list[str], rows: list[list[str]]) -> None:
    table = Table(*columns, box=None, header_style="bold", pad_edge=False)
    for row in rows:  # as Text: no markup read in what people and agents wrote
        table.add_row(*(Text(cell) for cell in row))
    console = _console()
    if not console.is_terminal:  # a pipe gets whole rows, for grep and cut
        console.width = 10_000
    console.print(table)


def _print_tracebacks(tree: EventTree, console: Console | None) -> None:
    """Where ``tree``'s failures started, after its tree (on stderr when ``console`` is None)."""
    lines = ["", *traceback_lines(tree)]
    if console is None:
        print("\n".join(lines), file=sys.stderr)
    else:
        for line in lines:  # as Text: no markup or emoji codes read in file names or code
            console.print(Text(line, style="red" if line.startswith("✗") else ""))


def _cmd_tree(args: argparse.Namespace) -> int:
    trees = _load_trees(args.file)
    for tree in trees:  # a log cut off mid-run (a crash, a kill, or a run still going)
        if tree.root is not None and tree.root.status in (NodeStatus.RUNNING, NodeStatus.PENDING):
            print(
                f"note: run {tree.root.name!r} did not finish in {args.file}: its end is not "
                "in the log (the process stopped before writing it, or is still running)",
                file=sys.stderr,
            )
    if args.traceback and (args.json or args.jsonl):
        for tree in trees:
            _print_tracebacks(tree, None)  # stdout is JSON: they go to stderr
    if args.json:
        data = [t.to_json() for t in trees]
        try:
            text = json.dumps(data[0] if len(data) == 1 else data, indent=2)
        except RecursionError:
            # Indented output is written recursively, so it gives out before reading did.
            raise CLIError(f"{args.file}: a payload is nested too deeply to print") from None
        print(text)
    elif args.jsonl:
        for tree in trees:
            for event in tree.events():
                print(dump_record(event.to_record()))
    else:
        try:
            drawn = [rich_tree(tree) for tree in trees]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Loading checks the records' shape; this catches what it cannot foresee.
            raise CLIError(
                f"{args.file} is not a Groundswell trace: {type(exc).__name__}: {exc}"
            ) from exc
        console = _console()
        for i, renderable in enumerate(drawn):
            if i:
                console.print()
            console.print(renderable)
            if args.traceback:
                _print_tracebacks(trees[i], console)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    wf = resolve_workflow(args.target)
    # Checked before the run starts: a wrong argument is a typing error, not a failed run.
    call = workflow_call(wf, args.args, args.input, args.arg)
    console = _console()
    want_live = args.live if args.live is not None else console.is_interactive
    want_live = want_live and not (args.json or args.jsonl)
    tap = Tap()
    manager = get_plugin_manager()
    plugin_name = manager.register(TapPlugin(tap), name="groundswell-cli-tap")
    threads = RunThreads()
    try:
        with fake_agents(args.fake):
            if want_live:
                # transient: the final, complete tree replaces the (capped) live frames.
                with Live(console=console, refresh_per_second=8, transient=True) as live:
                    outcome, again = drive(Watch(wf, call, args, tap, live), threads)
            else:
                outcome, again = drive(Watch(wf, call, args, tap, None), threads)
    finally:
        manager.unregister(plugin_name)
    if not (outcome.interrupted or again):
        return _report(outcome, args, console)
    try:
        _report(outcome, args, console)
    except KeyboardInterrupt:
        again = True  # Ctrl-C again while the tree was printed
    what = "; the run was cancelled" if outcome.interrupted else ""
    print(f"groundswell: interrupted{what}", file=sys.stderr, flush=True)
    if again and threads.running():
        quit_now()  # pressed twice: the run's threads are not waited for
    wait_for_threads(threads)
    return INTERRUPTED


def _report(outcome: Outcome, args: argparse.Namespace, console: Console) -> int:
    """Print (and ``--save``) how the run ended; the exit code for a run not interrupted."""
    if outcome.error is not None and not (args.json or args.jsonl):
        hint = "" if args.traceback else " (--traceback shows where)"
        # Scrubbed like the tree: the message may quote an environment secret.
        print(f"groundswell: {printable(scrub(outcome.error))}{hint}", file=sys.stderr)
    save_error = None
    if args.save:
        try:
            outcome.tree.save(args.save)
        except OSError as exc:
            # Reported after the tree: the run itself is not lost.
            save_error = f"cannot save the trace to {args.save}: {exc.strerror or exc}"
    if args.json:
        record = {
            "status": outcome.status.value,
            "output": redact(outcome.output),  # scrubbed like the tree beside it
            "tree": outcome.tree.to_json(),
        }
        print(json.dumps(record, indent=2))
    elif not args.jsonl:
        console.print(rich_tree(outcome.tree))
        if args.traceback:
            _print_tracebacks(outcome.tree, console)
        if outcome.status is NodeStatus.COMPLETED:
            console.print(f"\noutput: {scrub(repr(outcome.output))}", markup=False)
    if args.traceback and (args.json or args.jsonl):
        _print_tracebacks(outcome.tree, None)  # stdout is JSON: they go to stderr
    if save_error is not None:
        raise CLIError(save_error)
    return 0 if outcome.status is NodeStatus.COMPLETED else 1


BUILTIN_COMMANDS = ("examples", "plugins", "run", "tree", *WAIT_COMMANDS, EVAL_COMMAND)


def _plugin_commands(sub: Any) -> None:
    """Add the commands plugins register (``register_cli_commands``)."""
    try:
        commands = get_plugin_manager().cli_commands()
    except PluginError as exc:
        # Strict mode and a broken plugin: the built-in commands (`groundswell
        # plugins` above all, which shows what is broken) must still work.
        print(f"warning: plugin commands unavailable: {exc}", file=sys.stderr)
        return
    for name, record in sorted(commands.items()):
        if name in BUILTIN_COMMANDS:
            print(
                f"warning: a plugin's command {name!r} clashes with a built-in one; ignored",
                file=sys.stderr,
            )
            continue
        parser = sub.add_parser(name, help=record.description or f"{name} (plugin command)")
        try:
            record.factory(parser)
        except Exception as exc:  # the command is broken, the others still work
            message = f"the {name!r} command could not be set up: {type(exc).__name__}: {exc}"
            parser.set_defaults(func=_broken(message))
        if parser.get_default("func") is None:
            parser.set_defaults(func=_broken(f"the {name!r} command sets no func"))


def _broken(message: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        raise CLIError(message)

    return run


def build_parser(*, plugin_commands: bool = True) -> argparse.ArgumentParser:
    """The argument parser for ``groundswell``.

    ``plugin_commands=False`` leaves out the commands plugins add, so no plugin
    is loaded just to parse a built-in command.
    """
    parser = argparse.ArgumentParser(
        prog="groundswell", description="Orchestrate LLM agents; inspect runs and plugins."
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"groundswell {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("plugins", help="list installed plugins, their hooks and load errors")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--all",
        action="store_true",
        help="also list disabled plugins, the kernel's own hooks, and what each provides",
    )
    p.set_defaults(func=_cmd_plugins)

    p = sub.add_parser(
        "examples",
        help="list or run the bundled examples (offline unless ANTHROPIC_API_KEY is set)",
        description="List the examples, run them, or print the folder that holds them.",
    )
    p.add_argument(
        "action",
        nargs="?",
        default="list",
        metavar="{list,run,path}",
        help="list (default), run, or path (the folder, to copy from); "
        "any other word is an example to list",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="examples by number or name prefix")
    p.set_defaults(func=_cmd_examples)

    p = sub.add_parser(
        "run",
        help="run a workflow: groundswell run module:workflow [ARGS...]",
        description="Run a workflow, print its tree, exit 0 when it completed and 1 when it "
        "failed. Arguments are checked against the workflow's parameters (after ctx) before "
        "it runs, and converted to their annotated types.",
    )
    p.add_argument(
        "target",
        help="module:workflow (myapp.flows:review, imported from the current directory) or "
        "file.py:workflow (flows.py:review, path/to/flows.py:review)",
    )
    p.add_argument("args", nargs="*", help="the workflow's arguments in order (strings)")
    p.add_argument(
        "--input",
        metavar="JSON",
        help="""keyword arguments as a JSON object ('{"qty": 3}'), or @FILE.json to read one""",
    )
    p.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one keyword argument (repeatable); VALUE is parsed as JSON when it is JSON "
        "(3, true, [1, 2]), else kept as text",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help='print {"status", "output", "tree"}')
    out.add_argument(
        "--jsonl", action="store_true", help="stream the run's events as JSON lines, live"
    )
    p.add_argument(
        "--traceback",
        action="store_true",
        help="after the tree, print where each failure started (file, line, source)",
    )
    p.add_argument("--save", metavar="FILE", help="save the run's JSONL event log to FILE")
    p.add_argument(
        "--fake",
        nargs="?",
        const="schema",
        choices=list(FAKE_MODES),
        metavar="MODE",
        help="offline: every agent on groundswell.testing's fake Anthropic API, whatever its "
        "client; MODE "
        + "; ".join(f"{k}: {v}" for k, v in FAKE_MODES.items())
        + " (default schema)",
    )
    p.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="redraw the tree while the run goes (default: on when stdout is a terminal)",
    )
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("tree", help="render a saved trace (.jsonl event log or .json tree)")
    p.add_argument("file")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the tree as JSON")
    out.add_argument("--jsonl", action="store_true", help="print the tree as a JSONL event log")
    p.add_argument(
        "--traceback",
        action="store_true",
        help="after the tree, print where each failure started (file, line, source)",
    )
    p.set_defaults(func=_cmd_tree)

    add_wait_commands(sub, table=_print_table)
    add_eval_command(sub)

    if plugin_commands:
        _plugin_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``groundswell`` command; returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((w for w in words if not w.startswith("-")), None)
    # Plugins load once per command: loading them here too, for a built-in command,
    # would report every broken plugin twice.
    parser = build_parser(plugin_commands=command not in BUILTIN_COMMANDS)
    try:
        strict_plugins()  # a GROUNDSWELL_STRICT_PLUGINS that means neither on nor off: exit 2
        args, extra = parser.parse_known_args(words)
        if extra and isinstance(getattr(args, "args", None), list) and hasattr(args, "target"):
            # `run flows.py:wf --traceback a b`: workflow arguments after an option
            # are still the workflow's (argparse stops the list at the first option).
            if any(word.startswith("-") for word in extra):
                args = parser.parse_args(words)  # an unknown option: argparse's own error
            args.args.extend(extra)
        elif extra:
            args = parser.parse_args(words)
        return int(args.func(args))
    except KeyboardInterrupt:
        # Ctrl-C outside a run (which handles it itself): one line, no traceback.
        print("groundswell: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`groundswell run ... --jsonl | head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except PluginError as exc:
        # Strict mode (GROUNDSWELL_STRICT_PLUGINS=1) turned a plugin problem into an error.
        print(f"groundswell: plugin error: {printable(str(exc))}", file=sys.stderr)
        return 3
    except (CLIError, GroundswellError) as exc:
        # One line, whatever the message holds (names and messages may come from a file).
        print(f"groundswell: {printable(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
