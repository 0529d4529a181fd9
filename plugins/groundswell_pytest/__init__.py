"""Groundswell's pytest plugin: fixtures for testing agents offline, loaded with Groundswell.

It is registered for every pytest run in an environment where Groundswell is
installed, so it imports nothing but pytest until a test asks for one of its
fixtures: a project that never uses Groundswell pays nothing for it.

- ``fake_anthropic``: a fresh `groundswell.testing.FakeAnthropicAPI`.
- ``fake_anthropic_server``: the same fake served on a loopback port.
- ``fake_agents``: every agent in the test talks to ``fake_anthropic``
  (``groundswell.testing.use_fake``), module-level agents included. Each
  test's fake has an answer cache of its own, so a cached agent never answers
  one test with another's answer; ``fake_agents.share_cache = True`` in a
  test shares the agents' ordinary cache instead.

The fixtures are synchronous, so they work in async tests run by
pytest-asyncio and by anyio's pytest plugin alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from groundswell.testing import FakeAnthropicAPI, LoopbackServer

__all__ = ["fake_agents", "fake_anthropic", "fake_anthropic_server"]


@pytest.fixture
def fake_anthropic() -> FakeAnthropicAPI:
    """A fresh in-process fake API; ``fake_anthropic.client()`` gives a real SDK client."""
    from groundswell.testing import FakeAnthropicAPI

    return FakeAnthropicAPI()


@pytest.fixture
def fake_anthropic_server(fake_anthropic: FakeAnthropicAPI) -> Iterator[LoopbackServer]:
    """The same fake served on a loopback port; ``.client()`` talks to it over TCP."""
    with fake_anthropic.serve() as server:
        yield server


@pytest.fixture
def fake_agents(fake_anthropic: FakeAnthropicAPI) -> Iterator[FakeAnthropicAPI]:
    """Every agent in the test talks to ``fake_anthropic``; script it with ``.add(...)``."""
    from groundswell.testing import use_fake

    with use_fake(fake_anthropic):
        yield fake_anthropic
