"""Each test fake has an answer cache of its own: no test gets the answer another test's fake gave.

A module-level agent with a cache lives as long as the test session; the
answers it caches while on one fake must not answer the next test, whichever
way the test put it on its fake (``fake_agents``, ``use_fake``,
``agent.override(client=...)``). A test that wants to share asks for it.
"""

from __future__ import annotations

import pytest
from groundswell_lru import LRUCache

from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI, text, use_fake

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

MODULE_AGENT = """
from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI, text, use_fake

agent = Agent(name={name!r}, enable_cache=True)
"""

SUITES = {
    "fake_agents": """
async def test_first(fake_agents):
    fake_agents.add(text("first"))
    assert await agent.prompt("the same question") == "first"


async def test_second(fake_agents):
    fake_agents.add(text("second"))
    assert await agent.prompt("the same question") == "second"
    assert len(fake_agents.requests) == 1
""",
    "use_fake": """
@use_fake([text("first")])
async def test_first():
    assert await agent.prompt("the same question") == "first"


async def test_second():
    with use_fake([text("second")]) as fake:
        assert await agent.prompt("the same question") == "second"
    assert len(fake.requests) == 1
""",
    "override": """
async def test_first():
    with agent.override(client=FakeAnthropicAPI([text("first")]).client()):
        assert await agent.prompt("the same question") == "first"


async def test_second():
    fake = FakeAnthropicAPI([text("second")])
    with agent.override(client=fake.client()):
        assert await agent.prompt("the same question") == "second"
    assert len(fake.requests) == 1
""",
    "shared on request": """
async def test_first(fake_agents):
    fake_agents.share_cache = True
    fake_agents.add(text("first"))
    assert await agent.prompt("the same question") == "first"


async def test_second(fake_agents):
    fake_agents.share_cache = True  # this test asks for the answers others cached
    assert await agent.prompt("the same question") == "first"
    assert fake_agents.requests == []
""",
}


@pytest.mark.slow  # runs pytest in a subprocess
def test_a_module_level_agent_answers_each_test_from_its_own_fake(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    files = {
        f"test_{suite.replace(' ', '_')}": MODULE_AGENT.format(name=f"agent-{i}") + code
        for i, (suite, code) in enumerate(SUITES.items())
    }
    pytester.makepyfile(**files)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", "-v")
    result.assert_outcomes(passed=2 * len(SUITES))


async def test_one_fake_keeps_its_cache_across_its_clients_and_shares_on_request() -> None:
    cache = LRUCache()
    agent = Agent(name="scoped", cache=cache)
    fake = FakeAnthropicAPI(lambda request: text("from the first fake"))
    with agent.override(client=fake.client()):
        assert (await agent.run("q")).node.metrics["cache"] == "miss"
    with fake.serve() as server, agent.override(client=server.client()):
        hit = await agent.run("q")  # another client of the same fake: its cache
    assert hit.output == "from the first fake" and hit.node.metrics["cache"] == "hit"

    other = FakeAnthropicAPI(lambda request: text("from another fake"))
    with use_fake(other):
        assert await agent.prompt("q") == "from another fake"
    # Shared: the answers go to the agent's ordinary cache, as a real client's do.
    with use_fake(lambda request: text("shared"), share_cache=True) as sharing:
        assert await agent.prompt("q") == "shared"
    with use_fake(lambda request: text("unused"), share_cache=True) as again:
        assert await agent.prompt("q") == "shared"
    assert len(sharing.requests) == 1 and again.requests == []
    assert cache.metrics()["size"] == 3  # one entry per scope: two fakes and the shared one


async def test_scopes_keep_keys_of_real_clients_unchanged() -> None:
    from groundswell.cache.backends import answer_scope, request_cache_key

    fake = FakeAnthropicAPI()
    client = fake.client()
    scope = answer_scope(client)
    assert scope is not None and scope.startswith("fake-")
    request = {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 9}
    key = request_cache_key("judge", request)
    assert request_cache_key("judge", request, None) == key  # real clients: as before
    assert request_cache_key("judge", request, scope) != key
    assert request_cache_key("judge", request, scope).startswith("judge:")  # same namespace
    fake.share_cache = True
    assert answer_scope(client) is None
