"""A span exporter wrapper that strips secrets from spans before they leave the process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

import groundswell

from ._text import REDACTED, clean_text, env_secrets


class RedactingSpanExporter(SpanExporter):
    """Wrap any ``SpanExporter`` so exported spans carry no secrets.

    Removes the value of every attribute (on spans and span events) whose key
    looks like a credential, and replaces inside every string: values
    registered with `groundswell.register_secret` (API keys, agents'
    ``env`` values), this process's secret-looking environment variables, and
    anything shaped like an Anthropic key or bearer token. Exception messages
    and status descriptions are cleaned the same way.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._env = env_secrets()

    def _text(self, text: str) -> str:
        return clean_text(text, self._env)

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
            return tuple(self._value(v) for v in value)
        return value

    def _attributes(self, attributes: Mapping[str, Any] | None) -> dict[str, Any]:
        return {
            k: REDACTED if groundswell.is_secret_key(k) else self._value(v)
            for k, v in (attributes or {}).items()
        }

    def clean(self, span: ReadableSpan) -> ReadableSpan:
        """A copy of ``span`` with secrets removed."""
        status = span.status
        if status.description:
            status = Status(status.status_code, self._text(status.description))
        return ReadableSpan(
            name=self._text(span.name),
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=self._attributes(span.attributes),
            events=[
                Event(e.name, self._attributes(e.attributes), e.timestamp) for e in span.events
            ],
            links=span.links,
            kind=span.kind,
            status=status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([self.clean(s) for s in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)
