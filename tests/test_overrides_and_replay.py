"""Putting existing agents on a fake (`agent.override`, `use_fake`), and replaying saved runs."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from groundswell import (
    Agent,
    ConfigurationError,
    Middleware,
    ModelAPIError,
    PluginError,
    Prompt,
    PromptOverrides,
    ToolProvider,
    WorkflowContext,
    get_plugin_manager,
    hookimpl,
    workflow,
)
from groundswell.testing import (
    FakeAnthropicAPI,
    MessagesRequest,
    Reply,
    error,
    json_reply,
    text,
    tool_calls,
    tool_use,
    use_fake,
)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


calc = Agent(name="calc", tools=[add], system="You add.")


# -- agent.override -------------------------------------------------------------------


async def test_override_wins_over_the_agent_the_prompt_and_the_call() -> None:
    fake = FakeAnthropicAPI(["a", "b"])
    with calc.override(client=fake.client(), model="claude-haiku-4-5", system="Forced."):
        await calc.prompt(Prompt(user="x", system="From the prompt."))
        await calc.prompt("y", PromptOverrides(model="claude-opus-4-1", max_tokens=99))
    first, second = fake.requests
    assert (first.model, first.system) == ("claude-haiku-4-5", "Forced.")
    # The override's fields win; the call's other fields still apply.
    assert (second.model, second.body["max_tokens"]) == ("claude-haiku-4-5", 99)
    assert calc.config["model"] != "claude-haiku-4-5"  # the agent itself is untouched


async def test_override_ends_with_its_block_even_on_error() -> None:
    fake = FakeAnthropicAPI(["inside"])

    def fail_inside() -> None:
        with calc.override(client=fake.client()):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_inside()
    with use_fake(["outside"]) as outer:
        assert await calc.prompt("q") == "outside"
    assert len(fake.requests) == 0 and len(outer.requests) == 1


async def test_agent_override_wins_over_use_fake_field_by_field() -> None:
    own = FakeAnthropicAPI(["own"])
    with use_fake(["everyone"], model="claude-haiku-4-5") as every:
        other = Agent(name="other")
        with calc.override(client=own.client()):
            assert await calc.prompt("q") == "own"
            assert await other.prompt("q") == "everyone"
    assert own.requests[0].model == "claude-haiku-4-5"  # the process-wide model still holds
    assert every.requests[0].model == "claude-haiku-4-5"


async def test_use_fake_reaches_agents_run_in_another_thread() -> None:
    answers: list[str] = []
    with use_fake(["from a thread"]):
        thread = threading.Thread(target=lambda: answers.append(asyncio.run(calc.prompt("q"))))
        thread.start()
        thread.join()
    assert answers == ["from a thread"]


async def test_override_reaches_the_reflection_critic() -> None:
    class Num(BaseModel):
        n: int

    agent = Agent(name="r", enable_reflection=True)  # the llm strategy asks a critic agent
    critique = {"analysis": "not JSON", "should_retry": True, "guidance": "Answer in JSON."}
    with use_fake(["not json", json_reply(critique), '{"n": 4}']) as fake:
        assert await agent.prompt(Prompt(user="4?", response_format=Num)) == Num(n=4)
    assert "not json" in fake.requests[1].last_user_text()  # the critic's request


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "nothing to override"),
        ({"name": "x"}, "cannot override 'name'"),
        ({"client": object()}, "client must be an anthropic.AsyncAnthropic"),
        ({"temperature": "hot"}, "temperature"),
    ],
)
def test_override_refuses_bad_input_with_a_clear_error(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        calc.override(**kwargs)  # type: ignore[arg-type]


# -- fake scripts checked when built -------------------------------------------------


def test_a_plain_string_in_a_script_is_a_text_reply() -> None:
    fake = FakeAnthropicAPI(["plain string"])
    assert asyncio.run(Agent(name="a", client=fake.client()).prompt("q")) == "plain string"
    fake.add("more")
    assert fake.remaining == 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: FakeAnthropicAPI([42]), "script entry 0 is int 42"),
        (lambda: FakeAnthropicAPI([{"type": "text", "text": "x"}]), "wrap it: Reply"),
        (lambda: FakeAnthropicAPI("just text"), "put it in a list"),
        (lambda: FakeAnthropicAPI(text("one")), "put it in a list"),
        (lambda: FakeAnthropicAPI().add(None), "add\\(\\) argument 0 is NoneType"),
        (lambda: Reply([{"type": "tool_use", "name": "t"}]), "without a string 'id'"),
        (lambda: Reply("hi"), "must be a list of content blocks"),  # type: ignore[arg-type]
        (lambda: text("x", stop_reason="done"), "stop_reason 'done'"),
        (lambda: text(3), "text block without a string"),  # type: ignore[arg-type]
    ],
)
def test_a_malformed_script_is_refused_when_built(build: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()  # type: ignore[operator]


async def test_a_function_model_answering_garbage_fails_fast_with_the_reason() -> None:
    fake = FakeAnthropicAPI(lambda request: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(ModelAPIError, match="is int 42"):
        await Agent(name="a", client=fake.client()).prompt("q")
    assert len(fake.requests) == 1  # no retries of a broken script


async def test_latest_tool_results_against_all_of_them() -> None:
    fake = FakeAnthropicAPI(
        [
            tool_calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})),
            tool_use("add", {"a": 3, "b": 3}),
            "done",
        ]
    )
    await Agent(name="a", tools=[add], client=fake.client()).prompt("q")
    first, second, third = fake.requests
    assert first.latest_tool_results() == [] and first.tool_results() == []
    assert [r["content"] for r in second.latest_tool_results()] == ["2", "4"]
    assert [r["content"] for r in third.latest_tool_results()] == ["6"]
    assert [r["content"] for r in third.tool_results()] == ["2", "4", "6"]


# -- record and replay ----------------------------------------------------------------


class Total(BaseModel):
    total: int


@workflow
async def sums(ctx: WorkflowContext) -> list[int]:
    async def one(n: int) -> int:
        answer = await ctx.step(
            f"sum{n}", lambda: calc.prompt(Prompt(user=f"{n} + {n}?", response_format=Total))
        )
        return answer.total

    return list(await asyncio.gather(one(1), one(2), one(3)))


def _scripted(request: MessagesRequest) -> Reply:
    n = int(request.last_user_text().split()[0])
    if not request.latest_tool_results():
        return tool_use("add", {"a": n, "b": n})
    return json_reply({"total": 2 * n})


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    with use_fake(_scripted):
        result = asyncio.run(sums.run())
    assert result.output == [2, 4, 6]
    return result.tree.save(tmp_path / "sums.jsonl")


async def test_concurrent_prompts_replay_whatever_order_they_ask_in(recording: Path) -> None:
    fake = FakeAnthropicAPI.from_trace(recording)
    with use_fake(fake):
        assert (await sums.run()).output == [2, 4, 6]
    assert fake.remaining == 0 and fake.mismatches == [] and len(fake.requests) == 6


async def test_replay_streams_too(recording: Path) -> None:
    with use_fake(FakeAnthropicAPI.from_trace(recording)):
        events = [e async for e in calc.stream(Prompt(user="2 + 2?", response_format=Total))]
    assert events[-1].result == Total(total=4)
    assert any(e.type == "text" for e in events)


async def test_replay_reads_a_trace_directory_and_a_tree(recording: Path, tmp_path: Path) -> None:
    from groundswell import EventTree

    for source in (recording.parent, EventTree.load(recording)):
        fake = FakeAnthropicAPI.from_trace(source)
        with use_fake(fake):
            assert (await sums.run()).output == [2, 4, 6]


async def test_changed_tools_and_system_are_listed(recording: Path) -> None:
    def mul(a: int, b: int) -> int:
        """Multiply."""
        return a * b

    with (
        use_fake(FakeAnthropicAPI.from_trace(recording)),
        calc.override(tools=[add, mul], system="You multiply."),
        pytest.raises(ModelAPIError) as caught,
    ):
        await calc.prompt(Prompt(user="1 + 1?", response_format=Total))
    message = str(caught.value)
    assert "tools: recorded ['add'], now ['add', 'mul'] (added 'mul')" in message
    assert "system prompt: recorded 'You add.', now 'You multiply.'" in message


async def test_lenient_replay_answers_and_keeps_the_differences(recording: Path) -> None:
    fake = FakeAnthropicAPI.from_trace(recording, strict=False)
    with use_fake(fake), calc.override(model="claude-haiku-4-5"):
        assert await calc.prompt(Prompt(user="3 + 3?", response_format=Total)) == Total(total=6)
    assert len(fake.mismatches) == 2
    assert "model: recorded 'claude-sonnet-4-6', now 'claude-haiku-4-5'" in str(fake.mismatches[0])


async def test_a_request_beyond_the_recording_says_so(recording: Path) -> None:
    fake = FakeAnthropicAPI.from_trace(recording)
    with use_fake(fake):
        await sums.run()
        with pytest.raises(ModelAPIError, match="no recorded reply: the recorded run made 6"):
            await calc.prompt(Prompt(user="1 + 1?", response_format=Total))


def test_from_trace_refuses_what_it_cannot_replay(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--save"):
        FakeAnthropicAPI.from_trace(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="holds no trace files"):
        FakeAnthropicAPI.from_trace(tmp_path)

    @workflow
    async def no_model(ctx: WorkflowContext) -> int:
        return await ctx.step("s", lambda: 1)

    path = asyncio.run(no_model.run()).tree.save(tmp_path / "plain.jsonl")
    with pytest.raises(ValueError, match="holds no model calls"):
        FakeAnthropicAPI.from_trace(path)
    with pytest.raises(TypeError, match="takes a trace file"):
        FakeAnthropicAPI.from_trace(42)  # type: ignore[arg-type]


# -- plugins that break a seam's contract get named ------------------------------------


class ReturnsText(Middleware):
    name = "returns_text"

    async def wrap_prompt(self, run, call_next):  # type: ignore[no-untyped-def]
        await call_next()
        return "just the text"


class DropsRequest(Middleware):
    name = "drops_request"

    async def before_model(self, run, request):  # type: ignore[no-untyped-def]
        request["metadata"] = {"user_id": "u1"}  # forgot `return request`


class ReturnsDict(Middleware):
    name = "returns_dict"

    async def wrap_model_call(self, run, request, call_next):  # type: ignore[no-untyped-def]
        return (await call_next(request)).model_dump()


@pytest.mark.parametrize(
    ("middleware", "seam", "must"),
    [
        (ReturnsText(), "wrap_prompt", "the PromptResult of `await call_next()`"),
        (DropsRequest(), "before_model", "the request dict it was given"),
        (ReturnsDict(), "wrap_model_call", "the SDK Message of `await call_next(request)`"),
    ],
)
async def test_a_middleware_returning_the_wrong_thing_is_named(
    middleware: Middleware, seam: str, must: str
) -> None:
    agent = Agent(name="a", middleware=[middleware])
    with use_fake(["hi"]), pytest.raises(PluginError) as caught:
        await agent.prompt("q")
    message = str(caught.value)
    assert f"agent middleware {middleware.name!r} broke the {seam} contract" in message
    assert must in message and caught.value.plugin == middleware.name


@pytest.mark.parametrize("produced", [None, 42, "add"])
async def test_a_tool_provider_returning_no_list_is_named(produced: object) -> None:
    class Provider:
        @hookimpl
        def register_tool_providers(self) -> ToolProvider:
            return ToolProvider(name="odd_tools", factory=lambda: produced)

    manager = get_plugin_manager()
    manager.register(Provider(), name="odd-tools-plugin")
    try:
        with use_fake(["hi"]), pytest.raises(PluginError, match="must return a list of tools"):
            await Agent(name="a", tools=["odd_tools"]).prompt("q")
    finally:
        manager.unregister(name="odd-tools-plugin")


# -- found by using it as a newcomer ----------------------------------------------------


@use_fake(["decorated"])
async def test_use_fake_decorates_an_async_test() -> None:
    assert await calc.prompt("q") == "decorated"


def test_override_decorates_a_sync_function() -> None:
    fake = FakeAnthropicAPI(["sync"])

    @calc.override(client=fake.client())
    def ask() -> str:
        return asyncio.run(calc.prompt("q"))

    assert ask() == "sync" and ask.__name__ == "ask"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: use_fake(FakeAnthropicAPI().client()), "not use_fake\\(fake.client\\(\\)\\)"),
        (lambda: use_fake("Hello"), "write use_fake\\(\\['Hello'\\]\\)"),
        (lambda: tool_use("add", "a=1"), "takes the tool's input as a dict"),  # type: ignore[arg-type]
        (lambda: tool_calls(("add",)), "each call is a \\(tool name, input dict\\) pair"),  # type: ignore[arg-type]
        (lambda: json_reply({1, 2}), "json_reply\\(\\) needs a JSON value"),
        (lambda: error(999), "from 400 to 599"),
    ],
)
def test_testing_helpers_refuse_misuse_clearly(build: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()  # type: ignore[operator]


async def test_replay_tells_agents_asking_the_same_apart_by_system_prompt(tmp_path: Path) -> None:
    terse = Agent(name="terse", system="Be terse.")
    chatty = Agent(name="chatty", system="Be chatty.")

    def by_system(request: MessagesRequest) -> str:
        return "ok" if request.system == "Be terse." else "Well, hello there!"

    with use_fake(by_system):
        first = await terse.run("hi")
        second = await chatty.run("hi")
    first.tree.save(tmp_path / "a.jsonl")
    second.tree.save(tmp_path / "b.jsonl")
    fake = FakeAnthropicAPI.from_trace(tmp_path)
    with use_fake(fake):  # asked in the other order than recorded
        assert await chatty.prompt("hi") == "Well, hello there!"
        assert await terse.prompt("hi") == "ok"
    assert fake.mismatches == []


def test_tree_save_makes_missing_folders(tmp_path: Path) -> None:
    with use_fake(["x"]):
        result = asyncio.run(calc.run("q"))
    path = result.tree.save(tmp_path / "new" / "deeper" / "run.jsonl")
    assert FakeAnthropicAPI.from_trace(path).remaining == 1
