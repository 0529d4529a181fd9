"""Typed dependencies: ``Agent(deps_type=Shop)``, ``agent.prompt(..., deps=shop)``, and tools
that take ``ctx: ToolContext[Shop]`` get the object as ``ctx.deps``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

import pytest

from groundswell import (
    Agent,
    ConfigurationError,
    NodeType,
    Tool,
    ToolContext,
    WorkflowContext,
    workflow,
)
from groundswell.testing import FakeAnthropicAPI, tool_use

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Shop:
    name: str
    stock: dict[str, int] = field(default_factory=dict)
    password: str = "shop-SECRET-pw"


def in_stock(item: str, ctx: ToolContext[Shop]) -> int:
    """How many of an item the shop has.

    Args:
        item: The item's name.
    """
    return ctx.deps.stock.get(item, 0)


def agent_on(fake: FakeAnthropicAPI, **kw: Any) -> Agent[Any]:
    kw.setdefault("name", f"deps-{uuid.uuid4().hex[:8]}")
    return Agent(client=fake.client(max_retries=0), **kw)


async def test_a_tool_gets_the_calls_deps() -> None:
    fake = FakeAnthropicAPI([tool_use("in_stock", {"item": "apples"}), "Three."])
    clerk = agent_on(fake, tools=[in_stock], deps_type=Shop)
    answer = await clerk.prompt("Any apples?", deps=Shop("corner", {"apples": 3}))
    assert answer == "Three."
    assert fake.requests[1].latest_tool_results()[0]["content"] == "3"


async def test_each_call_has_its_own_deps_also_when_concurrent() -> None:
    import asyncio

    def answer(request: Any) -> Any:
        if not request.latest_tool_results():
            return tool_use("in_stock", {"item": "pears"})
        return request.latest_tool_results()[0]["content"]

    fake = FakeAnthropicAPI(answer)
    clerk = agent_on(fake, tools=[in_stock], deps_type=Shop)
    shops = [Shop(f"s{i}", {"pears": i}) for i in range(5)]
    answers = await asyncio.gather(*(clerk.prompt("Pears?", deps=s) for s in shops))
    assert answers == ["0", "1", "2", "3", "4"]


async def test_run_stream_and_reflect_pass_deps_too() -> None:
    seen: list[Any] = []

    def look(ctx: ToolContext[Shop]) -> str:
        """Look around."""
        seen.append(ctx.deps)
        return "ok"

    shop = Shop("corner")
    replies = [tool_use("look", {}), "done"] * 4
    fake = FakeAnthropicAPI(replies)
    agent = agent_on(fake, tools=[look], deps_type=Shop)
    assert (await agent.run("Look.", deps=shop)).output == "done"
    events = [e async for e in agent.stream("Look.", deps=shop)]
    assert events[-1].result == "done"
    assert await agent.reflect("Look.", deps=shop) == "done"
    assert seen == [shop] * 4


async def test_a_bare_tool_context_gets_deps_and_none_without_them() -> None:
    seen: list[Any] = []

    def look(ctx: ToolContext) -> str:
        """Look around."""
        seen.append((ctx.deps, ctx.agent))
        return "ok"

    fake = FakeAnthropicAPI([tool_use("look", {}), "a", tool_use("look", {}), "b"])
    agent = agent_on(fake, name="looker", tools=[look])  # no deps_type: any deps, or none
    await agent.prompt("Look.", deps={"anything": 1})
    await agent.prompt("Look.")
    assert seen == [({"anything": 1}, "looker"), (None, "looker")]


@pytest.mark.parametrize(
    "annotation",
    [ToolContext[Shop], ToolContext[Shop] | None, Annotated[ToolContext[Shop], "ctx"], ToolContext],
)
def test_a_typed_context_parameter_is_left_out_of_the_schema(annotation: Any) -> None:
    def tool(item: str, ctx: Any = None) -> str:
        """A tool."""
        return item

    tool.__annotations__ = {"item": str, "ctx": annotation, "return": str}
    assert Tool(tool).input_schema["properties"].keys() == {"item"}


# -- checked calls --------------------------------------------------------------------------


async def test_deps_of_the_wrong_type_are_refused_before_anything_is_sent() -> None:
    fake = FakeAnthropicAPI(["never"])
    clerk = agent_on(fake, name="clerk", tools=[in_stock], deps_type=Shop)
    with pytest.raises(
        ConfigurationError, match=r"agent 'clerk': deps must be a Shop \(its deps_type\), got dict"
    ):
        await clerk.prompt("Any apples?", deps={"apples": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"declares deps_type=Shop: pass deps=\.\.\."):
        await clerk.run("Any apples?")
    with pytest.raises(ConfigurationError, match="deps must be a Shop"):
        async for _ in clerk.stream("Any apples?", deps="corner"):  # type: ignore[arg-type]
            pass
    assert fake.requests == []


@dataclass
class Outlet(Shop):
    pass


async def test_deps_type_takes_subclasses_unions_and_generic_aliases() -> None:
    fake = FakeAnthropicAPI(["ok"] * 4)
    assert await agent_on(fake, deps_type=Shop).prompt("x", deps=Outlet("o")) == "ok"
    optional = agent_on(fake, deps_type=Shop | None)  # type: ignore[arg-type]
    assert await optional.prompt("x") == "ok"
    assert await optional.prompt("x", deps=Shop("s")) == "ok"
    mapping = agent_on(fake, deps_type=dict[str, int])
    assert await mapping.prompt("x", deps={"a": 1}) == "ok"
    with pytest.raises(ConfigurationError, match=r"deps must be a dict\[str, int\]"):
        await mapping.prompt("x", deps=[1])


class NotRuntime(Protocol):
    name: str


@pytest.mark.parametrize(
    ("deps_type", "says"),
    [
        (3, "deps_type must be a class"),
        ("Shop", "deps_type must be a class"),
    ],
)
def test_a_bad_deps_type_is_refused_when_the_agent_is_built(deps_type: Any, says: str) -> None:
    with pytest.raises(ConfigurationError, match=f"agent 'a': {says}"):
        Agent(name="a", deps_type=deps_type)


async def test_a_protocol_deps_type_is_left_to_the_type_checker() -> None:
    # Without @runtime_checkable isinstance cannot tell; mypy checks the calls.
    fake = FakeAnthropicAPI(["ok", "ok"])
    agent = agent_on(fake, deps_type=NotRuntime)
    assert await agent.prompt("x", deps=Shop("corner")) == "ok"
    assert await agent.prompt("x", deps=object()) == "ok"


# -- deps stay out of the tree, the cache key and the requests -------------------------------


async def test_deps_never_reach_the_tree_the_requests_or_the_cache_key() -> None:
    fake = FakeAnthropicAPI([tool_use("in_stock", {"item": "apples"}), "Three."])
    clerk = agent_on(fake, tools=[in_stock], deps_type=Shop, enable_cache=True)
    first = await clerk.run("Any apples?", deps=Shop("corner", {"apples": 3}))
    saved = json.dumps(first.tree.to_json())
    assert "SECRET" not in saved and "corner" not in saved
    assert all("SECRET" not in json.dumps(r.body) for r in fake.requests)
    # Other deps, the same request: the same key, so a cache hit.
    again = await clerk.run("Any apples?", deps=Shop("other", {"apples": 9}))
    assert again.output == "Three." and again.node.metrics["cache"] == "hit"
    assert len(fake.requests) == 2


# -- workflows ---------------------------------------------------------------------------------


async def test_deps_flow_into_a_step_through_its_lambda_and_to_sub_agents_only_when_passed() -> (
    None
):
    seen: dict[str, Any] = {}
    fake = FakeAnthropicAPI(
        [
            tool_use("delegate", {}),  # the manager asks its tool
            tool_use("in_stock", {"item": "plums"}),  # the clerk the tool runs
            "2",
            "The clerk says 2.",
        ]
    )
    clerk = agent_on(fake, name="clerk", tools=[in_stock], deps_type=Shop)

    async def delegate(ctx: ToolContext[Shop]) -> str:
        """Ask the clerk."""
        seen["manager"] = ctx.deps
        return await clerk.prompt("Plums?", deps=ctx.deps)  # passed on explicitly

    manager = agent_on(fake, name="manager", tools=[delegate], deps_type=Shop)

    @workflow(name="shopping")
    async def shopping(ctx: WorkflowContext, shop: Shop) -> str:
        return await ctx.step("ask", lambda: manager.prompt("Plums?", deps=shop))

    shop = Shop("corner", {"plums": 2})
    result = await shopping.run(shop)
    assert result.output == "The clerk says 2."
    assert seen["manager"] is shop
    assert [n.name for n in result.tree.find(type=NodeType.PROMPT)] == ["manager", "clerk"]


# -- typing --------------------------------------------------------------------------------


async def test_the_typing_example_runs() -> None:
    from tests import typing_deps_example as example

    fake = FakeAnthropicAPI(example.REPLIES)
    assert await example.ask(fake) == "33"
    assert fake.requests[1].latest_tool_results()[0]["content"] == "3"


@pytest.mark.slow
def test_mypy_types_ctx_deps_from_the_tool_context_parameter(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_deps.py"
    wrong.write_text(
        textwrap.dedent(
            """
            from groundswell import Agent, ToolContext
            from tests.typing_deps_example import Shop


            def misspelt(ctx: ToolContext[Shop]) -> str:
                return str(ctx.deps.nmae)


            async def wrong_deps() -> None:
                clerk: Agent[Shop] = Agent(deps_type=Shop)
                await clerk.prompt("x", deps="not a shop")
            """
        )
    )
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            f"--cache-dir={tmp_path / 'cache'}",
            "tests/typing_deps_example.py",
            str(wrong),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    # The example is clean; the wrong file fails exactly where deps are misused.
    assert not [e for e in errors if "typing_deps_example" in e], checked.stdout
    assert any('"Shop" has no attribute "nmae"' in e for e in errors), checked.stdout
    assert any("wrong_deps.py:12" in e and '"prompt"' in e for e in errors), checked.stdout
    assert len(errors) == 2, checked.stdout
