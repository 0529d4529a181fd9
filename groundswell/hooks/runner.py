"""Agent hooks with the Claude Agent SDK's events, callback shape, outputs and failure rules.

``hooks={"PreToolUse": [HookMatcher(matcher="Write|Edit", hooks=[cb], timeout=5)]}``
(the SDK's own ``HookMatcher``), or the same as a plain dict
(``{"matcher": ..., "hooks": [...], "timeout": ..., "on_failure": ...}``). A
callback is ``async def cb(input_data, tool_use_id, context) -> dict`` (a plain
function works too: it runs in a worker thread). Where each event fires and what each output field does:
the "Hooks" section of docs/tools.md; `groundswell.hooks.middleware` is
the middleware that fires them.

As in the SDK, the callbacks an event matches run concurrently, each within its
matcher's ``timeout`` (60 s by default; a plain function's thread cannot be
stopped: past the timeout it finishes in the background, its answer dropped). A callback that raises, times out or
returns something the SDK would reject counts as no decision (the action goes
on), unless its matcher says ``on_failure="block"``: then it blocks what the
event guards, as ``{"decision": "block"}`` would.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import inspect
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, GroundswellError
from ..scrubbing.serialize import scrub
from ..tree.tree import EventNode, EventTree

__all__ = [
    "DEFAULT_TIMEOUT",
    "HOOK_EVENTS",
    "SILENT_EVENTS",
    "TOOL_EVENTS",
    "HookConfig",
    "HookRunner",
    "HookStopped",
    "Outcome",
    "PromptBlocked",
    "Transcripts",
    "check_hooks",
    "keep_runner",
    "pre_compact_hook",
]

#: Every hook event of the Claude Agent SDK: its ``HookEvent`` literal, the events its
#: ``hookSpecificOutput`` types name, and ``SessionEnd``.
HOOK_EVENTS = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "PermissionRequest",
    "UserPromptSubmit",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "Notification",
    "SessionStart",
    "SessionEnd",
    "PermissionDenied",
    "UserPromptExpansion",
    "PreModelSwitch",
    "PostModelSwitch",
    "Elicitation",
    "ElicitationResult",
    "CwdChanged",
    "FileChanged",
    "WorktreeCreate",
    "MessageDisplay",
)
#: Events Groundswell accepts but never fires: it has no moment for them (docs/tools.md).
SILENT_EVENTS = frozenset(HOOK_EVENTS[HOOK_EVENTS.index("PermissionDenied") :])
#: The SDK's default time for one callback, in seconds.
DEFAULT_TIMEOUT = 60.0

# The input field a matcher is tested against, per event (events not here match all).
_MATCH_ON = {
    "PreToolUse": "tool_name",
    "PostToolUse": "tool_name",
    "PostToolUseFailure": "tool_name",
    "PermissionRequest": "tool_name",
    "Notification": "notification_type",
    "PreCompact": "trigger",
    "SessionStart": "source",
    "SessionEnd": "reason",
    "SubagentStart": "agent_type",
    "SubagentStop": "agent_type",
}
#: Events whose inputs carry ``agent_type`` (and ``agent_id`` inside a sub-agent).
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest"})
# ``on_failure="block"`` means nothing on these (the SDK ignores it there too).
_FAILURE_IGNORED = frozenset({"Stop", "SubagentStop", "SessionStart"})
# The hookSpecificOutput fields Groundswell acts on, per event; others are recorded
# as ``hook_ignored`` on the node.
_HONOURED = {
    "PreToolUse": {"permissionDecision", "permissionDecisionReason", "updatedInput", "additionalContext"},
    "PostToolUse": {"additionalContext", "updatedToolOutput", "updatedMCPToolOutput"},
    "PostToolUseFailure": {"additionalContext"},
    "PostToolBatch": {"additionalContext"},
    "UserPromptSubmit": {"additionalContext", "sessionTitle", "suppressOriginalPrompt"},
    "SessionStart": {"additionalContext", "sessionTitle"},
    "SubagentStart": {"additionalContext"},
    "PermissionRequest": {"decision"},
    "Stop": {"additionalContext"},
    "SubagentStop": {"additionalContext"},
}  # fmt: skip
_DECISIONS = ("allow", "ask", "defer", "deny")  # weakest first: the strictest one wins

HookCallback = Callable[[dict[str, Any], "str | None", dict[str, Any]], Awaitable[Any] | Any]


class HookStopped(GroundswellError):
    """A hook said ``continue: False``: the prompt stops; the message is its ``stopReason``.

    ``event`` is the hook event that stopped it and ``reason`` its ``stopReason``.
    """

    def __init__(self, event: str, reason: str) -> None:
        super().__init__(f"a {event} hook stopped the run: {reason}")
        self.event, self.reason = event, reason

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (a run elsewhere) with its fields
        return (type(self), (self.event, self.reason))


class PromptBlocked(HookStopped):
    """A ``UserPromptSubmit`` hook blocked the prompt; ``reason`` is its ``reason``."""

    def __init__(self, reason: str, event: str = "UserPromptSubmit") -> None:
        GroundswellError.__init__(self, f"a {event} hook blocked the prompt: {reason}")
        self.event, self.reason = event, reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.event))


@dataclass(frozen=True)
class _Matcher:
    pattern: re.Pattern[str] | None
    hooks: tuple[HookCallback, ...]
    timeout: float
    on_failure: str | None

    def matches(self, value: Any) -> bool:
        return self.pattern is None or value is None or bool(self.pattern.fullmatch(str(value)))


_MATCHER_KEYS = frozenset({"matcher", "hooks", "timeout", "on_failure"})


def _matcher(event: str, item: Any) -> _Matcher:
    where = f"hooks[{event!r}]"
    if isinstance(item, Mapping):
        unknown = sorted(map(str, item.keys() - _MATCHER_KEYS))
        if unknown:
            raise ConfigurationError(
                f"{where}: unknown matcher key(s) {', '.join(unknown)}; a matcher takes "
                "'matcher', 'hooks', 'timeout' and 'on_failure'"
            )
        pattern, hooks = item.get("matcher"), item.get("hooks", [])
        timeout, on_failure = item.get("timeout"), item.get("on_failure")
    elif hasattr(item, "hooks"):  # claude_agent_sdk.HookMatcher and look-alikes
        pattern, hooks = getattr(item, "matcher", None), item.hooks
        timeout, on_failure = getattr(item, "timeout", None), getattr(item, "on_failure", None)
    elif callable(item):
        pattern, hooks, timeout, on_failure = None, [item], None, None
    else:
        raise ConfigurationError(
            f"{where} items must be HookMatcher objects, "
            f"{{'matcher': ..., 'hooks': [...]}} dicts or callbacks; got {type(item).__name__}"
        )
    if not isinstance(hooks, Sequence) or not all(callable(h) for h in hooks):
        raise ConfigurationError(f"{where}: 'hooks' must be a list of callbacks")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ConfigurationError(
            f"{where}: timeout must be a number of seconds above 0, got {timeout!r}"
        )
    if on_failure not in (None, "continue", "block"):
        raise ConfigurationError(
            f"{where}: on_failure must be 'continue' or 'block', got {on_failure!r}"
        )
    compiled = None
    if pattern not in (None, "", "*"):
        try:
            compiled = re.compile(str(pattern))
        except re.error as exc:
            raise ConfigurationError(f"{where}: bad matcher {pattern!r}: {exc}") from exc
    wait = float(timeout) if timeout is not None else DEFAULT_TIMEOUT
    return _Matcher(compiled, tuple(hooks), wait, on_failure)


class HookConfig:
    """A ``hooks=`` dict, checked and parsed: the matchers of each event."""

    def __init__(self, hooks: Mapping[str, Any] | None) -> None:
        self._matchers: dict[str, list[_Matcher]] = {}
        for event, items in (hooks or {}).items():
            if event not in HOOK_EVENTS:
                raise ConfigurationError(
                    f"hooks: unknown hook event {event!r}; use one of {', '.join(HOOK_EVENTS)}"
                )
            seq = items if isinstance(items, Sequence) and not isinstance(items, str) else [items]
            self._matchers[event] = [_matcher(event, item) for item in seq]

    def __bool__(self) -> bool:
        return any(self._matchers.values())

    def has(self, event: str) -> bool:
        """True when any callback is configured for ``event``."""
        return any(m.hooks for m in self._matchers.get(event, ()))

    def matching(self, event: str, value: Any) -> list[tuple[_Matcher, HookCallback]]:
        """The callbacks of ``event`` whose matcher takes ``value``, in configuration order."""
        return [(m, h) for m in self._matchers.get(event, ()) if m.matches(value) for h in m.hooks]


def check_hooks(hooks: Any, owner: str) -> dict[str, Any]:
    """``hooks=`` as a dict, checked where an agent, prompt or override is built.

    Event names, matchers (their regexes compiled), timeouts, ``on_failure`` and
    callbacks are checked as the first prompt would; raises `ConfigurationError`
    naming what is wrong.
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
        HookConfig(hooks)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{owner}: {exc}") from None
    return dict(hooks)


@dataclass
class Outcome:
    """What the callbacks of one event said, merged as the SDK merges them.

    ``stop`` is the ``stopReason`` when one said ``continue: False``; ``block``
    the ``reason`` of a ``decision: "block"`` (also what a failed ``on_failure="block"``
    callback says); ``context`` the ``additionalContext`` texts; ``specific`` the
    ``hookSpecificOutput`` dicts.
    """

    event: str
    stop: str | None = None
    block: str | None = None
    context: list[str] = field(default_factory=list)
    specific: list[dict[str, Any]] = field(default_factory=list)

    def add(self, output: Mapping[str, Any]) -> None:
        if output.get("async_") is True or output.get("async") is True:
            return  # the SDK does not wait for a deferred hook: no decision
        if output.get("continue_", output.get("continue")) is False:
            self.stop = str(output.get("stopReason") or f"stopped by a {self.event} hook")
        if output.get("decision") == "block":
            self.block = str(output.get("reason") or f"blocked by a {self.event} hook")
        spec = output.get("hookSpecificOutput")
        if isinstance(spec, Mapping):
            self.specific.append(dict(spec))
            if spec.get("additionalContext"):
                self.context.append(str(spec["additionalContext"]))

    def last(self, key: str) -> Any:
        """The last callback's ``hookSpecificOutput[key]`` (``None`` when none gave it)."""
        return next((s[key] for s in reversed(self.specific) if s.get(key) is not None), None)

    @property
    def permission(self) -> tuple[str | None, str]:
        """``PreToolUse``: the strictest ``permissionDecision`` and its reason.

        ``decision: "block"`` counts as ``deny``; ``deny`` beats ``defer``, then
        ``ask``, then ``allow``.
        """
        if self.block is not None:
            return "deny", self.block
        chosen: tuple[str | None, str] = (None, "")
        for spec in self.specific:
            decision = spec.get("permissionDecision")
            if decision in _DECISIONS and (
                chosen[0] is None or _DECISIONS.index(decision) > _DECISIONS.index(chosen[0])
            ):
                chosen = (decision, str(spec.get("permissionDecisionReason") or ""))
        return chosen


def _problem(event: str, result: Any, on_failure: str | None) -> str | None:
    """Why the SDK would reject ``result`` as a hook's answer, or ``None``."""
    if result is None:
        # With "block" a callback with no opinion must say so with {} (the SDK's rule).
        return "returned None; a hook with no opinion returns {}" if on_failure == "block" else None
    if not isinstance(result, Mapping):
        return f"returned {type(result).__name__}, not a dict"
    if result.get("decision") not in (None, "block", "approve"):
        return f"decision must be 'block', got {result['decision']!r}"
    for key in ("continue", "continue_", "suppressOutput"):
        if key in result and not isinstance(result[key], bool):
            return f"{key} must be True or False, got {result[key]!r}"
    spec = result.get("hookSpecificOutput")
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        return f"hookSpecificOutput must be a dict, got {type(spec).__name__}"
    named = spec.get("hookEventName", event)
    if named != event:
        return f"hookSpecificOutput is for {named!r}, in a {event} hook"
    decision = spec.get("permissionDecision")
    if decision is not None and decision not in _DECISIONS:
        return f"permissionDecision must be one of {', '.join(_DECISIONS)}, got {decision!r}"
    return None


class Transcripts:
    """Where hook inputs' ``transcript_path`` files live: a private temporary folder.

    Each is the JSONL event log of a prompt's subtree (``EventTree.load`` reads
    it), rewritten once per hook event that calls a callback and deleted when
    its prompt ends; the folder goes when the process exits.
    """

    _folder: Path | None = None
    _lock = threading.Lock()

    @classmethod
    def folder(cls) -> Path:
        with cls._lock:
            if cls._folder is None or not cls._folder.is_dir():
                # mkdtemp makes it readable by this user only: transcripts hold the conversation.
                cls._folder = Path(tempfile.mkdtemp(prefix="groundswell-transcripts-"))
                atexit.register(shutil.rmtree, cls._folder, ignore_errors=True)
            return cls._folder

    @classmethod
    def path(cls, node: EventNode) -> str:
        """Where ``node``'s transcript is written (creating nothing: it may not be there)."""
        return str((cls._folder or Path(tempfile.gettempdir())) / f"{node.id}.jsonl")

    @classmethod
    async def write(cls, tree: EventTree, node: EventNode) -> str:
        """Write ``node``'s subtree (as it is now) and return the file's path.

        The subtree is copied on the event loop (the tree changes there) and
        written in a worker thread. Raises `OSError` when it cannot be written.
        """
        snapshot = tree.to_json(start=node.id)
        path = await asyncio.to_thread(cls.folder)
        target = path / f"{node.id}.jsonl"
        await asyncio.to_thread(cls._save, snapshot, target)
        return str(target)

    @staticmethod
    def _save(snapshot: dict[str, Any], target: Path) -> None:
        # Written aside, then moved in: a hook reading it never sees half a file.
        aside = target.with_name(f"{target.stem}.{uuid.uuid4().hex}.tmp")
        try:
            EventTree.from_json(snapshot).save(aside)
            os.replace(aside, target)
        finally:
            aside.unlink(missing_ok=True)

    @classmethod
    def discard(cls, node: EventNode) -> None:
        """Delete ``node``'s transcript, if one was written."""
        if cls._folder is not None:
            # Cleaning up fails no prompt (a hook may have put a folder there).
            with contextlib.suppress(OSError):
                (cls._folder / f"{node.id}.jsonl").unlink(missing_ok=True)


class HookRunner:
    """Runs the callbacks an event matches for one prompt (a "session") and merges them.

    ``node`` is the prompt's node: ``session_id`` and ``prompt_id`` are its id and
    ``transcript_path`` its subtree. ``agent`` holds ``agent_type`` (and
    ``agent_id`` inside a sub-agent) for tool events; ``emit`` shows a
    ``systemMessage`` to the user (``agent.stream()``).
    """

    def __init__(
        self,
        config: HookConfig,
        tree: EventTree,
        node: EventNode,
        *,
        agent: Mapping[str, str] | None = None,
        effort: str | None = None,
        emit: Callable[[str], None] | None = None,
    ) -> None:
        self.config, self.tree, self.node = config, tree, node
        self.agent = dict(agent or {})
        self.effort = effort
        self.emit = emit

    def __bool__(self) -> bool:
        return bool(self.config)

    def has(self, event: str) -> bool:
        """True when any callback is configured for ``event``."""
        return self.config.has(event)

    async def transcript(self, event: str, where: EventNode) -> str:
        """The path of this session's transcript, written now.

        A transcript that cannot be written (a full disk) fails no prompt: a
        ``hook_error`` event on ``where`` says so and the hook gets the path anyway.
        """
        try:
            return await Transcripts.write(self.tree, self.node)
        except OSError as exc:
            self.tree.add_event(
                where, "hook_error", hook=event, callback=None,
                error=f"could not write the transcript: {type(exc).__name__}: {exc}",
                on_failure="continue",
            )  # fmt: skip
            return Transcripts.path(self.node)

    async def run(
        self,
        event: str,
        data: dict[str, Any],
        *,
        node: EventNode | None = None,
        tool_use_id: str | None = None,
    ) -> Outcome:
        """Call every matching callback (concurrently); their merged `Outcome`.

        What each said is recorded on ``node`` (the prompt's node by default).
        """
        outcome = Outcome(event)
        key = _MATCH_ON.get(event)
        chosen = self.config.matching(event, data.get(key) if key else None)
        if not chosen:
            return outcome
        where = node if node is not None else self.node
        base: dict[str, Any] = {
            "hook_event_name": event,
            "session_id": self.node.id,
            # Once per event (not per callback), and only when a callback is called.
            "transcript_path": await self.transcript(event, where),
            "cwd": os.getcwd(),
            "permission_mode": "default",
            "prompt_id": self.node.id,
        }
        if self.effort is not None:
            base["effort"] = {"level": self.effort}
        if event in TOOL_EVENTS:
            base.update(self.agent)
        base.update(data)
        calls = [self._call(event, m, h, base, tool_use_id) for m, h in chosen]
        answers = [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls)
        for (matcher, hook), (output, error) in zip(chosen, answers, strict=True):
            name = getattr(hook, "__qualname__", type(hook).__name__)
            if error is not None:
                self.tree.add_event(
                    where, "hook_error", hook=event, callback=name, error=error,
                    on_failure=matcher.on_failure or "continue",
                )  # fmt: skip
                if matcher.on_failure != "block" or event in _FAILURE_IGNORED:
                    continue  # a failure is no decision: what the event guards goes ahead
                # The reason goes to the model: an exception's text may hold a secret.
                reason = scrub(f"the {event} hook {name} failed: {error}")
                output = {"decision": "block", "reason": reason}
            self._record(event, name, output, where)
            outcome.add(output)
        if outcome.stop is not None:
            self.tree.add_event(where, "hook_stopped", hook=event, reason=outcome.stop)
        return outcome

    async def _call(
        self,
        event: str,
        matcher: _Matcher,
        hook: HookCallback,
        base: dict[str, Any],
        tool_use_id: str | None,
    ) -> tuple[dict[str, Any], str | None]:
        input_data = _own_copy(base)
        context: dict[str, Any] = {"signal": None}
        deadline = asyncio.timeout(matcher.timeout)
        try:
            async with deadline:
                if _is_async(hook):
                    result = hook(input_data, tool_use_id, context)
                else:  # a plain function may block (a request, a person): not on the loop
                    result = await asyncio.to_thread(hook, input_data, tool_use_id, context)
                if inspect.isawaitable(result):
                    result = await result
        except TimeoutError as exc:
            if deadline.expired():
                return {}, f"timed out after {matcher.timeout:g}s"
            return {}, f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            return {}, f"{type(exc).__name__}: {exc}"
        problem = _problem(event, result, matcher.on_failure)
        if problem is not None:
            return {}, problem
        return (dict(result) if result else {}), None

    def _record(self, event: str, name: str, output: Mapping[str, Any], node: EventNode) -> None:
        tree = self.tree
        if output and not output.get("suppressOutput"):
            tree.add_event(node, "hook_output", hook=event, callback=name, output=dict(output))
        message = output.get("systemMessage")
        if message:
            tree.add_event(node, "hook_system_message", hook=event, message=str(message))
            if self.emit is not None:
                self.emit(str(message))
        spec = output.get("hookSpecificOutput")
        ignored = sorted(
            k for k in (spec if isinstance(spec, Mapping) else ())
            if k != "hookEventName" and k not in _HONOURED.get(event, ())
        )  # fmt: skip
        if "asyncTimeout" in output:
            ignored.append("asyncTimeout")
        if ignored:
            tree.add_event(node, "hook_ignored", hook=event, callback=name, fields=ignored)


_IMMUTABLE = (str, int, float, bool, type(None))


def _own_copy(base: Mapping[str, Any]) -> dict[str, Any]:
    """A callback's own input, as the SDK's callbacks each get parsed JSON: one
    changing it changes neither the tool's input nor another callback's. Text and
    numbers cannot change, so only the other values are copied."""
    return {k: v if isinstance(v, _IMMUTABLE) else copy.deepcopy(v) for k, v in base.items()}


def _is_async(hook: Any) -> bool:
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
        getattr(hook, "__call__", None)  # noqa: B004 - an async __call__ counts too
    )


# -- for the budget: PreCompact ------------------------------------------------------

_RUNNER = "hooks.runner"


def keep_runner(scratch: dict[str, Any], runner: HookRunner) -> None:
    """Keep the prompt's runner in its ``PromptRun.scratch`` (`pre_compact_hook` finds it)."""
    scratch[_RUNNER] = runner


def pre_compact_hook(
    scratch: Mapping[str, Any],
) -> Callable[[], Awaitable[str | None]] | None:
    """The prompt's ``PreCompact`` hooks as one call, or ``None`` when there are none.

    The call returns the reason when a hook blocks compaction (``decision:
    "block"``) and raises `HookStopped` when one says ``continue: False``.
    """
    runner: HookRunner | None = scratch.get(_RUNNER)
    if runner is None or not runner.has("PreCompact"):
        return None

    async def before_compact() -> str | None:
        outcome = await runner.run("PreCompact", {"trigger": "auto", "custom_instructions": None})
        if outcome.stop is not None:
            raise HookStopped("PreCompact", outcome.stop)
        return outcome.block

    return before_compact
