"""Prompt caching in the fake API: what a request reads from the cache and writes to it.

Modelled on the API's rules. A request is a run of blocks: each tool
definition, each system block, each message's content blocks, in that order.
A ``cache_control`` marker on a block is a breakpoint; a top-level
``cache_control`` (automatic caching) is one on the last block that can hold
a marker. At each breakpoint the prefix up to it is written (or its lifetime
refreshed), unless it is shorter than the model's minimum (the same table as
`groundswell.cache.prompt_cache`); a read is the longest prefix written
before (not expired) that ends at a breakpoint or at most 20 blocks before
one. ``cache_control`` itself is not part of a prefix. More than four
markers are refused with the API's own 400 message.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..cache.prompt_cache import MAX_BREAKPOINTS, TTL_SECONDS, min_cacheable_tokens
from ..model.thinking_blocks import THINKING_TYPES

__all__ = ["PromptCacheLedger"]

#: How many blocks before a breakpoint the API looks for an earlier cache entry.
LOOKBACK = 20
_TOO_MANY = "A maximum of {limit} blocks with cache_control may be provided. Found {found}."


class _Block:
    """One block of a request: its marker, and its text as prefixes are compared and sized."""

    __slots__ = ("cacheable", "control", "markers", "sized", "text")

    def __init__(self, where: str, block: Any, given: str | None = None) -> None:
        control: Any = None
        markers = 0
        if isinstance(block, Mapping):
            if block.get("cache_control"):
                control, markers = block["cache_control"], 1
            inner = block.get("content")
            if block.get("type") == "tool_result" and isinstance(inner, list):
                for item in inner:
                    if isinstance(item, Mapping) and item.get("cache_control"):
                        control = control or item["cache_control"]
                        markers += 1
            kind = block.get("type")
            self.cacheable = kind not in THINKING_TYPES and not (
                kind == "text" and not block.get("text")
            )
        else:
            self.cacheable = True
        self.control, self.markers = control, markers
        plain = json.dumps(_plain(block), sort_keys=True, default=str)
        self.text = f"{where}:{plain}"
        # Sized as the request's own estimate sees it: a string as the string it was sent as.
        self.sized = json.dumps(given) if given is not None else plain


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _blocks(body: Mapping[str, Any]) -> list[_Block]:
    out = [_Block("tools", tool) for tool in body.get("tools") or ()]
    system = body.get("system")
    if isinstance(system, str):
        if system:
            out.append(_Block("system", {"type": "text", "text": system}, system))
    else:
        out += [_Block("system", block) for block in system or ()]
    for message in body.get("messages") or ():
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        role = str(message.get("role"))
        if isinstance(content, str):
            out.append(_Block(role, {"type": "text", "text": content}, content))
        else:
            out += [_Block(role, block) for block in content or ()]
    return out


def _has_markers(body: Mapping[str, Any]) -> bool:
    """A quick look first: most requests in tests carry no marker at all."""
    if body.get("cache_control"):
        return True
    system = body.get("system")
    blocks = [*(body.get("tools") or ()), *(system if isinstance(system, list) else ())]
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            blocks += content
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if block.get("cache_control"):
            return True
        inner = block.get("content")
        if isinstance(inner, list) and any(
            isinstance(b, Mapping) and b.get("cache_control") for b in inner
        ):
            return True
    return False


def _ttl(control: Any) -> float:
    ttl = control.get("ttl") if isinstance(control, Mapping) else None
    return TTL_SECONDS.get(str(ttl), TTL_SECONDS["5m"])


class PromptCacheLedger:
    """One fake's prompt cache: the prefixes written, by digest, and when each expires.

    ``clock`` gives the time in seconds (``time.monotonic`` unless a test moves it).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[bytes, tuple[float, float]] = {}  # digest -> (expires, ttl)

    def check(self, body: Mapping[str, Any]) -> str | None:
        """The API's 400 message for a request with too many markers, or ``None``."""
        if not _has_markers(body):
            return None
        blocks = _blocks(body)
        found = sum(b.markers for b in blocks)
        if body.get("cache_control"):
            last = _last_cacheable(blocks)
            if last is None or not blocks[last].markers:
                found += 1  # automatic caching takes a slot of its own
        if found > MAX_BREAKPOINTS:
            return _TOO_MANY.format(limit=MAX_BREAKPOINTS, found=found)
        return None

    def account(
        self, body: Mapping[str, Any], estimate: Callable[[Any], int]
    ) -> tuple[int, int, int]:
        """``(read, written, written for an hour)`` input tokens of ``body``; remembers what
        it writes. ``estimate`` gives a block's tokens (the fake's own estimate)."""
        if not _has_markers(body):
            return 0, 0, 0
        blocks = _blocks(body)
        breakpoints = [(i, b.control) for i, b in enumerate(blocks) if b.markers]
        automatic = body.get("cache_control")
        if automatic:
            last = _last_cacheable(blocks)
            if last is not None and not blocks[last].markers:
                breakpoints.append((last, automatic))
                breakpoints.sort(key=lambda p: p[0])
        if not breakpoints:
            return 0, 0, 0
        digest = hashlib.sha256(str(body.get("model", "")).encode()).digest()
        digests: list[bytes] = []
        totals: list[int] = []
        total = 0
        for block in blocks[: breakpoints[-1][0] + 1]:
            digest = hashlib.sha256(digest + block.text.encode()).digest()
            total += estimate(block.sized)
            digests.append(digest)
            totals.append(total)
        minimum = min_cacheable_tokens(str(body.get("model", "")))
        now = self.clock()
        with self._lock:
            read_end = -1
            for at, _ in breakpoints:
                for j in range(at, max(at - LOOKBACK, 0) - 1, -1):
                    entry = self._entries.get(digests[j])
                    if entry is not None and entry[0] > now:
                        read_end = max(read_end, j)
                        break
            if read_end >= 0:  # a hit refreshes the entry's lifetime, at no cost
                ttl = self._entries[digests[read_end]][1]
                self._entries[digests[read_end]] = (now + ttl, ttl)
            read = totals[read_end] if read_end >= 0 else 0
            written = hour = 0
            done = read  # tokens up to here are read or written already
            for at, control in breakpoints:
                if totals[at] < minimum:
                    continue  # too short to be cached: sent as plain input
                ttl = _ttl(control)
                known = self._entries.get(digests[at])
                if known is not None and known[0] > now:
                    ttl = max(ttl, known[1])  # there already: its lifetime starts again
                self._entries[digests[at]] = (now + ttl, ttl)
                if at > read_end and totals[at] > done:
                    # Tokens up to here not read are written, and paid for at the price
                    # of the lifetime asked for here (the API's usage.cache_creation).
                    segment = totals[at] - done
                    written += segment
                    if _ttl(control) >= TTL_SECONDS["1h"]:
                        hour += segment
                    done = totals[at]
        return read, written, hour


def _last_cacheable(blocks: list[_Block]) -> int | None:
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].cacheable:
            return i
    return None
