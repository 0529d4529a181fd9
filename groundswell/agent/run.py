"""The typed state of one prompt (`PromptRun`) and what the loop hands around.

A `PromptRun` is created for every ``agent.prompt()`` / ``run()`` / ``stream()``
call and passed to every middleware seam. It lives for the whole prompt, all
its attempts included; the kernel refreshes the per-attempt parts (``node``,
``settings``, ``messages``, ``history``, ``system``, ``tools``, ``usage``) when
an attempt starts, and ``scratch`` is kept across attempts for middleware's own
state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from ..errors import ConfigurationError, GroundswellError, PluginError
from ..model.requests import build_request
from ..plugins.manager import get_plugin_manager
from ..tools.tool import Tool, ToolHandler, tool_for
from ..tree.node import metrics_of
from ..tree.tree import EventNode, EventTree

if TYPE_CHECKING:
    import anthropic

    from ..prompt.prompt import Prompt, PromptOverrides
    from ..workflow.workflow import WorkflowContext
    from .core import Agent

__all__ = ["PromptResult", "PromptRun", "StreamEvent", "ToolCall", "Toolbox", "check_history"]

T = TypeVar("T")


@dataclass(frozen=True)
class StreamEvent:
    """One item of ``agent.stream()``.

    ``type`` is ``text`` (``text`` holds a delta), ``tool_input`` (``tool_input``
    holds a partial-JSON delta), ``tool_call`` (``tool_call``: id, name, input),
    ``tool_result`` (``tool_result``: tool_use_id, name, content, is_error),
    ``retry`` (the model turn broke off mid-stream and starts again: discard the
    deltas received since the turn began; ``text`` says why), ``system_message``
    (a hook's ``systemMessage`` for the user, in ``text``), ``mcp_progress``
    and ``mcp_log`` (a local MCP server's progress or log message during a
    call; ``mcp`` holds the call's ``tool_use_id`` and ``name`` with
    ``progress``, ``total``, ``message``, or ``level``, ``logger``, ``data``) or,
    last, ``result`` (``result`` is the validated output).
    """

    type: Literal[
        "text",
        "tool_input",
        "tool_call",
        "tool_result",
        "retry",
        "system_message",
        "mcp_progress",
        "mcp_log",
        "result",
    ]
    text: str | None = None
    tool_input: str | None = None
    tool_call: dict[str, Any] | None = None
    tool_result: dict[str, Any] | None = None
    result: Any = None
    mcp: dict[str, Any] | None = None


@dataclass
class PromptResult(Generic[T]):
    """What `Agent.run` returns: the output plus where it sits in the tree.

    ``messages`` is the whole conversation, Messages API message dicts oldest
    first: the ``message_history`` the call continued (as last sent, so less
    when a token budget dropped some of it), the user turn, tool calls and
    results, and the final assistant turn. Pass it as ``message_history`` to
    continue the conversation.
    """

    output: T
    tree: EventTree
    node: EventNode
    usage: dict[str, int] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    #: Values of the prompt's `Extract` rules, by ``store_as``.
    extracted: dict[str, Any] = field(default_factory=dict)

    @property
    def cost_usd(self) -> float | None:
        """What the prompt's model calls cost in USD (its node's ``metrics["cost_usd"]``).

        Like ``usage``, the answering attempt's (the step or workflow around it
        counts every attempt); ``0.0`` when it made no call (an answer from the
        cache); ``None`` when the model has no known price (see
        `groundswell.set_prices`).
        """
        cost: float | None = metrics_of(self.node).get("cost_usd", 0.0)
        return cost


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

    Every tool is a `groundswell.tools.tool.ToolHandler` (a function's `Tool`, a
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
        # A nameless entry (the MCP-client beta's mcp_toolset) cannot clash.
        if name is not None and any(d.get("name") == name for d in self.definitions):
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
    your middleware's name as a key prefix). ``history`` is the earlier
    conversation the call continues (``message_history``), sent before
    ``messages`` (whose first message is always this prompt's user turn);
    ``deps`` the call's dependencies object, which tools get as ``ctx.deps``.
    """

    __slots__ = (
        "_bare",
        "_caught_up",
        "_continuation",
        "_deferred",
        "_emit",
        "_given_history",
        "_listeners",
        "_node",
        "agent",
        "attempt",
        "base_settings",
        "client",
        "deps",
        "history",
        "messages",
        "overrides",
        "payload",
        "prompt",
        "retry_messages",
        "retry_note",
        "scratch",
        "settings",
        "spent",
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
        history: tuple[dict[str, Any], ...] = (),
        deps: Any = None,
        caught_up: Callable[[], Awaitable[None]] | None = None,
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
        self._caught_up = caught_up
        self._node: EventNode | None = None
        self._bare = False  # `begin_attempt`: the request is the agent's, untouched
        self.messages: list[dict[str, Any]] = []
        #: The earlier conversation (``message_history``) sent before ``messages``; a
        #: token budget may drop turns of it (for this attempt: each starts from all of it).
        self.history: list[dict[str, Any]] = list(history)
        self._given_history = history
        #: The call's ``deps`` (``None`` when it passed none); tools get it as ``ctx.deps``.
        self.deps = deps
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
        self._deferred: list[tuple[Callable[[], Awaitable[Any]], Callable[[], Any] | None]] = []
        self._continuation: tuple[str, str] | None = None
        self._listeners: list[Callable[[str, str], None]] = []

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

    def emit_mcp(self, kind: str, details: dict[str, Any]) -> None:
        """Send an ``mcp_progress`` or ``mcp_log`` `StreamEvent` (``details`` its ``mcp``)."""
        if self._emit is not None:
            self._emit(StreamEvent(kind, mcp=details))  # type: ignore[arg-type]

    def request(self) -> dict[str, Any]:
        """The Messages API request the next model turn would send (before ``before_model``).

        Its ``messages`` are ``history`` then ``messages`` (``messages`` itself when
        there is no history).
        """
        return build_request(
            self.settings,
            [*self.history, *self.messages] if self.history else self.messages,
            tools=self.tools.definitions,
            system=self.system,
            response_format=self.prompt.response_format,
            bare=self._bare,
        )

    @property
    def bare_request(self) -> bool:
        """True when `request` sends only the model, max_tokens, messages, system and tools:
        the agent's own settings, no middleware taking part, no ``response_format``."""
        return self._bare and self.prompt.response_format is None

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

    def defer(
        self, action: Callable[[], Awaitable[Any]], dropped: Callable[[], Any] | None = None
    ) -> None:
        """Run ``await action()`` once the current attempt has succeeded as a whole.

        For work that must not happen when a later layer fails the attempt,
        e.g. storing an answer that extraction then refuses. ``dropped()`` is
        called instead when the attempt fails (or is cancelled).
        """
        self._deferred.append((action, dropped))

    def notify(self, kind: str, message: str) -> None:
        """Tell the prompt's listeners (`listen`) that it waits: ``kind`` says for what.

        The loop says ``retry_wait`` before it waits to retry a model call.
        """
        for listener in self._listeners:
            listener(kind, message)

    def listen(self, listener: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``listener(kind, message)`` on each `notify`; returns what stops it.

        It is called where the wait starts, so it must be quick (start a task for
        slow work).
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def continue_with(self, text: str, *, reason: str = "a middleware asked for more") -> None:
        """After the model's final reply, send ``text`` as a user turn and go on.

        ``reason`` is what `MaxTurnsExceeded` names when this keeps happening.
        """
        self._continuation = (text, reason)

    # -- for the loop ---------------------------------------------------------------

    def begin_attempt(self, node: EventNode, *, copy_settings: bool = True) -> None:
        """Start an attempt under ``node``: fresh settings, usage and conversation state.

        ``copy_settings=False`` (no middleware takes part, so nothing writes to them)
        reads ``base_settings`` where they are instead of copying them.
        """
        if self._node is not None:  # a retry: nothing of the failed attempt carries over
            self.usage = {}
            self.messages = []
            self.tools = Toolbox()
            self.drop_deferred()
            self._continuation = None
            if self._given_history:
                self.history = list(self._given_history)
        self._node = node
        if copy_settings:
            self.settings = dict(self.base_settings)
            self._bare = False
        else:
            self.settings = self.base_settings
            agent = self.agent
            self._bare = self.settings is agent.config and agent.bare_request
        self.system = self.settings.get("system")

    def pop_continuation(self) -> tuple[str, str] | None:
        """The pending `continue_with` (text, reason), cleared; ``None`` if there is none."""
        pending, self._continuation = self._continuation, None
        return pending

    @property
    def has_deferred(self) -> bool:
        """True when `defer` collected actions for the current attempt."""
        return bool(self._deferred)

    async def caught_up(self) -> None:
        """Wait until the ``agent.stream()`` consumer has taken every event and asks for more.

        The loop waits here before it ends a prompt node ``completed``: a consumer that
        left the stream early never asks again, so the prompt stays open until the
        stream is closed (``aclose()``, its finalizer or the loop's shutdown), which
        cancels it. Returns at once when not streaming.
        """
        if self._caught_up is not None:
            await self._caught_up()

    async def run_deferred(self) -> None:
        """Run the actions `defer` collected for the attempt that just succeeded."""
        actions, self._deferred = self._deferred, []
        for i, (action, _) in enumerate(actions):
            try:
                await action()
            except BaseException:
                _drop(actions[i + 1 :])
                raise

    def drop_deferred(self) -> None:
        """The attempt failed: call what `defer` was given to call instead of each action."""
        actions, self._deferred = self._deferred, []
        _drop(actions)

    def __repr__(self) -> str:
        return f"PromptRun(agent={self.agent.name!r}, attempt={self.attempt})"


_MESSAGE_KEYS = frozenset({"role", "content"})


def check_history(history: Any, owner: str) -> tuple[dict[str, Any], ...]:
    """``message_history`` as message dicts, checked: a conversation a new user turn can follow.

    Messages API message dicts (``role`` ``"user"`` or ``"assistant"``, ``content`` a
    non-empty string or list of content blocks), oldest first: the first a user turn,
    the last an assistant turn, never two user turns in a row (an assistant turn may
    span several messages, as a paused turn does), every ``tool_use`` answered by the
    ``tool_result`` blocks of the next message and every ``tool_result`` answering one.
    `PromptResult.messages` is such a list. Raises `ConfigurationError` naming the first
    message that breaks a rule.
    """
    where = f"{owner}: message_history"
    if isinstance(history, str | bytes | Mapping) or not isinstance(history, Sequence):
        hint = ", not the result" if isinstance(history, PromptResult) else ""
        raise ConfigurationError(
            f"{where} must be a list of Messages API message dicts "
            f"({{'role': 'user' or 'assistant', 'content': ...}}), e.g. result.messages{hint}; "
            f"got {type(history).__name__}"
        )
    checked: list[dict[str, Any]] = []
    previous: str | None = None
    asked: set[str] = set()  # the tool_use ids the assistant turn before asked for
    for i, message in enumerate(history):
        at = f"{where}[{i}]"
        if not isinstance(message, Mapping):
            raise ConfigurationError(
                f"{at} must be a message dict {{'role': ..., 'content': ...}}, "
                f"got {type(message).__name__}"
            )
        unknown = sorted(map(str, message.keys() - _MESSAGE_KEYS))
        role = message.get("role")
        if unknown or role not in ("user", "assistant"):
            why = (
                f"has keys a message does not take: {', '.join(unknown)}"
                if unknown
                else f"role must be 'user' or 'assistant', got {role!r:.40}"
            )
            raise ConfigurationError(f"{at} {why}")
        blocks = _content_blocks(message.get("content"), at)
        if previous is None and role != "user":
            raise ConfigurationError(f"{where} must start with a user turn; [0] is {role!r}")
        if role == "user":
            if previous == "user":
                raise ConfigurationError(
                    f"{where}[{i - 1}] and [{i}] are both user turns; user and assistant "
                    "turns must alternate"
                )
            answered = {str(b.get("tool_use_id")) for b in blocks if b["type"] == "tool_result"}
            if answered != asked:
                missing, stray = sorted(asked - answered), sorted(answered - asked)
                raise ConfigurationError(
                    f"{at} "
                    + (
                        f"does not answer the tool calls of the turn before (tool_use ids "
                        f"{', '.join(missing)}): a tool_use must be followed by its tool_result"
                        if missing
                        else f"has tool_result blocks for tool_use ids the turn before did "
                        f"not ask for: {', '.join(stray)}"
                    )
                )
            asked = set()
        else:
            if asked:
                raise ConfigurationError(
                    f"{where}[{i - 1}] calls tools (tool_use ids {', '.join(sorted(asked))}) "
                    f"but [{i}] is not the user turn with their tool_result blocks"
                )
            asked = {str(b.get("id")) for b in blocks if b["type"] == "tool_use"}
        previous = role
        checked.append(dict(message))
    if asked:
        raise ConfigurationError(
            f"{where} ends with tool calls (tool_use ids {', '.join(sorted(asked))}) that have "
            "no tool_result; a conversation is continued after the model's answer"
        )
    if previous == "user":
        raise ConfigurationError(
            f"{where} must end with an assistant turn (the reply the new user turn follows); "
            f"[{len(checked) - 1}] is a user turn"
        )
    return tuple(checked)


def _content_blocks(content: Any, at: str) -> list[Mapping[str, Any]]:
    """A message's content as blocks (a string is one text block); refused when malformed."""
    if isinstance(content, str) and content:
        return [{"type": "text", "text": content}]
    if isinstance(content, list | tuple) and content:
        for j, block in enumerate(content):
            if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                raise ConfigurationError(
                    f"{at}.content[{j}] must be a content block dict with a 'type' "
                    f"('text', 'tool_use', 'tool_result', ...), got {block!r:.60}"
                )
        return list(content)
    raise ConfigurationError(
        f"{at}.content must be a non-empty string or list of content blocks, got {content!r:.60}"
    )


def _drop(actions: list[tuple[Any, Callable[[], Any] | None]]) -> None:
    for _, dropped in actions:
        if dropped is not None:
            dropped()
