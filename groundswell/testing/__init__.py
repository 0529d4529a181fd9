"""Test Groundswell code with no network: a fake Anthropic API and test models.

```python
from groundswell.testing import FakeAnthropicAPI, text, tool_use

fake = FakeAnthropicAPI([tool_use("add", {"a": 1, "b": 2}), text("3")])
agent = Agent(name="calc", tools=[add], client=fake.client())
assert await agent.prompt("1 + 2?") == "3"
assert fake.requests[1].tool_results()[0]["content"] == "3"
```

``use_fake(...)`` puts every agent (module-level ones included) on a fake,
``agent.override(client=...)`` one agent, and ``FakeAnthropicAPI.from_trace``
replays a saved run. Each fake has an answer cache of its own, so no test
gets an answer another test's fake gave (``share_cache=True`` shares). The
pytest plugin installed with Groundswell provides the ``fake_anthropic``,
``fake_anthropic_server`` and ``fake_agents`` fixtures. ``auto_answer(...)``
answers the waits for people (``ctx.ask``) that code under test opens;
``auto_answer(from_trace=...)`` with the decisions a saved run recorded.
"""

from ._auto_answer import AutoAnswer, auto_answer
from ._batches import FakeBatch, FakeBatches
from ._checks import ProtocolViolation
from ._checks_cache import check_cache_backend
from ._checks_counter import check_counter
from ._checks_engine import check_engine
from ._checks_middleware import check_middleware
from ._checks_sink import check_sink
from ._fake import (
    FAKE_API_KEY,
    FakeAnthropicAPI,
    LoopbackServer,
    auto_client,
    estimate_tokens,
    use_fake,
)
from ._recorded_waits import NoRecordedDecision
from ._replay import Mismatch, ReplayModel, load_trees
from ._replies import (
    ErrorReply,
    FunctionModel,
    MessagesRequest,
    RawReply,
    Reply,
    SchemaModel,
    ScriptedModel,
    error,
    json_reply,
    raw_reply,
    sample_from_schema,
    text,
    tool_calls,
    tool_use,
)
from ._thinking import redacted_thinking, thinking

__all__ = [
    "FAKE_API_KEY",
    "AutoAnswer",
    "ErrorReply",
    "FakeAnthropicAPI",
    "FakeBatch",
    "FakeBatches",
    "FunctionModel",
    "LoopbackServer",
    "MessagesRequest",
    "Mismatch",
    "NoRecordedDecision",
    "ProtocolViolation",
    "RawReply",
    "ReplayModel",
    "Reply",
    "SchemaModel",
    "ScriptedModel",
    "auto_answer",
    "auto_client",
    "check_cache_backend",
    "check_counter",
    "check_engine",
    "check_middleware",
    "check_sink",
    "error",
    "estimate_tokens",
    "json_reply",
    "load_trees",
    "raw_reply",
    "redacted_thinking",
    "sample_from_schema",
    "text",
    "thinking",
    "tool_calls",
    "tool_use",
    "use_fake",
]
