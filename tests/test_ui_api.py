"""The dev UI's API (``groundswell ui``) on a real server: runs from a trace folder written by
real runs, one run's tree and node details, live runs as server-sent events, waits answered
through the UI's calls, workflows started from the form, and the token rules."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from groundswell_history import serve_app, serving
from groundswell_history.auth import issue_operator_token, issue_token
from groundswell_jsonl import JsonlSink
from groundswell_lru import LRUCache
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    Prompt,
    ReflectionConfig,
    TokenBudget,
    WorkflowContext,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, text, tool_use
from groundswell.tree.labels import label_parts

from .test_history_api import SECRET

CLI = (sys.executable, "-m", "groundswell.cli")
KEY = "sk-ant-api03-" + "Q" * 40  # shaped like a real key: the scrubber must hide it
ADA = {"Authorization": f"Bearer {issue_operator_token('ada', SECRET)}"}
ALICE = {"Authorization": f"Bearer {issue_token('alice', SECRET)}"}

pytestmark = pytest.mark.usefixtures("no_wait_left_open")


def lookup(city: str) -> str:
    """The weather in a city."""
    if city == "Atlantis":
        raise ValueError("no such city")
    return f"sunny in {city}"


def weather_agent(fake: FakeAnthropicAPI) -> Agent:
    return Agent(
        name="forecaster",
        system=f"You report the weather. Key: {KEY}",
        tools=[lookup],
        client=fake.client(),
        token_budget=TokenBudget(max_total=2000, reserve_for_output=1000, warning_threshold=0.1),
    )


@workflow(name="forecast")
async def forecast(ctx: WorkflowContext, city: str) -> str:
    fake = FakeAnthropicAPI([tool_use("lookup", {"city": city}), text(f"It is sunny in {city}.")])
    agent = weather_agent(fake)
    return str(await ctx.step("ask", lambda: agent.prompt(f"Weather in {city}?")))


@workflow(name="parse")
async def parse(ctx: WorkflowContext, price: str) -> float:
    return await ctx.step("parse", lambda: float(price.removeprefix("$")))


@workflow(name="interview")
async def interview(ctx: WorkflowContext, topic: str, rounds: int = 1) -> str:
    """Asks a person about a topic, then has an agent sum it up."""
    await ctx.step("prepare", lambda: topic.upper())
    answer = await ctx.ask(f"What do you think of {topic}?")
    summary = await ctx.step(
        "sum-up", lambda: Agent(name="summer").prompt(f"Sum up: {answer} ({rounds})")
    )
    return f"{answer} / {summary}"


@pytest.fixture
async def traces(tmp_path: Path, add_sink: Callable[..., str]) -> Path:
    """A trace folder written by the bundled JSONL sink during three real runs."""
    folder = tmp_path / "traces"
    add_sink(JsonlSink(folder), "ui-test-jsonl")
    await forecast.run("Paris")
    await asyncio.sleep(0.01)  # distinct start times, for the newest-first order
    await forecast.run("Oslo")
    with pytest.raises(groundswell.WorkflowError):
        await parse.run("ten dollars")
    assert groundswell.flush_sinks()
    assert len(list(folder.glob("*.jsonl"))) == 3
    return folder


@pytest.fixture
async def ui(traces: Path) -> AsyncIterator[httpx2.AsyncClient]:
    app = serve_app(trace_dir=traces, workflows=[interview, forecast], secret=SECRET)
    async with (
        serving(app, port=0) as server,
        httpx2.AsyncClient(base_url=server.url, timeout=10, headers=ADA) as client,
    ):
        yield client


async def runs(client: httpx2.AsyncClient, **query: str) -> list[dict[str, Any]]:
    answer = await client.get("/api/runs", params=query)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["runs"]
    return found


async def test_runs_are_listed_newest_first_with_status_duration_tokens_and_cost(
    ui: httpx2.AsyncClient,
) -> None:
    listed = [r for r in await runs(ui) if r["source"] == "trace"]
    assert [(r["name"], r["status"]) for r in listed] == [
        ("parse", "failed"),
        ("forecast", "completed"),
        ("forecast", "completed"),
    ]
    newest = listed[1]
    assert newest["duration"] > 0
    assert newest["input_tokens"] > 0 and newest["output_tokens"] > 0
    assert newest["cost_usd"] > 0
    assert newest["file"].endswith(f"-{newest['run_id']}.jsonl")
    assert listed[1]["started_at"] > listed[2]["started_at"]


async def test_runs_are_searched_by_name_status_and_date(ui: httpx2.AsyncClient) -> None:
    assert {r["name"] for r in await runs(ui, name="FORE")} == {"forecast"}
    assert [r["name"] for r in await runs(ui, status="failed")] == ["parse"]
    today = dt.date.today()
    assert len(await runs(ui, since=today.isoformat(), until=today.isoformat())) == 3
    assert await runs(ui, since=(today + dt.timedelta(days=1)).isoformat()) == []
    assert await runs(ui, until=(today - dt.timedelta(days=1)).isoformat()) == []
    assert len(await runs(ui, limit="1")) == 1
    bad = await ui.get("/api/runs", params={"status": "done"})
    assert bad.status_code == 422 and "status must be one of" in bad.json()["message"]
    bad = await ui.get("/api/runs", params={"since": "yesterday"})
    assert bad.status_code == 422 and "not a date or time: 'yesterday'" in bad.json()["message"]
    bad = await ui.get("/api/runs", params={"stauts": "failed"})
    assert bad.status_code == 422 and "stauts" in bad.json()["message"]


async def test_a_runs_tree_reads_like_render_and_its_nodes_show_their_details(
    ui: httpx2.AsyncClient, traces: Path
) -> None:
    (run,) = [r for r in await runs(ui, name="forecast")][:1]
    view = (await ui.get(f"/api/runs/{run['run_id']}")).json()
    tree = groundswell.EventTree.load(traces / run["file"])
    rendered = tree.render().splitlines()
    assert len(view["nodes"]) == len(rendered)
    for node, line in zip(view["nodes"], rendered, strict=True):
        # The page draws each node's label from render()'s own pieces.
        label = node["label"][0][0] + " " + node["label"][1][0] + " " + node["label"][2][0]
        label += "".join("  " + text for text, _ in node["label"][3:])
        assert line.endswith(label)
    types = [n["type"] for n in view["nodes"]]
    assert types == ["workflow", "step", "prompt", "model_call", "tool_call", "model_call"]
    assert view["nodes"][0]["start"] == 0 and view["span"] > 0
    assert all(n["end"] >= n["start"] for n in view["nodes"])

    second_call = view["nodes"][5]
    detail = (await ui.get(f"/api/runs/{run['run_id']}/nodes/{second_call['id']}")).json()
    assert KEY not in json.dumps(detail)
    assert detail["prompt"]["system"] == "You report the weather. Key: **********"
    assert detail["prompt"]["user"] == "Weather in Oslo?"
    roles = [m["role"] for m in detail["model_call"]["messages"]]
    assert roles == ["user", "assistant", "user"]
    (result,) = detail["model_call"]["messages"][2]["content"]
    assert (result["type"], result["content"], result["is_error"]) == (
        "tool_result",
        "sunny in Oslo",
        False,
    )
    assert detail["model_call"]["reply"]["content"] == [
        {"type": "text", "text": "It is sunny in Oslo."}
    ]
    assert detail["usage"]["input_tokens"] > 0 and "cache_read_input_tokens" in detail["usage"]
    assert detail["cost_usd"] > 0

    prompt = view["nodes"][2]
    detail = (await ui.get(f"/api/runs/{run['run_id']}/nodes/{prompt['id']}")).json()
    assert detail["budget"]["state"] == "warning"  # over 10% of the 1,000 input tokens
    assert detail["budget"]["threshold"] == 0.1 and detail["budget"]["limit"] > 0
    assert [c["status"] for c in detail["model_calls"]] == ["completed", "completed"]
    tool = (await ui.get(f"/api/runs/{run['run_id']}/nodes/{view['nodes'][4]['id']}")).json()
    assert tool["tool"] == {"input": {"city": "Oslo"}, "output": "sunny in Oslo", "is_error": False}

    missing = await ui.get(f"/api/runs/{run['run_id']}/nodes/nope")
    assert missing.status_code == 404
    assert (await ui.get("/api/runs/nope")).status_code == 404


async def test_a_failed_node_shows_its_error_and_traceback(ui: httpx2.AsyncClient) -> None:
    (run,) = await runs(ui, status="failed")
    view = (await ui.get(f"/api/runs/{run['run_id']}")).json()
    step = next(n for n in view["nodes"] if n["type"] == "step")
    assert step["mark"] == "✗" and step["status"] == "failed"
    detail = (await ui.get(f"/api/runs/{run['run_id']}/nodes/{step['id']}")).json()
    assert detail["error"]["type"] == "ValueError"
    assert detail["error"]["formatted"].startswith("Traceback (most recent call last):")
    assert 'float(price.removeprefix("$"))' in detail["error"]["formatted"]


class Score(BaseModel):
    score: int


@workflow(name="rate")
async def rate(ctx: WorkflowContext) -> int:
    fake = FakeAnthropicAPI([text("a good one"), text('{"score": 3}')])
    rater = Agent(
        name="rater",
        system=f"You rate things. Key: {KEY}",
        client=fake.client(),
        reflection=ReflectionConfig(strategy="feedback"),
        cache=LRUCache(),
    )
    ask = Prompt(user="Rate it", response_format=Score)
    first = await ctx.step("first", lambda: rater.prompt(ask))
    again = await ctx.step("again", lambda: rater.prompt(ask))
    return first.score + again.score


async def test_a_run_of_the_ui_process_shows_cache_hits_and_reflection_attempts_scrubbed(
    ui: httpx2.AsyncClient,
) -> None:
    result = await rate.run()  # in the UI's process: followed from its own events
    assert result.tree.root is not None
    run_id = result.tree.root.id
    deadline = time.monotonic() + 10
    # The live sink and the trace folder's writer take the events on threads of their
    # own: the trace may be complete first, and the live copy wins once it has it all.
    while (answer := await ui.get(f"/api/runs/{run_id}")).status_code != 200 or (
        answer.json()["status"] != "completed" or answer.json()["source"] != "live"
    ):
        assert time.monotonic() < deadline, answer.text
        await asyncio.sleep(0.02)
    view = answer.json()
    assert view["source"] == "live"
    assert [line["label"] for line in view["nodes"]] == [
        [list(p) for p in label_parts(node)] for node in result.tree.walk()
    ]
    prompts = [n for n in view["nodes"] if n["type"] == "prompt"]
    assert [p["status"] for p in prompts] == ["failed", "completed", "completed"]

    async def detail(node: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = (await ui.get(f"/api/runs/{run_id}/nodes/{node['id']}")).json()
        assert KEY not in json.dumps(found)
        return found

    retried = await detail(prompts[1])
    assert retried["reflection"]["attempt"] == 2
    assert [r["name"] for r in retried["reflection"]["reflections"]] == ["rater"]
    assert retried["prompt"]["system"] == "You rate things. Key: **********"
    failed = await detail(prompts[0])
    assert failed["error"]["type"] == "ResponseValidationError"
    assert failed["cache"] == "miss"
    hit = await detail(prompts[2])
    assert hit["cache"] == "hit"
    assert [e["type"] for e in hit["cache_events"]] == ["cache_hit"]
    assert "⚡ cache hit" in [text for text, _ in hit["label"]]


async def sse(response: httpx2.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    kind = ""
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            kind = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            yield kind, json.loads(line.removeprefix("data:"))


def names(events: list[tuple[str, dict[str, Any]]], kind: str) -> list[str]:
    return [
        e["data"].get("name") or e["data"]["id"] for k, e in events if k == kind and "data" in e
    ]


async def test_a_form_run_streams_its_nodes_live_and_its_wait_is_answered_through_the_ui(
    ui: httpx2.AsyncClient,
) -> None:
    listed = (await ui.get("/api/workflows")).json()["workflows"]
    (form,) = [w for w in listed if w["name"] == "interview"]
    assert form["description"].startswith("Asks a person")
    assert form["schema"]["required"] == ["topic"]
    assert form["schema"]["properties"]["rounds"]["default"] == 1

    started = await ui.post("/api/workflows/interview/run", json={"inputs": {"topic": "tea"}})
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    seen: list[tuple[str, dict[str, Any]]] = []
    async with ui.stream("GET", f"/api/runs/{run_id}/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = sse(stream)
        async for kind, event in events:
            seen.append((kind, event))
            if kind == "node_start" and event["data"]["type"] == "wait":
                break
        # The run waits: what has happened so far came live, and nothing after it yet.
        assert names(seen, "node_start") == ["interview", "prepare", "question"]
        assert "sum-up" not in json.dumps(seen)
        listed_runs = await runs(ui, status="waiting")
        assert [(r["run_id"], r["source"], r["waiting"]) for r in listed_runs] == [
            (run_id, "live", 1)
        ]
        (wait,) = (await ui.get("/api/waits", params={"run_id": run_id})).json()["waits"]
        assert wait["request"]["question"] == "What do you think of tea?"
        answered = await ui.post(f"/api/waits/{wait['id']}/answer", json={"value": "lovely"})
        assert answered.status_code == 200, answered.text
        async for kind, event in events:
            seen.append((kind, event))
    assert seen[-1] == ("end", {"run_id": run_id})
    assert names(seen, "node_start")[3:] == ["sum-up", "summer", "claude-sonnet-4-6"]
    assert names(seen, "node_end")[-1] == run_id
    view = (await ui.get(f"/api/runs/{run_id}")).json()
    assert (view["status"], view["source"]) == ("completed", "live")
    assert [n["type"] for n in view["nodes"]] == [
        "workflow",
        "step",
        "wait",
        "step",
        "prompt",
        "model_call",
    ]


async def test_a_form_run_checks_its_inputs_and_the_real_api_needs_a_key(
    ui: httpx2.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = await ui.post("/api/workflows/interview/run", json={"inputs": {"rounds": "many"}})
    assert wrong.status_code == 422
    assert "topic" in wrong.json()["message"] and "rounds" in wrong.json()["message"]
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    real = await ui.post(
        "/api/workflows/forecast/run", json={"inputs": {"city": "Rome"}, "mode": "real"}
    )
    assert real.status_code == 422 and "ANTHROPIC_API_KEY" in real.json()["message"]
    unknown = await ui.post("/api/workflows/nope/run", json={})
    assert unknown.status_code == 404 and "forecast, interview" in unknown.json()["message"]

    started = await ui.post("/api/workflows/forecast/run", json={"inputs": {"city": "Rome"}})
    run_id = started.json()["run_id"]
    deadline = time.monotonic() + 10
    while (view := (await ui.get(f"/api/runs/{run_id}")).json())["status"] != "completed":
        assert time.monotonic() < deadline, view
        await asyncio.sleep(0.02)
    # The fake (mode "fake") answered, not the scripted client the workflow built.
    prompt = next(n for n in view["nodes"] if n["type"] == "prompt")
    detail = (await ui.get(f"/api/runs/{run_id}/nodes/{prompt['id']}")).json()
    assert detail["prompt"]["output"] != "It is sunny in Rome."


FOLLOWED = """
import os, time
from pathlib import Path
from groundswell import WorkflowContext, workflow

@workflow(name="elsewhere")
async def elsewhere(ctx: WorkflowContext) -> str:
    await ctx.step("first", lambda: "one")
    async def gate() -> str:
        while not Path("go").exists():
            import asyncio
            await asyncio.sleep(0.02)
        return "two"
    await ctx.step("second", gate)
    return "done"

import asyncio
asyncio.run(elsewhere.run())
"""


async def test_a_run_of_another_process_is_followed_from_its_trace_file(
    ui: httpx2.AsyncClient, traces: Path, tmp_path: Path
) -> None:
    (tmp_path / "other.py").write_text(textwrap.dedent(FOLLOWED))
    env = {**os.environ, "GROUNDSWELL_TRACE_DIR": str(traces)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "other.py", cwd=tmp_path, env=env
    )
    try:
        deadline = time.monotonic() + 30
        while not (found := await runs(ui, name="elsewhere", status="running")):
            assert time.monotonic() < deadline and process.returncode is None
            await asyncio.sleep(0.05)
        (run,) = found
        assert run["source"] == "trace"
        seen: list[tuple[str, dict[str, Any]]] = []
        async with ui.stream("GET", f"/api/runs/{run['run_id']}/events") as stream:
            async for kind, event in sse(stream):
                seen.append((kind, event))
                if kind == "node_start" and event["data"]["name"] == "second":
                    (tmp_path / "go").touch()
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert names(seen, "node_start") == ["elsewhere", "first", "second"]
    assert names(seen, "node_end")[-1] == run["run_id"]
    assert seen[-1][0] == "end"


async def test_the_token_rules(ui: httpx2.AsyncClient) -> None:
    (run,) = (await runs(ui, status="failed"))[:1]
    paths = [
        "/api/runs",
        f"/api/runs/{run['run_id']}",
        f"/api/runs/{run['run_id']}/events",
        "/api/workflows",
    ]
    for path in paths:
        missing = await ui.get(path, headers={"Authorization": ""})
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        forged = await ui.get(path, headers={"Authorization": "Bearer gsho.YWRh.Zm9yZ2Vk"})
        assert forged.status_code == 401
        agent = await ui.get(path, headers=ALICE)
        assert agent.status_code == 403 and "operator token" in agent.json()["message"]
    post = await ui.post("/api/workflows/forecast/run", json={}, headers=ALICE)
    assert post.status_code == 403
    # The page holds no data: it loads without a token and asks for one.
    page = await ui.get("/ui/", headers={"Authorization": ""})
    assert page.status_code == 200 and 'id="login"' in page.text
    script = await ui.get("/ui/static/app.js", headers={"Authorization": ""})
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def outward_address() -> str:
    """This machine's address on its network (127.0.0.1 on a machine with none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # a documentation address: no packet is sent
        except OSError:
            return "127.0.0.1"
        address: str = sock.getsockname()[0]
        return address


def ui_env(tmp_path: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "GROUNDSWELL_HOME": str(tmp_path),
        "GROUNDSWELL_HISTORY_SECRET": SECRET.decode(),
    }
    env.pop("GROUNDSWELL_HISTORY_URL", None)
    return env


def launch_ui(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """``groundswell ui ARGS`` in a process of its own, and what it printed up to its link."""
    log = tmp_path / "log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [*CLI, "ui", *args], env=ui_env(tmp_path), stderr=stderr, cwd=tmp_path
        )
    deadline = time.monotonic() + 30
    while "#token=" not in (text := log.read_text()):
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            process.wait(10)
            raise AssertionError(f"groundswell ui printed no link: {text}")
        time.sleep(0.05)
    return process, text


def reached(url: str, token: str | None) -> httpx2.Response:
    """GET ``url`` (with ``token`` if any), once the server listens."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx2.get(url, headers=headers, timeout=10)
        except httpx2.ConnectError:
            assert time.monotonic() < deadline, f"nothing listens at {url}"
            time.sleep(0.05)


def test_groundswell_ui_serves_on_loopback_and_prints_a_link_with_a_token(
    tmp_path: Path,
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    groundswell.EventTree().save(traces / "empty.jsonl")  # a file with no run is skipped
    port = free_port()
    process, text = launch_ui(tmp_path, "--trace-dir", str(traces), "--port", str(port))
    try:
        link = next(line.strip() for line in text.splitlines() if "#token=" in line)
        assert link.startswith(f"http://127.0.0.1:{port}/ui/#token=gsho.")
        assert "warning" not in text
        token = link.partition("#token=")[2]
        answer = reached(f"http://127.0.0.1:{port}/api/runs", token)
        assert answer.status_code == 200
        assert answer.json()["runs"] == [] and answer.json()["trace_dir"] == str(traces)
    finally:
        process.terminate()
        process.wait(10)
    missing = subprocess.run(
        [*CLI, "ui", "--trace-dir", str(tmp_path / "nowhere")],
        env=ui_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0 and "no such folder" in missing.stderr


def test_groundswell_ui_on_a_network_address_refuses_requests_without_its_token(
    tmp_path: Path,
) -> None:
    (tmp_path / "traces").mkdir()
    port = free_port("0.0.0.0")
    where = ("--trace-dir", str(tmp_path / "traces"), "--host", "0.0.0.0", "--port", str(port))
    process, text = launch_ui(tmp_path, *where)
    try:
        assert "warning: listening on 0.0.0.0, reachable from other machines" in text
        link = next(line.strip() for line in text.splitlines() if "#token=" in line)
        token = link.partition("#token=")[2]
        # Asked the way another machine would: at this machine's network address.
        runs_url = f"http://{outward_address()}:{port}/api/runs"
        missing = reached(runs_url, None)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert "runs" not in missing.json()
        forged = reached(runs_url, "gsho.dWk.Zm9yZ2Vk")
        assert forged.status_code == 401
        other = reached(runs_url, issue_operator_token("ui", b"another-secret-of-32-characters!"))
        assert other.status_code == 401  # well formed, signed with another secret
        answer = reached(runs_url, token)
        assert answer.status_code == 200 and answer.json()["runs"] == []
    finally:
        process.terminate()
        process.wait(10)


def test_the_page_and_its_scripts_ship_in_the_wheel(groundswell_wheel: Path) -> None:
    from groundswell_history.api_ui import STATIC

    page = (STATIC / "index.html").read_text()
    assert "http://" not in page and "https://" not in page  # nothing from a CDN: works offline
    shipped = {
        name.rpartition("/")[2]
        for name in zipfile.ZipFile(groundswell_wheel).namelist()
        if name.startswith("groundswell_history/ui_static/")
    }
    assert shipped == {p.name for p in STATIC.iterdir()}
    assert {"index.html", "ui.css", "app.js", "api.js", "run.js", "details.js"} <= shipped
