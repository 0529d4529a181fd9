"""`PIIRedactor`: the ``pii`` agent middleware.

Two seams. ``before_model`` sends a redacted copy of the conversation and
system prompt (the conversation itself is never changed, so layers outside
keep the originals); each message is redacted once per attempt and the copy
reused on later turns. ``wrap_tool_call`` redacts a tool's result, or the text
of its error, before anything outside it (the tool node, the tool-result
cache, Claude SDK hooks, the model) sees it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from groundswell import (
    ConfigurationError,
    EventNode,
    Middleware,
    PromptRun,
    ToolCall,
    ToolFailed,
    ToolNext,
    tool_error_text,
    tool_result_content,
)

from .detect import KINDS, Detector, Scanner, builtin_detectors

__all__ = ["PIIRedactor"]

_KIND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class PIIRedactor(Middleware):
    """Replaces personal data in what the model is sent with typed placeholders.

    Args:
        kinds: The built-in kinds to find (default: all of ``EMAIL``, ``PHONE``,
            ``CARD``, ``IBAN``, ``SSN``).
        extra_patterns: More kinds, by name: a regex (string or compiled) each,
            e.g. ``{"EMPLOYEE_ID": r"\\bE-\\d{6}\\b"}``. They win over a built-in
            kind that matches the same text.
        replacement: The placeholder, with ``{kind}`` for the kind's name.

    Raises:
        ConfigurationError: an unknown kind, a kind named twice, a pattern that
            does not compile or matches empty text, or a bad ``replacement``.
    """

    name = "pii"
    order = 400

    def __init__(
        self,
        kinds: Iterable[str] | None = None,
        *,
        extra_patterns: Mapping[str, str | re.Pattern[str]] | None = None,
        replacement: str = "[{kind}]",
    ) -> None:
        chosen = _kinds(kinds)
        extras = _extra_detectors(extra_patterns, chosen)
        if not chosen and not extras:
            raise ConfigurationError(
                "PIIRedactor: nothing to redact; name at least one kind or extra pattern"
            )
        builtin = builtin_detectors()
        detectors = [*extras, *(d for kind in chosen for d in builtin[kind])]
        names = (*chosen, *(d.kind for d in extras))
        self.kinds: tuple[str, ...] = names
        self._scanner = Scanner(detectors, _placeholders(replacement, names))
        self._key = f"pii.{id(self)}"

    # -- text -------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every match replaced by its placeholder."""
        return self._scanner.redact(text)[0]

    def redact_counts(self, text: str) -> tuple[str, dict[str, int]]:
        """``text`` redacted, and how many matches of each kind were replaced."""
        redacted, counts = self._scanner.redact(text)
        return redacted, dict(counts)

    # -- the seams --------------------------------------------------------------------

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        node = run.node
        state = run.scratch.get(self._key)
        if state is None or state[0] is not node:
            # Per attempt: the cache holds each message it saw, so the ids stay valid.
            state = run.scratch[self._key] = (node, {}, [None, None])
        seen: dict[int, tuple[Any, Any]] = state[1]
        counts: Counter[str] = Counter()
        changed = False
        messages: list[Any] = []
        for message in request.get("messages") or ():
            known = seen.get(id(message))
            if known is None or known[0] is not message:
                known = seen[id(message)] = (message, self._message(message, counts))
            messages.append(known[1])
            changed = changed or known[1] is not message
        sent = {**request, "messages": messages} if changed else request
        system = request.get("system")
        if system is not None:
            last = state[2]
            if system is not last[0]:
                last[:] = [system, self._content(system, counts)]
            if last[1] is not system:
                sent = {**sent, "system": last[1]}
        if counts:
            _record(run, node, counts, "request")
        return sent

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        counts: Counter[str] = Counter()
        try:
            result = await call_next(call)
        except Exception as exc:
            text = tool_error_text(exc)
            redacted = self._text(text, counts)
            if redacted is text:
                raise
            _record(run, call.node, counts, "tool_error")
            # The model sees exactly the redacted text, and so does the tool node.
            raise ToolFailed(redacted) from None
        redacted = self._result(result, counts)
        if counts:
            _record(run, call.node, counts, "tool_result")
        return redacted

    # -- walking request and result content -------------------------------------------

    def _text(self, text: str, counts: Counter[str]) -> str:
        redacted, found = self._scanner.redact(text)
        if not found:
            return text
        counts.update(found)
        return redacted

    def _message(self, message: Any, counts: Counter[str]) -> Any:
        if not isinstance(message, Mapping):
            return message
        content = message.get("content")
        redacted = self._content(content, counts)
        return message if redacted is content else {**message, "content": redacted}

    def _content(self, content: Any, counts: Counter[str]) -> Any:
        """Message, system or tool-result content: a string or a list of blocks."""
        if isinstance(content, str):
            return self._text(content, counts)
        if not isinstance(content, list):
            return content
        blocks = [self._block(block, counts) for block in content]
        if all(new is old for new, old in zip(blocks, content, strict=True)):
            return content
        return blocks

    def _block(self, block: Any, counts: Counter[str]) -> Any:
        if not isinstance(block, Mapping):
            return block
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            text = self._text(block["text"], counts)
            return block if text is block["text"] else {**block, "text": text}
        if kind == "tool_result":
            content = self._content(block.get("content"), counts)
            return block if content is block.get("content") else {**block, "content": content}
        if kind == "document":
            source = block.get("source")
            if isinstance(source, Mapping) and source.get("type") == "text":
                data = source.get("data")
                if isinstance(data, str) and (text := self._text(data, counts)) is not data:
                    return {**block, "source": {**source, "data": text}}
        # Images, tool_use, thinking (signed: never touched) and server blocks pass as they are.
        return block

    def _result(self, result: Any, counts: Counter[str]) -> Any:
        """A tool's result, redacted as the content the model gets; itself when clean."""
        content = tool_result_content(result)
        redacted = self._content(content, counts)
        return result if redacted is content else redacted

    def __repr__(self) -> str:
        return f"PIIRedactor(kinds={list(self.kinds)!r})"


def _record(run: PromptRun, node: EventNode, counts: Counter[str], where: str) -> None:
    run.tree.add_event(node, "pii_redacted", where=where, counts=dict(sorted(counts.items())))


# -- configuration ------------------------------------------------------------------------


def _kinds(kinds: Iterable[str] | None) -> tuple[str, ...]:
    if kinds is None:
        return KINDS
    if isinstance(kinds, str) or not isinstance(kinds, Iterable):
        raise ConfigurationError(
            f"PIIRedactor: kinds must be a list of kind names such as ['EMAIL', 'PHONE'], "
            f"got {kinds!r:.60}"
        )
    chosen: list[str] = []
    for kind in kinds:
        name = kind.upper() if isinstance(kind, str) else kind
        if name not in KINDS:
            raise ConfigurationError(
                f"PIIRedactor: unknown kind {kind!r}; built-in kinds: {', '.join(KINDS)} "
                "(add your own with extra_patterns={'NAME': r'regex'})"
            )
        if name in chosen:
            raise ConfigurationError(f"PIIRedactor: kind {name!r} is named twice in kinds")
        chosen.append(name)
    return tuple(chosen)


def _extra_detectors(
    patterns: Mapping[str, str | re.Pattern[str]] | None, chosen: tuple[str, ...]
) -> list[Detector]:
    if patterns is None:
        return []
    if not isinstance(patterns, Mapping):
        raise ConfigurationError(
            "PIIRedactor: extra_patterns must map kind names to regexes, e.g. "
            f"{{'EMPLOYEE_ID': r'\\bE-\\d{{6}}\\b'}}; got {type(patterns).__name__}"
        )
    detectors: list[Detector] = []
    for kind, pattern in patterns.items():
        if not isinstance(kind, str) or not _KIND_NAME.fullmatch(kind):
            raise ConfigurationError(
                f"PIIRedactor: extra_patterns kind names must be letters, digits and _ "
                f"starting with a letter (they go into the placeholder), got {kind!r}"
            )
        if kind in chosen:
            raise ConfigurationError(
                f"PIIRedactor: extra_patterns names {kind!r}, which is also a built-in kind "
                f"in kinds; leave it out of kinds=[...] to use your own pattern for it"
            )
        try:
            regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ConfigurationError(
                f"PIIRedactor: extra_patterns[{kind!r}] is not a valid regex: {exc}"
            ) from exc
        if not isinstance(regex.pattern, str):
            raise ConfigurationError(f"PIIRedactor: extra_patterns[{kind!r}] must be a str regex")
        if regex.search("") is not None:
            raise ConfigurationError(
                f"PIIRedactor: extra_patterns[{kind!r}] = {regex.pattern!r} matches empty "
                "text; make it match at least one character"
            )
        detectors.append(Detector(kind, regex))
    return detectors


def _placeholders(replacement: str, kinds: Iterable[str]) -> dict[str, str]:
    if not isinstance(replacement, str):
        raise ConfigurationError(
            f"PIIRedactor: replacement must be a string such as '[{{kind}}]', "
            f"got {type(replacement).__name__}"
        )
    try:
        return {kind: replacement.format(kind=kind) for kind in kinds}
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise ConfigurationError(
            f"PIIRedactor: replacement {replacement!r} must be a format string whose only "
            f"field is {{kind}} (e.g. '[{{kind}}]' or '<redacted>'): {type(exc).__name__}: {exc}"
        ) from exc
