"""Tracebacks of failed nodes: recorded where the exception was raised, kept bounded and
scrubbed in the tree, its saved traces and OpenTelemetry spans, and printed by the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import groundswell
from groundswell import EventTree, NodeStatus, NodeType, WorkflowContext, workflow
from groundswell.tree.tracebacks import MAX_FRAMES, format_traceback

from .otlp_receiver import OTLPReceiver

SHOP = '''\
"""A user's workflows, each failing in the user's own code."""
import os

import groundswell

groundswell.register_secret("hunter2-" + "registered")


def parse(text):
    return int(text)  # the failing line


def login():
    raise PermissionError("refused hunter2-registered " + os.environ["SHOP_TOKEN"])


@groundswell.workflow(name="quote")
async def quote(ctx, text):
    return await ctx.step("parse", lambda: parse(text))


@groundswell.workflow(name="leak")
async def leak(ctx):
    await ctx.step("login", login)


@groundswell.workflow(name="outer")
async def outer(ctx):
    return await ctx.step("inner", lambda: quote.run("nine"))


@groundswell.workflow(name="wrapped")
async def wrapped(ctx):
    try:
        await ctx.step("parse", lambda: parse("x"))
    except ValueError:
        raise RuntimeError("no quote today")
'''
PARSE_LINE = SHOP.splitlines().index("    return int(text)  # the failing line") + 1
WRAPPED_LINE = SHOP.splitlines().index('        raise RuntimeError("no quote today")') + 1
ENV_SECRET = "tok-" + "e" * 20


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    (tmp_path / "shop.py").write_text(SHOP)
    return tmp_path


def gs(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groundswell.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "SHOP_TOKEN": ENV_SECRET, **(env or {})},
        timeout=60,
    )


def traceback_part(stdout: str) -> str:
    """What ``--traceback`` printed after the tree."""
    return stdout[stdout.index("Traceback (most recent call last):") :]


def test_run_traceback_shows_the_users_file_line_and_source(shop: Path) -> None:
    out = gs("run", "shop.py:quote", "x", "--traceback", "--save", "t.jsonl", cwd=shop)
    assert out.returncode == 1
    printed = traceback_part(out.stdout)
    # Python's own format, innermost last: the user's failing line closes it.
    assert printed.splitlines()[-3:] == [
        f'  File "{shop / "shop.py"}", line {PARSE_LINE}, in parse',
        "    return int(text)  # the failing line",
        "ValueError: invalid literal for int() with base 10: 'x'",
    ]
    # Once, for the step where it was raised, not again for the workflow it failed.
    assert out.stdout.count("Traceback (most recent call last):") == 1
    assert "✗ step quote/parse" in out.stdout
    assert "(--traceback shows where)" not in out.stderr

    saved = gs("tree", "t.jsonl", "--traceback", cwd=shop)
    assert saved.returncode == 0, saved.stderr
    assert traceback_part(saved.stdout) == printed
    plain = gs("run", "shop.py:quote", "x", cwd=shop)
    assert "Traceback" not in plain.stdout + plain.stderr
    assert plain.stderr.rstrip().endswith("(--traceback shows where)")


def test_the_traceback_survives_save_load_and_json(shop: Path) -> None:
    out = gs("run", "shop.py:quote", "x", "--json", "--save", "t.jsonl", cwd=shop)
    record = json.loads(out.stdout)
    (parse,) = [n for n in record["tree"]["nodes"] if n["name"] == "parse"]
    frames = parse["error"]["traceback"]
    assert frames[-1] == {
        "file": str(shop / "shop.py"),
        "line": PARSE_LINE,
        "function": "parse",
        "code": "return int(text)  # the failing line",
    }
    assert parse["error"]["type"] == "ValueError"
    loaded = EventTree.load(shop / "t.jsonl")
    assert loaded.find(name="parse")[0].error == parse["error"]
    assert EventTree.from_json(loaded.to_json()) == loaded
    (shop / "run.json").write_text(out.stdout)
    again = gs("tree", "run.json", "--traceback", cwd=shop)
    assert again.returncode == 0 and f"line {PARSE_LINE}, in parse" in again.stdout
    # With JSON on stdout, --traceback writes its text to stderr.
    for args in (["run", "shop.py:quote", "x", "--json"], ["tree", "t.jsonl", "--json"]):
        both = gs(*args, "--traceback", cwd=shop)
        assert json.loads(both.stdout)  # still JSON
        assert f"line {PARSE_LINE}, in parse" in both.stderr


def test_a_nested_run_prints_only_where_it_started_and_a_new_error_prints_too(
    shop: Path,
) -> None:
    nested = gs("run", "shop.py:outer", "--traceback", cwd=shop)
    assert nested.returncode == 1
    # outer/inner fails with the nested run's WorkflowError, which names the real error.
    assert nested.stdout.count("Traceback (most recent call last):") == 1
    assert "✗ step outer/inner/quote/parse" in nested.stdout
    wrapped = gs("run", "shop.py:wrapped", "--traceback", cwd=shop)
    heads = [ln for ln in wrapped.stdout.splitlines() if ln.startswith("✗ ") and "/" in ln]
    assert heads == ["✗ step wrapped/parse"]
    # A different error from the one below: the workflow's own traceback is printed too.
    own = wrapped.stdout.split("\n✗ workflow wrapped\n", 1)[1].split("\n✗ ", 1)[0]
    # Raised while handling the step's error: that one is shown first, as Python does.
    assert "During handling of the above exception, another exception occurred:" in own
    assert own.strip().splitlines()[-3:] == [
        f'  File "{shop / "shop.py"}", line {WRAPPED_LINE}, in wrapped',
        '    raise RuntimeError("no quote today")',
        "RuntimeError: no quote today",
    ]


def test_no_secret_reaches_a_traceback(shop: Path) -> None:
    out = gs("run", "shop.py:leak", "--traceback", "--save", "t.jsonl", cwd=shop)
    assert out.returncode == 1
    assert "PermissionError: refused **********" in out.stdout
    assert 'raise PermissionError("refused **********' in out.stdout  # the source line too
    as_json = gs("run", "shop.py:leak", "--json", cwd=shop)
    saved = gs("tree", "t.jsonl", "--traceback", cwd=shop)
    for text in (
        out.stdout,
        out.stderr,
        as_json.stdout,
        saved.stdout,
        (shop / "t.jsonl").read_text(),
    ):
        assert "hunter2-registered" not in text and ENV_SECRET not in text
    assert "traceback" in as_json.stdout


def test_otlp_spans_carry_the_stacktrace(shop: Path) -> None:
    with OTLPReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "tb"}
        for args in (["shop.py:quote", "x"], ["shop.py:leak"]):
            out = gs("run", *args, cwd=shop, env=env)
            assert out.returncode == 1, out.stderr
    spans = {s.name: s for s in receiver.spans}
    (event,) = [a for name, a in spans["step parse"].events if name == "exception"]
    assert event["exception.type"] == "ValueError"
    stack = event["exception.stacktrace"]
    assert stack.startswith("Traceback (most recent call last):\n")
    assert f'File "{shop / "shop.py"}", line {PARSE_LINE}, in parse' in stack
    assert stack.endswith("ValueError: invalid literal for int() with base 10: 'x'")
    (leaked,) = [a for name, a in spans["step login"].events if name == "exception"]
    assert "shop.py" in leaked["exception.stacktrace"]
    for span in receiver.spans:
        text = json.dumps([span.attributes, span.events, span.status_message])
        assert "hunter2-registered" not in text and ENV_SECRET not in text


def test_tree_traceback_on_a_trace_without_tracebacks_says_so(shop: Path) -> None:
    out = gs("run", "shop.py:quote", "x", "--save", "t.jsonl", cwd=shop)
    assert out.returncode == 1
    lines = [json.loads(line) for line in (shop / "t.jsonl").read_text().splitlines()]
    for line in lines:  # as a trace written before tracebacks were recorded
        error = line["data"].get("error") or {}
        error.pop("traceback", None)
    (shop / "old.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    old = gs("tree", "old.jsonl", "--traceback", cwd=shop)
    assert old.returncode == 0, old.stderr
    assert old.stdout.rstrip().endswith(
        "✗ step quote/parse\nValueError: invalid literal for int() with base 10: 'x'\n"
        "(no traceback recorded)"
    )
    gs("run", "shop.py:quote", "7", "--save", "ok.jsonl", cwd=shop)
    fine = gs("tree", "ok.jsonl", "--traceback", cwd=shop)
    assert fine.stdout.rstrip().endswith("no node failed")


@pytest.mark.parametrize(
    ("traceback", "message"),
    [
        ("frames", "'error.traceback' should be a list, got 'frames'"),
        ([["shop.py", 1]], "'error.traceback' frame 0 should be an object"),
        (
            [{"file": "shop.py", "function": "f"}],
            "'error.traceback' frame 0: 'line' should be a number",
        ),
        ([{"file": "a", "line": "9", "function": "f"}], "'line' should be a number, got '9'"),
        ([{"file": "a", "line": 9, "function": "f", "code": 3}], "'code' should be a string"),
    ],
)
def test_the_loader_refuses_a_malformed_traceback(
    shop: Path, traceback: object, message: str
) -> None:
    node = {"id": "a", "type": "step", "name": "s", "status": "failed", "timestamp": 1.0}
    error = {"type": "ValueError", "message": "bad", "traceback": traceback}
    for name, content in (
        ("bad.json", json.dumps({"version": 1, "nodes": [node | {"error": error}]})),
        (
            "bad.jsonl",
            json.dumps({"kind": "node_start", "data": node | {"status": "running"}})
            + "\n"
            + json.dumps(
                {"kind": "node_end", "data": {"id": "a", "status": "failed", "error": error}}
            ),
        ),
    ):
        (shop / name).write_text(content + "\n")
        out = gs("tree", name, cwd=shop)
        assert out.returncode == 2
        assert out.stderr.startswith(f"groundswell: {name} is not a Groundswell trace: ")
        assert message in out.stderr and len(out.stderr.splitlines()) == 1
    with pytest.raises(ValueError, match=r"'error\.traceback_omitted' should be a count"):
        EventTree.from_json(
            {
                "version": 1,
                "nodes": [node | {"error": error | {"traceback": [], "traceback_omitted": -1}}],
            }
        )


def _recurse(n: int) -> int:
    return _recurse(n - 1) if n else 1 // 0


async def test_a_deep_traceback_keeps_its_innermost_frames_and_counts_the_rest() -> None:
    @workflow(name="deep")
    async def deep(ctx: WorkflowContext) -> int:
        return await ctx.step("dive", lambda: _recurse(100))

    with pytest.raises(groundswell.WorkflowError) as info:
        await deep.run()
    assert info.value.result is not None
    (dive,) = info.value.result.tree.find(name="dive")
    error = dive.error
    assert error is not None and len(error["traceback"]) == MAX_FRAMES
    assert error["traceback_omitted"] > 70
    assert error["traceback"][-1]["code"] == "return _recurse(n - 1) if n else 1 // 0"
    assert error["traceback"][-1]["file"] == __file__
    text = format_traceback(error)
    assert text is not None
    assert f"  ... {error['traceback_omitted']} earlier frames left out" in text.splitlines()[1]


async def test_only_failures_read_frames_and_an_unraised_error_has_none() -> None:
    @workflow(name="fine")
    async def fine(ctx: WorkflowContext) -> int:
        return await ctx.step("one", lambda: 1)

    result = await fine.run()
    assert all(n.error is None for n in result.tree.walk())
    tree = EventTree()
    node = tree.start_node(NodeType.STEP, "s")
    tree.end_node(node, NodeStatus.FAILED, error=ValueError("never raised"))
    assert node.error == {"type": "ValueError", "message": "never raised"}


def test_long_messages_end_in_an_ellipsis_and_stay_whole_in_json() -> None:
    tree = EventTree()
    node = tree.start_node(NodeType.STEP, "s")
    message = "the reason " * 20
    tree.end_node(node, NodeStatus.FAILED, error=ValueError(message))
    line = tree.render()
    shown = line.split("ValueError: ", 1)[1]
    assert shown.endswith("…") and len(shown) == 80 and message.startswith(shown[:-1])
    assert tree.to_json()["nodes"][0]["error"]["message"] == message
    short = EventTree()
    short.end_node(
        short.start_node(NodeType.STEP, "s"), NodeStatus.FAILED, error=ValueError("x" * 80)
    )
    assert short.render().endswith("ValueError: " + "x" * 80)


def test_the_live_view_cuts_wide_lines_with_an_ellipsis() -> None:
    import io

    from rich.console import Console
    from rich.live_render import LiveRender

    from groundswell.tree._render import rich_tree

    tree = EventTree()
    tree.start_node(NodeType.STEP, "n" * 100)
    out = io.StringIO()
    console = Console(file=out, width=40, soft_wrap=True)
    console.print(LiveRender(rich_tree(tree, crop=True)))
    assert out.getvalue().rstrip("\n").endswith("…") and len(out.getvalue().rstrip()) == 40
    out.truncate(0)
    out.seek(0)
    console.print(rich_tree(tree))  # printed, a line is never cut
    assert out.getvalue().rstrip("\n") == tree.render()


def test_a_chained_error_keeps_its_root_cause(tmp_path: Path) -> None:
    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError as exc:
            raise RuntimeError("could not read the order") from exc

    @workflow
    async def order(ctx: WorkflowContext, text: str) -> int:
        return await ctx.step("parse", lambda: parse(text))

    with pytest.raises(groundswell.WorkflowError) as caught:
        asyncio.run(order.run("abc"))
    result = caught.value.result
    assert result is not None
    step = result.tree.find(name="parse")[0]
    cause = step.error["cause"]
    assert cause["type"] == "ValueError" and cause["traceback"][-1]["code"] == "return int(text)"
    loaded = EventTree.load(result.tree.save(tmp_path / "t.jsonl")).find(name="parse")[0]
    printed = format_traceback(loaded.error)
    assert printed is not None
    assert printed.index("ValueError: invalid literal") < printed.index("direct cause")
    assert printed.rstrip().endswith("RuntimeError: could not read the order")
