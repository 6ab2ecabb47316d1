"""An OTLP/HTTP trace receiver for tests/tracing.rs, on the official
protobuf definitions (PyPI `opentelemetry-proto`, pinned in requirements.txt).

Usage: otlp_receiver.py PORT [ok|hang|fail]

- `POST /v1/traces` with `application/x-protobuf`: an
  `ExportTraceServiceRequest`, parsed with the official classes; each span is
  kept with its resource's `service.name`. "ok" (the default) answers 200
  with an empty `ExportTraceServiceResponse`; "fail" answers 503; "hang"
  reads the request and never answers (a collector that hangs).
- `GET /spans`: every span received so far, as JSON: ids in hex, kind and
  status code as numbers, attributes as a flat object.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

MODE = sys.argv[2] if len(sys.argv) > 2 else "ok"
SPANS = []
LOCK = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def span_json(span, service):
    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "name": span.name,
        "kind": span.kind,
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "status_code": span.status.code,
        "status_message": span.status.message,
        "attributes": {kv.key: value(kv.value) for kv in span.attributes},
        "events": [{"name": e.name, "attributes": {kv.key: value(kv.value) for kv in e.attributes}}
                   for e in span.events],
        "service": service,
    }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.send_error(415 if self.path == "/v1/traces" else 404)
            return
        if MODE == "hang":
            threading.Event().wait()
        if MODE == "fail":
            self.send_error(503)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with LOCK:
            for resource_spans in request.resource_spans:
                service = {kv.key: value(kv.value) for kv in resource_spans.resource.attributes}.get("service.name")
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        SPANS.append(span_json(span, service))
                        SPANS[-1]["headers"] = {k.lower(): v for k, v in self.headers.items() if k.lower().startswith("x-")}
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        if self.path != "/spans":
            self.send_error(404)
            return
        with LOCK:
            body = json.dumps(SPANS).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
