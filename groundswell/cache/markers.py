"""The ``cache_control`` markers of a request: counting the caller's, and automatic caching.

Shared by the agent loop (``prompt_cache=True``, ``"5m"`` or ``"1h"`` is one top-level
field, set on each turn's request after the ``before_model`` layers) and the
``prompt_cache`` middleware (breakpoints placed where they pay).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["END", "MAX_BREAKPOINTS", "NO_MARKS", "Marks", "auto_cache", "control", "marks_in"]

#: The most ``cache_control`` markers one request may carry (the API refuses more).
MAX_BREAKPOINTS = 4
END = (3, 0, 0)  # where a top-level marker applies: after every block


def control(ttl: str) -> dict[str, str]:
    # The API's default lifetime is five minutes: "5m" is sent as the plain marker.
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


class Marks:
    """The caller's own markers in a request: how many, and where their lifetimes bind ours.

    The API wants longer lifetimes before shorter ones (tools, then system, then
    messages), so a marker of ours after a five-minute one is five minutes, and
    one before a one-hour one is an hour (its tokens are written for an hour anyway).
    """

    __slots__ = ("count", "first_short", "last_long")

    def __init__(self) -> None:
        self.count = 0
        self.first_short: tuple[int, int, int] | None = None
        self.last_long: tuple[int, int, int] | None = None

    def add(self, control: Any, where: tuple[int, int, int]) -> None:
        self.count += 1
        if isinstance(control, Mapping) and control.get("ttl") == "1h":
            if self.last_long is None or where > self.last_long:
                self.last_long = where
        elif self.first_short is None or where < self.first_short:
            self.first_short = where

    def ttl_at(self, ttl: str, where: tuple[int, int, int]) -> str:
        if ttl == "1h" and self.first_short is not None and self.first_short < where:
            return "5m"
        if ttl != "1h" and self.last_long is not None and self.last_long > where:
            return "1h"
        return ttl


NO_MARKS = Marks()  # the usual request: the caller set no marker (never changed)


def marks_in(request: Mapping[str, Any]) -> Marks:
    """The caller's own markers in ``request`` (one walk over its blocks, copying nothing).

    Runs every turn: plain ``dict`` checks (what requests are made of) and no
    position worked out unless a marker is found.
    """
    found: list[tuple[Any, tuple[int, int, int]]] = []
    tools = request.get("tools")
    if tools:
        for i, tool in enumerate(tools):
            if isinstance(tool, dict) and tool.get("cache_control"):
                found.append((tool["cache_control"], (0, i, 0)))
    system = request.get("system")
    if system and not isinstance(system, str):
        for i, block in enumerate(system):
            if isinstance(block, dict) and block.get("cache_control"):
                found.append((block["cache_control"], (1, i, 0)))
    i = -1
    for message in request.get("messages") or ():
        i += 1
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) or not content:
            continue
        j = -1
        for block in content:
            j += 1
            if not isinstance(block, dict):
                continue
            if block.get("cache_control"):
                found.append((block["cache_control"], (2, i, j)))
            inner = block.get("content")
            if inner and not isinstance(inner, str):
                for item in inner:  # a tool result's own blocks may carry markers too
                    if isinstance(item, dict) and item.get("cache_control"):
                        found.append((item["cache_control"], (2, i, j)))
    if request.get("cache_control"):
        found.append((request["cache_control"], END))
    if not found:
        return NO_MARKS
    marks = Marks()
    for control, where in found:
        marks.add(control, where)
    return marks


def auto_cache(request: dict[str, Any], setting: Any) -> None:
    """Automatic caching (``prompt_cache`` ``True``, ``"5m"`` or ``"1h"``): one top-level
    ``cache_control``, unless the caller's own is there or their markers leave no room."""
    if request.get("cache_control"):
        return
    marks = marks_in(request)
    ttl = "1h" if setting == "1h" else "5m"
    if marks is NO_MARKS:  # the usual request: nothing of the caller's to fit around
        request["cache_control"] = control(ttl)
    elif marks.count < MAX_BREAKPOINTS:
        request["cache_control"] = control(marks.ttl_at(ttl, END))
