"""An OTLP/HTTP trace receiver for the tests, decoding with the official
protobuf definitions (PyPI `opentelemetry-proto`): what the host sends is
read by code nobody here wrote.

Usage: otlp_receiver.py OUT_FILE [--fail N]
Listens on 127.0.0.1 (a free port), prints `listening PORT` on stdout, and
writes one JSON line per span received to OUT_FILE: ids in lowercase hex,
times in Unix nanoseconds, attributes as a flat object, the resource's
attributes under "resource". With --fail N, answers the first N exports
with 503 (a collector that is down), receiving nothing from them.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

OUT = sys.argv[1]
FAIL = int(sys.argv[sys.argv.index("--fail") + 1]) if "--fail" in sys.argv else 0
lock = threading.Lock()
failed = 0


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        global failed
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with lock:
            if failed < FAIL:
                failed += 1
                self.send_response(503)
                self.end_headers()
                return
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        if self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(415)
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": trace_pb2.Span.SpanKind.Name(span.kind),
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": attributes(span.attributes),
                        "status": trace_pb2.Status.StatusCode.Name(span.status.code),
                        "status_message": span.status.message,
                        "scope": scope_spans.scope.name,
                        "resource": resource,
                        "headers": {k.lower(): v for k, v in self.headers.items()
                                    if k.lower().startswith("x-")},
                    }))
        with lock, open(OUT, "a") as out:
            for line in lines:
                out.write(line + "\n")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
