"""What Groundswell's MCP client offers servers: elicitation, sampling, roots, progress, logs,
and a server's resources and prompts as tools.

Against the published ``@modelcontextprotocol/server-everything`` (and
``-filesystem`` for roots) over stdio, through the real ``anthropic`` client
and the fake Messages API; an in-process server of our own covers the 2026
protocol, where a server asks for input inside the call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel

from groundswell import (
    Agent,
    ConfigurationError,
    Elicitation,
    EventNode,
    PromptResult,
    TokenBudget,
)
from groundswell.testing import (
    FakeAnthropicAPI,
    MessagesRequest,
    Reply,
    auto_answer,
    text,
    tool_calls,
    tool_use,
)
from groundswell.waits import Decision, Wait

from .published_mcp import npm_server


def text_of(content: Any) -> str:
    """A tool result's content as text, whatever blocks it came in."""
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] if b.get("type") == "text" else json.dumps(b) for b in content)


def calling(*calls: tuple[str, dict[str, Any]]) -> Callable[[MessagesRequest], Reply]:
    """A model that makes ``calls`` one per turn, then answers with the last result's text."""

    def respond(request: MessagesRequest) -> Reply:
        done = request.tool_results()
        if len(done) < len(calls):
            return tool_use(*calls[len(done)])
        return text(text_of(done[-1]["content"]))

    return respond


def everything(**config: Any) -> dict[str, Any]:
    return {**npm_server("everything"), **config}


def only_call(result: PromptResult[Any]) -> EventNode:
    (call,) = result.tree.find(type="mcp_call")
    return call


def listed_tools(result: PromptResult[Any]) -> list[str]:
    (start,) = result.tree.find(type="mcp_connect")
    tools: list[str] = start.payload["output"]["tools"]
    return tools


HIDDEN = {
    "mcp__everything__trigger-elicitation-request",
    "mcp__everything__trigger-sampling-request",
    "mcp__everything__get-roots-list",
}


@pytest.mark.slow
async def test_server_everything_shows_its_hidden_tools_once_the_client_offers_them(
    tmp_path: Path,
) -> None:
    fake = FakeAnthropicAPI(["ok", "ok"])
    offered_to_model: list[set[str]] = []
    for config in [everything(), everything(sampling=True, roots=[tmp_path])]:
        result = await Agent(name="probe", mcps=[config], client=fake.client()).run("hi")
        assert set(listed_tools(result)) == {t["name"] for t in fake.message_requests[-1].tools}
        offered_to_model.append(set(listed_tools(result)))
    plain, offered = offered_to_model
    # Elicitation is always offered (a request nobody answers is declined); sampling and
    # roots only when the config asks for them.
    assert HIDDEN & plain == {"mcp__everything__trigger-elicitation-request"}
    assert offered >= HIDDEN


@pytest.mark.slow
async def test_a_long_running_tools_progress_is_on_its_node_and_in_the_stream() -> None:
    fake = FakeAnthropicAPI(
        calling(("mcp__everything__trigger-long-running-operation", {"duration": 1, "steps": 4}))
    )
    agent = Agent(name="waiter", mcps=[everything()], client=fake.client())
    async with agent:  # one server for both prompts
        result = await agent.run("Run the long operation.")
        events = [e async for e in agent.stream("Run it again.")]
    recorded = [e for e in only_call(result).events if e["type"] == "mcp_progress"]
    assert [(e["progress"], e["total"]) for e in recorded] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    streamed = [e.mcp for e in events if e.type == "mcp_progress" and e.mcp]
    (call_id,) = [e.tool_call["id"] for e in events if e.tool_call]
    assert [(p["progress"], p["total"]) for p in streamed] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert {(p["tool_use_id"], p["name"]) for p in streamed} == {
        (call_id, "mcp__everything__trigger-long-running-operation")
    }
    kinds = [e.type for e in events]
    # Between the call and its result, as they happened.
    assert kinds.index("tool_call") < kinds.index("mcp_progress") < kinds.index("tool_result")
    assert "Long running operation completed" in events[-1].result


LEVELS = {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}


@pytest.mark.slow
async def test_a_servers_log_message_during_a_call_is_on_its_node_and_in_the_stream() -> None:
    toggle = ("mcp__everything__toggle-simulated-logging", {})
    # Logging on (the server logs one message at once), then off again, per prompt.
    fake = FakeAnthropicAPI(calling(toggle, toggle))
    agent = Agent(name="logs", mcps=[everything()], client=fake.client())
    async with agent:
        result = await agent.run("Toggle logging on and off.")
        events = [e async for e in agent.stream("Once more.")]
    switched_on = result.tree.find(type="mcp_call")[0]
    (logged,) = [e for e in switched_on.events if e["type"] == "mcp_log"]
    assert logged["level"] in LEVELS
    assert logged["data"].endswith("message")  # "Notice-level message", ...
    streamed = [e.mcp for e in events if e.type == "mcp_log" and e.mcp]
    assert streamed[0]["name"] == "mcp__everything__toggle-simulated-logging"
    assert streamed[0]["level"] in LEVELS


ELICIT = ("mcp__everything__trigger-elicitation-request", {})


@pytest.mark.slow
async def test_an_elicitation_reaches_the_agents_handler_and_its_answer_the_server() -> None:
    asked: list[Elicitation] = []
    answers: list[Callable[[Elicitation], Any]] = [
        lambda r: r.accept({"name": "Ada Lovelace", "check": True, "integer": 7}),
        lambda r: {"action": "decline"},
        # No "name", which the server's schema requires: the server is told, not fooled.
        lambda r: r.accept({"check": True}),
    ]

    async def on_elicitation(request: Elicitation) -> Any:
        asked.append(request)
        return answers[len(asked) - 1](request)

    fake = FakeAnthropicAPI(calling(ELICIT))
    agent = Agent(
        name="form", mcps=[everything()], on_elicitation=on_elicitation, client=fake.client()
    )
    async with agent:
        accepted, declined, wrong = [await agent.run("Fill in the form.") for _ in answers]
    request = asked[0]
    assert (request.server, request.mode, request.tool) == (
        "everything",
        "form",
        "mcp__everything__trigger-elicitation-request",
    )
    assert request.message == "Please provide inputs for the following fields:"
    assert request.schema is not None and request.schema["required"] == ["name"]
    # The answer reached the server: its result repeats it.
    assert "- Name: Ada Lovelace" in accepted.output
    assert "- Favorite Integer: 7" in accepted.output
    (event,) = only_call(accepted).events
    assert (event["type"], event["action"], event["handler"]) == (
        "mcp_elicitation",
        "accept",
        "agent",
    )
    assert event["content"]["name"] == "Ada Lovelace"
    assert "declined to provide" in declined.output
    call = only_call(wrong)
    assert call.payload["is_error"]
    assert "does not fit the requested schema: 'name' is required" in wrong.output
    assert "does not fit the requested schema" in call.events[0]["error"]


@pytest.mark.slow
async def test_without_a_handler_a_person_answers_through_a_question_wait() -> None:
    asked: list[Wait] = []

    def person(wait: Wait) -> Any:
        asked.append(wait)
        if len(asked) == 1:
            return {"name": "Ada Lovelace", "check": True, "integer": 7}
        return Decision.reject("not filling that in")

    fake = FakeAnthropicAPI(calling(ELICIT))
    agent = Agent(name="attended", mcps=[everything()], client=fake.client())
    with auto_answer(person, by="operator"):
        async with agent:
            accepted, declined = [await agent.run("Fill in the form.") for _ in range(2)]
    wait = asked[0]
    assert (wait.kind, wait.request["server"], wait.request["mode"]) == (
        "question",
        "everything",
        "form",
    )
    assert wait.request["question"] == "Please provide inputs for the following fields:"
    assert wait.request["schema"]["required"] == ["name"]
    assert "- Name: Ada Lovelace" in accepted.output
    call = only_call(accepted)
    (event,) = call.events
    assert (event["action"], event["handler"]) == ("accept", "wait")
    (node,) = call.children
    assert (node.type, node.payload["answered_by"]) == ("wait", "operator")
    assert "declined to provide" in declined.output
    assert only_call(declined).events[0]["action"] == "decline"


@pytest.mark.slow
async def test_a_servers_own_on_elicitation_wins_over_the_agents() -> None:
    agents_calls: list[Elicitation] = []

    def agents(request: Elicitation) -> Any:  # a plain function runs in a thread
        agents_calls.append(request)
        return request.accept({"name": "wrong"})

    server = everything(on_elicitation=lambda request: request.cancel())
    fake = FakeAnthropicAPI(calling(ELICIT))
    agent = Agent(name="both", mcps=[server], on_elicitation=agents, client=fake.client())
    result = await agent.run("Fill in the form.")
    assert "cancelled the elicitation" in result.output
    assert agents_calls == []
    assert only_call(result).events[0]["handler"] == "server"


SAMPLE = (
    "mcp__everything__trigger-sampling-request",
    {"prompt": "Name a colour.", "maxTokens": 50},
)


@pytest.mark.slow
async def test_sampling_is_answered_by_the_configured_agent_under_the_call() -> None:
    sampler_api = FakeAnthropicAPI(["Teal, like the sea."])
    sampler = Agent(name="sampler", max_tokens=30, client=sampler_api.client())
    fake = FakeAnthropicAPI(calling(SAMPLE))
    agent = Agent(name="host", mcps=[everything(sampling=sampler)], client=fake.client())
    result = await agent.run("Ask the server to sample.")
    # The sampler's answer went back to the server, which returned it.
    assert "Teal, like the sea." in result.output
    assert '"stopReason": "endTurn"' in result.output
    (asked,) = sampler_api.message_requests
    assert asked.last_user_text() == "Resource trigger-sampling-request context: Name a colour."
    assert asked.system == "You are a helpful test server."
    assert asked.body["max_tokens"] == 30  # the server asked for 50: the agent's own cap wins
    assert asked.body["temperature"] == 0.7
    call = only_call(result)
    (prompt,) = [n for n in call.children if n.type == "prompt"]
    assert prompt.name == "sampler"
    assert [n.type for n in prompt.children] == ["model_call"]
    (event,) = call.events
    assert (event["type"], event["agent"], event["prompt_id"]) == (
        "mcp_sampling",
        "sampler",
        prompt.id,
    )


@pytest.mark.slow
async def test_sampling_true_answers_with_the_calling_agents_model() -> None:
    def respond(request: MessagesRequest) -> Reply:
        if request.system == "You are a helpful test server.":
            return text("Ochre.")
        return calling(SAMPLE)(request)

    fake = FakeAnthropicAPI(respond)
    agent = Agent(
        name="host",
        model="claude-haiku-4-5",
        mcps=[everything(sampling=True)],
        client=fake.client(),
    )
    result = await agent.run("Ask the server to sample.")
    assert "Ochre." in result.output
    sampled = [r for r in fake.message_requests if r.system == "You are a helpful test server."]
    assert [r.model for r in sampled] == ["claude-haiku-4-5"]
    assert sampled[0].body["max_tokens"] == 50
    (prompt,) = [n for n in only_call(result).children if n.type == "prompt"]
    assert prompt.name == "everything_sampling"


@pytest.mark.slow
async def test_sampling_true_never_asks_for_more_than_the_calling_agents_max_tokens() -> None:
    def respond(request: MessagesRequest) -> Reply:
        if request.system == "You are a helpful test server.":
            return text("Ochre.")
        return calling(SAMPLE)(request)

    fake = FakeAnthropicAPI(respond)
    budget = TokenBudget(max_total=50_000, reserve_for_output=20)
    agent = Agent(
        name="host",
        max_tokens=20,
        token_budget=budget,
        mcps=[everything(sampling=True)],
        client=fake.client(),
    )
    result = await agent.run("Ask the server to sample.")
    assert "Ochre." in result.output
    (sampled,) = [r for r in fake.message_requests if r.system == "You are a helpful test server."]
    assert sampled.body["max_tokens"] == 20  # the server asked for 50: the agent's cap wins
    (prompt,) = [n for n in only_call(result).children if n.type == "prompt"]
    assert prompt.name == "everything_sampling"


async def test_a_server_gets_an_error_past_the_completions_one_call_may_ask_for() -> None:
    from mcp.types import CreateMessageRequestParams, ErrorData

    from groundswell.mcp.capabilities import Call
    from groundswell.mcp.sampling import MAX_SAMPLING_PER_CALL, answer_sampling

    sampler = Agent(name="sampler", client=FakeAnthropicAPI(["Teal."] * 20).client())
    params = CreateMessageRequestParams.model_validate(
        {
            "messages": [{"role": "user", "content": {"type": "text", "text": "A colour?"}}],
            "maxTokens": 10,
        }
    )
    call = Call("poet", "verses")
    answers = [await answer_sampling("poet", sampler, params, call) for _ in range(11)]
    assert [a.content.text for a in answers[:MAX_SAMPLING_PER_CALL]] == ["Teal."] * 10  # type: ignore[union-attr]
    refused = answers[-1]
    assert isinstance(refused, ErrorData)
    assert "asked for more than 10 completions during one call of 'verses'" in refused.message


LONG = ("mcp__everything__trigger-long-running-operation", {"duration": 3, "steps": 3})


def side_by_side(*calls: tuple[str, dict[str, Any]]) -> Callable[[MessagesRequest], Reply]:
    """A model that makes ``calls`` at once (one turn), then answers "done"."""

    def respond(request: MessagesRequest) -> Reply:
        return text("done") if request.tool_results() else tool_calls(*calls)

    return respond


@pytest.mark.slow
async def test_with_two_calls_of_a_server_in_flight_its_requests_are_not_pinned_on_a_guess() -> (
    None
):
    asked: list[Elicitation] = []

    def on_elicitation(request: Elicitation) -> Any:
        asked.append(request)
        return request.decline()

    fake = FakeAnthropicAPI(side_by_side(LONG, ELICIT))
    agent = Agent(
        name="busy", mcps=[everything()], on_elicitation=on_elicitation, client=fake.client()
    )
    result = await agent.run("Run the long operation and fill in the form.")
    # The agent's handler still answered; the event is on the server's connect node, since
    # the request did not say which of the two calls it came from.
    assert [r.tool for r in asked] == [None]
    assert all(
        e["type"] != "mcp_elicitation" for c in result.tree.find(type="mcp_call") for e in c.events
    )
    (connect,) = result.tree.find(type="mcp_connect")
    (event,) = [e for e in connect.events if e["type"] == "mcp_elicitation"]
    assert (event["action"], event["calls_in_flight"]) == ("decline", 2)
    # 'sampling': True answers with the calling prompt's settings: with two calls it refuses.
    fake = FakeAnthropicAPI(side_by_side(LONG, SAMPLE))
    agent = Agent(name="busy", mcps=[everything(sampling=True)], client=fake.client())
    result = await agent.run("Run the long operation and sample.")
    assert not [r for r in fake.message_requests if r.system == "You are a helpful test server."]
    results = fake.message_requests[-1].tool_results()
    sampled = text_of(results[1]["content"])
    assert "while 2 of its tool calls ran" in sampled and "give 'sampling' an Agent" in sampled


@pytest.mark.slow
async def test_roots_from_the_config_are_the_directories_the_servers_see(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("water the plants")
    fake = FakeAnthropicAPI(calling(("mcp__everything__get-roots-list", {})))
    agent = Agent(name="roots", mcps=[everything(roots=[notes])], client=fake.client())
    listed = await agent.run("Which roots do you see?")
    assert f"URI: {notes.resolve().as_uri()}" in listed.output
    # server-filesystem started with no directory takes its allowed directories from roots.
    # It asks for them once started and applies the answer when it comes, so the model
    # lists the allowed directories until ours is there (no sleep: each look is a call).
    files = {**npm_server("filesystem"), "roots": [notes.as_uri()]}
    todo = str(notes.resolve() / "todo.txt")

    def respond(request: MessagesRequest) -> Reply:
        seen = [text_of(r["content"]) for r in request.tool_results()]
        if "water the plants" in seen:  # read: one more look, then the last one's answer
            if seen[-1] == "water the plants":
                return tool_use("mcp__filesystem__list_allowed_directories", {})
            return text(seen[-1])
        if seen and str(notes.resolve()) in seen[-1]:  # allowed now: read the file
            return tool_use("mcp__filesystem__read_text_file", {"path": todo})
        assert len(seen) < 40, "server-filesystem never took the roots it was given"
        return tool_use("mcp__filesystem__list_allowed_directories", {})

    fake = FakeAnthropicAPI(respond)
    reader = Agent(name="reader", mcps=[files], client=fake.client(), max_turns=50)
    read = await reader.run("Read my todo list.")
    contents = text_of(fake.message_requests[-1].tool_results()[-2]["content"])
    assert contents == "water the plants"
    assert read.output == f"Allowed directories:\n{notes.resolve()}"


@pytest.mark.slow
async def test_a_servers_resources_and_prompts_are_tools_the_agent_can_call() -> None:
    uri = "demo://resource/static/document/architecture.md"
    fake = FakeAnthropicAPI(
        calling(
            ("mcp__everything__read_resource", {"uri": uri}),
            ("mcp__everything__read_resource", {"uri": "demo://no/such/thing"}),
            ("mcp__everything__get_prompt", {"name": "args-prompt", "arguments": {"city": "Lyon"}}),
        )
    )
    agent = Agent(name="reader", mcps=[everything()], client=fake.client())
    result = await agent.run("Read the architecture notes, then get the weather prompt.")
    assert {"mcp__everything__read_resource", "mcp__everything__get_prompt"} <= set(
        listed_tools(result)
    )
    first = fake.message_requests[0]
    (reader,) = [t for t in first.tools if t["name"] == "mcp__everything__read_resource"]
    assert f"- {uri}" in reader["description"]
    assert "demo://resource/dynamic/text/{resourceId}" in reader["description"]
    (prompts,) = [t for t in first.tools if t["name"] == "mcp__everything__get_prompt"]
    assert "args-prompt(city, state?)" in prompts["description"]
    assert "args-prompt" in prompts["input_schema"]["properties"]["name"]["enum"]
    read, missing, prompt = [r["content"] for r in fake.message_requests[-1].tool_results()]
    assert "Architecture" in text_of(read)
    assert "could not read 'demo://no/such/thing'" in text_of(missing)
    assert "[user]" in text_of(prompt) and "Lyon" in text_of(prompt)
    calls = result.tree.find(type="mcp_call")
    assert [c.name for c in calls] == [
        "mcp__everything__read_resource",
        "mcp__everything__read_resource",
        "mcp__everything__get_prompt",
    ]
    assert [c.payload["is_error"] for c in calls] == [False, True, False]


# -- an in-process server: the 2026 protocol, where the server asks inside the call ----------

desk = MCPServer("desk")
SECRET = "desk-token-8c1f4e2a9b7d"


class Visitor(BaseModel):
    name: str


def ask_visitor() -> Elicit[Visitor]:
    return Elicit("Who is at the desk?", Visitor)


@desk.tool()
async def greet(visitor: Annotated[Visitor, Resolve(ask_visitor)], ctx: Context) -> str:
    """Greet whoever is at the desk."""
    await ctx.report_progress(1, 2, f"checking badge with {SECRET}")
    await ctx.info(f"badge system token {SECRET}")
    return f"Welcome, {visitor.name}."


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_an_in_process_servers_questions_progress_and_logs_reach_the_run_scrubbed() -> None:
    fake = FakeAnthropicAPI(calling(("mcp__desk__greet", {})))
    agent = Agent(
        name="front",
        mcps=[desk],
        env={"BADGE_TOKEN": SECRET},  # registered as a secret: never recorded
        on_elicitation=lambda request: request.accept({"name": "Grace"}),
        client=fake.client(),
    )
    result = await agent.run("Greet the visitor.")
    assert result.output == "Welcome, Grace."
    events = {e["type"]: e for e in only_call(result).events}
    assert events["mcp_elicitation"]["message"] == "Who is at the desk?"
    assert events["mcp_progress"]["progress"] == 1
    assert events["mcp_log"]["level"] == "info"
    assert SECRET not in json.dumps(result.tree.to_json())
    assert "badge system token" in events["mcp_log"]["data"]


# -- config checks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"on_elicitation": "ask"}, "on_elicitation must be a function"),
        ({"sampling": "yes"}, "'sampling' must be True"),
        ({"roots": "/srv/data"}, "'roots' must be a list of directories"),
        ({"roots": ["https://example.com/data"]}, "roots[0] is a https:// URI"),
        ({"roots": [3]}, "roots[0] must be a directory path"),
        ({"root": ["/srv"]}, "did you mean 'roots'?"),
    ],
)
def test_bad_client_options_in_a_server_config_are_refused_when_the_agent_is_built(
    config: dict[str, Any], message: str
) -> None:
    server = {"name": "srv", "command": "python", "args": ["-m", "srv"], **config}
    with pytest.raises(ConfigurationError, match="stdio MCP server 'srv'") as caught:
        Agent(name="a", mcps=[server])
    assert message in str(caught.value)


def test_client_options_of_a_remote_server_are_refused_with_the_reason() -> None:
    remote = {"type": "url", "name": "docs", "url": "https://mcp.example.com", "sampling": True}
    with pytest.raises(ConfigurationError, match="a stdio server's key"):
        Agent(name="a", mcps=[remote])


def test_an_agents_on_elicitation_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match="agent 'a': on_elicitation must be a function"):
        Agent(name="a", on_elicitation=True)  # type: ignore[arg-type]


def test_a_sampling_agent_and_roots_are_accepted_and_roots_resolve_against_cwd(
    tmp_path: Path,
) -> None:
    from groundswell.mcp.bridge import MCPBridge

    server = {
        "name": "srv",
        "command": "python",
        "cwd": str(tmp_path),
        "sampling": Agent(name="sampler"),
        "roots": ["data", (tmp_path / "other").as_uri()],
    }
    (local,) = MCPBridge([server], {}).local
    assert local.client.roots == (
        ((tmp_path / "data").resolve().as_uri(), "data"),
        ((tmp_path / "other").as_uri(), "other"),
    )


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_an_answer_with_a_field_the_server_did_not_ask_for_fails_the_call() -> None:
    fake = FakeAnthropicAPI(calling(("mcp__desk__greet", {})))
    agent = Agent(
        name="front",
        mcps=[desk],
        on_elicitation=lambda request: {"action": "accept", "content": {"nme": "Grace"}},
        client=fake.client(),
    )
    result = await agent.run("Greet the visitor.")
    call = only_call(result)
    assert call.payload["is_error"]
    assert "'name' is required" in result.output  # the first problem, then the server's error
    assert call.events[0]["error"].startswith("BadAnswer: the content does not fit")
