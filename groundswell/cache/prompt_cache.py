"""``prompt_cache=``: Anthropic prompt caching, where it pays.

A cache write costs 1.25x the input price (2x for the one-hour lifetime), a
read 0.1x, and a prefix shorter than the model's minimum is never cached. So
a write of ``P`` tokens costs ``0.25 P`` extra and each later read saves
``0.9 P``: it pays once the prefix is read again with a chance above 28%.

- ``False``: nothing is added.
- ``True``, ``"5m"``, ``"1h"``: automatic caching (a top-level
  ``cache_control``) on every turn, set by the agent loop after every
  ``before_model`` layer (`groundswell.cache.markers.auto_cache`): this layer
  then sits the prompt out.
- a list of places (``"system"``, ``"tools"``, ``"messages"``): explicit
  breakpoints at the end of each.
- ``None`` (the default): automatic caching from the third turn of a tool
  loop and on a conversation continued with ``message_history``, once the
  request is long enough and the conversation was not rewritten this turn (a
  budget's sliding window or summary: the next turn would rewrite it again, so
  nothing written would be read); a breakpoint after the system prompt and tools when
  the same client sent that prefix within the last five minutes. Turn 1 of a
  prompt with no history and a prefix not seen before gets nothing: a
  one-shot prompt never pays for a write nobody reads.

The user's own ``cache_control`` markers (top-level or on blocks) are kept
and counted: the request never carries more than `MAX_BREAKPOINTS`, ours
dropped first. Runs last of the ``before_model`` layers (order 900), so the
markers land on what is sent. Nothing the caller passed is changed in place:
a list or block that gets a marker is copied.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from ..agent import Middleware, PromptRun
from ..model.thinking_blocks import THINKING_TYPES
from .markers import END as _END
from .markers import MAX_BREAKPOINTS
from .markers import Marks as _Marks
from .markers import control as _control
from .markers import marks_in as _marks

__all__ = ["MAX_BREAKPOINTS", "REWRITTEN", "PromptCache", "min_cacheable_tokens"]

#: A middleware that changes messages the previous request already held (a context
#: TTL expiring a tool result, say) sets ``run.scratch[REWRITTEN] = True``: the default
#: policy then treats the conversation as rewritten this turn, as it does a budget's
#: trimming (which it sees for itself: the conversation no longer starts the same way).
REWRITTEN = "conversation_rewritten"

#: How long a cache entry lives after its last use, by ``ttl``.
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
# The minimum cacheable prompt length by model (Anthropic's prompt caching docs);
# any other model: DEFAULT_MINIMUM, the lowest, so a prefix is never left uncached
# for being short when it is not. A marker on a shorter prefix is harmless: no write,
# no charge, no error.
_MINIMUMS: tuple[tuple[str, int], ...] = (
    ("opus-4-7", 4096),
    ("opus-4-6", 4096),
    ("opus-4-5", 4096),
    ("haiku-4-5", 4096),
    ("3-5-haiku", 2048),
    ("3-haiku", 2048),
)
DEFAULT_MINIMUM = 1024
_CHARS_PER_TOKEN = 4  # estimates only decide "long enough?": chars/4 is plenty
_SEEN_MAX = 1024  # prefixes remembered per client
_SCRATCH = "prompt_cache"
_LISTS = (list, tuple)
_AUTOMATIC = ("5m", "1h")  # with True: the settings the request builder serves

_minimums: dict[str, int] = {}


def min_cacheable_tokens(model: str) -> int:
    """The fewest tokens a prefix needs to be cached for ``model``."""
    known = _minimums.get(model)
    if known is None:
        known = next((n for part, n in _MINIMUMS if part in model), DEFAULT_MINIMUM)
        if len(_minimums) < 256:
            _minimums[model] = known
    return known


def _mark_tools(request: dict[str, Any], ttl: str, marks: _Marks) -> bool:
    tools = request.get("tools")
    if not tools or not isinstance(tools[-1], Mapping) or tools[-1].get("cache_control"):
        return False
    where = (0, len(tools) - 1, 0)
    marked = list(tools)
    marked[-1] = {**tools[-1], "cache_control": _control(marks.ttl_at(ttl, where))}
    request["tools"] = marked
    return True


def _mark_system(request: dict[str, Any], ttl: str, marks: _Marks) -> bool:
    system = request.get("system")
    if isinstance(system, str):
        if not system:
            return False
        control = _control(marks.ttl_at(ttl, (1, 0, 0)))
        request["system"] = [{"type": "text", "text": system, "cache_control": control}]
        return True
    if not system or not isinstance(system, _LISTS):
        return False
    last = system[-1]
    if not _markable(last):
        return False
    blocks = list(system)
    control = _control(marks.ttl_at(ttl, (1, len(system) - 1, 0)))
    blocks[-1] = {**last, "cache_control": control}
    request["system"] = blocks
    return True


def _mark_messages(request: dict[str, Any], ttl: str, marks: _Marks) -> bool:
    messages = request.get("messages")
    if not messages or not isinstance(messages[-1], Mapping):
        return False
    i = len(messages) - 1
    message = messages[i]
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return False
        control = _control(marks.ttl_at(ttl, (2, i, 0)))
        blocks: list[Any] = [{"type": "text", "text": content, "cache_control": control}]
    else:
        # The last block that can hold a marker: never a thinking block, nor empty text.
        j = next((j for j in range(len(content or ()) - 1, -1, -1) if _markable(content[j])), -1)
        if j < 0:
            return False
        blocks = list(content)
        blocks[j] = {**content[j], "cache_control": _control(marks.ttl_at(ttl, (2, i, j)))}
    sent = list(messages)
    sent[i] = {**message, "content": blocks}
    request["messages"] = sent
    return True


def _markable(block: Any) -> bool:
    if not isinstance(block, Mapping) or block.get("cache_control"):
        return False  # the caller's own marker is already there: it stands for ours
    kind = block.get("type")
    return kind not in THINKING_TYPES and not (kind == "text" and not block.get("text"))


_PLACES = {"tools": _mark_tools, "system": _mark_system, "messages": _mark_messages}
# Breakpoints kept first when there is no room for all: the later in the prompt,
# the more a breakpoint covers.
_PRIORITY = ("auto", "messages", "system", "tools")


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "text":
            return len(str(value.get("text", "")))
        if kind == "tool_result":
            return _chars(value.get("content") or "")
        return len(repr(value))
    if isinstance(value, _LISTS):
        return sum(_chars(v) for v in value)
    return len(repr(value))


# The first turn of a tool loop the default policy caches. Turn 2 would write a prefix
# that only a third turn reads: the commonest loop (one tool call, then the answer)
# would pay the 0.25x write premium for nothing. From turn 3 on, the loop has shown
# it goes on.
_FIRST_CACHED_TURN = 3
_schema_sizes: dict[int, tuple[Any, int]] = {}


def _prefix(system: Any, tools: Sequence[Any]) -> tuple[int, Any]:
    """(characters, hashable key) of a request's system prompt and tool definitions."""
    system_key: Any
    if isinstance(system, str):
        size, system_key = len(system), system
    elif isinstance(system, _LISTS):
        texts = tuple(str(b.get("text", "")) if isinstance(b, Mapping) else str(b) for b in system)
        size, system_key = sum(map(len, texts)), texts
    else:
        size, system_key = 0, None
    tool_keys = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        name, description = str(tool.get("name", "")), str(tool.get("description") or "")
        schema_size = _schema_size(tool.get("input_schema"))
        size += len(name) + len(description) + schema_size
        tool_keys.append((name, description, schema_size))
    return size, (system_key, tuple(tool_keys))


def _schema_size(schema: Any) -> int:
    if schema is None:
        return 0
    held = _schema_sizes.get(id(schema))
    if held is not None and held[0] is schema:
        return held[1]
    size = len(json.dumps(schema, default=str, sort_keys=True))
    if len(_schema_sizes) >= _SEEN_MAX:
        _schema_sizes.clear()
    _schema_sizes[id(schema)] = (schema, size)  # the schema is held: its id stays its own
    return size


def _long_enough(request: Mapping[str, Any], prefix: int, minimum: int) -> bool:
    """Whether the request reaches ``minimum`` characters (newest messages counted first)."""
    total = prefix
    messages = request.get("messages") or ()
    for i in range(len(messages) - 1, -1, -1):
        if total >= minimum:
            return True
        message = messages[i]
        total += _chars(message.get("content") if isinstance(message, Mapping) else message)
    return total >= minimum


class _State:
    """One attempt's view: its turn, and what its first turn learned of the prefix."""

    __slots__ = ("count", "head", "node", "prefix", "shared", "tail", "turn")

    def __init__(self, node: Any) -> None:
        self.node = node
        self.turn = 0
        self.prefix = 0
        self.shared = False
        # The previous request's conversation: how long, its first and last message.
        self.count = 0
        self.head: Any = None
        self.tail: Any = None

    def rewritten(self, messages: Sequence[Any]) -> bool:
        """Whether ``messages`` no longer starts with the previous request's conversation
        (a budget trimmed or summarized it), noting ``messages`` for the next turn."""
        count = self.count
        changed = count > 0 and not (
            len(messages) >= count and messages[0] == self.head and messages[count - 1] == self.tail
        )
        self.count = len(messages)
        if messages:
            self.head, self.tail = messages[0], messages[-1]
        return changed


class PromptCache(Middleware):
    """Add ``cache_control`` to each request as ``prompt_cache`` asks (module docstring)."""

    name = "prompt_cache"
    order = 900
    per_agent = True  # active() reads the agent's settings only

    def __init__(self) -> None:
        # Per client (weakly): the prefixes (model, system, tools) its prompts sent, by
        # hash, and when. The API's cache is per account; one client is the closest
        # thing to it in the process, and it never mixes tests on different fakes.
        self._seen: weakref.WeakKeyDictionary[Any, dict[int, float]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def active(self, run: PromptRun) -> bool:
        setting = run.settings.get("prompt_cache")
        if setting is not None:
            # Automatic caching is one top-level field: the agent loop sets it
            # (`groundswell.cache.markers.auto_cache`), with no layer to run per turn.
            return not (setting is False or setting is True or setting in _AUTOMATIC)
        # The default can only act on a continued conversation, a tool loop or a
        # shared system prompt: a bare one-shot prompt never sees this middleware.
        settings = run.settings
        return bool(
            run.history
            or settings.get("tools")
            or settings.get("system")
            or settings.get("mcps")
            or settings.get("skills")
            or settings.get("context")
        )

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        rewritten = run.scratch.pop(REWRITTEN, False)  # said for this turn only
        setting = run.settings.get("prompt_cache")
        plan: Sequence[str]
        if setting is None:
            plan, ttl = self._default_plan(run, request, rewritten), "5m"
        elif isinstance(setting, Sequence) and not isinstance(setting, str):
            plan, ttl = [p for p in _PRIORITY if p in setting], "5m"
        else:
            return request
        if not plan:
            return request
        marks = _marks(request)
        room = MAX_BREAKPOINTS - marks.count
        for place in plan:
            if room <= 0:
                break
            if place == "auto":
                if request.get("cache_control"):
                    continue  # the caller's own automatic caching stands
                request["cache_control"] = _control(marks.ttl_at(ttl, _END))
                room -= 1
            elif _PLACES[place](request, ttl, marks):
                room -= 1
        return request

    def _default_plan(
        self, run: PromptRun, request: Mapping[str, Any], rewritten: bool = False
    ) -> list[str]:
        state: _State | None = run.scratch.get(_SCRATCH)
        if state is None or state.node is not run.node:  # a new attempt starts over
            state = run.scratch[_SCRATCH] = _State(run.node)
        state.turn += 1
        model = str(request.get("model", ""))
        minimum = min_cacheable_tokens(model) * _CHARS_PER_TOKEN
        if state.turn == 1:
            system, tools = request.get("system"), request.get("tools")
            if system or tools:
                # Sized and keyed once per attempt, from what is cheap to read: a string's
                # length and hash (Python keeps it), a tool's name, description and the
                # size of its schema (measured once per schema object).
                size, key = _prefix(system, tools or ())
                state.prefix = size
                if size >= minimum:
                    state.shared = self._seen_before(run.client, hash((model, key)))
        plan: list[str] = []
        # A conversation rewritten this turn (a budget's sliding window, a summary) will
        # most likely be rewritten again next turn: what this turn wrote would never be
        # read, so a write would only cost 1.25x.
        rewritten = state.rewritten(request.get("messages") or ()) or rewritten
        if (
            (state.turn > _FIRST_CACHED_TURN - 1 or run.history)
            and not rewritten
            and _long_enough(request, state.prefix, minimum)
        ):
            plan.append("auto")
        if state.shared:
            plan.append("system" if request.get("system") else "tools")
        return plan

    def _seen_before(self, client: Any, key: int) -> bool:
        """Whether ``client`` sent the prefix ``key`` within five minutes; remembers it now."""
        now = time.monotonic()
        with self._lock:
            try:
                seen = self._seen.get(client)
                if seen is None:
                    seen = self._seen[client] = {}
            except TypeError:  # a client that cannot be weakly referenced: not remembered
                return False
            last = seen.get(key)
            seen[key] = now
            if len(seen) > _SEEN_MAX:
                for old in [k for k, t in seen.items() if now - t >= TTL_SECONDS["5m"]]:
                    del seen[old]
                if len(seen) > _SEEN_MAX:
                    seen.clear()
        return last is not None and now - last < TTL_SECONDS["5m"]
