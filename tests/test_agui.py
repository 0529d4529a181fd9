"""groundswell.agui: a workflow or an agent served to AG-UI clients.

A real uvicorn server on a loopback port runs the ASGI app; the tests POST a
``RunAgentInput`` made with ``ag_ui.core``'s own model and read the SSE stream
back into ``ag_ui.core`` event models (each validated), as a client would.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import uvicorn
from ag_ui.core import (
    AssistantMessage,
    Event,
    EventType,
    FunctionCall,
    RunAgentInput,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pydantic import TypeAdapter

from groundswell import Agent, ConfigurationError, WorkflowContext, agui, workflow
from groundswell.testing import FakeAnthropicAPI, Reply, text, tool_use

EVENT = TypeAdapter(Event)
T = EventType


class Server:
    """A real uvicorn server for ``app`` on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Server] = []

    def start(target: Any, **options: Any) -> str:
        server = Server(agui.app(target, **options)).__enter__()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.__exit__()


def run_input(*messages: Any, **fields: Any) -> str:
    """A RunAgentInput as a client sends it (ag_ui.core's own model, camelCase JSON)."""
    model = RunAgentInput(thread_id="thread-1", run_id="run-1", messages=list(messages), **fields)
    return model.model_dump_json(by_alias=True)


def post(url: str, body: str) -> list[Any]:
    """POST ``body`` and parse the SSE stream into validated AG-UI event models."""
    response = httpx2.post(url, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for chunk in response.text.split("\n\n"):
        if chunk.strip():
            assert chunk.startswith("data: "), chunk
            events.append(EVENT.validate_python(json.loads(chunk.removeprefix("data: "))))
    return events


def types(events: list[Any]) -> list[EventType]:
    return [e.type for e in events]


def apply(state: Any, patch: list[dict[str, Any]]) -> Any:
    """Apply a JSON Patch (add, remove, replace: what STATE_DELTA sends) as a client would."""
    state = copy.deepcopy(state)
    for op in patch:
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        if not keys:
            state = op["value"]
            continue
        target = state
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if op["op"] == "remove":
            del target[keys[-1]]
        else:
            target[keys[-1]] = op["value"]
    return state


def user(content: str, id: str = "u1") -> UserMessage:
    return UserMessage(id=id, content=content)


def test_an_agents_answer_streams_as_one_text_message(serve: Any) -> None:
    answer = "Paris is the capital of France, on the Seine."
    seen: list[Any] = []

    def model(request: Any) -> Any:
        seen.append(request.body["messages"])
        return text(answer)

    agent = Agent(name="geo", client=FakeAnthropicAPI(model).client())
    url = serve(agent)
    events = post(
        url,
        run_input(
            user("Name a river in France."),
            AssistantMessage(id="a1", content="The Seine."),
            user("And the capital?", id="u2"),
        ),
    )
    kinds = types(events)
    assert kinds[0] == T.RUN_STARTED and kinds[-1] == T.RUN_FINISHED
    assert kinds[1] == T.TEXT_MESSAGE_START and kinds[-2] == T.TEXT_MESSAGE_END
    assert set(kinds[2:-2]) == {T.TEXT_MESSAGE_CONTENT} and len(kinds[2:-2]) > 1  # deltas
    assert len({e.message_id for e in events[1:-1]}) == 1
    assert events[1].role == "assistant"
    assert "".join(e.delta for e in events[2:-2]) == answer
    assert events[0].thread_id == "thread-1" and events[0].run_id == "run-1"
    assert events[-1].result == answer
    # The conversation before the last user message was the prompt's history.
    assert [m["role"] for m in seen[0]] == ["user", "assistant", "user"]
    assert seen[0][-1]["content"] == "And the capital?"


def test_a_tool_call_streams_start_args_end_and_its_result(serve: Any) -> None:
    def forecast(city: str) -> str:
        """The weather in a city."""
        return f"rainy in {city}"

    fake = FakeAnthropicAPI([tool_use("forecast", {"city": "Lyon"}), text("Take an umbrella.")])
    url = serve(Agent(name="weather", tools=[forecast], client=fake.client()))
    events = post(url, run_input(user("Weather in Lyon?")))
    tools = [e for e in events if e.type.name.startswith("TOOL_CALL")]
    assert types(tools) == [
        T.TOOL_CALL_START,
        T.TOOL_CALL_ARGS,
        T.TOOL_CALL_END,
        T.TOOL_CALL_RESULT,
    ]
    start, args, end, result = tools
    call_id = start.tool_call_id
    assert call_id.startswith("toolu_") and {args.tool_call_id, end.tool_call_id} == {call_id}
    assert result.tool_call_id == call_id
    assert start.tool_call_name == "forecast"
    assert json.loads(args.delta) == {"city": "Lyon"}
    assert result.content == "rainy in Lyon" and result.role == "tool"
    # The answer after the tool is a message of its own, not the tool call's turn.
    texts = [e for e in events if e.type == T.TEXT_MESSAGE_START]
    assert len(texts) == 1 and texts[0].message_id != start.parent_message_id
    assert start.parent_message_id and result.message_id not in {
        texts[0].message_id,
        start.parent_message_id,
    }
    assert types(events)[-1] == T.RUN_FINISHED and events[-1].result == "Take an umbrella."


def test_a_workflows_steps_and_state_changes_stream_as_steps_and_json_patches(
    serve: Any,
) -> None:
    asked: list[str] = []

    def model(request: Any) -> Any:
        asked.append(request.body["messages"][-1]["content"])
        return text("A short poem about tea.")

    writer = Agent(name="writer", client=FakeAnthropicAPI(model).client())

    @workflow(name="poem")
    async def poem(ctx: WorkflowContext, topic: str, lines: int = 2) -> str:
        draft = await ctx.step("draft", lambda: writer.prompt(f"{lines} lines on {topic}"))
        ctx.state["drafts"] = ctx.state.get("drafts", 0) + 1
        ctx.state["topic"] = topic

        def polish() -> str:
            ctx.state["tags"] = ["short", "tea"]
            del ctx.state["old"]
            return draft.upper()

        return await ctx.step("polish", polish)

    url = serve(poem)
    events = post(
        url,
        run_input(user("tea"), state={"drafts": 0, "old": True}, forwarded_props={"lines": 4}),
    )
    kinds = types(events)
    assert kinds[:2] == [T.RUN_STARTED, T.STATE_SNAPSHOT]
    assert events[1].snapshot == {"drafts": 0, "old": True}  # the client's state, as ctx.state
    steps = [(e.type, e.step_name) for e in events if e.type in (T.STEP_STARTED, T.STEP_FINISHED)]
    assert steps == [
        (T.STEP_STARTED, "draft"),
        (T.STEP_FINISHED, "draft"),
        (T.STEP_STARTED, "polish"),
        (T.STEP_FINISHED, "polish"),
    ]
    # The prompt inside the first step streamed its text within the step.
    draft = kinds[kinds.index(T.STEP_STARTED) : kinds.index(T.STEP_FINISHED)]
    assert T.TEXT_MESSAGE_START in draft and T.TEXT_MESSAGE_END in draft
    state = events[1].snapshot
    deltas = [e for e in events if e.type == T.STATE_DELTA]
    assert deltas, "no STATE_DELTA"
    for delta in deltas:
        state = apply(state, [op.model_dump(by_alias=True) for op in delta.delta])
    assert state == {"drafts": 1, "topic": "tea", "tags": ["short", "tea"]}
    # The changes made between the steps arrive between them, before `polish` starts.
    between = kinds[kinds.index(T.STEP_FINISHED) : kinds.index(T.STEP_STARTED, 3)]
    assert T.STATE_DELTA in between
    assert events[-1].type == T.RUN_FINISHED and events[-1].result == "A SHORT POEM ABOUT TEA."
    # forwardedProps named `lines`; the last user message filled the first argument left.
    assert asked == ["4 lines on tea"]


def test_a_sub_agent_in_a_tool_streams_as_a_subagent_of_the_run(serve: Any) -> None:
    researcher = Agent(
        name="researcher", client=FakeAnthropicAPI([text("Lyon has 500,000 people.")]).client()
    )

    async def research(question: str) -> str:
        """Ask the researcher."""
        return await researcher.prompt(question)

    lead = Agent(
        name="lead",
        tools=[research],
        client=FakeAnthropicAPI(
            [tool_use("research", {"question": "Population of Lyon?"}), text("About 500k.")]
        ).client(),
    )
    events = post(serve(lead), run_input(user("How big is Lyon?")))
    (started,) = [e for e in events if e.type == T.SUBAGENT_STARTED]
    (call,) = [e for e in events if e.type == T.TOOL_CALL_START]
    assert started.name == "researcher" and started.parent_tool_call_id == call.tool_call_id
    assert started.parent_message_id == call.parent_message_id
    sub = started.subagent_run_id
    inner = [e for e in events if getattr(e, "subagent_run_id", None) == sub]
    assert types(inner)[0] == T.SUBAGENT_STARTED and types(inner)[-1] == T.SUBAGENT_FINISHED
    inner_texts = [e for e in inner if e.type == T.TEXT_MESSAGE_CONTENT]
    assert "".join(e.delta for e in inner_texts) == "Lyon has 500,000 people."
    outer_texts = [
        e for e in events if e.type == T.TEXT_MESSAGE_CONTENT and e.subagent_run_id is None
    ]
    assert "".join(e.delta for e in outer_texts) == "About 500k."
    assert {e.message_id for e in inner_texts}.isdisjoint({e.message_id for e in outer_texts})
    # Its events come between the call's start and its result, as they happened.
    kinds = types(events)
    assert (
        kinds.index(T.TOOL_CALL_END)
        < kinds.index(T.SUBAGENT_STARTED)
        < kinds.index(T.SUBAGENT_FINISHED)
        < kinds.index(T.TOOL_CALL_RESULT)
    )


def test_a_spawned_workflows_steps_are_named_by_their_path(serve: Any) -> None:
    @workflow(name="fetch")
    async def fetch(ctx: WorkflowContext, url: str) -> int:
        return await ctx.step("download", lambda: len(url))

    @workflow(name="crawl")
    async def crawl(ctx: WorkflowContext, url: str) -> int:
        return await ctx.step("child", lambda: ctx.spawn_workflow(fetch, url))

    events = post(serve(crawl), run_input(user("https://example.org")))
    names = [e.step_name for e in events if e.type == T.STEP_STARTED]
    assert names == ["child", "child/fetch/download"]
    (started,) = [e for e in events if e.type == T.SUBAGENT_STARTED]
    assert started.name == "fetch"
    (inner,) = [e for e in events if e.type == T.STEP_STARTED and e.subagent_run_id]
    assert inner.subagent_run_id == started.subagent_run_id
    assert events[-1].type == T.RUN_FINISHED and events[-1].result == len("https://example.org")


def test_a_failed_run_ends_with_run_error_and_no_secret(serve: Any) -> None:
    key = "sk-ant-api03-" + "Zx9" * 20

    @workflow(name="charge")
    async def charge(ctx: WorkflowContext, order: str) -> str:
        def pay() -> str:
            raise RuntimeError(f"payment gateway refused key {key}")

        return await ctx.step("pay", pay)

    events = post(serve(charge), run_input(user("order-7")))
    kinds = types(events)
    assert kinds[-1] == T.RUN_ERROR and T.RUN_FINISHED not in kinds
    assert (T.STEP_FINISHED, "pay") in [(e.type, getattr(e, "step_name", None)) for e in events]
    error = events[-1]
    assert "payment gateway refused" in error.message and "pay" in error.message
    assert key not in json.dumps([e.model_dump(mode="json") for e in events])


def test_secrets_in_tool_results_and_state_are_scrubbed(serve: Any) -> None:
    token = "ghp_" + "a1B2c3D4e5" * 4

    def lookup() -> str:
        """Read the deploy config."""
        return f"deploy with GITHUB token {token}"

    agent = Agent(
        name="ops",
        tools=[lookup],
        client=FakeAnthropicAPI([tool_use("lookup", {}), text("Done.")]).client(),
    )

    @workflow(name="deploy")
    async def deploy(ctx: WorkflowContext, what: str) -> str:
        ctx.state["api_key"] = "k-" + "9" * 20
        return await ctx.step("ask", lambda: agent.prompt(what))

    events = post(serve(deploy), run_input(user("deploy it")))
    raw = json.dumps([e.model_dump(mode="json") for e in events])
    assert token not in raw and "9" * 20 not in raw
    (result,) = [e for e in events if e.type == T.TOOL_CALL_RESULT]
    assert "**********" in result.content


def test_events_reach_the_client_while_the_run_is_still_going(serve: Any) -> None:
    release = threading.Event()

    @workflow(name="slow")
    async def slow(ctx: WorkflowContext, topic: str) -> str:
        await ctx.step("first", lambda: "ok")
        await ctx.step("wait", lambda: asyncio.to_thread(release.wait, 10))
        return topic

    url = serve(slow)
    seen: list[Any] = []
    with httpx2.stream("POST", url, content=run_input(user("x")), timeout=10) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(EVENT.validate_python(json.loads(line.removeprefix("data: "))))
                if (seen[-1].type, getattr(seen[-1], "step_name", None)) == (
                    T.STEP_STARTED,
                    "wait",
                ):
                    release.set()  # the run is held until the client has seen this
    assert types(seen)[-1] == T.RUN_FINISHED


def test_a_conversation_continues_with_tool_messages_from_the_client(serve: Any) -> None:
    seen: list[Any] = []

    def model(request: Any) -> Any:
        seen.append(request.body["messages"])
        return text("It was rainy.")

    url = serve(Agent(name="weather", client=FakeAnthropicAPI(model).client()))
    call = ToolCall(id="toolu_1", function=FunctionCall(name="forecast", arguments='{"c": "Lyon"}'))
    post(
        url,
        run_input(
            user("Weather?"),
            AssistantMessage(id="a1", tool_calls=[call]),
            ToolMessage(id="t1", tool_call_id="toolu_1", content="rainy"),
            AssistantMessage(id="a2", content="Rainy."),
            user("And yesterday?", id="u2"),
        ),
    )
    sent = seen[0]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[1]["content"][0] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "forecast",
        "input": {"c": "Lyon"},
    }
    assert sent[2]["content"][0]["tool_use_id"] == "toolu_1"


def test_bad_requests_get_a_json_error_naming_what_was_wrong(serve: Any) -> None:
    @workflow(name="count")
    async def count(ctx: WorkflowContext, n: int) -> int:
        return n

    url = serve(count)
    missing = httpx2.post(url, content=json.dumps({"runId": "r", "messages": []}))
    assert missing.status_code == 422 and "threadId" in missing.json()["error"]
    not_json = httpx2.post(url, content=b"{not json")
    assert not_json.status_code == 422 and "not JSON" in not_json.json()["error"]
    wrong_arg = httpx2.post(url, content=run_input(user("x"), forwarded_props={"n": "many"}))
    assert wrong_arg.status_code == 422 and "n" in wrong_arg.json()["error"]
    bad_state = httpx2.post(url, content=run_input(user("3"), state=[1, 2]))
    assert bad_state.status_code == 422 and "state must be a JSON object" in bad_state.text
    info = httpx2.get(url)
    assert info.status_code == 200 and info.json()["kind"] == "workflow"
    assert info.json()["name"] == "count"
    assert httpx2.put(url).status_code == 405
    assert httpx2.post(url + "/elsewhere", content=b"{}").status_code == 404
    ok = post(url, run_input(user("3")))
    assert ok[-1].result == 3


def test_an_agent_needs_the_conversation_to_end_with_a_user_message(serve: Any) -> None:
    url = serve(Agent(name="a", client=FakeAnthropicAPI([text("hi")]).client()))
    response = httpx2.post(
        url, content=run_input(user("hi"), AssistantMessage(id="a", content="yo"))
    )
    assert response.status_code == 422
    assert "must end with a user message" in response.json()["error"]


def test_app_refuses_what_it_cannot_serve() -> None:
    with pytest.raises(ConfigurationError, match="serves a Workflow or an Agent"):
        agui.app(lambda: None)  # type: ignore[arg-type]


def test_an_answer_from_the_cache_arrives_as_one_whole_message(serve: Any) -> None:
    fake = FakeAnthropicAPI([text("Bonjour tout le monde, et bienvenue.")])
    url = serve(Agent(name="greeter", enable_cache=True, client=fake.client()))
    first = post(url, run_input(user("Say hello in French.")))
    again = post(url, run_input(user("Say hello in French.")))
    assert len(fake.requests) == 1  # the second answer came from the cache: no model call
    texts = [e for e in again if e.type == T.TEXT_MESSAGE_CONTENT]
    assert types(again) == [
        T.RUN_STARTED,
        T.TEXT_MESSAGE_START,
        T.TEXT_MESSAGE_CONTENT,
        T.TEXT_MESSAGE_END,
        T.RUN_FINISHED,
    ]
    assert texts[0].delta == "".join(e.delta for e in first if e.type == T.TEXT_MESSAGE_CONTENT)


def test_a_turn_cut_off_mid_stream_is_retried_and_its_partial_message_is_marked_void(
    serve: Any,
) -> None:
    cut = Reply([{"type": "text", "text": "A long answer that breaks off"}], cut_stream=True)
    fake = FakeAnthropicAPI([cut, text("The whole answer.")])
    events = post(serve(Agent(name="flaky", client=fake.client())), run_input(user("Go")))
    (retry,) = [e for e in events if e.type == T.CUSTOM]
    assert retry.name == "groundswell.retry"
    starts = [e.message_id for e in events if e.type == T.TEXT_MESSAGE_START]
    assert len(starts) == 2 and retry.value["messageId"] == starts[0]
    kinds = types(events)
    assert kinds.index(T.CUSTOM) > kinds.index(T.TEXT_MESSAGE_END)  # the void one closed first
    final = [
        e.delta for e in events if e.type == T.TEXT_MESSAGE_CONTENT and e.message_id == starts[1]
    ]
    assert "".join(final) == "The whole answer." and events[-1].result == "The whole answer."


def test_a_sub_agent_run_on_another_thread_streams_into_the_same_run(serve: Any) -> None:
    checker = Agent(name="checker", client=FakeAnthropicAPI([text("Spelling is fine.")]).client())

    def check(text_to_check: str) -> str:
        """Check the spelling (a plain function: it runs on a worker thread)."""
        return checker.run_sync(text_to_check).output

    editor = Agent(
        name="editor",
        tools=[check],
        client=FakeAnthropicAPI(
            [tool_use("check", {"text_to_check": "teh cat"}), text("Checked.")]
        ).client(),
    )
    events = post(serve(editor), run_input(user("Check 'teh cat'.")))
    (started,) = [e for e in events if e.type == T.SUBAGENT_STARTED]
    inner = [e for e in events if getattr(e, "subagent_run_id", None) == started.subagent_run_id]
    deltas = [e.delta for e in inner if e.type == T.TEXT_MESSAGE_CONTENT]
    assert "".join(deltas) == "Spelling is fine."
    assert types(inner)[-1] == T.SUBAGENT_FINISHED and events[-1].type == T.RUN_FINISHED


def test_concurrent_runs_each_stream_only_their_own_events(serve: Any) -> None:
    @workflow(name="tally")
    async def tally(ctx: WorkflowContext, label: str) -> str:
        for i in range(3):
            await ctx.step(f"count-{i}", lambda: asyncio.sleep(0.02))
            ctx.state["count"] = i + 1
        return label

    url = serve(tally)
    results: dict[str, list[Any]] = {}

    def client(label: str) -> None:
        results[label] = post(url, run_input(user(label), state={"who": label}))

    threads = [threading.Thread(target=client, args=(label,)) for label in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for label, events in results.items():
        assert events[1].snapshot == {"who": label} and events[-1].result == label
        assert types(events).count(T.STEP_STARTED) == 3
        state = events[1].snapshot
        for delta in [e for e in events if e.type == T.STATE_DELTA]:
            state = apply(state, [op.model_dump(by_alias=True) for op in delta.delta])
        assert state == {"who": label, "count": 3}
    assert sorted(results) == ["a", "b", "c"]


def test_a_client_that_goes_away_cancels_the_run(serve: Any) -> None:
    cancelled = threading.Event()

    async def wait_forever() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @workflow(name="endless")
    async def endless(ctx: WorkflowContext, topic: str) -> str:
        await ctx.step("wait", wait_forever)
        return topic

    url = serve(endless)
    with httpx2.stream("POST", url, content=run_input(user("x")), timeout=10) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and "STEP_STARTED" in line:
                break  # leave mid-run: the connection closes
    assert cancelled.wait(10), "the run went on after its client left"


def test_a_batched_prompt_is_sent_whole_when_its_batch_answers(serve: Any) -> None:
    fake = FakeAnthropicAPI([text("Batched answers come whole.")])
    summarizer = Agent(name="summarizer", client=fake.client())

    @workflow(name="nightly", batch=True)
    async def nightly(ctx: WorkflowContext, doc: str) -> str:
        return await ctx.step("summarize", lambda: summarizer.prompt(doc))

    events = post(serve(nightly), run_input(user("a long document")))
    assert events[-1].type == T.RUN_FINISHED, events[-1]
    contents = [e.delta for e in events if e.type == T.TEXT_MESSAGE_CONTENT]
    assert contents == ["Batched answers come whole."]
    assert all("batches" in r.path for r in fake.requests)  # through the Message Batches API
