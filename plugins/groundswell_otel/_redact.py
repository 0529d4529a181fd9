"""A span exporter wrapper that strips secrets from spans before they leave the process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

import groundswell

REDACTED = "**********"


class RedactingSpanExporter(SpanExporter):
    """Wrap any ``SpanExporter`` so exported spans carry no secrets.

    Every string (span names, attribute values, event attributes, exception
    messages, status descriptions) goes through `groundswell.scrub`, the
    scrubber every Groundswell output uses; the value of every attribute whose
    key is a secret name (`groundswell.is_secret_key`) is replaced whole,
    flags excepted. Other numbers stay numbers.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    @staticmethod
    def _text(text: str) -> str:
        return groundswell.scrub(text)

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
            return tuple(self._value(v) for v in value)
        return value

    def _attributes(self, attributes: Mapping[str, Any] | None) -> dict[str, Any]:
        return {
            k: REDACTED if groundswell.is_secret_key(k) and _hides(v) else self._value(v)
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


def _hides(value: Any) -> bool:
    # As in groundswell.redact: a flag under a secret name ("auth.enabled") says nothing.
    return value is not None and not isinstance(value, bool)
