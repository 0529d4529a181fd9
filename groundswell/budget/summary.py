"""The ``summarize`` strategy's pure parts: its settings, the transcript, the summary block.

A `Summarizer` says which model writes the summary, how long it may be
(``target_size``) and what stays word for word (``preserve``); the
``budget`` middleware (`groundswell.budget.summarize`) asks for the
summary and fits it in. The summary of the turns it replaces travels as the
last text block of the instruction message, so user and assistant turns still
alternate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError

__all__ = [
    "PRESERVE",
    "SUMMARIZER_SYSTEM",
    "SUMMARY_TAG",
    "Summarizer",
    "asked_for",
    "content_blocks",
    "is_summary_text",
    "previous_summary",
    "summary_text",
    "transcript",
    "with_summary",
]

#: What `Summarizer.preserve` may name, besides ``"last_<n>_turns"``.
PRESERVE: tuple[str, ...] = ("errors", "decisions", "instructions")
_LAST_TURNS = re.compile(r"^last_(\d+)_turns?$")


@dataclass(frozen=True, kw_only=True)
class Summarizer:
    """How the ``summarize`` strategy writes its summary.

    ``model`` is an `Agent` or a model name (``None``: the calling agent's
    model). ``target_size`` is the summary's size in tokens: the summarizer is
    asked for about that much and may write no more (``None``: a quarter of
    the room the budget leaves). ``preserve`` names what is kept word for word
    instead of summarized: ``"errors"`` (turns with a failed tool call),
    ``"decisions"`` (turns where the model said something in words),
    ``"instructions"`` (turns where the user spoke mid-run, e.g. feedback),
    and ``"last_<n>_turns"`` (the latest n turns, instead of the budget's
    ``keep_last_turns``). Kept turns still have to fit: those that do not are
    summarized with the rest, and the summarizer is told to keep what
    ``preserve`` names.
    """

    model: Any = None
    target_size: int | None = None
    preserve: Sequence[str] = ()

    def __post_init__(self) -> None:
        def bad(what: str) -> ConfigurationError:
            return ConfigurationError(f"Summarizer: {what}")

        model = self.model
        if model is not None and not (isinstance(model, str) or hasattr(model, "prompt")):
            raise bad(
                f"model must be a groundswell.Agent or a model name, got {type(model).__name__}"
            )
        size = self.target_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 16):
            raise bad(f"target_size must be an int >= 16 (tokens), got {size!r:.40}")
        if isinstance(self.preserve, str) or not isinstance(self.preserve, Sequence):
            raise bad(
                f"preserve must be a list such as ['errors', 'last_3_turns'], got {self.preserve!r:.60}"
            )
        for item in self.preserve:
            if item not in PRESERVE and not (isinstance(item, str) and _LAST_TURNS.match(item)):
                raise bad(
                    f"preserve: unknown item {item!r:.40}; use {', '.join(PRESERVE)} or "
                    "'last_<n>_turns' (e.g. 'last_3_turns')"
                )
        object.__setattr__(self, "preserve", tuple(self.preserve))

    def keep_last(self, default: int) -> int:
        """The latest turns kept as they are: ``last_<n>_turns`` if preserved, else ``default``."""
        for item in self.preserve:
            found = _LAST_TURNS.match(item)
            if found:
                return max(1, int(found.group(1)))
        return default


def content_blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A message's content as blocks (a plain string is one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, Mapping)]


SUMMARY_TAG = "earlier_turns_summary"
SUMMARIZER_SYSTEM = (
    "You condense the earlier part of a conversation between a user, an AI assistant and "
    "its tools so that the conversation can go on without it. Keep every fact, result, "
    "decision, error and open question a later turn may rely on, with names, numbers and "
    "identifiers exact. Leave out repetition. Reply with the summary only."
)
_TRANSCRIPT_CLIP = 2_000


def transcript(messages: Sequence[Mapping[str, Any]], previous: str | None = None) -> str:
    """Messages as plain text for a summarizer (long tool results clipped)."""
    lines: list[str] = []
    if previous:
        lines.append(f"[summary of still earlier turns]\n{previous}")
    for message in messages:
        role = str(message.get("role"))
        for block in content_blocks(message):
            kind = block.get("type")
            if kind == "text":
                lines.append(f"[{role}] {_clip(str(block.get('text', '')))}")
            elif kind == "tool_use":
                args = json.dumps(block.get("input") or {}, ensure_ascii=False, default=str)
                lines.append(f"[{role} calls tool {block.get('name')}] {_clip(args)}")
            elif kind == "tool_result":
                inner = block.get("content")
                text = (
                    inner
                    if isinstance(inner, str)
                    else " ".join(
                        str(b.get("text", "")) for b in inner or () if isinstance(b, Mapping)
                    )
                )
                mark = "tool error" if block.get("is_error") else "tool result"
                lines.append(f"[{mark}] {_clip(text)}")
    return "\n\n".join(lines)


def _clip(text: str) -> str:
    if len(text) <= _TRANSCRIPT_CLIP:
        return text
    return f"{text[:_TRANSCRIPT_CLIP]} … [{len(text) - _TRANSCRIPT_CLIP} more characters]"


def with_summary(first: Mapping[str, Any], summary: str) -> dict[str, Any]:
    """The instruction message with the summary of earlier turns as its last text block
    (replacing an older summary), so user and assistant turns still alternate."""
    content = first.get("content")
    blocks: list[Any] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    )
    blocks = [b for b in blocks if not _is_summary(b)]
    blocks.append({"type": "text", "text": summary_text(summary)})
    return {**first, "content": blocks}


def previous_summary(first: Mapping[str, Any]) -> str | None:
    """The summary an earlier ``summarize`` left in the instruction message, if any."""
    content = first.get("content")
    if isinstance(content, str):
        return None
    for block in content or ():
        if _is_summary(block):
            text = str(block["text"])
            return text.removeprefix(f"<{SUMMARY_TAG}>\n").removesuffix(f"\n</{SUMMARY_TAG}>")
    return None


def _is_summary(block: Any) -> bool:
    return (
        isinstance(block, Mapping)
        and block.get("type") == "text"
        and is_summary_text(str(block.get("text", "")))
    )


def summary_text(summary: str) -> str:
    """The text block the ``summarize`` budget strategy adds to the instruction message
    for ``summary``: ``<earlier_turns_summary>``, the summary, then the closing tag, on
    lines of their own."""
    return f"<{SUMMARY_TAG}>\n{summary}\n</{SUMMARY_TAG}>"


def is_summary_text(text: str) -> bool:
    """Whether ``text`` is a summary of earlier turns (`summary_text`) rather than the
    user's own words; an exporter of conversations uses it to replace an older summary."""
    return text.startswith(f"<{SUMMARY_TAG}>")


_ASKS = {
    "errors": "Keep every error (tool errors and their messages) word for word.",
    "decisions": "Keep every decision the assistant made, with its reason.",
    "instructions": "Keep every instruction the user gave, word for word.",
}


def asked_for(options: Summarizer, text: str) -> str:
    """What a summarizer is asked to summarize: ``options``' wishes, then the turns."""
    asks = [_ASKS[item] for item in options.preserve if item in _ASKS]
    if options.target_size is not None:
        asks.append(f"Write about {options.target_size} tokens, no more.")
    turns = f"<turns>\n{text}\n</turns>"
    return "\n".join([*asks, "", turns]) if asks else turns
