"""pytest fixtures for testing Groundswell code offline (loaded automatically)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._fake import FakeAnthropicAPI, LoopbackServer


@pytest.fixture
def fake_anthropic() -> FakeAnthropicAPI:
    """A fresh in-process fake API; ``fake_anthropic.client()`` gives a real SDK client."""
    return FakeAnthropicAPI()


@pytest.fixture
def fake_anthropic_server(fake_anthropic: FakeAnthropicAPI) -> Iterator[LoopbackServer]:
    """The same fake served on a loopback port; ``.client()`` talks to it over TCP."""
    with fake_anthropic.serve() as server:
        yield server
