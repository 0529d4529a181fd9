"""Secret removal shared by the sink and the exporter wrapper (no OpenTelemetry imports)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any

import groundswell

REDACTED = "**********"
# Anthropic keys and bearer tokens, wherever they appear in text.
SECRET_TEXT = re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}|(?i:bearer\s+)[A-Za-z0-9._\-]{12,}")


def env_secrets() -> tuple[str, ...]:
    """Values of this process's secret-looking variables (ANTHROPIC_API_KEY, *_TOKEN...).

    Only values of 8 characters or more: shorter ones would mangle ordinary words.
    """
    found = {v for k, v in os.environ.items() if groundswell.is_secret_key(k) and len(v) >= 8}
    return tuple(sorted(found, key=len, reverse=True))


def clean_text(text: str, env: tuple[str, ...]) -> str:
    """``text`` without registered secrets, the given env values, keys or bearer tokens."""
    text = str(groundswell.redact(text))
    for secret in env:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return SECRET_TEXT.sub(REDACTED, text)


def clean(value: Any, env: tuple[str, ...]) -> Any:
    """A JSON-safe copy of ``value`` with secrets removed, keys and text alike.

    A string holding a JSON object or array (a tool result, say) is parsed
    first, so the values under its secret-looking keys are found too.
    """
    if isinstance(value, str) and value[:1] in ("{", "["):
        with contextlib.suppress(ValueError):  # not JSON after all: cleaned as text
            value = json.loads(value)
    return _strings(groundswell.redact(value), env)


def _strings(value: Any, env: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return clean_text(value, env)
    if isinstance(value, dict):
        return {k: _strings(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, env) for v in value]
    return value
