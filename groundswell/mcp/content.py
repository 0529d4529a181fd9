"""MCP content as Anthropic content blocks: what a local MCP tool's result becomes for the model.

`tool_result_content` turns an MCP ``CallToolResult`` into the content of the
``tool_result`` the model gets:

========================  ===================================================
MCP content               Anthropic content
========================  ===================================================
text                      ``text``
image (JPEG, PNG, GIF,    ``image`` (base64); another type, bad base64 or
WebP)                     over 5 MB: a short ``text`` note instead
audio                     a short ``text`` note (the API takes no audio)
embedded text resource    ``document`` with a text source, titled by its URI
embedded blob resource    PDF: ``document`` (base64); image: ``image``; text
                          (``text/*``, JSON, or UTF-8 that decodes): a text
                          ``document``; anything else: a short ``text`` note
resource link             ``text`` naming the link (URI, name, type,
                          description)
``structuredContent``     a ``text`` block of its JSON when the content has
                          no text (the MCP spec asks servers to put its JSON
                          in a text block) and is not the blocks themselves
========================  ===================================================

A result of text alone stays one string, as before. Base64 never reaches the
model as text: every note names the media type and size instead. The tree
records the same blocks, with each base64 source's data replaced by a short
placeholder (`groundswell.scrubbing.serialize`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "content_blocks",
    "resource_blocks",
    "structured_record",
    "text_of",
    "tool_result_content",
]

#: The image media types the Messages API takes.
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
#: The API's limit on one image (bytes, decoded): a larger one fails the whole request.
MAX_IMAGE_BYTES = 5 * 1024 * 1024
# Media types that are text though not text/*.
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/yaml", "application/javascript"}
)
# Longest string of a structuredContent kept as is (longer base64-looking ones are elided).
_LONG = 1_000
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


def tool_result_content(result: Any) -> str | list[dict[str, Any]]:
    """The ``tool_result`` content for an MCP ``CallToolResult``: one string when all is text."""
    blocks = [block for item in result.content for block in content_blocks(item)]
    structured = result.structured_content
    if structured is not None and not _restated(structured, result.content):
        blocks.append(_text(json.dumps(structured_record(structured), ensure_ascii=False)))
    if all(b["type"] == "text" for b in blocks):
        return "\n".join(b["text"] for b in blocks)
    return blocks


def text_of(result: Any) -> str:
    """A result as text alone (an error result's message): notes stand for non-text blocks."""
    content = tool_result_content(result)
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] if b["type"] == "text" else _label(b) for b in content)


def content_blocks(item: Any) -> list[dict[str, Any]]:
    """One MCP content block (text, image, audio, resource, resource link) as Anthropic blocks."""
    kind = getattr(item, "type", None)
    if kind == "text":
        return [_text(item.text)] if item.text else []
    if kind == "image":
        return [_image(item.data, item.mime_type, "image")]
    if kind == "audio":
        what = f"{item.mime_type} audio, {_size(item.data)}"
        return [_text(f"[{what}: not shown, the API takes no audio]")]
    if kind == "resource":
        return resource_blocks(item.resource)
    if kind == "resource_link":
        return [_text(_link(item))]
    # A content type newer than this code: its fields as JSON, any base64 in it elided.
    dumped = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    return [_text(json.dumps(structured_record(dumped), ensure_ascii=False))]


def resource_blocks(resource: Any) -> list[dict[str, Any]]:
    """The contents of an MCP resource (text or blob) as Anthropic blocks."""
    uri, mime = str(resource.uri), resource.mime_type
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return [_document(text, uri)] if text else [_text(f"[resource {uri}: empty]")]
    blob: str = resource.blob
    if mime == "application/pdf":
        if _decodes(blob) is None:
            return [_text(f"[resource {uri} ({mime}): not shown, its data is not valid base64]")]
        source = {"type": "base64", "media_type": mime, "data": _compact(blob)}
        return [{"type": "document", "source": source, "title": uri[:500]}]
    if mime is not None and mime.startswith("image/"):
        return [_image(blob, mime, f"resource {uri}")]
    raw = _decodes(blob)
    if raw is not None and _is_text(mime):
        try:
            decoded = raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return [_document(decoded, uri)] if decoded else [_text(f"[resource {uri}: empty]")]
    return [_text(f"[resource {uri} ({mime or 'binary'}, {_size(blob)}): not shown, binary data]")]


def structured_record(value: Any) -> Any:
    """``value`` (JSON) with long base64 strings replaced by a note of their size."""
    if isinstance(value, str):
        if len(value) > _LONG and _BASE64.fullmatch(value):
            return f"[{_size(value)} of base64 data, not shown]"
        return value
    if isinstance(value, dict):
        return {k: structured_record(v) for k, v in value.items()}
    if isinstance(value, list):
        return [structured_record(v) for v in value]
    return value


def _restated(structured: Any, content: Sequence[Any]) -> bool:
    """Whether the content already gives ``structured``: in a text block (the MCP spec asks
    servers for its JSON there; ``MCPServer`` gives a plain value's text), or as the very
    blocks (server-filesystem echoes them as ``{"content": [...]}``)."""
    if any(getattr(item, "type", None) == "text" and item.text for item in content):
        return True
    dumped = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in content]
    return bool(dumped) and structured == {"content": dumped}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _document(text: str, uri: str) -> dict[str, Any]:
    source = {"type": "text", "media_type": "text/plain", "data": text}
    return {"type": "document", "source": source, "title": uri[:500]}


def _image(data: str, declared: str, what: str) -> dict[str, Any]:
    raw = _decodes(data)
    if raw is None:
        return _text(f"[{what} ({declared}): not shown, its data is not valid base64]")
    # The bytes decide: a server that says image/jpg, or PNG for a JPEG, still gets through.
    media = _sniff(raw) or declared
    shown = f"{what} ({media}, {_size(data)})"
    if media not in IMAGE_TYPES:
        return _text(f"[{shown}: not shown, the API takes JPEG, PNG, GIF and WebP images only]")
    if len(raw) > MAX_IMAGE_BYTES:
        return _text(f"[{shown}: not shown, over the API's {MAX_IMAGE_BYTES >> 20} MB per image]")
    source = {"type": "base64", "media_type": media, "data": _compact(data)}
    return {"type": "image", "source": source}


def _sniff(raw: bytes) -> str | None:
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def _compact(data: str) -> str:
    """Base64 without the whitespace a server may wrap it with: the API refuses it."""
    # split() only when needed: an image's megabytes are not copied for nothing.
    return "".join(data.split()) if any(c in data for c in " \t\r\n\f\v") else data


def _decodes(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        try:  # line-wrapped base64 (MIME style) is still base64
            return base64.b64decode("".join(data.split()), validate=True)
        except (binascii.Error, ValueError):
            return None


def _is_text(mime: str | None) -> bool:
    if mime is None:
        return True  # unknown: text if it decodes as UTF-8
    base = mime.split(";", 1)[0].strip().lower()
    return base.startswith("text/") or base in _TEXT_TYPES or base.endswith(("+json", "+xml"))


def _size(data: str) -> str:
    """The decoded size of base64 ``data``, for people: ``"4,144 bytes"``, ``"6.2 MB"``."""
    # str.count runs in C: an image's megabytes are not walked in Python.
    n = len(data) - data.count("\n") - data.count("\r") - data.count(" ")
    end = data.rstrip()
    size = n * 3 // 4 - end.endswith("==") - end.endswith("=")
    return f"{size:,} bytes" if size < 2**20 else f"{size / 2**20:.1f} MB"


def _link(link: Any) -> str:
    label = link.title or link.name
    parts = [f"Resource link: {label} <{link.uri}>"]
    if link.mime_type:
        parts.append(f" ({link.mime_type}")
        parts.append(f", {link.size:,} bytes)" if link.size is not None else ")")
    if link.description:
        parts.append(f": {link.description}")
    return "".join(parts)


def _label(block: dict[str, Any]) -> str:
    """A non-text block in a line of text: ``[image/png image]``, ``[document demo://x]``."""
    if block["type"] == "image":
        return f"[{block['source']['media_type']} image]"
    return f"[{block['type']} {block.get('title') or ''}]".replace(" ]", "]")
