"""A small OTLP/HTTP trace receiver for the tests: decodes protobuf exports on loopback."""

from __future__ import annotations

import gzip
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


class ReceivedSpan:
    """One decoded span: ids as hex, attributes as a plain dict."""

    def __init__(self, span: Any, resource: dict[str, Any]) -> None:
        self.name: str = span.name
        self.kind: int = span.kind
        self.trace_id = span.trace_id.hex()
        self.span_id = span.span_id.hex()
        self.parent_span_id = span.parent_span_id.hex() or None
        self.attributes = {kv.key: _value(kv.value) for kv in span.attributes}
        self.events = [
            (e.name, {kv.key: _value(kv.value) for kv in e.attributes}) for e in span.events
        ]
        self.status_code: int = span.status.code
        self.status_message: str = span.status.message
        self.start_ns: int = span.start_time_unix_nano
        self.end_ns: int = span.end_time_unix_nano
        self.resource = resource


class OTLPReceiver:
    """Listens on 127.0.0.1 for ``POST /v1/traces``; ``spans`` holds what arrived."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _add(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            for rs in request.resource_spans:
                resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    self.spans.extend(ReceivedSpan(s, resource) for s in ss.spans)

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
