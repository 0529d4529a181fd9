"""The ``groundswell`` command, run as a user runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from groundswell import EventTree

FLOWS = """
import groundswell

@groundswell.workflow(name="greet")
async def greet(ctx, who):
    return await ctx.step("hello", lambda: f"hello {who}")

@groundswell.workflow(name="crash")
async def crash(ctx):
    await ctx.step("boom", lambda: 1 / 0)

@groundswell.workflow(name="slow")
async def slow(ctx):
    import asyncio
    await ctx.step("first", lambda: 1)
    await ctx.step("nap", asyncio.sleep(1.0))
    return 2

@groundswell.workflow(name="long")
async def long(ctx, marker):
    import asyncio, pathlib

    async def wait():
        pathlib.Path(marker).write_text("started")  # the test presses Ctrl-C now
        await asyncio.sleep(600)

    await ctx.step("first", lambda: 1)
    return await ctx.step("wait", wait)

not_a_workflow = 3
"""


def gs(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groundswell.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd or ""), **(env or {})},
        timeout=60,
    )


def start(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``groundswell ARGS`` in the background, for a test that interrupts it."""
    # A shell that started the tests in the background ignores SIGINT, and children
    # inherit that; with a Python handler here, the child starts with the default.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "groundswell.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(cwd), **(env or {})},
        )
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupt_once(marker: Path, process: subprocess.Popen[str]) -> tuple[str, str]:
    """Press Ctrl-C once ``marker`` exists; return the process's stdout and stderr."""
    while not marker.exists():
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=60)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "flows.py").write_text(FLOWS)
    return tmp_path


def test_plugins_lists_the_bundled_plugin() -> None:
    out = gs("plugins")
    assert out.returncode == 0
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("lru"))
    assert "ok" in line and "register_cache_backends" in line
    data = json.loads(gs("plugins", "--json").stdout)
    assert {"name": "lru", "ok": True}.items() <= next(
        d for d in data if d["name"] == "lru"
    ).items()


def test_run_prints_the_tree_and_exits_zero(project: Path) -> None:
    out = gs("run", "flows:greet", "ann", cwd=project)
    assert out.returncode == 0, out.stderr
    assert "✓ workflow greet" in out.stdout and "└── ✓ step hello" in out.stdout
    assert "output: 'hello ann'" in out.stdout


def test_run_json_and_save_then_render_the_saved_trace(project: Path) -> None:
    out = gs("run", "flows:greet", "bo", "--json", "--save", "trace.jsonl", cwd=project)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["status"] == "completed" and data["output"] == "hello bo"
    assert [n["name"] for n in data["tree"]["nodes"]] == ["greet", "hello"]
    rendered = gs("tree", "trace.jsonl", cwd=project)
    assert rendered.returncode == 0 and "└── ✓ step hello" in rendered.stdout
    as_json = json.loads(gs("tree", "trace.jsonl", "--json", cwd=project).stdout)
    assert as_json["nodes"] == data["tree"]["nodes"]


def test_run_output_is_scrubbed_like_the_tree(project: Path) -> None:
    key = "sk-ant-api03-" + "Q" * 40
    for extra in (["--json"], []):
        out = gs("run", "flows:greet", key, *extra, cwd=project)
        assert out.returncode == 0, out.stderr
        assert key not in out.stdout and "hello" in out.stdout


def test_failed_run_exits_one_and_still_shows_the_tree(project: Path) -> None:
    out = gs("run", "flows:crash", cwd=project)
    assert out.returncode == 1
    assert "✗ step boom" in out.stdout and "ZeroDivisionError" in out.stdout
    assert out.stderr.startswith("groundswell: workflow 'crash' failed at crash/boom")
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "flows"], "expected module:workflow"),
        (["run", "nowhere:thing"], "cannot import 'nowhere'"),
        (["run", "flows:not_a_workflow"], "flows:not_a_workflow is an int, not a Workflow"),
        (["run", "flows:missing"], "has no attribute 'missing'"),
        (["tree", "missing.jsonl"], "no such file"),
        (["tree", "."], "is a directory"),
        (["run", "flows:greet", "x", "--save", "flows.py/t.jsonl"], "cannot save the trace"),
    ],
)
def test_bad_input_is_one_clear_line(project: Path, args: list[str], message: str) -> None:
    out = gs(*args, cwd=project)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_tree_rejects_a_file_that_is_not_a_trace(project: Path) -> None:
    (project / "junk.jsonl").write_text('{"kind": "nope", "data": {}}\n')
    out = gs("tree", "junk.jsonl", cwd=project)
    assert out.returncode == 2 and "not a Groundswell trace" in out.stderr


def test_run_jsonl_streams_events_that_rebuild_the_tree(project: Path) -> None:
    out = gs("run", "flows:greet", "cy", "--jsonl", cwd=project)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert {r["kind"] for r in records} == {"node_start", "node_end"}
    tree = EventTree.replay(records)
    assert [n.name for n in tree.walk()] == ["greet", "hello"]
    assert tree.root is not None and tree.root.payload["output"] == "hello cy"
    failed = gs("run", "flows:crash", "--jsonl", cwd=project)
    assert (
        failed.returncode == 1
        and EventTree.replay(json.loads(line) for line in failed.stdout.splitlines())
        .find(name="boom")[0]
        .status
        == "failed"
    )


def test_live_view_redraws_the_tree_while_the_run_goes(project: Path) -> None:
    # What a terminal would receive: frames showing the step still running, then the end.
    terminal = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "100"}
    out = gs("run", "flows:slow", cwd=project, env=terminal)
    assert out.returncode == 0, out.stderr
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.stdout)
    assert "… step nap  running" in plain
    assert "✓ step nap" in plain and "output: 2" in plain
    quiet = gs("run", "flows:slow", "--no-live", cwd=project, env=terminal)
    assert "running" not in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", quiet.stdout)


def test_tree_prints_a_saved_trace_as_a_jsonl_event_log(project: Path) -> None:
    assert gs("run", "flows:greet", "di", "--save", "t.jsonl", cwd=project).returncode == 0
    out = gs("tree", "t.jsonl", "--jsonl", cwd=project)
    assert out.returncode == 0
    assert out.stdout == (project / "t.jsonl").read_text()


def test_an_empty_log_is_an_error_not_an_empty_tree(project: Path) -> None:
    (project / "empty.jsonl").write_text("")
    out = gs("tree", "empty.jsonl", cwd=project)
    assert out.returncode == 2 and "holds no runs" in out.stderr


def test_a_closed_pipe_ends_jsonl_output_quietly(project: Path) -> None:
    shell = f"{sys.executable} -m groundswell.cli run flows:slow --jsonl | head -1"
    out = subprocess.run(
        ["bash", "-c", shell],
        capture_output=True,
        text=True,
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(project)},
        timeout=60,
    )
    assert json.loads(out.stdout)["kind"] == "node_start"
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


def test_plugins_all_shows_disabled_plugins_the_kernel_and_what_each_provides() -> None:
    out = gs("plugins", "--all", env={"GROUNDSWELL_DISABLE_PLUGINS": "redis"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    redis = lines.index(next(ln for ln in lines if ln.startswith("redis ")))
    assert " off " in lines[redis]
    assert lines[redis + 1].strip() == "disabled: named in GROUNDSWELL_DISABLE_PLUGINS"
    assert any(ln.startswith("groundswell ") and "(kernel)" in ln for ln in lines)
    assert "    token counters: estimate, anthropic" in lines
    assert "    cache backends: lru" in lines
    data = {d["name"]: d for d in json.loads(gs("plugins", "--all", "--json").stdout)}
    assert data["lru"]["provides"] == {"register_cache_backends": ["lru"]}
    assert data["groundswell"]["provides"]["register_reflection_strategies"] == ["feedback"]
    # Without --all, neither the kernel nor disabled plugins are listed.
    plain = gs("plugins", env={"GROUNDSWELL_DISABLE_PLUGINS": "redis"}).stdout
    assert not re.search(r"^(redis|groundswell) ", plain, flags=re.M)


MIDDLEWARE_PLUGIN = """
from groundswell import AgentMiddleware, hookimpl

@hookimpl
def register_agent_middleware():
    return [
        AgentMiddleware("ratelimit", object),
        AgentMiddleware("audit", object, 100, True),
    ]
"""


def test_plugins_all_lists_agent_middleware_with_order_and_default(
    tmp_path: Path, make_distribution: Callable[..., None]
) -> None:
    make_distribution("gs-limits", "1.0", {"limits": "gs_limits"}, {"gs_limits": MIDDLEWARE_PLUGIN})
    env = {"PYTHONPATH": str(tmp_path / "site")}  # where make_distribution installs it
    out = gs("plugins", "--all", env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    limits = lines.index(next(ln for ln in lines if ln.startswith("limits ")))
    # Outermost first: the order they wrap a prompt in.
    assert lines[limits + 1] == "    agent middleware: audit (100, default), ratelimit (500)"
    data = {d["name"]: d for d in json.loads(gs("plugins", "--all", "--json", env=env).stdout)}
    assert data["limits"]["agent_middleware"] == [
        {"name": "audit", "order": 100, "default": True},
        {"name": "ratelimit", "order": 500, "default": False},
    ]
    assert data["limits"]["provides"] == {"register_agent_middleware": ["ratelimit", "audit"]}
    assert data["lru"]["agent_middleware"] == []


def test_examples_lists_all_twelve_with_titles() -> None:
    out = gs("examples")
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if re.match(r"^\s*\d+  ", ln)]
    assert [int(r.split()[0]) for r in rows] == list(range(1, 13))
    assert "03_one_agent_many_workflows" in rows[2] and "one agent used across" in rows[2]
    assert "groundswell examples run" in out.stdout


def test_examples_run_runs_the_chosen_example_offline_and_prints_its_tree() -> None:
    env = {"ANTHROPIC_API_KEY": ""}
    out = gs("examples", "run", "1", "04_nested", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("offline:")
    assert re.findall(r"^== (\S+):", out.stdout, flags=re.M) == [
        "01_basic_workflow",
        "04_nested_workflows",
    ]
    assert len(re.findall(r"^✓ workflow (report|deploy)", out.stdout, flags=re.M)) == 2
    assert out.stdout.rstrip().endswith("2 of 2 examples ran cleanly")


def test_examples_errors_are_one_line(tmp_path: Path) -> None:
    out = gs("examples", "run", "nope")
    assert out.returncode == 2
    assert out.stderr.startswith("groundswell: example 'nope' matches none of: 01_basic_workflow")
    assert len(out.stderr.splitlines()) == 1
    out = gs("examples", "run", "0_")  # 01..09 all start with 0
    assert out.returncode == 2 and "matches" in out.stderr
    empty = gs("examples", env={"GROUNDSWELL_EXAMPLES_DIR": str(tmp_path)})
    assert empty.returncode == 2
    assert empty.stderr.strip() == (
        "groundswell: no examples found; set GROUNDSWELL_EXAMPLES_DIR to a folder holding them"
    )


def test_a_failing_example_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "01_fine.py").write_text('"""Example 1: fine."""\nprint("fine")\n')
    (tmp_path / "02_broken.py").write_text('"""Example 2: broken."""\nraise SystemExit(3)\n')
    out = gs("examples", "run", env={"GROUNDSWELL_EXAMPLES_DIR": str(tmp_path)})
    assert out.returncode == 1
    assert out.stdout.rstrip().endswith("1 of 2 examples ran cleanly; failed: 02_broken")
    assert gs(
        "examples", "path", env={"GROUNDSWELL_EXAMPLES_DIR": str(tmp_path)}
    ).stdout.strip() == str(tmp_path)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["plugins"],
        ["run"],
        ["tree"],
        ["examples"],
        ["history"],
        ["history", "serve"],
        ["serve"],
        ["pending"],
        ["approve"],
        ["reject"],
        ["answer"],
        ["ui"],
        ["eval"],
        ["eval", "run"],
        ["eval", "capture"],
        ["eval", "fork"],
    ],
)
def test_every_command_has_help(argv: list[str]) -> None:
    out = gs(*argv, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: groundswell")


@pytest.mark.parametrize("output", ["tree", "json"])
def test_ctrl_c_cancels_the_run_and_still_shows_and_saves_its_tree(
    project: Path, output: str
) -> None:
    flags = ["--json"] if output == "json" else []
    run = start("run", "flows:long", "started", "--save", "t.jsonl", *flags, cwd=project)
    stdout, stderr = interrupt_once(project / "started", run)
    assert run.returncode == 130
    assert stderr == "groundswell: interrupted; the run was cancelled\n"
    statuses = [("long", "cancelled"), ("first", "completed"), ("wait", "cancelled")]
    if output == "json":
        data = json.loads(stdout)
        assert data["status"] == "cancelled" and data["output"] is None
        assert [(n["name"], n["status"]) for n in data["tree"]["nodes"]] == statuses
    else:
        assert stdout.startswith("⊘ workflow long")
        assert "├── ✓ step first" in stdout
        assert re.search(r"└── ⊘ step wait .*cancelled", stdout)
    saved = EventTree.load(project / "t.jsonl")
    assert [(n.name, n.status.value) for n in saved.walk()] == statuses


def test_ctrl_c_during_examples_run_stops_the_example_quietly(tmp_path: Path) -> None:
    (tmp_path / "01_wait.py").write_text(
        '"""Example 1: waits."""\nimport os, pathlib, time\n'
        'pathlib.Path(os.environ["MARKER"]).write_text(str(os.getpid()))\ntime.sleep(600)\n'
    )
    marker = tmp_path / "started"
    env = {"GROUNDSWELL_EXAMPLES_DIR": str(tmp_path), "MARKER": str(marker)}
    examples = start("examples", "run", cwd=tmp_path, env=env)
    stdout, stderr = interrupt_once(marker, examples)
    assert examples.returncode == 130
    assert stderr == "groundswell: interrupted\n"
    assert "== 01_wait" in stdout
    with pytest.raises(ProcessLookupError):  # the example was stopped too, not left running
        os.kill(int(marker.read_text()), 0)


def test_tree_draws_a_trace_whose_metrics_have_the_wrong_types(project: Path) -> None:
    assert gs("run", "flows:greet", "ed", "--save", "t.jsonl", cwd=project).returncode == 0
    records = [json.loads(line) for line in (project / "t.jsonl").read_text().splitlines()]
    for record in records:
        if record["kind"] == "node_end":
            record["data"]["metrics"] = {"usage": "x", "duration": "y", "attempt": "z"}
    (project / "odd.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = gs("tree", "odd.jsonl", cwd=project)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["✓ workflow greet", "└── ✓ step hello"]


NODE = {"id": "a", "type": "workflow", "name": "w", "status": "completed", "timestamp": 1.0}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("no-nodes.json", {"version": 1, "root_id": None}, "a tree needs a 'nodes' list"),
        ("ints.json", {"version": 1, "nodes": [1, 2]}, "a node record should be an object"),
        ("nameless.json", {"version": 1, "nodes": [NODE | {"name": None}]}, "'name' is missing"),
        (
            "bad-metrics.json",
            {"version": 1, "nodes": [NODE | {"metrics": "fast"}]},
            "'metrics' should be an object, got 'fast'",
        ),
        ("status.json", {"version": 1, "nodes": [NODE | {"status": "done"}]}, "unknown status"),
        (
            "error.jsonl",
            [
                {"kind": "node_start", "data": NODE | {"status": "running"}},
                {"kind": "node_end", "data": {"id": "a", "status": "failed", "error": "boom"}},
            ],
            "node_end of node 'a': 'error' should be an object, got 'boom'",
        ),
    ],
)
def test_a_malformed_trace_is_one_line_naming_what_is_wrong(
    project: Path, name: str, content: object, message: str
) -> None:
    lines = content if name.endswith(".jsonl") else [content]
    (project / name).write_text("".join(json.dumps(line) + "\n" for line in lines))  # type: ignore[attr-defined]
    out = gs("tree", name, cwd=project)
    assert out.returncode == 2
    assert out.stderr.startswith(f"groundswell: {name} is not a Groundswell trace: ")
    assert message in out.stderr and len(out.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "content", ["", "  \n", '{"version": 1, "root_id": null, "nodes": []}', "[]"]
)
def test_a_json_file_without_nodes_holds_no_runs_like_an_empty_log(
    project: Path, content: str
) -> None:
    (project / "empty.json").write_text(content)
    out = gs("tree", "empty.json", cwd=project)
    assert out.returncode == 2
    assert out.stderr == "groundswell: empty.json holds no runs (is the file empty?)\n"


def test_tree_reads_its_own_json_and_what_run_json_prints(project: Path) -> None:
    for who in ("fay", "gus"):
        assert gs("run", "flows:greet", who, "--save", f"{who}.jsonl", cwd=project).returncode == 0
    both = project / "both.jsonl"
    both.write_text((project / "fay.jsonl").read_text() + (project / "gus.jsonl").read_text())
    listed = gs("tree", "both.jsonl", "--json", cwd=project)
    (project / "both.json").write_text(listed.stdout)
    envelope = gs("run", "flows:greet", "hal", "--json", cwd=project)
    (project / "run.json").write_text(envelope.stdout)
    (project / "runs.json").write_text(f"[{envelope.stdout}, {envelope.stdout}]")

    expected = gs("tree", "both.jsonl", cwd=project).stdout
    assert gs("tree", "both.json", cwd=project).stdout == expected
    assert gs("tree", "both.json", "--json", cwd=project).stdout == listed.stdout
    single = gs("tree", "run.json", cwd=project)
    assert single.returncode == 0, single.stderr
    assert single.stdout.startswith("✓ workflow greet") and "└── ✓ step hello" in single.stdout
    runs = gs("tree", "runs.json", "--json", cwd=project)
    assert [len(t["nodes"]) for t in json.loads(runs.stdout)] == [2, 2]


def test_examples_given_a_name_lists_that_example() -> None:
    out = gs("examples", "3")
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if re.match(r"^\s*\d+  ", ln)]
    assert len(rows) == 1 and "03_one_agent_many_workflows" in rows[0]
    assert gs("examples", "04_nested", "7").stdout.count("_") >= 2
    nope = gs("examples", "nope")
    assert nope.returncode == 2 and "example 'nope' matches none of" in nope.stderr


@pytest.mark.parametrize(("strict", "args", "code"), [
    ("0", ["plugins"], 0),
    ("1", ["plugins"], 0),
    ("0", ["run", "flows:greet", "ivy"], 0),
    ("1", ["run", "flows:greet", "ivy"], 3),
])  # fmt: skip
def test_a_broken_plugin_is_reported_once(
    project: Path,
    make_distribution: Callable[..., None],
    strict: str,
    args: list[str],
    code: int,
) -> None:
    make_distribution(
        "broken-x", "1.0", {"broken": "broken_x"}, {"broken_x": "raise RuntimeError('on purpose')"}
    )
    site = project / "site"  # where make_distribution installs it
    env = {"PYTHONPATH": f"{site}{os.pathsep}{project}", "GROUNDSWELL_STRICT_PLUGINS": strict}
    out = gs(*args, cwd=project, env=env)
    assert out.returncode == code, out.stderr
    assert out.stderr.count("RuntimeError: on purpose") == 1, out.stderr


SHOP = """
import groundswell
from pricing import unit_price  # a sibling module, imported as `python shop.py` would


@groundswell.workflow(name="quote")
async def quote(ctx, item: str, qty: int = 1, tags: list[str] | None = None) -> dict:
    price = await ctx.step("price", lambda: unit_price(item) * qty)
    return {"item": item, "qty": qty, "price": price, "tags": tags}


@groundswell.workflow(name="free")
async def free(ctx, *items, **options):
    return [list(items), options]


if __name__ == "__main__":
    raise SystemExit("run as a script, not by groundswell run")
"""


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    folder = tmp_path / "apps" / "shop"
    folder.mkdir(parents=True)
    (folder / "shop.py").write_text(SHOP)
    (folder / "pricing.py").write_text("def unit_price(item):\n    return len(item)\n")
    return tmp_path


@pytest.mark.parametrize(
    ("cwd", "target"),
    [
        ("apps/shop", "shop.py:quote"),
        ("apps/shop", "./shop.py:quote"),
        (".", "apps/shop/shop.py:quote"),
        ("apps", "./shop/shop.py:quote"),
    ],
)
def test_run_takes_a_file_path_and_its_sibling_imports_work(
    shop: Path, cwd: str, target: str
) -> None:
    out = gs("run", target, "pear", "--json", cwd=shop / cwd)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["output"] == {"item": "pear", "qty": 1, "price": 4, "tags": None}
    assert gs("run", "shop:quote", "fig", cwd=shop / "apps" / "shop").returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["shop.py:quot"],
            "'shop.py' has no attribute 'quot'; its workflows: free, quote",
        ),
        (
            ["shop.py:unit_price"],
            "shop.py:unit_price is a function, not a Workflow (decorate it with @workflow); "
            "its workflows: free, quote",
        ),
        (["nope.py:quote"], "no such file: nope.py"),
        (["pricing:quote"], "'pricing' has no attribute 'quote'; it defines no workflows"),
        (
            ["shop.py:quote", "pear", "2", "x", "y"],
            "workflow 'quote' takes 3 arguments (item, qty, tags), but 4 were given",
        ),
        (
            ["shop.py:quote"],
            "workflow 'quote' is missing argument 'item'; its parameters: item, qty=1, tags=None",
        ),
        (
            ["shop.py:quote", "pear", "--arg", "qyt=2"],
            "workflow 'quote' has no parameter 'qyt'; its parameters: item, qty=1, tags=None "
            "(check the --arg or --input names)",
        ),
        (
            ["shop.py:quote", "pear", "--arg", "item=fig"],
            "argument 'item' is given twice",
        ),
        (["shop.py:quote", "--arg", "item"], "--arg expects NAME=VALUE, got 'item'"),
        (["shop.py:quote", "--input", "{item: 1}"], "--input is not valid JSON (Expecting"),
        (["shop.py:quote", "--input", "[1]"], "--input must be a JSON object of argument names"),
        (["shop.py:quote", "--input", "@none.json"], "--input @none.json: cannot read none.json"),
        (
            ["shop.py:quote", "pear", "--arg", "qty=many"],
            "workflow 'quote': invalid input (qty: Input should be a valid integer",
        ),
        (
            # item=42 is fine for `item: str`; only the argument that is wrong is named.
            ["shop.py:quote", "--arg", "item=42", "--arg", "qty=lots"],
            "workflow 'quote': invalid input (qty: Input should be a valid integer",
        ),
    ],
)
def test_wrong_targets_and_arguments_are_one_line_before_the_run(
    shop: Path, args: list[str], message: str
) -> None:
    out = gs("run", *args, cwd=shop / "apps" / "shop")
    assert out.returncode == 2, out.stdout
    assert message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert out.stdout == ""  # nothing ran


def test_input_and_arg_pass_typed_keyword_arguments(shop: Path) -> None:
    where = shop / "apps" / "shop"
    (where / "args.json").write_text('{"item": "plum", "qty": 2}')

    def output(*args: str) -> object:
        out = gs("run", "shop.py:quote", *args, "--json", cwd=where)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["output"]

    # Positional words are text, converted to the annotation (qty: int).
    assert output("kiwi", "3") == {"item": "kiwi", "qty": 3, "price": 12, "tags": None}
    # ... wherever they stand among the options.
    assert output("kiwi", "--no-live", "3") == {"item": "kiwi", "qty": 3, "price": 12, "tags": None}
    assert output("--input", '{"item": "kiwi", "qty": 2, "tags": ["ripe"]}') == {
        "item": "kiwi",
        "qty": 2,
        "price": 8,
        "tags": ["ripe"],
    }
    # --arg wins over --input; its value is JSON when it parses, else text; a str
    # parameter keeps the text as typed (item=42 is "42", not 42).
    assert output("--input", "@args.json", "--arg", "qty=5", "--arg", 'tags=["a"]') == {
        "item": "plum",
        "qty": 5,
        "price": 20,
        "tags": ["a"],
    }
    assert output("--arg", "item=42") == {"item": "42", "qty": 1, "price": 2, "tags": None}
    # A workflow taking *args and **kwargs gets what it is given, as given.
    free = gs("run", "shop.py:free", "a", "b", "--arg", "n=1", "--arg", "s=x", "--json", cwd=where)
    assert json.loads(free.stdout)["output"] == [["a", "b"], {"n": 1, "s": "x"}]
