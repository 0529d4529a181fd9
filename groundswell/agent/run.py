"""The typed state of one prompt (`PromptRun`) and what the loop hands around.

A `PromptRun` is created for every ``agent.prompt()`` / ``run()`` / ``stream()``
call and passed to every middleware seam. It lives for the whole prompt, all
its attempts included; the kernel refreshes the per-attempt parts (``node``,
``settings``, ``messages``, ``system``, ``tools``, ``usage``) when an attempt
starts, and ``scratch`` is kept across attempts for middleware's own state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from ..errors import ConfigurationError, GroundswellError, PluginError
from ..model import build_request
from ..plugins import get_plugin_manager
from ..tools import Tool, ToolHandler, tool_for
from ..tree import EventNode, EventTree

if TYPE_CHECKING:
    import anthropic

    from ..prompt import Prompt, PromptOverrides
    from ..workflow import WorkflowContext
    from .core import Agent

__all__ = ["PromptResult", "PromptRun", "StreamEvent", "ToolCall", "Toolbox"]

T = TypeVar("T")


@dataclass(frozen=True)
class StreamEvent:
    """One item of ``agent.stream()``.

    ``type`` is ``text`` (``text`` holds a delta), ``tool_input`` (``tool_input``
    holds a partial-JSON delta), ``tool_call`` (``tool_call``: id, name, input),
    ``tool_result`` (``tool_result``: tool_use_id, name, content, is_error),
    ``retry`` (the model turn broke off mid-stream and starts again: discard the
    deltas received since the turn began; ``text`` says why) or, last,
    ``result`` (``result`` is the validated output).
    """

    type: Literal["text", "tool_input", "tool_call", "tool_result", "retry", "result"]
    text: str | None = None
    tool_input: str | None = None
    tool_call: dict[str, Any] | None = None
    tool_result: dict[str, Any] | None = None
    result: Any = None


@dataclass
class PromptResult(Generic[T]):
    """What `Agent.run` returns: the output plus where it sits in the tree."""

    output: T
    tree: EventTree
    node: EventNode
    usage: dict[str, int] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    #: Values of the prompt's `Extract` rules, by ``store_as``.
    extracted: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolCall:
    """One tool call the model asked for, as ``wrap_tool_call`` sees it.

    ``input`` may be changed (or a changed copy passed on with
    ``dataclasses.replace``); ``node`` is the call's node in the tree; ``tool``
    is the handler that will run it (``None`` when no tool has that name).
    """

    name: str
    input: dict[str, Any]
    id: str
    node: EventNode
    tool: ToolHandler | None = None


class Toolbox:
    """The tools of one prompt: handlers by name, and the definitions sent to the API.

    Every tool is a `groundswell.tools.ToolHandler` (a function's `Tool`, a
    toolset's tools, a skill's ``read_skill``, an MCP server's tools); an
    Anthropic tool dict without a handler (a server tool) is only sent.
    """

    __slots__ = ("definitions", "handlers")

    def __init__(self) -> None:
        self.handlers: dict[str, ToolHandler] = {}
        self.definitions: list[dict[str, Any]] = []

    def add(self, item: Any) -> None:
        """Add a callable, a `Tool` or other handler, an Anthropic tool dict, or a toolset name."""
        if isinstance(item, str):
            for produced in _toolset(item):
                self.add(produced)
            return
        if isinstance(item, Mapping):
            definition = dict(item)  # an Anthropic tool dict: passed through unchanged
        elif isinstance(item, ToolHandler):
            definition = item.definition()
            self.handlers[item.name] = item
        elif callable(item):
            self.add(tool_for(item))
            return
        else:
            raise ConfigurationError(
                f"tools items must be callables, groundswell.Tool, Anthropic tool dicts or "
                f"toolset names; got {type(item).__name__}"
            )
        name = definition.get("name")
        if any(d.get("name") == name for d in self.definitions):
            raise ConfigurationError(f"two tools are named {name!r}; tool names must be unique")
        self.definitions.append(definition)

    def get(self, name: str) -> ToolHandler | None:
        """The handler of the tool called ``name``, if it has one."""
        return self.handlers.get(name)

    def __len__(self) -> int:
        return len(self.definitions)


def _toolset(name: str) -> list[Any]:
    manager = get_plugin_manager()
    record = manager.lookup("register_tool_providers", name)
    try:
        produced = record.factory()
    except GroundswellError:
        raise  # a deliberate error of the plugin's (e.g. a missing extra) says enough
    except Exception as exc:
        plugin = manager.owner("register_tool_providers", name) or name
        raise PluginError(
            f"toolset {name!r} of plugin {plugin!r} failed to make its tools: "
            f"{type(exc).__name__}: {exc}",
            plugin=plugin,
        ) from exc
    if isinstance(produced, Mapping | Tool) or callable(produced):
        items = [produced]
    elif isinstance(produced, Iterable) and not isinstance(produced, str | bytes):
        items = list(produced)
    else:
        plugin = manager.owner("register_tool_providers", name) or name
        raise PluginError(
            f"toolset {name!r} of plugin {plugin!r}: its factory returned "
            f"{type(produced).__name__} {produced!r:.60}; it must return a list of tools "
            "(functions, Tool objects or tool dicts), empty when there are none",
            plugin=plugin,
        )
    for item in items:
        # Recorded on their tool-call nodes, so sinks can treat a toolset's results apart.
        if isinstance(item, Tool) and item.toolset is None:
            item.toolset = name
    return items


class PromptRun:
    """The state of one prompt, passed to every middleware seam.

    ``agent``, ``prompt`` and ``overrides`` are what was called; ``settings``
    the merged settings of the current attempt (``PromptOverrides`` > ``Prompt``
    > ``Agent``, by API name); ``tree`` the run's tree and ``node`` the current
    attempt's ``prompt`` node; ``messages``, ``system`` and ``tools`` the
    conversation the next model turn sends; ``usage`` the attempt's token usage;
    ``scratch`` a dict where a middleware keeps its own per-prompt state (use
    your middleware's name as a key prefix).
    """

    __slots__ = (
        "_continuation",
        "_deferred",
        "_emit",
        "_node",
        "agent",
        "attempt",
        "base_settings",
        "client",
        "messages",
        "overrides",
        "payload",
        "prompt",
        "retry_messages",
        "retry_note",
        "scratch",
        "settings",
        "system",
        "tools",
        "tree",
        "usage",
        "workflow",
    )

    def __init__(
        self,
        *,
        agent: Agent,
        prompt: Prompt[Any],
        overrides: PromptOverrides,
        settings: dict[str, Any],
        tree: EventTree,
        client: anthropic.AsyncAnthropic,
        workflow: WorkflowContext | None,
        emit: Callable[[StreamEvent], None] | None,
    ) -> None:
        self.agent = agent
        self.prompt = prompt
        self.overrides = overrides
        #: The settings every attempt starts from (`revise` rebuilds them).
        self.base_settings = settings
        self.settings = settings
        self.tree = tree
        self.client = client
        #: The workflow run the prompt belongs to, or ``None`` outside one.
        self.workflow = workflow
        self._emit = emit
        self._node: EventNode | None = None
        self.messages: list[dict[str, Any]] = []
        self.system: Any = None
        self.tools = Toolbox()
        self.usage: dict[str, int] = {}
        self.scratch: dict[str, Any] = {}
        #: The attempt running now when a middleware retries the prompt (1 for the
        #: first), else ``None``; recorded on the prompt node as ``metrics["attempt"]``.
        self.attempt: int | None = None
        #: Extra fields for the prompt node's payload (set before the node starts,
        #: i.e. by a middleware with an order below `NODE_ORDER`).
        self.payload: dict[str, Any] = {}
        #: What the next attempt adds: a note after the user text, and messages after it.
        self.retry_note: str | None = None
        self.retry_messages: tuple[dict[str, Any], ...] = ()
        self._deferred: list[Callable[[], Awaitable[Any]]] = []
        self._continuation: tuple[str, str] | None = None

    @property
    def node(self) -> EventNode:
        """The ``prompt`` node of the current attempt."""
        if self._node is None:
            raise ConfigurationError(
                "PromptRun.node is not there yet: the prompt node starts inside middleware "
                "with an order below NODE_ORDER (200); give yours a higher order"
            )
        return self._node

    @property
    def has_node(self) -> bool:
        """True once the first attempt's prompt node has started."""
        return self._node is not None

    @property
    def streaming(self) -> bool:
        """True when the prompt runs under ``agent.stream()``."""
        return self._emit is not None

    def emit(self, event: StreamEvent) -> None:
        """Send ``event`` to the ``agent.stream()`` consumer (nothing when not streaming)."""
        if self._emit is not None:
            self._emit(event)

    def request(self) -> dict[str, Any]:
        """The Messages API request the next model turn would send (before ``before_model``)."""
        return build_request(
            self.settings,
            self.messages,
            tools=self.tools.definitions,
            system=self.system,
            response_format=self.prompt.response_format,
        )

    def add_system(self, section: str) -> None:
        """Append ``section`` to the system prompt (text or content blocks) of this attempt."""
        system = self.system
        if isinstance(system, str) or system is None:
            self.system = f"{system}\n\n{section}" if system else section
        else:
            self.system = [*system, {"type": "text", "text": section}]

    def revise(
        self, prompt: Prompt[Any] | None = None, overrides: PromptOverrides | None = None
    ) -> None:
        """Use a changed prompt or overrides from the next attempt on."""
        self.prompt = prompt if prompt is not None else self.prompt
        self.overrides = overrides if overrides is not None else self.overrides
        self.base_settings = self.agent.settings_for(self.prompt, self.overrides)

    def defer(self, action: Callable[[], Awaitable[Any]]) -> None:
        """Run ``await action()`` once the current attempt has succeeded as a whole.

        For work that must not happen when a later layer fails the attempt,
        e.g. storing an answer that extraction then refuses.
        """
        self._deferred.append(action)

    def continue_with(self, text: str, *, reason: str = "a middleware asked for more") -> None:
        """After the model's final reply, send ``text`` as a user turn and go on.

        ``reason`` is what `MaxTurnsExceeded` names when this keeps happening.
        """
        self._continuation = (text, reason)

    # -- for the loop ---------------------------------------------------------------

    def begin_attempt(self, node: EventNode) -> None:
        """Start an attempt under ``node``: fresh settings, usage and conversation state."""
        if self._node is not None:  # a retry: nothing of the failed attempt carries over
            self.usage = {}
            self.messages = []
            self.tools = Toolbox()
            self._deferred = []
            self._continuation = None
        self._node = node
        self.settings = dict(self.base_settings)
        self.system = self.settings.get("system")

    def pop_continuation(self) -> tuple[str, str] | None:
        """The pending `continue_with` (text, reason), cleared; ``None`` if there is none."""
        pending, self._continuation = self._continuation, None
        return pending

    @property
    def has_deferred(self) -> bool:
        """True when `defer` collected actions for the current attempt."""
        return bool(self._deferred)

    async def run_deferred(self) -> None:
        """Run the actions `defer` collected for the attempt that just succeeded."""
        actions, self._deferred = self._deferred, []
        for action in actions:
            await action()

    def __repr__(self) -> str:
        return f"PromptRun(agent={self.agent.name!r}, attempt={self.attempt})"
