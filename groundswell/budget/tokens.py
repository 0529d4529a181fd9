"""Token counting: the offline estimate and the counters of the ``register_token_counters`` hook.

The kernel registers ``estimate`` (offline, deterministic; the default) and
``anthropic`` (the API's ``messages.count_tokens`` on the calling agent's
client). `get_counter` finds a counter by name;
``GROUNDSWELL_TOKEN_COUNTER`` names the process default.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError, PluginError
from ..hookspecs import TokenCounter, hookimpl

__all__ = [
    "COUNTER_ENV",
    "AnthropicCounter",
    "CountRequest",
    "Counter",
    "EstimateCounter",
    "clear_memo",
    "estimate_message",
    "estimate_request",
    "estimate_tokens",
    "get_counter",
]

#: Names the process-wide default counter (``estimate`` when unset).
COUNTER_ENV = "GROUNDSWELL_TOKEN_COUNTER"


@dataclass(frozen=True)
class CountRequest:
    """What a counter counts: one Messages API request's input.

    ``client`` is the calling agent's ``anthropic.AsyncAnthropic`` (counters
    that ask the API use it). ``betas`` and ``mcp_servers`` are the request's
    own (remote MCP servers need the MCP-client beta, and so does counting
    the ``mcp_toolset`` entries they add to ``tools``).
    """

    model: str
    messages: Sequence[Mapping[str, Any]]
    system: Any = None
    tools: Sequence[Mapping[str, Any]] = ()
    client: Any = None
    betas: Sequence[str] = ()
    mcp_servers: Sequence[Mapping[str, Any]] = ()


@runtime_checkable
class Counter(Protocol):
    """A token counter: the input tokens of a request, counted before it is sent.

    One instance may count for many prompts at once (keep no per-request
    state on it). Raising is allowed: the budget estimates that turn instead
    and records a ``budget_counter_error`` event; so is returning anything but
    an ``int`` >= 0 (a `PluginError` naming the counter is what is recorded).
    """

    async def count(self, request: CountRequest) -> int:
        """The number of input tokens ``request`` would use, an ``int`` >= 0."""
        ...


# The estimator is a linear model over counts of simple text features, fitted
# against a published byte-level BPE tokenizer of Claude on prose, code, JSON
# and Markdown (benchmarks/bench_token_accuracy.py and docs/budgets.md have the
# figures). Regex findall and str.count run in C, which keeps it at about
# 10 MB/s.
_WORDS = re.compile(r"[A-Za-z]+")
_PUNCT = re.compile(r"[^\w\s]")
_PUNCT_RUNS = re.compile(r"[^\w\s]+")
_SPACE_RUNS = re.compile(r"  +")
# Runs a BPE cannot swallow whole: encoded data (base64, hex digests, keys:
# letters and digits mixed without breaks, about 1.6 characters a token) and
# long runs of letters, spaces or symbols (DNA, padding, rulers: past the length
# of ordinary words, about four characters a token). Letter and symbol runs are
# searched only inside words of 17+ characters: a cheap split first, because one
# regex over the whole text cost as much as all the other features together.
_RUNS = re.compile(r"[A-Za-z0-9+/=]{17,}|[^\w\s]{33,}")
_SPACE_LONG = re.compile(r"\s{65,}")
_LONG_WORD = 17
_ENCODED_MIN = 24
_CHARS_PER_ENCODED_TOKEN = 1.6
_DIGITS = "0123456789"
_W_WORD, _W_PUNCT, _W_PUNCT_RUN, _W_DIGIT = 1.07, 0.14, 0.89, 1.18
_W_NEWLINE, _W_SPACE_RUN, _W_NON_ASCII = 0.84, 0.24, 0.59
_LONG_RUN_FREE, _CHARS_PER_LONG_TOKEN = 16, 4
# Fixed costs around content, from the API's documented message framing.
_MESSAGE_OVERHEAD = 4
_BLOCK_OVERHEAD = 3
_IMAGE_TOKENS = 1_600  # the API's cap for an image of unknown size (about 1.15 megapixels)
# The tool-use system prompt the API adds whenever tools are sent.
_TOOLS_OVERHEAD = 346
# Counts of texts already seen, keyed by (hash, length) so that the memo never
# keeps a (possibly huge) tool result alive; a collision of both only skews an
# estimate. Cleared when full rather than evicted one by one: cheap, and a
# conversation re-fills it with its own texts on the next turn.
_MEMO: dict[tuple[int, int], int] = {}
_MEMO_SIZE = 65_536


def _text_tokens(text: str) -> int:
    if not text:
        return 0
    key = (hash(text), len(text))
    known = _MEMO.get(key)
    if known is not None:
        return known
    score = 0.0
    runs = [r for w in text.split() if len(w) >= _LONG_WORD for r in _RUNS.findall(w)]
    runs += _SPACE_LONG.findall(text)
    if runs:
        for run in runs:
            alpha = run.isalpha()
            if not alpha and len(run) >= _ENCODED_MIN and any(c.isdigit() for c in run):
                if any(c.isalpha() for c in run):
                    # Counted here as a whole, so left out of the features below.
                    score += len(run) / _CHARS_PER_ENCODED_TOKEN
                    text = text.replace(run, " ", 1)
            elif alpha or not run.isalnum():
                score += (len(run) - _LONG_RUN_FREE) / _CHARS_PER_LONG_TOKEN
    non_ascii = 0 if text.isascii() else len(text.encode("utf-8", "replace")) - len(text)
    score += (
        _W_WORD * len(_WORDS.findall(text))
        + _W_PUNCT * len(_PUNCT.findall(text))
        + _W_PUNCT_RUN * len(_PUNCT_RUNS.findall(text))
        + _W_DIGIT * sum(map(text.count, _DIGITS))
        + _W_NEWLINE * text.count("\n")
        + _W_SPACE_RUN * len(_SPACE_RUNS.findall(text))
        + _W_NON_ASCII * non_ascii
    )
    tokens = max(1, int(score + 0.5))
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    _MEMO[key] = tokens
    return tokens


def clear_memo() -> None:
    """Forget every memoized count (for benchmarks measuring a cold start)."""
    _MEMO.clear()


def estimate_tokens(value: Any) -> int:
    """An offline estimate of the tokens in ``value`` (text, or anything JSON-like).

    Deterministic and fast; within about 5% on English prose and code and
    about 10% on JSON and Markdown of a real tokenizer (docs/budgets.md has
    the measured figures). Use the ``anthropic`` counter for exact counts.
    """
    if isinstance(value, str):
        return _text_tokens(value)
    if value is None:
        return 0
    return _text_tokens(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))


def _block_tokens(block: Any) -> int:
    if isinstance(block, str):
        return _text_tokens(block)
    if not isinstance(block, Mapping):
        return estimate_tokens(block)
    kind = block.get("type")
    if kind == "text":
        return _BLOCK_OVERHEAD + _text_tokens(str(block.get("text", "")))
    if kind == "tool_use" or kind == "server_tool_use" or kind == "mcp_tool_use":
        return (
            _BLOCK_OVERHEAD
            + _text_tokens(str(block.get("name", "")))
            + estimate_tokens(block.get("input") or {})
        )
    if kind == "tool_result" or kind == "mcp_tool_result":
        content = block.get("content")
        inner = (
            _text_tokens(content)
            if isinstance(content, str)
            else sum(_block_tokens(b) for b in content or ())
        )
        return _BLOCK_OVERHEAD + inner
    if kind == "image":
        return _IMAGE_TOKENS
    if kind == "thinking":
        return _BLOCK_OVERHEAD + _text_tokens(str(block.get("thinking", "")))
    return _BLOCK_OVERHEAD + estimate_tokens(dict(block))


def estimate_message(message: Mapping[str, Any]) -> int:
    """The estimated tokens of one message (``{"role", "content"}``)."""
    content = message.get("content")
    if isinstance(content, str):
        return _MESSAGE_OVERHEAD + _text_tokens(content)
    return _MESSAGE_OVERHEAD + sum(_block_tokens(b) for b in content or ())


def system_tokens(system: Any) -> int:
    if not system:
        return 0
    if isinstance(system, str):
        return _text_tokens(system)
    return sum(_block_tokens(b) for b in system)


def tools_tokens(tools: Sequence[Mapping[str, Any]]) -> int:
    if not tools:
        return 0
    return _TOOLS_OVERHEAD + sum(estimate_tokens(dict(t)) for t in tools)


def estimate_request(request: CountRequest) -> int:
    """The estimated input tokens of a whole request."""
    return (
        system_tokens(request.system)
        + tools_tokens(request.tools)
        + sum(estimate_message(m) for m in request.messages)
    )


class EstimateCounter:
    """The default counter: `estimate_request`, offline and deterministic."""

    async def count(self, request: CountRequest) -> int:
        """Estimated input tokens of ``request``."""
        return estimate_request(request)


class AnthropicCounter:
    """Counts with the API's ``messages.count_tokens`` on the calling agent's client.

    The kernel's ``"anthropic"`` token counter (``TokenBudget(counter="anthropic")``):
    exact, at the cost of one API call per count. Subclass it to change how it counts,
    and register the subclass under that name to replace it (see the
    ``register_token_counters`` hook).
    """

    async def count(self, request: CountRequest) -> int:
        """Exact input tokens of ``request``, as the API counts them."""
        if request.client is None:
            raise ConfigurationError(
                "the 'anthropic' token counter needs the agent's client; it counts only "
                "inside an agent's prompt"
            )
        params: dict[str, Any] = {"model": request.model, "messages": list(request.messages)}
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = list(request.tools)
        if request.betas or request.mcp_servers:
            # Only the beta endpoint takes betas, remote servers and their toolsets.
            if request.betas:
                params["betas"] = list(request.betas)
            if request.mcp_servers:
                params["mcp_servers"] = list(request.mcp_servers)
            result = await request.client.beta.messages.count_tokens(**params)
        else:
            result = await request.client.messages.count_tokens(**params)
        return int(result.input_tokens)


@hookimpl
def register_token_counters() -> tuple[TokenCounter, ...]:
    """The kernel's own counters: ``estimate`` (default) and ``anthropic``."""
    return (
        TokenCounter("estimate", EstimateCounter, "offline estimate, deterministic (the default)"),
        TokenCounter(
            "anthropic", AnthropicCounter, "the API's messages.count_tokens (exact, online)"
        ),
    )


_DEFAULT_COUNTER = EstimateCounter()


def known_counter(name: str) -> list[str] | None:
    """``None`` when a counter named ``name`` is registered, else the names that are.

    To raise the usual error instead, use ``get_plugin_manager().lookup(TokenCounter, name)``.
    """
    if name == "estimate":
        return None
    from ..plugins.manager import get_plugin_manager

    manager = get_plugin_manager()
    try:
        manager.lookup(TokenCounter, name)
    except ConfigurationError:
        return sorted(manager.token_counters())
    return None


class _Checked:
    """A counter whose answers are checked: ``count`` must be async and give an int >= 0.

    A wrong answer becomes a `PluginError` that names the counter and what it
    must return, which the budget records (and estimates instead) like any
    other counter failure, rather than a ``TypeError`` from deep inside it.
    """

    __slots__ = ("counter", "label", "plugin")

    def __init__(self, counter: Counter, label: str, plugin: str | None) -> None:
        self.counter, self.label, self.plugin = counter, label, plugin

    async def count(self, request: CountRequest) -> int:
        made = self.counter.count(request)
        if not inspect.isawaitable(made):
            raise self._broken(
                f"returned {type(made).__name__} {made!r:.40}, not an awaitable; "
                "it must be async def count(self, request)"
            )
        tokens = await made
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
            return tokens
        raise self._broken(
            f"returned {type(tokens).__name__} {tokens!r:.40}; it must return "
            "the request's input tokens as an int >= 0"
        )

    def _broken(self, problem: str) -> PluginError:
        return PluginError(f"token counter {self.label}: count {problem}", plugin=self.plugin)


def get_counter(choice: str | Counter | None = None) -> Counter:
    """The counter ``choice`` names (``None``: ``GROUNDSWELL_TOKEN_COUNTER``, else ``estimate``).

    Counters other than the kernel's own come back wrapped, their answers checked.
    """
    if choice is not None and not isinstance(choice, str):
        if isinstance(choice, EstimateCounter | AnthropicCounter | _Checked):
            return choice
        return _Checked(choice, type(choice).__name__, None)
    name = choice or os.environ.get(COUNTER_ENV) or "estimate"
    if name == "estimate":  # the common case never touches the plugin registry
        return _DEFAULT_COUNTER
    from ..plugins.manager import get_plugin_manager

    manager = get_plugin_manager()
    record = manager.lookup(TokenCounter, name)
    plugin = manager.owner("register_token_counters", name)
    label = f"{name!r}" + (f" of plugin {plugin!r}" if plugin and plugin != name else "")
    try:
        counter = record.factory()
    except (ConfigurationError, PluginError):
        raise
    except Exception as exc:  # blamed on the counter, not on the budget that asked for it
        raise PluginError(
            f"token counter {label} could not be made: {exc!r}", plugin=plugin
        ) from exc
    if not isinstance(counter, Counter):
        raise PluginError(
            f"token counter {label}: its factory returned {type(counter).__name__}, "
            "which has no async count(request)",
            plugin=plugin,
        )
    if isinstance(counter, EstimateCounter | AnthropicCounter):
        return counter
    return _Checked(counter, label, plugin)
