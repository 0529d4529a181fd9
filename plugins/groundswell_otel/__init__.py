"""OpenTelemetry export of Groundswell's event tree (bundled plugin ``otel``).

Every run becomes one trace whose spans mirror the tree: ``invoke_workflow
{name}``, ``step {name}``, ``invoke_agent {agent}``, ``chat {model}`` per model
round trip (CLIENT), ``execute_tool {tool}``, ``reflection {name}``, following
the OpenTelemetry GenAI semantic conventions (names in
`groundswell_otel.attributes`). Spans start and end as nodes do, not
after the run.

Where spans go:

- ``instrument(tracer_provider=...)``: to that provider (the global one is
  never required);
- otherwise, the global provider, if the application set one;
- otherwise, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set: OTLP/HTTP through a
  ``BatchSpanProcessor`` and `RedactingSpanExporter` (needs
  ``pip install "groundswell[otlp]"``), with the resource ``OTEL_SERVICE_NAME``
  and ``OTEL_RESOURCE_ATTRIBUTES`` describe (`otlp_resource`);
- otherwise nowhere, at no cost to runs.

Content (prompts, completions, tool arguments and results) stays off spans
unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``SPAN_ONLY``,
``SPAN_AND_EVENT`` or ``true`` (or ``instrument(capture_content=True)``); each
``chat`` span then carries the whole conversation that turn sent, tool results
included, rebuilt from the tree (`groundswell_otel._content`).
Results of the introspection toolset describe the whole run, so they need
their own opt-in: ``GROUNDSWELL_OTEL_CAPTURE_INTROSPECTION=true`` or
``instrument(capture_introspection=True)``. Secrets are redacted either way.
Export runs on background threads: a failing exporter never fails a run.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import groundswell
from groundswell import AgentMiddleware, ConfigurationError, EventSink, hookimpl

from . import attributes

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import TracerProvider as APITracerProvider

    from ._redact import RedactingSpanExporter
    from ._sink import Capture, OTelSink

# OpenTelemetry's SDK takes ~70 ms to import; plugin loading must stay cheap, so
# it is imported when a sink is made or instrument() is called, not before.
_LAZY = {
    "Capture": "._sink",
    "OTelSink": "._sink",
    "RedactingSpanExporter": "._redact",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Capture",
    "OTelSink",
    "RedactingSpanExporter",
    "attributes",
    "capture_from_env",
    "instrument",
    "otlp_resource",
    "uninstrument",
]

SINK_NAME = "otel"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
INTROSPECTION_ENV = "GROUNDSWELL_OTEL_CAPTURE_INTROSPECTION"
_ON = {"span_only", "span_and_event", "true", "1", "yes"}


@dataclass
class _Config:
    provider: APITracerProvider | None = None
    owned: bool = False
    capture_content: bool | None = None
    capture_introspection: bool | None = None


_config = _Config()
_lock = threading.Lock()
# The sink made last: MCP calls ask it for their span (`groundswell_otel._propagate`).
_live: OTelSink | None = None


def capture_from_env(content: bool | None = None, introspection: bool | None = None) -> Capture:
    """What to capture: explicit arguments win, else the environment variables."""
    from ._sink import Capture

    mode = os.environ.get(CONTENT_ENV, "").strip().lower()
    return Capture(
        content=content if content is not None else mode in _ON,
        events=mode == "span_and_event" if content is None else False,
        introspection=(
            introspection
            if introspection is not None
            else os.environ.get(INTROSPECTION_ENV, "").strip().lower() in _ON
        ),
    )


def _otlp_endpoint() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )


def _otlp_provider() -> TracerProvider:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ConfigurationError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OTLP exporter is not installed: "
            'pip install "groundswell[otlp]"'
        ) from exc
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ._redact import RedactingSpanExporter

    resource = otlp_resource()
    # The sink flushes and shuts it down itself, with a bound; the SDK's own exit
    # hook would wait out every retry when the collector is down.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(RedactingSpanExporter(OTLPSpanExporter())))
    return provider


def otlp_resource() -> Resource:
    """The resource of the OTLP provider the plugin makes (an SDK ``Resource``).

    ``Resource.create()`` reads ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
    (``service.name=...`` there counts too); without either the service is
    ``groundswell`` rather than the SDK's ``unknown_service``. Phoenix files traces
    under the project named by ``openinference.project.name``, else under
    ``default``: unless that attribute is set, it is the service name.
    """
    from opentelemetry.sdk.resources import SERVICE_NAME
    from opentelemetry.sdk.resources import Resource as SDKResource

    resource = SDKResource.create()
    service = str(resource.attributes.get(SERVICE_NAME) or "")
    if not service or service.startswith("unknown_service"):
        service = "groundswell"
        resource = resource.merge(SDKResource({SERVICE_NAME: service}))
    if attributes.OPENINFERENCE_PROJECT_NAME not in resource.attributes:
        resource = resource.merge(SDKResource({attributes.OPENINFERENCE_PROJECT_NAME: service}))
    return resource


def _global_provider() -> APITracerProvider | None:
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    # The API's stand-ins record nothing: treat them as "no provider configured".
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def _environment_provider() -> tuple[APITracerProvider | None, bool]:
    """The global provider, else an OTLP one when the endpoint is set; and whether it is ours."""
    provider = _global_provider()
    if provider is not None:
        return provider, False
    if _otlp_endpoint():
        return _otlp_provider(), True
    return None, False


def _resolve() -> tuple[APITracerProvider | None, bool]:
    if _config.provider is not None:
        return _config.provider, _config.owned
    return _environment_provider()


def _make_sink() -> OTelSink | None:
    from ._sink import OTelSink

    with _lock:
        provider, owned = _resolve()
        if provider is None:
            return None
        capture = capture_from_env(_config.capture_content, _config.capture_introspection)
        # A provider made by instrument() belongs to the configuration, which may
        # outlive this sink; only one made here is this sink's to shut down.
        global _live
        _live = OTelSink(provider, capture=capture, owned=owned and _config.provider is None)
        return _live


def live_sink() -> OTelSink | None:
    """The sink exporting runs now, if any (a closed one is not)."""
    sink = _live
    return None if sink is None or sink._closed else sink


def instrument(
    tracer_provider: APITracerProvider | None = None,
    *,
    capture_content: bool | None = None,
    capture_introspection: bool | None = None,
) -> APITracerProvider:
    """Export every run from now on as spans; returns the provider in use.

    ``tracer_provider`` defaults to the global provider, else to an OTLP/HTTP
    provider when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. ``capture_content`` and
    ``capture_introspection`` override the environment variables. Calling it
    again replaces the previous settings (spans so far are flushed first).
    """
    with _lock:
        previous = _config.provider if _config.owned else None
        found, owned = (
            (tracer_provider, False) if tracer_provider is not None else _environment_provider()
        )
        if found is None:
            raise ConfigurationError(
                "groundswell_otel.instrument() found no tracer provider: pass "
                "tracer_provider=..., set a global one with "
                "opentelemetry.trace.set_tracer_provider(), or set OTEL_EXPORTER_OTLP_ENDPOINT"
            )
        provider: APITracerProvider = found
        _config.provider, _config.owned = provider, owned
        _config.capture_content = capture_content
        _config.capture_introspection = capture_introspection
    manager = groundswell.get_plugin_manager()
    if not any(i.name == SINK_NAME for i in manager.list_plugins()):
        # Disabled or filtered out at load: calling instrument() is an explicit opt-in.
        manager.register(sys.modules[__name__], name=SINK_NAME)
    manager.refresh_sinks(SINK_NAME)
    _shutdown(previous)
    # Exit hooks run last-registered first: registered now, this flush runs
    # before the shutdown hook of the provider passed in (created earlier), so
    # spans still queued in the sink reach it.
    atexit.unregister(_flush_at_exit)
    atexit.register(_flush_at_exit)
    return provider


def _flush_at_exit() -> None:
    groundswell.flush_sinks(3.0)


def _shutdown(provider: APITracerProvider | None) -> None:
    shutdown = getattr(provider, "shutdown", None)
    if callable(shutdown):
        shutdown()


def uninstrument() -> None:
    """Stop exporting: flush and close the sink; settings return to the environment's."""
    with _lock:
        previous = _config.provider if _config.owned else None
        _config.provider, _config.owned = None, False
        _config.capture_content = _config.capture_introspection = None
    groundswell.get_plugin_manager().refresh_sinks(SINK_NAME)
    _shutdown(previous)


def _trace_context() -> Any:
    from ._propagate import MCPTraceContext

    return MCPTraceContext()


@hookimpl
def register_agent_middleware() -> Any:
    return AgentMiddleware(
        "otel_mcp", _trace_context, 330, True, "trace context to MCP servers (params._meta)"
    )


@hookimpl
def register_event_sinks() -> Any:
    return EventSink(
        name=SINK_NAME,
        factory=_make_sink,
        description="OpenTelemetry spans of every run (GenAI semantic conventions)",
    )
