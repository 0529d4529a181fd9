"""What the fast paths of steps, nodes and text prompts must keep: what the slow paths give.

A step's node is built by ``new_node`` (not ``EventNode(...)``), keeps its output and
duration out of dicts until they are read, gets its id from a seeded generator, and a
plain ``async def`` body is called without ``call_body``; none of that may show.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import math
import os
import pickle
import re
from typing import Any

import pytest

import groundswell
from groundswell import EventNode, EventTree, NodeStatus, NodeType, WorkflowContext, workflow
from groundswell.runtime.context import Frame, current_frame, enter_frame, reset_frame
from groundswell.scrubbing.serialize import jsonable
from groundswell.testing import FakeAnthropicAPI, text
from groundswell.tree.node import new_node

ID = re.compile(r"[0-9a-f]{16}")


def _slots(node: EventNode) -> dict[str, Any]:
    names = [n for cls in type(node).__mro__ for n in getattr(cls, "__slots__", ())]
    return {n: getattr(node, n) for n in names if n not in ("id", "timestamp", "_t0")}


@pytest.mark.parametrize("kind", [NodeType.STEP, "tool_call"])
def test_new_node_sets_what_the_constructor_sets(kind: Any) -> None:
    fast = new_node(kind, "n", "parent", {"input": 1})
    slow = EventNode(kind, "n", parent_id="parent", payload={"input": 1})
    assert _slots(fast) == _slots(slow)
    assert fast.type is NodeType(kind) and fast.status is NodeStatus.RUNNING
    assert new_node(NodeType.STEP, "n", id="chosen").id == "chosen"


def test_ids_are_16_hex_digits_and_unique() -> None:
    ids = [EventNode("step", "s").id for _ in range(20_000)]
    ids += [new_node(NodeType.STEP, "s").id for _ in range(20_000)]
    assert all(ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.slow  # forks a process
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_repeat_the_parents_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write its next ids and leave at once
        os.close(read)
        os.write(write, " ".join(EventNode("step", "s").id for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = set(f.read().split())
    os.waitpid(pid, 0)
    parent = {EventNode("step", "s").id for _ in range(50)}
    assert len(child) == 50
    assert not child & parent


def test_payload_and_metrics_read_and_write_like_dicts() -> None:
    tree = EventTree()
    root = tree.start_node(NodeType.WORKFLOW, "w")
    quiet = tree.start_node(NodeType.STEP, "quiet", root)
    assert quiet.payload.get("output") is None and quiet.metrics == {}
    assert quiet.duration is None
    done = tree.start_node(NodeType.STEP, "done", root)
    tree.end_node(done, NodeStatus.COMPLETED, output=7, record_output=True)
    assert done.duration is not None and done.duration >= 0
    assert done.to_dict()["payload"] == {"output": 7}
    assert set(done.to_dict()["metrics"]) == {"duration"}
    assert done.payload == {"output": 7}
    assert done.payload is done.payload  # one live dict from the first read on
    done.payload["note"] = "x"
    done.metrics["attempt"] = 2
    assert list(done.payload) == ["output", "note"]
    assert list(done.metrics) == ["duration", "attempt"]
    assert tree.find(payload={"output": 7, "note": "x"}) == [done]
    # Written before the end: the output and duration go after what is there.
    early = tree.start_node(NodeType.STEP, "early", root)
    early.payload["input"] = 1
    early.metrics["attempt"] = 1
    tree.end_node(early, NodeStatus.COMPLETED, output="out", record_output=True)
    assert list(early.payload.items()) == [("input", 1), ("output", "out")]
    assert list(early.metrics) == ["attempt", "duration"]
    # A replaced dict replaces the output and duration kept beside it.
    replaced = tree.start_node(NodeType.STEP, "replaced", root)
    tree.end_node(replaced, NodeStatus.COMPLETED, output=1, record_output=True)
    replaced.payload = {"other": 2}
    replaced.metrics = {}
    assert replaced.payload == {"other": 2} and replaced.duration is None
    assert EventTree.from_json(tree.to_json()) == tree


def test_nodes_copy_and_pickle_with_their_output() -> None:
    tree = EventTree()
    root = tree.start_node(NodeType.WORKFLOW, "w")
    done = tree.start_node(NodeType.STEP, "done", root)
    tree.end_node(done, NodeStatus.COMPLETED, output=[1, "a"], record_output=True)
    bare = tree.start_node(NodeType.STEP, "bare", root)
    for node in (done, bare):
        for twin in (copy.copy(node), copy.deepcopy(node), pickle.loads(pickle.dumps(node))):
            assert twin.payload == node.payload and twin.metrics == node.metrics
            assert twin.to_dict() == node.to_dict()


@pytest.mark.parametrize(
    ("output", "recorded"),
    [
        (1, 1),
        (True, True),
        (None, None),
        (math.nan, "nan"),
        (2.5, 2.5),
        ("plain", "plain"),
        ({"k": (1, 2)}, {"k": [1, 2]}),
    ],
)
async def test_step_outputs_are_recorded_json_safe(output: Any, recorded: Any) -> None:
    @workflow(name="outputs")
    async def flow(ctx: WorkflowContext) -> Any:
        async def body() -> Any:
            return output

        return await ctx.step("s", body)

    result = await flow.run()
    step = result.tree.find(type="step")[0]
    assert step.payload["output"] == recorded
    assert result.output is output  # the caller gets the value itself


async def test_a_string_output_has_registered_secrets_redacted() -> None:
    secret = "sk-hotpath-" + os.urandom(4).hex()
    groundswell.register_secret(secret)

    @workflow(name="secret-output")
    async def flow(ctx: WorkflowContext) -> str:
        async def body() -> str:
            return f"key={secret}"

        return await ctx.step("s", body)

    result = await flow.run()
    assert secret not in str(result.tree.find(type="step")[0].payload["output"])


class _Service:
    async def fetch(self) -> int:
        return 3


async def test_every_kind_of_body_still_runs_under_its_step() -> None:
    async def child() -> str:
        frame = current_frame()
        assert frame is not None
        return frame.node.name

    async def add(a: int, b: int) -> int:
        return a + b

    def sync() -> str:
        frame = current_frame()
        assert frame is not None
        return frame.node.name

    @workflow(name="bodies")
    async def flow(ctx: WorkflowContext) -> list[Any]:
        return [
            await ctx.step("async-fn", child),
            await ctx.step("partial", functools.partial(add, 1, 2)),
            await ctx.step("method", _Service().fetch),
            await ctx.step("lambda", lambda: child()),
            await ctx.step("sync", sync),
            await ctx.step("awaitable", child()),
            await ctx.step("timed", child, timeout=5),
        ]

    result = await flow.run()
    assert result.output == ["async-fn", 3, 3, "lambda", "sync", "awaitable", "timed"]
    assert [n.status for n in result.tree.find(type="step")] == [NodeStatus.COMPLETED] * 7


async def test_a_body_that_cannot_be_called_fails_its_step() -> None:
    async def needs_an_argument(x: int) -> int:
        return x

    @workflow(name="bad-call")
    async def flow(ctx: WorkflowContext) -> Any:
        return await ctx.step("s", needs_an_argument)  # type: ignore[arg-type]

    with pytest.raises(groundswell.WorkflowError) as caught:
        await flow.run()
    assert isinstance(caught.value.__cause__, TypeError)
    assert caught.value.result is not None
    step = caught.value.result.tree.find(type="step")[0]
    assert step.status is NodeStatus.FAILED and step.error is not None


def test_enter_frame_sets_the_frame_set_frame_would() -> None:
    tree = EventTree()
    node = tree.start_node(NodeType.WORKFLOW, "w")
    token = enter_frame(tree, node)
    try:
        frame = current_frame()
        assert frame == Frame(tree, node) and type(frame) is Frame
    finally:
        reset_frame(token)
    assert current_frame() is None


async def test_concurrent_steps_each_mount_under_their_own_step() -> None:
    @workflow(name="fan-out")
    async def flow(ctx: WorkflowContext) -> None:
        async def inner(i: int) -> None:
            await ctx.step(f"inner-{i}", asyncio.sleep(0))

        await asyncio.gather(
            *(ctx.step(f"outer-{i}", functools.partial(inner, i)) for i in range(5))
        )

    result = await flow.run()
    for i in range(5):
        (outer,) = result.tree.find(name=f"outer-{i}")
        assert [c.name for c in outer.children] == [f"inner-{i}"]


class Odd(float):
    """A float subclass whose equality says yes to everything."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = float.__hash__


@pytest.mark.parametrize(
    ("value", "recorded"),
    [
        (1.5, 1.5),
        (-0.0, -0.0),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (Odd(1.5), "1.5"),  # as `jsonable` always read it: by equality
    ],
)
def test_floats_are_recorded_alike_in_a_payload_and_alone(value: Any, recorded: Any) -> None:
    assert repr(jsonable(value)) == repr(recorded)
    assert repr(jsonable({"x": value})["x"]) == repr(recorded)
    assert repr(jsonable([value])[0]) == repr(recorded)


@pytest.mark.parametrize("text", ["ping", "  padded\n", "naïve ünïcode", "x" * 5_000])
def test_a_text_prompt_is_the_prompt_its_fields_make(text: str) -> None:
    # agent.prompt("...") builds its Prompt through Prompt.of_text, not the constructor.
    fast, slow = groundswell.Prompt.of_text(text), groundswell.Prompt(user=text)
    assert fast == slow and vars(fast) == vars(slow)
    assert fast.render() == text and pickle.loads(pickle.dumps(fast)) == slow


@pytest.mark.parametrize("blank", ["", " ", "\n\t", "\u3000\u2003"])
async def test_a_blank_text_prompt_is_refused_like_a_blank_prompt(blank: str) -> None:
    with pytest.raises(groundswell.ConfigurationError, match=r"Prompt\.user must be a non-empty"):
        groundswell.Prompt(user=blank)
    fake = FakeAnthropicAPI()
    agent = groundswell.Agent(name="a", client=fake.client())
    with pytest.raises(groundswell.ConfigurationError, match=r"Prompt\.user must be a non-empty"):
        await agent.prompt(blank)
    assert fake.requests == []


async def test_a_run_result_is_the_result_the_constructor_makes() -> None:
    @workflow(name="w")
    async def flow(ctx: WorkflowContext) -> dict[str, int]:
        ctx.state["n"] = 1
        return {"a": 1}

    result = await flow.run()
    made = groundswell.WorkflowResult(
        output={"a": 1},
        status=NodeStatus.COMPLETED,
        tree=result.tree,
        node=result.node,
        duration=result.duration,
        state={"n": 1},
    )
    assert result == made and repr(result) == repr(made) and result.error is None
    assert pickle.loads(pickle.dumps(result)).output == {"a": 1}


class _Counting(groundswell.Agent):
    calls = 0

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        return await super().run(*args, **kwargs)


async def test_agent_prompt_goes_through_an_overridden_or_patched_run() -> None:
    # agent.prompt skips Agent.run's own coroutine, but never one put in its place.
    fake = FakeAnthropicAPI(lambda request: text("ok"))
    agent = _Counting(name="a", client=fake.client())
    assert await agent.prompt("hi") == "ok" and _Counting.calls == 1
    plain = groundswell.Agent(name="b", client=fake.client())
    seen: list[str] = []
    original = plain.run

    async def patched(*args: Any, **kwargs: Any) -> Any:
        seen.append("run")
        return await original(*args, **kwargs)

    plain.run = patched  # type: ignore[method-assign]
    assert await plain.prompt("hi") == "ok" and seen == ["run"]


class _SetsMetadata(groundswell.Middleware):
    """Writes a request field into the prompt's settings, as skills and MCP layers do."""

    name = "sets-metadata"

    async def wrap_prompt(self, run: Any, call_next: Any) -> Any:
        run.settings["metadata"] = {"user_id": "u-1"}
        return await call_next()


async def test_a_plain_call_sends_what_the_full_request_building_sends() -> None:
    # A call that sets nothing of its own, with no middleware, takes the agent's settings
    # as they are and skips reading each request field; what reaches the API must not
    # change, nor may a middleware's write to the settings reach the agent or a later call.
    fake = FakeAnthropicAPI(lambda request: text("ok"))
    bare = groundswell.Agent(name="bare", client=fake.client(), max_tokens=32, system="Be brief.")
    await bare.prompt("hi")
    assert set(fake.requests[-1].body) == {"model", "max_tokens", "messages", "system"}
    # The same agent's settings through the full path (a prompt override) send the same.
    await bare.prompt("hi", groundswell.PromptOverrides(max_tokens=32))
    assert fake.requests[-1].body == fake.requests[-2].body

    # A field set on the agent is sent on a plain call too.
    tuned = groundswell.Agent(name="tuned", client=fake.client(), temperature=0.2, top_k=5)
    await tuned.prompt("hi")
    assert fake.requests[-1].body["temperature"] == 0.2
    assert fake.requests[-1].body["top_k"] == 5

    layered = groundswell.Agent(name="layered", client=fake.client(), middleware=[_SetsMetadata()])
    await layered.prompt("hi")
    assert fake.requests[-1].body["metadata"] == {"user_id": "u-1"}
    assert layered.config["metadata"] is None  # written to the attempt's copy only
    await bare.prompt("hi")
    assert "metadata" not in fake.requests[-1].body


class _OuterSetsMetadata(_SetsMetadata):
    """The same write, from outside the prompt node (before the attempt starts)."""

    name = "outer-sets-metadata"
    order = 150


async def test_an_outer_layer_writing_settings_leaves_the_agent_as_it_was() -> None:
    fake = FakeAnthropicAPI(lambda request: text("ok"))
    agent = groundswell.Agent(name="outer", client=fake.client(), middleware=[_OuterSetsMetadata()])
    await agent.prompt("hi")
    assert fake.requests[-1].body["metadata"] == {"user_id": "u-1"}
    assert agent.config["metadata"] is None


class _WritesInActive(groundswell.Middleware):
    """Changes the settings while deciding whether to take part: not allowed."""

    name = "writes-in-active"

    def active(self, run: Any) -> bool:
        run.settings["temperature"] = 0.9
        return False


@pytest.mark.parametrize("overrides", [None, groundswell.PromptOverrides(max_tokens=16)])
async def test_a_write_to_the_settings_in_active_fails_naming_the_middleware(
    overrides: Any,
) -> None:
    # On a plain call the settings are the agent's own: a write there would change every
    # later call. It is refused on every call alike, with what to do instead.
    fake = FakeAnthropicAPI(lambda request: text("ok"))
    agent = groundswell.Agent(name="a", client=fake.client(), middleware=[_WritesInActive()])
    with pytest.raises(groundswell.PluginError, match=r"'writes-in-active'.*wrap_prompt") as caught:
        await agent.prompt("hi", overrides)
    assert caught.value.plugin == "writes-in-active"
    assert agent.config["temperature"] is None and not fake.requests


class _Cooler(groundswell.Agent):
    def settings_for(self, prompt: Any, overrides: Any) -> dict[str, Any]:
        return {**super().settings_for(prompt, overrides), "temperature": 0.7}


async def test_a_subclass_settings_for_counts_on_a_plain_call_too() -> None:
    fake = FakeAnthropicAPI(lambda request: text("ok"))
    await _Cooler(name="cool", client=fake.client()).prompt("hi")
    assert fake.requests[-1].body["temperature"] == 0.7
