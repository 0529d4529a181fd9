"""Agent hooks with the Claude Agent SDK's events and callback shape.

``hooks={"PreToolUse": [HookMatcher(matcher="Write|Edit", hooks=[cb])]}``, or the
same with plain dicts (``{"matcher": "Write|Edit", "hooks": [cb]}``) when the
``claude_agent_sdk`` package is not installed. A callback is
``async def cb(input_data: dict, tool_use_id: str | None, context: dict) -> dict``.

Outputs understood (anything else in an output is ignored):

- ``PreToolUse``: ``hookSpecificOutput.permissionDecision`` ``"deny"`` (or
  ``"ask"``, as nobody is there to ask) blocks the tool with
  ``permissionDecisionReason``; ``updatedInput`` replaces the tool input; the
  older top-level ``{"decision": "block", "reason": ...}`` also blocks.
- ``PostToolUse``: ``hookSpecificOutput.updatedToolOutput`` (or
  ``updatedMCPToolOutput``) replaces what the model sees;
  ``additionalContext`` is appended to it.
- ``UserPromptSubmit``: ``additionalContext`` is appended to the prompt;
  ``{"decision": "block"}`` stops the prompt with `PromptBlocked`.
- ``Stop``: ``{"decision": "block", "reason": ...}`` makes the agent go on,
  with ``reason`` as the next user message.
- ``PostToolUseFailure``, ``SubagentStart``, ``SubagentStop``: notifications.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError, GroundswellError

__all__ = ["HOOK_EVENTS", "HookRunner", "PromptBlocked", "check_hooks"]

HOOK_EVENTS = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "Stop",
    "SubagentStart",
    "SubagentStop",
)
_TOOL_EVENTS = {"PreToolUse", "PostToolUse", "PostToolUseFailure"}

HookCallback = Callable[[dict[str, Any], "str | None", dict[str, Any]], Awaitable[Any] | Any]


class PromptBlocked(GroundswellError):
    """A ``UserPromptSubmit`` hook blocked the prompt; the message is its reason."""


@dataclass(frozen=True)
class _Matcher:
    pattern: re.Pattern[str] | None
    hooks: tuple[HookCallback, ...]

    def matches(self, tool_name: str | None) -> bool:
        return self.pattern is None or tool_name is None or bool(self.pattern.fullmatch(tool_name))


def _matcher(event: str, item: Any) -> _Matcher:
    if isinstance(item, Mapping):
        pattern, hooks = item.get("matcher"), item.get("hooks", [])
    elif hasattr(item, "hooks"):  # claude_agent_sdk.HookMatcher and look-alikes
        pattern, hooks = getattr(item, "matcher", None), item.hooks
    elif callable(item):
        pattern, hooks = None, [item]
    else:
        raise ConfigurationError(
            f"hooks[{event!r}] items must be HookMatcher objects, "
            f"{{'matcher': ..., 'hooks': [...]}} dicts or callbacks; got {type(item).__name__}"
        )
    if not isinstance(hooks, Sequence) or not all(callable(h) for h in hooks):
        raise ConfigurationError(f"hooks[{event!r}]: 'hooks' must be a list of callbacks")
    compiled = None
    if pattern not in (None, "", "*"):
        try:
            compiled = re.compile(str(pattern))
        except re.error as exc:
            raise ConfigurationError(f"hooks[{event!r}]: bad matcher {pattern!r}: {exc}") from exc
    return _Matcher(compiled, tuple(hooks))


def check_hooks(hooks: Any, owner: str) -> dict[str, Any]:
    """``hooks=`` as a dict, checked where an agent, prompt or override is built.

    Event names, matchers (their regexes compiled) and callbacks are checked
    as the first prompt would; raises `ConfigurationError` naming what is wrong.
    """
    if hooks is None:
        return {}
    if not isinstance(hooks, Mapping):
        raise ConfigurationError(
            f"{owner}: hooks must be a dict of hook event names to matchers, e.g. "
            f"{{'PreToolUse': [{{'matcher': 'Bash', 'hooks': [callback]}}]}}; "
            f"got {type(hooks).__name__}"
        )
    try:
        HookRunner(hooks, session_id="")
    except ConfigurationError as exc:
        raise ConfigurationError(f"{owner}: {exc}") from None
    return dict(hooks)


class HookRunner:
    """Runs the configured callbacks for an event and merges their outputs."""

    def __init__(self, hooks: Mapping[str, Any] | None, session_id: str) -> None:
        self.session_id = session_id
        self._matchers: dict[str, list[_Matcher]] = {}
        for event, items in (hooks or {}).items():
            if event not in HOOK_EVENTS:
                raise ConfigurationError(
                    f"hooks: unknown hook event {event!r}; use one of {', '.join(HOOK_EVENTS)}"
                )
            seq = items if isinstance(items, Sequence) and not isinstance(items, str) else [items]
            self._matchers[event] = [_matcher(event, item) for item in seq]

    def __bool__(self) -> bool:
        return bool(self._matchers)

    def has(self, event: str) -> bool:
        """True when any callback is configured for ``event``."""
        return bool(self._matchers.get(event))

    async def run(
        self,
        event: str,
        data: dict[str, Any],
        *,
        tool_name: str | None = None,
        tool_use_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Call every matching callback in order; returns their (dict) outputs."""
        matchers = self._matchers.get(event)
        if not matchers:
            return []
        input_data = {
            "hook_event_name": event,
            "session_id": self.session_id,
            "transcript_path": "",
            "cwd": os.getcwd(),
            **data,
        }
        outputs: list[dict[str, Any]] = []
        for matcher in matchers:
            if event in _TOOL_EVENTS and not matcher.matches(tool_name):
                continue
            for callback in matcher.hooks:
                result = callback(input_data, tool_use_id, {"signal": None})
                if inspect.isawaitable(result):
                    result = await result
                if isinstance(result, Mapping):
                    outputs.append(dict(result))
        return outputs


def specific(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``hookSpecificOutput`` parts of hook outputs."""
    return [
        o["hookSpecificOutput"] for o in outputs if isinstance(o.get("hookSpecificOutput"), Mapping)
    ]


def blocked(outputs: list[dict[str, Any]]) -> str | None:
    """The reason if any output blocks (``decision: block`` or a deny/ask decision)."""
    for out in outputs:
        if out.get("decision") == "block":
            return str(out.get("reason") or "blocked by hook")
        spec = out.get("hookSpecificOutput")
        if isinstance(spec, Mapping) and spec.get("permissionDecision") in ("deny", "ask"):
            return str(spec.get("permissionDecisionReason") or "denied by hook")
    return None
