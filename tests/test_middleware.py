"""Agent middleware as users and plugin authors meet it (DESIGN section 6).

Most tests load ``groundswell-mw-demo``, a third-party distribution kept under
``tests/data/middleware_dist`` the way pip leaves an installed plugin (its
package next to a ``*.dist-info`` folder whose ``entry_points.txt`` has a
``[groundswell]`` section), through the real entry-point loading. Every prompt
goes through the real ``anthropic`` client to `FakeAnthropicAPI`; middleware
leave ``trace`` events on the prompt node, so the order they ran in is read
back from the tree like a user would.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from pydantic import BaseModel

import groundswell
from groundswell import (
    Agent,
    AgentMiddleware,
    ConfigurationError,
    GroundswellError,
    Middleware,
    ModelAPIError,
    NodeStatus,
    PluginError,
    PluginManager,
    Prompt,
    PromptOverrides,
    PromptRun,
    ToolCachePolicy,
    ToolCall,
    WorkflowContext,
    WorkflowError,
    hookimpl,
    workflow,
)
from groundswell.agent import ModelNext, PromptNext, PromptResult, ToolNext
from groundswell.plugins.manager import reset_plugin_manager
from groundswell.testing import FakeAnthropicAPI, error, json_reply, text, tool_use

DIST = Path(__file__).parent / "data" / "middleware_dist"
PLUGIN = "mwdemo"  # the entry point's name in groundswell_mw_demo-1.0.0.dist-info
HOUSE_STYLE = "House style: answer in one sentence."

# Managers this module made or replaced, kept alive on purpose: the kernel caches
# made middleware by id(manager), and a freed manager's id is soon reused by the
# next one (see test_reloading_plugins_makes_their_middleware_again). Keeping them
# alive stops one test's middleware from leaking into the next.
_RETIRED: list[PluginManager] = []


def _retire_manager() -> None:
    _RETIRED.append(groundswell.get_plugin_manager())
    reset_plugin_manager()


@pytest.fixture
def mwdemo(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginManager]:
    """The process's plugins reloaded with groundswell-mw-demo installed."""
    monkeypatch.syspath_prepend(str(DIST))
    monkeypatch.delenv("GROUNDSWELL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("GROUNDSWELL_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("MWDEMO_LICENCE", "lic-0001")
    monkeypatch.delenv("MWDEMO_USER", raising=False)
    _retire_manager()
    yield groundswell.get_plugin_manager()
    _retire_manager()
    for module in [m for m in sys.modules if m.split(".")[0] == "groundswell_mw_demo"]:
        del sys.modules[module]


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "tester")
    return Agent(client=fake.client(max_retries=0), **kw)


def shape(node: groundswell.EventNode) -> list[str]:
    return [f"{c.type.value}:{c.name}" for c in node.children]


def traces(node: groundswell.EventNode) -> list[str]:
    """The ``trace`` events middleware left on ``node``, as ``layer@seam``."""
    return [f"{e['layer']}@{e['at']}" for e in node.events if e["type"] == "trace"]


def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


class Tracer(Middleware):
    """A user's own middleware: traces every seam like the plugin's audit layers."""

    def _mark(self, run: PromptRun, at: str) -> None:
        kind = type(self)
        run.tree.add_event(run.node, "trace", layer=kind.name or kind.__name__, at=at)

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        self._mark(run, "prompt>")
        result = await call_next()
        self._mark(run, "prompt<")
        return result

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        self._mark(run, "before_model")
        return request

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        self._mark(run, "model>")
        message = await call_next(request)
        self._mark(run, "model<")
        return message

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        self._mark(run, "tool>")
        result = await call_next(call)
        self._mark(run, "tool<")
        return result


class Early(Tracer):
    name = "early"
    order = 300


class Late(Tracer):
    name = "late"
    order = 700


# -- A. a middleware shipped as a third-party distribution --------------------------


def test_the_installed_distribution_loads_through_the_groundswell_entry_point_group(
    mwdemo: PluginManager,
) -> None:
    info = {i.name: i for i in mwdemo.list_plugins()}[PLUGIN]
    assert info.ok and info.source == "entry point"
    assert (info.distribution, info.version) == ("groundswell-mw-demo", "1.0.0")
    assert info.hooks == ["register_agent_middleware"]
    records = mwdemo.agent_middleware()
    assert records["tool_guard"] == AgentMiddleware(
        "tool_guard", records["tool_guard"].factory, 400, True, "refuses danger_ tools"
    )
    assert {"stamp", "canned", "retry_once", "audit_a", "reflection", "cache"} <= set(records)
    # Registering cost nothing: no factory has run, so the classes are not even imported.
    assert "groundswell_mw_demo.layers" not in sys.modules


async def test_plugin_middleware_changes_the_request_the_api_receives(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI([text("Paris."), text("Paris, France.")])
    stamped = agent_for(fake, system="You are a geographer.", middleware=["stamp"])
    assert await stamped.prompt("Capital of France?") == "Paris."
    body = fake.requests[0].body
    assert body["system"] == f"You are a geographer.\n\n{HOUSE_STYLE}"
    assert body["metadata"] == {"user_id": "mwdemo"}
    assert body["messages"] == [{"role": "user", "content": "Capital of France?"}]
    # Opt-in: an agent that does not name it sends its request untouched.
    await agent_for(fake, system="You are a geographer.").prompt("Capital of France?")
    plain = fake.requests[1].body
    assert plain["system"] == "You are a geographer." and "metadata" not in plain


async def test_plugin_middleware_answers_a_model_turn_without_calling_the_api(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI([])  # an empty script: any request reaching it would fail
    result = await agent_for(fake, middleware=["canned"]).run("Ping?")
    assert result.output == "canned answer to: Ping?" and result.turns == 1
    assert fake.requests == []
    # The tree shows a completed prompt with its answer, and no model_call under it:
    # the API was never called, so there is no round trip (and no usage) to record.
    node = result.node
    assert node.status is NodeStatus.COMPLETED and node.payload["output"] == result.output
    assert shape(node) == [] and node.metrics["usage"] == {} and node.metrics["turns"] == 1
    assert result.messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "canned answer to: Ping?"}],
    }


async def test_plugin_middleware_changes_a_tools_input_and_its_result(
    mwdemo: PluginManager,
) -> None:
    received: list[str] = []

    def forecast(city: str) -> str:
        """Tomorrow's forecast for a city.

        Args:
            city: The city's name.
        """
        received.append(city)
        return f"rain in {city}"

    fake = FakeAnthropicAPI([tool_use("forecast", {"city": "  paris "}), text("Rain.")])
    result = await agent_for(fake, tools=[forecast], middleware=["tool_rewrite"]).run("Tomorrow?")
    assert result.output == "Rain."
    assert received == ["Paris"]  # the tool ran with the middleware's input
    (sent,) = fake.requests[1].tool_results()
    assert sent["content"] == "rain in Paris (checked by mwdemo)" and "is_error" not in sent
    call = result.node.children[1]
    assert call.type.value == "tool_call" and call.status is NodeStatus.COMPLETED
    assert call.payload["output"] == "rain in Paris (checked by mwdemo)"


async def test_default_plugin_middleware_refuses_a_tool_which_then_never_runs(
    mwdemo: PluginManager,
) -> None:
    dropped: list[str] = []

    def danger_drop_table(table: str) -> str:
        """Drop a database table.

        Args:
            table: The table to drop.
        """
        dropped.append(table)
        return "dropped"

    fake = FakeAnthropicAPI([tool_use("danger_drop_table", {"table": "users"}), text("Sorry.")])
    # No middleware= at all: tool_guard is registered with default=True.
    result = await agent_for(fake, tools=[danger_drop_table, weather]).run("Clean up")
    assert result.output == "Sorry." and dropped == []
    (sent,) = fake.requests[1].tool_results()
    assert sent["content"] == "refused: mwdemo policy forbids danger_drop_table"
    call = result.node.children[1]
    assert call.status is NodeStatus.COMPLETED
    assert [e["type"] for e in call.events] == ["mwdemo.refused"]


class City(BaseModel):
    name: str
    country: str


async def test_plugin_middleware_wrapping_the_prompt_retries_a_failed_attempt(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI([text("Paris, France"), json_reply({"name": "Paris", "country": "FR"})])
    agent = agent_for(fake, middleware=["retry_once"])

    @workflow(name="trip")
    async def trip(ctx: WorkflowContext) -> City:
        return await agent.prompt(Prompt(user="Where to?", response_format=City))

    result = await trip.run()
    assert result.output == City(name="Paris", country="FR") and len(fake.requests) == 2
    assert fake.requests[1].messages[0]["content"].startswith("Where to?\n\nYour last reply")
    first, second = result.tree.find(type="prompt")
    assert (first.status, first.metrics["attempt"]) == (NodeStatus.FAILED, 1)
    assert first.error is not None and first.error["type"] == "ResponseValidationError"
    assert (second.status, second.metrics["attempt"]) == (NodeStatus.COMPLETED, 2)
    assert second.payload["output"] == {"name": "Paris", "country": "FR"}


async def test_a_retrying_middleware_outside_the_prompt_node_works_outside_a_workflow_too(
    mwdemo: PluginManager,
) -> None:
    # Section 6: wrap_prompt "may retry"; the middleware module says layers below
    # NODE_ORDER "wrap every attempt of a prompt (and may start it again)".
    fake = FakeAnthropicAPI([text("Paris, France"), json_reply({"name": "Paris", "country": "FR"})])
    agent = agent_for(fake, middleware=["retry_once"])
    result = await agent.run(Prompt(user="Where to?", response_format=City))
    assert result.output == City(name="Paris", country="FR") and len(fake.requests) == 2
    holder, *attempts = result.tree.find(type="prompt", name="tester")
    assert holder is result.tree.root and holder.payload["retried_by"] == ["retry_once"]
    assert [n.status for n in attempts] == [NodeStatus.FAILED, NodeStatus.COMPLETED]
    assert all(n.parent_id == holder.id for n in attempts)


async def test_a_middleware_retrying_outside_any_run_without_saying_so_gets_a_clear_error(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI([text("Paris, France"), json_reply({"name": "Paris", "country": "FR"})])
    agent = agent_for(fake, middleware=["retry_undeclared"])
    with pytest.raises(ConfigurationError, match=r"set `retries = True` on the middleware"):
        await agent.run(Prompt(user="Where to?", response_format=City))
    assert len(fake.requests) == 1


async def test_plugin_middleware_post_processes_the_answer_the_tree_records(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI([text("hello there")])
    result = await agent_for(fake, middleware=["shout"]).run("Greet me")
    assert result.output == "HELLO THERE"
    assert result.node.payload["output"] == "HELLO THERE"
    assert result.messages[-1]["content"] == [{"type": "text", "text": "hello there"}]


# -- B. ordering, defaults, opt-in and overrides ----------------------------------


async def test_middleware_run_outer_first_in_and_last_out_at_every_seam(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI([tool_use("weather", {"city": "Oslo"}), text("Sunny.")])
    # Given in no particular order: sorted by order (300, 450, 450, 700), ties by name.
    agent = agent_for(fake, tools=[weather], middleware=[Late(), "audit_b", Early(), "audit_a"])
    result = await agent.run("Weather in Oslo?")
    assert result.output == "Sunny."
    chain = ["early", "audit_a", "audit_b", "late"]
    back = chain[::-1]

    def at(seam: str, names: list[str]) -> list[str]:
        return [f"{n}@{seam}" for n in names]

    turn = [*at("before_model", chain), *at("model>", chain), *at("model<", back)]
    assert traces(result.node) == [
        *at("prompt>", chain),
        *turn,
        *at("tool>", chain),
        *at("tool<", back),
        *turn,
        *at("prompt<", back),
    ]


async def test_a_registered_records_order_and_name_win_over_the_classes_own(
    mwdemo: PluginManager,
) -> None:
    class Innermost(Tracer):
        name = "innermost"
        order = 10_000

    class Plugin:
        @hookimpl
        def register_agent_middleware(self) -> AgentMiddleware:
            # The same class registered as "early_audit" at 250.
            return AgentMiddleware("early_audit", Innermost, 250)

    mwdemo.register(Plugin(), name="early-audit-plugin")
    fake = FakeAnthropicAPI([text("ok")])
    agent = agent_for(fake, middleware=["audit_a", Innermost(), "early_audit"])
    result = await agent.run("x")
    # Two layers, not one: the record's name is not the class's "innermost"; it runs
    # at the record's 250, the instance passed directly at its class's 10000.
    assert [t for t in traces(result.node) if t.endswith("@prompt>")] == [
        "innermost@prompt>",
        "audit_a@prompt>",
        "innermost@prompt>",
    ]


async def test_default_middleware_apply_to_every_agent_and_opt_in_ones_only_where_named(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI(lambda request: "ok")
    plain = await agent_for(fake, name="plain").run("a")
    named = await agent_for(fake, name="named", middleware=["audit_a"]).run("b")
    # licensed (default=True) sends its header for every agent; audit_a only where named.
    assert [r.headers.get("x-mwdemo-licensed") for r in fake.requests] == ["yes", "yes"]
    assert traces(plain.node) == []
    assert traces(named.node)[0] == "audit_a@prompt>"


async def test_prompt_overrides_add_middleware_for_that_one_call(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI(lambda request: "ok")
    agent = agent_for(fake, middleware=[Early()])
    once = await agent.run("a", PromptOverrides(middleware=["audit_b", Late()]))
    after = await agent.run("b")
    assert [t for t in traces(once.node) if t.endswith("@prompt>")] == [
        "early@prompt>",
        "audit_b@prompt>",
        "late@prompt>",
    ]
    assert [t for t in traces(after.node) if t.endswith("@prompt>")] == ["early@prompt>"]


async def test_an_instance_takes_its_name_and_order_from_its_class(
    mwdemo: PluginManager,
) -> None:
    class Unnamed(Tracer):  # no name: the class name; no order: 500
        pass

    class Broken(Middleware):  # named by its class in errors too
        async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
            raise RuntimeError("oops")

    fake = FakeAnthropicAPI(lambda request: "ok")
    agent = agent_for(fake, middleware=[Late(), Unnamed(), "audit_a", Unnamed()])
    result = await agent.run("x")
    # Unnamed (500) sorts between audit_a (450) and late (700), and runs once.
    assert [t for t in traces(result.node) if t.endswith("@prompt>")] == [
        "audit_a@prompt>",
        "Unnamed@prompt>",
        "late@prompt>",
    ]
    with pytest.raises(PluginError, match=r"^agent middleware 'Broken' failed: RuntimeError"):
        await agent_for(fake, middleware=[Broken()]).prompt("x")


async def test_the_same_middleware_named_twice_runs_once(mwdemo: PluginManager) -> None:
    fake = FakeAnthropicAPI([tool_use("weather", {"city": "Rome"}), text("ok")])
    agent = agent_for(fake, tools=[weather], middleware=["audit_a", "audit_a", Early(), Early()])
    result = await agent.run("x", PromptOverrides(middleware=["audit_a", Early()]))
    seen = traces(result.node)
    for name in ("audit_a", "early"):
        assert [t for t in seen if t.startswith(f"{name}@")] == [
            f"{name}@{at}"
            for at in (
                *("prompt>", "before_model", "model>", "model<", "tool>", "tool<"),
                *("before_model", "model>", "model<", "prompt<"),
            )
        ]


# -- C. active() ----------------------------------------------------------------------


class Selective(Tracer):
    """Takes part only in prompts that do not start with "quiet"."""

    name = "selective"

    def __init__(self) -> None:
        self.checks = 0

    def active(self, run: PromptRun) -> bool:
        self.checks += 1
        return not run.prompt.user.startswith("quiet")


async def test_a_middleware_that_is_not_active_runs_none_of_its_seams(
    mwdemo: PluginManager,
) -> None:
    lima = tool_use("weather", {"city": "Lima"})
    fake = FakeAnthropicAPI([lima, text("a"), lima, text("b")])
    selective = Selective()
    agent = agent_for(fake, tools=[weather], middleware=[selective])
    quiet = await agent.run("quiet please")
    loud = await agent.run("go on")
    assert (quiet.output, loud.output) == ("a", "b")
    assert traces(quiet.node) == []
    assert {t.split("@")[1] for t in traces(loud.node)} == {
        "prompt>",
        "prompt<",
        "before_model",
        "model>",
        "model<",
        "tool>",
        "tool<",
    }
    assert selective.checks == 2  # once per prompt, not once per turn or per seam


async def test_a_middleware_whose_active_check_raises_is_named_in_the_error(
    mwdemo: PluginManager,
) -> None:
    class Moody(Middleware):
        name = "moody"

        def active(self, run: PromptRun) -> bool:
            raise ValueError("feature flag service down")

        async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
            return request

    fake = FakeAnthropicAPI([text("ok")])
    with pytest.raises(PluginError, match=r"'moody'.*feature flag service down") as info:
        await agent_for(fake, middleware=[Moody()]).prompt("x")
    assert info.value.plugin == "moody"


# -- D. errors ----------------------------------------------------------------------


SEAMS = ["wrap_prompt", "before_model", "wrap_model_call"]


def faulty(seam: str, exc: Exception) -> Middleware:
    """A middleware named "faulty" (order 500) that raises ``exc`` at ``seam``."""

    async def wrap_prompt(self: Any, run: PromptRun, call_next: PromptNext) -> Any:
        raise exc

    async def before_model(self: Any, run: PromptRun, request: dict[str, Any]) -> Any:
        raise exc

    async def wrap_model_call(self: Any, run: PromptRun, request: Any, call_next: Any) -> Any:
        raise exc

    body = {"wrap_prompt": wrap_prompt, "before_model": before_model}
    body["wrap_model_call"] = wrap_model_call
    kind = type("Faulty", (Middleware,), {"name": "faulty", "order": 500, seam: body[seam]})
    made: Middleware = kind()
    return made


@pytest.mark.parametrize("seam", SEAMS)
async def test_a_middleware_that_raises_fails_the_prompt_with_its_name(
    mwdemo: PluginManager, seam: str
) -> None:
    fake = FakeAnthropicAPI([text("never sent")])
    agent = agent_for(fake, middleware=["audit_a", faulty(seam, ValueError("quota table gone"))])

    @workflow(name="job")
    async def job(ctx: WorkflowContext) -> str:
        return await agent.prompt("x")

    with pytest.raises(WorkflowError) as info:
        await job.run()
    cause = info.value.__cause__
    assert isinstance(cause, PluginError) and cause.plugin == "faulty"
    assert str(cause) == "agent middleware 'faulty' failed: ValueError: quota table gone"
    assert fake.requests == []
    tree = info.value.result.tree  # type: ignore[union-attr]
    (prompt,) = tree.find(type="prompt")
    assert prompt.status is NodeStatus.FAILED
    assert prompt.error is not None
    assert prompt.error["type"] == "PluginError"
    assert prompt.error["message"] == str(cause)
    assert tree.root is not None and tree.root.status is NodeStatus.FAILED
    assert all(n.status is not NodeStatus.RUNNING for n in tree.walk())
    # audit_a (450) runs outside it and saw the failure go by.
    assert traces(prompt)[0] == "audit_a@prompt>" and "audit_a@prompt<" not in traces(prompt)


@pytest.mark.parametrize("seam", SEAMS)
async def test_the_middlewares_own_exception_is_the_cause_of_the_plugin_error(
    mwdemo: PluginManager, seam: str
) -> None:
    # For the traceback a user debugs from: "The above exception was the direct cause".
    original = ValueError("quota table gone")
    fake = FakeAnthropicAPI([text("never sent")])
    with pytest.raises(PluginError) as info:
        await agent_for(fake, middleware=[faulty(seam, original)]).prompt("x")
    assert info.value.__cause__ is original


class QuotaExceeded(GroundswellError):
    """A plugin's own error, raised on purpose."""


@pytest.mark.parametrize("seam", SEAMS)
async def test_a_groundswell_error_raised_on_purpose_passes_through_as_it_is(
    mwdemo: PluginManager, seam: str
) -> None:
    raised = QuotaExceeded("tenant 7 is over its monthly quota")
    fake = FakeAnthropicAPI([text("never sent")])
    agent = agent_for(fake, middleware=["audit_a", faulty(seam, raised)])
    with pytest.raises(QuotaExceeded) as info:
        await agent.prompt("x")
    assert info.value is raised and str(info.value) == "tenant 7 is over its monthly quota"
    assert fake.requests == []


@pytest.mark.parametrize("seam", SEAMS)
async def test_an_error_raised_on_purpose_keeps_its_cause(mwdemo: PluginManager, seam: str) -> None:
    lookup = KeyError("tenant-7")
    raised = QuotaExceeded("tenant 7 is over its monthly quota")
    raised.__cause__ = lookup  # as `raise QuotaExceeded(...) from lookup` leaves it
    fake = FakeAnthropicAPI([text("never sent")])
    with pytest.raises(QuotaExceeded) as info:
        await agent_for(fake, middleware=[faulty(seam, raised)]).prompt("x")
    assert info.value.__cause__ is lookup


async def test_a_model_api_error_keeps_the_sdk_exception_as_its_cause_through_middleware(
    mwdemo: PluginManager,
) -> None:
    # errors.py: "ModelAPIError: the SDK's exception is __cause__"; audit_a only
    # passes the model call (and the prompt) on.
    fake = FakeAnthropicAPI([error(400, "prompt is too long")])
    with pytest.raises(ModelAPIError) as info:
        await agent_for(fake, middleware=["audit_a"]).prompt("x")
    assert info.value.status_code == 400
    assert isinstance(info.value.__cause__, anthropic.BadRequestError)


async def test_a_failing_tool_middleware_becomes_an_error_result_the_model_sees(
    mwdemo: PluginManager,
) -> None:
    class Proxy(Middleware):
        name = "proxy"

        async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
            raise ConnectionError("tool proxy unreachable")

    fake = FakeAnthropicAPI([tool_use("weather", {"city": "Oslo"}), text("Could not check.")])
    result = await agent_for(fake, tools=[weather], middleware=[Proxy()]).run("Weather?")
    assert result.output == "Could not check." and result.turns == 2
    (sent,) = fake.requests[1].tool_results()
    assert sent == {
        "type": "tool_result",
        "tool_use_id": sent["tool_use_id"],
        "content": "ConnectionError: tool proxy unreachable",
        "is_error": True,
    }
    call = result.node.children[1]
    assert call.status is NodeStatus.FAILED and call.payload["is_error"] is True
    assert result.node.status is NodeStatus.COMPLETED


async def test_an_unknown_middleware_name_is_a_configuration_error_listing_the_choices(
    mwdemo: PluginManager,
) -> None:
    with pytest.raises(ConfigurationError) as info:
        Agent(name="x", middleware=["nope"])
    message = str(info.value)
    assert message.startswith("no agent middleware named 'nope'; available: ")
    for name in ("audit_a", "canned", "stamp", "tool_guard", "reflection", "cache", "tool_cache"):
        assert name in message
    fake = FakeAnthropicAPI([text("never sent")])
    with pytest.raises(ConfigurationError, match="no agent middleware named 'nope'"):
        await agent_for(fake).prompt("x", PromptOverrides(middleware=["nope"]))
    assert fake.requests == []


LICENSED_MISSING = (
    "plugin 'mwdemo 1.0.0': default agent middleware 'licensed' could not be made: "
    "RuntimeError: no licence key: set MWDEMO_LICENCE; prompts fail rather than run without "
    "it, and the next prompt tries again (to run without it, disable its plugin: "
    "GROUNDSWELL_DISABLE_PLUGINS=mwdemo)"
)


async def test_a_default_middleware_whose_factory_raises_fails_prompts_naming_its_plugin(
    mwdemo: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MWDEMO_LICENCE")  # the suite runs with GROUNDSWELL_STRICT_PLUGINS=1
    fake = FakeAnthropicAPI([text("never sent")])
    with pytest.raises(PluginError) as info:
        await agent_for(fake).prompt("x")
    assert info.value.plugin == PLUGIN
    assert str(info.value) == LICENSED_MISSING
    assert isinstance(info.value.__cause__, RuntimeError)
    assert fake.requests == []


async def test_a_default_middleware_that_cannot_be_made_fails_closed_even_when_not_strict(
    mwdemo: PluginManager, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Before, outside strict mode it was reported once and left out for the rest of
    # the process: every later prompt ran without it. A default middleware may be a
    # safety control, so the prompts it would guard fail instead (the plugin isolation
    # rules still skip a plugin that fails to *load*: its middleware never registers).
    monkeypatch.delenv("MWDEMO_LICENCE")
    monkeypatch.setenv("GROUNDSWELL_STRICT_PLUGINS", "0")
    fake = FakeAnthropicAPI([text("licensed now")])
    with caplog.at_level(logging.WARNING, "groundswell.plugins"):
        for _ in range(3):
            with pytest.raises(PluginError) as info:
                await agent_for(fake).prompt("x")
            assert str(info.value) == LICENSED_MISSING
    assert fake.requests == []
    (problem,) = mwdemo.errors[PLUGIN]  # listed with its plugin, as `groundswell plugins` shows
    assert "agent middleware 'licensed' could not be made" in problem
    assert caplog.text.count("plugin 'mwdemo 1.0.0'") == 1  # logged once, not per prompt
    # Never kept as absent: once it can be made, the next prompt has it.
    monkeypatch.setenv("MWDEMO_LICENCE", "lic-0001")
    assert await agent_for(fake).prompt("y") == "licensed now"
    assert fake.requests[0].headers["x-mwdemo-licensed"] == "yes"


async def test_the_remedy_the_error_names_lets_prompts_run_without_the_plugin(
    mwdemo: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MWDEMO_LICENCE")
    monkeypatch.setenv("GROUNDSWELL_DISABLE_PLUGINS", PLUGIN)  # as the error says
    _retire_manager()  # plugins load again, without mwdemo
    fake = FakeAnthropicAPI([text("fine")])
    assert await agent_for(fake).prompt("x") == "fine"
    assert "x-mwdemo-licensed" not in fake.requests[0].headers


async def test_a_default_middleware_that_fails_once_is_made_on_the_next_prompt(
    mwdemo: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A plugin registered at run time whose default middleware's factory fails the
    # first time only (a passing error, say a full file table): one prompt fails, the
    # next ones have it, and it is made once from then on.
    monkeypatch.setenv("GROUNDSWELL_STRICT_PLUGINS", "0")  # as a process runs by default
    made: list[int] = []

    class Stamp(Middleware):
        async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
            return {**request, "metadata": {"user_id": "stamped"}}

    def flaky() -> Middleware:
        made.append(len(made))
        if len(made) == 1:
            raise OSError(24, "Too many open files")
        return Stamp()

    class Flaky:
        @hookimpl
        def register_agent_middleware(self) -> AgentMiddleware:
            return AgentMiddleware("flaky_stamp", flaky, 700, True)

    mwdemo.register(Flaky(), name="flaky-plugin")
    fake = FakeAnthropicAPI([text("one"), text("two")])
    with pytest.raises(PluginError) as info:
        await agent_for(fake).prompt("x")
    assert info.value.plugin == "flaky-plugin"
    assert str(info.value).startswith(
        "plugin 'flaky-plugin': default agent middleware 'flaky_stamp' could not be made: "
        "OSError: [Errno 24] Too many open files; prompts fail rather than run without it"
    )
    assert str(info.value).endswith(
        "(to run without it, unregister its plugin: "
        "groundswell.get_plugin_manager().unregister('flaky-plugin'))"
    )
    assert fake.requests == []
    assert await agent_for(fake).prompt("y") == "one"
    assert await agent_for(fake).prompt("z") == "two"
    assert [r.body["metadata"] for r in fake.requests] == [{"user_id": "stamped"}] * 2
    assert made == [0, 1]


FD_EXHAUSTED_ONCE = """
import asyncio, json, sys
from groundswell import Agent, PluginError
from groundswell.testing import FakeAnthropicAPI, text, tool_use

class FdExhaustedOnce:
    '''The first import of each module named fails, as it did under `ulimit -n 256`.'''

    def __init__(self, *names):
        self.left = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.left:
            self.left.discard(fullname)
            raise OSError(24, "Too many open files")
        return None

sys.meta_path.insert(
    0, FdExhaustedOnce("groundswell.hooks.middleware", "groundswell.tools.timeout")
)
ran = []

def drop_table(name: str) -> str:
    '''Drop a table.'''
    ran.append(name)
    return "dropped"

async def slow() -> str:
    '''Take three seconds.'''
    await asyncio.sleep(3)
    return "late"

def deny(input_data, tool_use_id, context):
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": "read-only replica"}}

async def main():
    fake = FakeAnthropicAPI(
        [tool_use("drop_table", {"name": "users"}), text("ok")] * 3
        + [tool_use("slow", {}), text("ok")] * 3
    )
    guarded = Agent(
        name="guarded",
        tools=[drop_table, slow],
        hooks={"PreToolUse": [{"matcher": "drop_table", "hooks": [deny]}]},
        tool_timeout=0.5,
        client=fake.client(max_retries=0),
    )
    report = {"errors": [], "results": []}
    loop = asyncio.get_running_loop()
    for question in ["drop users"] * 4 + ["wait"] * 3:
        started = loop.time()
        try:
            await guarded.prompt(question)
        except PluginError as exc:
            report["errors"].append([exc.plugin, str(exc)])
            continue
        (result,) = fake.requests[-1].tool_results()
        report["results"].append([result["content"], round(loop.time() - started, 1)])
    report["ran"] = ran
    print(json.dumps(report))

asyncio.run(main())
"""


def test_a_default_middleware_whose_import_fails_once_guards_every_later_prompt(
    tmp_path: Path,
) -> None:
    # The reported failure: one import of the hooks middleware failed (EMFILE under
    # `ulimit -n 256`), and every later prompt ran without hooks or tool timeouts.
    env = {**os.environ, "GROUNDSWELL_STRICT_PLUGINS": "0", "GROUNDSWELL_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", FD_EXHAUSTED_ONCE],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    (error,) = report["errors"]  # the one prompt it would have guarded fails, typed...
    assert error == [
        "groundswell",
        "plugin 'groundswell': default agent middleware 'hooks' could not be made: OSError: "
        "[Errno 24] Too many open files (nor could 'tool_timeout'); prompts fail rather than "
        "run without it, and the next prompt tries again (it is the kernel's own: fix the "
        "cause above)",
    ]
    # ...and every later one is guarded: the denied tool never runs, the timeout holds.
    assert report["ran"] == []
    denied = [content for content, _ in report["results"][:3]]
    assert all("blocked by a PreToolUse hook: read-only replica" in c for c in denied)
    for content, seconds in report["results"][3:]:
        assert "did not finish within 0.5 s" in content and seconds < 2.5


async def test_a_named_middleware_whose_factory_raises_is_reported_naming_its_plugin(
    mwdemo: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MWDEMO_LICENCE")
    with pytest.raises(PluginError, match="no licence key: set MWDEMO_LICENCE") as info:
        Agent(name="x", middleware=["premium"])
    assert "'premium'" in str(info.value)
    # The plugin isolation rules report a plugin by name and version, as for a default.
    assert info.value.plugin == PLUGIN and "mwdemo 1.0.0" in str(info.value)


RELOAD = """import asyncio, gc, os
import groundswell
from groundswell import Agent
from groundswell.plugins.manager import reset_plugin_manager
from groundswell.testing import FakeAnthropicAPI

fake = FakeAnthropicAPI(lambda request: "ok")
agents = []
for i in range(10):
    os.environ["MWDEMO_USER"] = f"user-{i}"  # read by the stamp middleware's factory
    gc.collect()
    reset_plugin_manager()  # "the next use reloads plugins"
    gc.collect()  # the old manager is gone for good
    groundswell.get_plugin_manager()  # reloaded
    agents.append(Agent(name=f"agent-{i}", client=fake.client(), middleware=["stamp"]))


async def main():
    for agent in agents:
        await agent.prompt("x")


asyncio.run(main())
print(" ".join(r.body["metadata"]["user_id"] for r in fake.requests))
"""


def test_reloading_plugins_makes_their_middleware_again() -> None:
    # reset_plugin_manager() says "the next use reloads plugins", and a factory reads
    # its configuration when it runs, so each reload must make the middleware anew.
    # In a fresh interpreter, so the managers it drops leave nothing behind here.
    env = {**os.environ, "PYTHONPATH": str(DIST), "MWDEMO_LICENCE": "lic-0001"}
    out = subprocess.run(
        [sys.executable, "-c", RELOAD], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"user-{i}" for i in range(10)]


# -- E. the CLI lists middleware ------------------------------------------------------


def gs(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groundswell.cli", *args],
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if k != "MWDEMO_LICENCE"}, **env},
        timeout=60,
    )


def test_plugins_all_lists_the_installed_middleware_and_the_kernels_with_their_order() -> None:
    # No MWDEMO_LICENCE: listing never runs a factory (licensed's would raise).
    env = {"PYTHONPATH": str(DIST), "GROUNDSWELL_STRICT_PLUGINS": "1"}
    out = gs("plugins", "--all", env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    mine = lines.index(next(ln for ln in lines if ln.startswith(f"{PLUGIN} ")))
    assert lines[mine].split()[:3] == [PLUGIN, "1.0.0", "ok"]
    assert lines[mine + 1] == (
        "    agent middleware: retry_once (120), retry_undeclared (120), "
        "tool_guard (400, default), audit_a (450), audit_b (450), shout (450), canned (500), stamp (500), tool_rewrite (500), "
        "licensed (600, default), premium (610)"
    )
    kernel = lines.index(next(ln for ln in lines if ln.startswith("groundswell ")))
    assert lines[kernel + 1] == (
        "    agent middleware: reflection (100, default), hooks (210, default), "
        "extraction (220, default), skills (230, default), context (240, default), "
        "mcp (250, default), context_ttl (255, default), budget (260, default), "
        "approval (280, default), cache (300, default), "
        "tool_cache (310, default), tool_timeout (320, default), prompt_cache (900, default), "
        "batch (950, default)"
    )
    listed = gs("plugins", "--all", "--json", env=env)
    data = {d["name"]: d for d in json.loads(listed.stdout)}
    assert data[PLUGIN]["distribution"] == "groundswell-mw-demo"
    assert data[PLUGIN]["agent_middleware"][:3] == [
        {"name": "retry_once", "order": 120, "default": False},
        {"name": "retry_undeclared", "order": 120, "default": False},
        {"name": "tool_guard", "order": 400, "default": True},
    ]


# -- F. the kernel's defaults around third-party middleware --------------------------


async def test_the_answer_cache_still_hits_with_a_request_changing_middleware_inside_it(
    mwdemo: PluginManager,
) -> None:
    fake = FakeAnthropicAPI([text("Paris."), text("a second answer the cache should spare")])
    name = f"cached-{os.urandom(4).hex()}"  # the default cache is process-wide
    agent = agent_for(fake, name=name, enable_cache=True, middleware=["stamp", "audit_a"])
    first = await agent.run("Capital of France?")
    second = await agent.run("Capital of France?")
    assert first.output == second.output == "Paris." and len(fake.requests) == 1
    assert fake.requests[0].body["metadata"] == {"user_id": "mwdemo"}
    assert (first.node.metrics["cache"], second.node.metrics["cache"]) == ("miss", "hit")
    assert shape(second.node) == []
    # audit_a (450) sits inside the cache (300): a hit never reaches it.
    assert traces(second.node) == []


async def test_tool_result_caching_still_works_around_a_tool_changing_middleware(
    mwdemo: PluginManager,
) -> None:
    runs: list[str] = []

    def population(city: str) -> str:
        """A city's population.

        Args:
            city: The city's name.
        """
        runs.append(city)
        return f"{city}: 2.1 million"

    fake = FakeAnthropicAPI(
        [tool_use("population", {"city": " paris"}), tool_use("population", {"city": " paris"})]
    ).add(text("2.1 million"))
    agent = agent_for(
        fake,
        name=f"tools-{os.urandom(4).hex()}",
        tools=[population],
        tool_cache={"population": ToolCachePolicy()},
        middleware=["tool_rewrite"],
    )
    result = await agent.run("How many people live in Paris?")
    assert result.output == "2.1 million" and runs == ["Paris"]
    first, second = (r.tool_results()[-1]["content"] for r in fake.requests[1:])
    assert first == second == "Paris: 2.1 million (checked by mwdemo)"


async def test_active_sees_the_payload_a_continued_conversation_gives_the_prompt() -> None:
    seen: list[dict[str, Any]] = []

    class Watch(Middleware):
        name = "watch"

        def active(self, run: PromptRun) -> bool:
            seen.append(dict(run.payload))
            return False

    fake = FakeAnthropicAPI(lambda request: text("ok"))
    agent = Agent(name="chat", client=fake.client(), middleware=[Watch()])
    first = await agent.run("Hello")
    second = await agent.run("Again", message_history=first.messages)
    assert seen == [{}, {"message_history": 2}]
    assert second.node.payload["message_history"] == 2
