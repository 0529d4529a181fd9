"""Thinking blocks in the fake API: it signs those it sends and checks those sent back.

Each ``thinking`` block the fake sends gets a ``signature`` (an HMAC, with a
secret of the fake's own, of the block's text and of its prefix: the
``system`` prompt, the ``tools``, the messages before it and the blocks
before it in its message, ``cache_control`` markers left out as the API
leaves them out) unless the script gives one; a ``redacted_thinking`` block
gets opaque ``data``. Every request is then checked as the API checks it
(`groundswell.model.thinking_blocks` states the rules), with the API's own 400
messages:

* with thinking on, the latest assistant turn of a tool loop must come back
  with the thinking blocks it was sent with, in place ("Expected `thinking`
  or `redacted_thinking`, but found `tool_use`" when they are missing, "...
  cannot be modified" when they are reordered or some are left out);
* a block whose text no longer matches its signature is refused ("cannot be
  modified" in the latest assistant message, "Invalid `signature`" in an
  earlier one), and so is a signature the fake never issued;
* a block whose prefix changed is "bound to a different conversation",
  unless the request sets ``thinking.block_binding.prefix_mismatch_behavior``
  to ``"drop_block"``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..model.thinking_blocks import THINKING_TYPES
from ._replies import Reply, as_answer

__all__ = ["ThinkingLedger", "redacted_thinking", "thinking"]


def thinking(text: str, reply: Reply | str, *, signature: str | None = None) -> Reply:
    """``reply`` with a thinking block before its content, as a model that thinks first.

    ``thinking("Add them first.", tool_use("add", {"a": 1, "b": 2}))``. The fake
    signs the block for the conversation it is sent in, unless ``signature``
    is given, and refuses a later request that sends it back changed, out of
    place, or after a change to what came before it (as the API does).
    Nest calls for several blocks; the outermost comes first.
    """
    if not isinstance(text, str):
        raise ConfigurationError(
            f"groundswell.testing: thinking() takes the thinking text as a str, got "
            f"{type(text).__name__}; e.g. thinking('Add them first.', tool_use('add', {{...}}))"
        )
    block: dict[str, Any] = {"type": "thinking", "thinking": text}
    if signature is not None:
        block["signature"] = signature
    return _before(block, reply, "thinking()")


def redacted_thinking(reply: Reply | str, *, data: str | None = None) -> Reply:
    """``reply`` with a ``redacted_thinking`` block first (opaque ``data``, made up if not given)."""
    block: dict[str, Any] = {"type": "redacted_thinking"}
    if data is not None:
        block["data"] = data
    return _before(block, reply, "redacted_thinking()")


def _before(block: dict[str, Any], reply: Reply | str, where: str) -> Reply:
    answer = as_answer(reply, f"the reply given to {where}")
    if not isinstance(answer, Reply):
        raise ConfigurationError(
            f"groundswell.testing: {where} goes before a reply's content; an error has none"
        )
    return dataclasses.replace(answer, content=[block, *answer.content])


# -- signing and checking ----------------------------------------------------------------

_MODIFIED = (
    "{where}: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot "
    "be modified. These blocks must remain as they were in the original response."
)
_MISSING = (
    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
_BOUND = (
    "{where}: Invalid `{field}` in `{kind}` block. The block is bound to a different "
    "conversation. Remove the block, or set "
    '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)
_CALLS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
# What a block's opaque key is: the signature of a thinking block, the data of a redacted one.
_KEY = {"thinking": "signature", "redacted_thinking": "data"}


class ThinkingLedger:
    """One fake's thinking blocks: what it signed, and which reply each tool call came in."""

    def __init__(self) -> None:
        self._secret = os.urandom(32)
        self._lock = threading.Lock()
        # signature or data -> every (text, prefix digest) it was sent with (None: redacted)
        self._issued: dict[str, set[tuple[str | None, bytes]]] = {}
        # a call's id -> the thinking blocks of its reply, as (index, type, signature or data)
        self._turns: dict[str, tuple[tuple[int, str, str], ...]] = {}

    def sign(self, body: Mapping[str, Any], content: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``content`` (a reply to ``body``) with every thinking block signed and recorded."""
        if not any(b.get("type") in THINKING_TYPES for b in content):
            return content
        prefix = _Prefix(body)
        messages = len(body.get("messages") or ())
        out: list[dict[str, Any]] = []
        marks: list[tuple[int, str, str]] = []
        for j, block in enumerate(content):
            kind = block.get("type")
            if kind in THINKING_TYPES:
                digest = prefix.at(messages, "assistant", out)
                text = block.get("thinking") if kind == "thinking" else None
                key = block.get(_KEY[kind]) or self._key(digest, text)
                block = {**block, _KEY[kind]: key}
                with self._lock:
                    self._issued.setdefault(key, set()).add((text, digest))
                marks.append((j, kind, key))
            out.append(block)
        with self._lock:
            for block in out:
                if block.get("type") in _CALLS and isinstance(block.get("id"), str):
                    self._turns[block["id"]] = tuple(marks)
        return out

    def _key(self, digest: bytes, text: str | None) -> str:
        # Opaque like the API's: base64 of a MAC over the prefix and the text.
        salt = os.urandom(8) if text is None else b""
        mac = hmac.new(self._secret, digest + salt + (text or "").encode(), hashlib.sha256)
        return base64.b64encode(b"\x01" + salt + mac.digest()).decode()

    def check(self, body: Mapping[str, Any]) -> str | None:
        """The API's 400 message for the thinking blocks ``body`` sends back, or ``None``."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        config = body.get("thinking")
        config = config if isinstance(config, Mapping) else {}
        continued = _continued(messages)
        if continued is not None and config.get("type") not in (None, "disabled"):
            problem = self._check_turn(messages, continued)
            if problem is not None:
                return problem
        spots = [
            (i, j, block)
            for i, message in enumerate(messages)
            if isinstance(message, Mapping) and message.get("role") == "assistant"
            for j, block in enumerate(_blocks(message))
            if block.get("type") in THINKING_TYPES
        ]
        if not spots:
            return None
        latest = max(
            i
            for i, m in enumerate(messages)
            if isinstance(m, Mapping) and m.get("role") == "assistant"
        )
        binding = config.get("block_binding")
        drop = isinstance(binding, Mapping) and (
            binding.get("prefix_mismatch_behavior") == "drop_block"
        )
        prefix = _Prefix(body)
        for i, j, block in spots:
            where, kind = f"messages.{i}.content.{j}", str(block["type"])
            field = _KEY[kind]
            key = block.get(field)
            text = block.get("thinking") if kind == "thinking" else None
            if not isinstance(key, str) or not key:
                return f"{where}.{kind}.{field}: Field required"
            if kind == "thinking" and not isinstance(text, str):
                return f"{where}.{kind}.thinking: Field required"
            with self._lock:
                issued = set(self._issued.get(key, ()))
            digest = prefix.at(i, "assistant", _blocks(messages[i])[:j])
            if (text, digest) in issued:
                continue
            if any(sent == text for sent, _ in issued):  # the block as sent, elsewhere
                if drop:
                    continue
                return _BOUND.format(where=where, field=field, kind=kind)
            if i == latest:
                return _MODIFIED.format(where=where)
            return f"{where}: Invalid `{field}` in `{kind}` block"
        return None

    def _check_turn(self, messages: list[Any], i: int) -> str | None:
        """The latest assistant turn, continued: its thinking blocks must be as they were sent."""
        blocks = _blocks(messages[i])
        with self._lock:
            original = next(
                (self._turns[b["id"]] for b in blocks if b.get("id") in self._turns), None
            )
        if not original:
            return None
        sent = [
            (j, str(b.get("type")), b.get(_KEY[str(b.get("type"))]))
            for j, b in enumerate(blocks)
            if b.get("type") in THINKING_TYPES
        ]
        if sent == list(original):
            return None
        if not blocks or blocks[0].get("type") not in THINKING_TYPES:
            found = blocks[0].get("type") if blocks else "nothing"
            return _MISSING.format(i=i, found=found)
        k = next(
            (k for k, (a, b) in enumerate(zip(sent, original, strict=False)) if a != b),
            min(len(sent), len(original)),
        )
        # Where the first difference is: a block out of place, or one left out.
        at = sent[k][0] if k < len(sent) else original[k][0]
        return _MODIFIED.format(where=f"messages.{i}.content.{at}")


def _continued(messages: Sequence[Any]) -> int | None:
    """The index of the assistant message a request continues (a tool loop, a paused turn)."""
    if not messages or not isinstance(messages[-1], Mapping):
        return None
    last = len(messages) - 1
    if messages[last].get("role") == "assistant":
        return last
    if (
        last >= 1
        and isinstance(messages[last - 1], Mapping)
        and messages[last - 1].get("role") == "assistant"
        and any(b.get("type") == "tool_result" for b in _blocks(messages[last]))
    ):
        return last - 1
    return None


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, Mapping)]


class _Prefix:
    """Digests of a request's prefixes: ``system`` and ``tools``, then message after message."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        messages = body.get("messages")
        self._messages: list[Any] = messages if isinstance(messages, list) else []
        system = body.get("system")
        if isinstance(system, str):
            system = [{"type": "text", "text": system}]
        self._chain = [_digest(b"", [system or [], body.get("tools") or []])]

    def at(self, i: int, role: str, before: Sequence[Mapping[str, Any]]) -> bytes:
        """The prefix of a block of message ``i`` (``role``) that has ``before`` ahead of it."""
        chain = self._chain
        while len(chain) <= i:
            message = self._messages[len(chain) - 1]
            content = _blocks(message) if isinstance(message, Mapping) else message
            role_k = message.get("role") if isinstance(message, Mapping) else None
            chain.append(_digest(chain[-1], {"role": role_k, "content": content}))
        return _digest(chain[i], {"role": role, "content": list(before), "partial": True})


def _digest(previous: bytes, value: Any) -> bytes:
    text = json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(previous + text.encode()).digest()


def _plain(value: Any) -> Any:
    """``value`` as the prefix check compares it: no ``cache_control``, no ``None`` fields."""
    if isinstance(value, Mapping):
        return {
            str(k): _plain(v) for k, v in value.items() if k != "cache_control" and v is not None
        }
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
