"""A local stand-in for the Kubernetes API server, for testing KubernetesCluster at the HTTP level.

`FakeKubeAPI` is a threaded HTTP server on 127.0.0.1 (a free port) that records every request
(method, path, query, headers, JSON body) and answers from a route table; tests/nodes/kubernetes/
api_objects.py builds the JSON it answers with.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.nodes.kubernetes.api_objects import status_error

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: Any  # decoded JSON, or None without a body

    def param(self, name: str) -> str | None:
        """The single value of query parameter `name`, or None."""
        values = self.query.get(name)
        return values[0] if values else None

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-encoded unless it is bytes
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[RecordedRequest], Reply]


class FakeKubeAPI:
    """Records requests and answers them from routes keyed by (method, exact path).

    A request without a route goes to the handler given to `serve`, if any; else it gets the API server's 404 for an unknown resource path, so a test
    sees a wrong path as a NotFound rather than a hang.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._routes: dict[tuple[str, str], Handler] = {}
        self._fallback: Handler | None = None
        self._requests: list[RecordedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKubeAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        """Forget routes and recorded requests (one server serves many tests)."""
        with self._lock:
            self._routes.clear()
            self._fallback = None
            self._requests.clear()

    def on(
        self,
        method: str,
        path: str,
        body: Any = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
        handler: Handler | None = None,
    ) -> None:
        """Answer `method path` with `status` and `body`, or with whatever `handler` returns."""
        reply = Reply(status=status, body=body, headers=dict(headers or {}))
        with self._lock:
            self._routes[(method.upper(), path)] = handler or (lambda _request: reply)

    def serve(self, handler: Handler) -> None:
        """Answer every request that has no route with `handler` (a stateful fake cluster's)."""
        with self._lock:
            self._fallback = handler

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def only_request(self) -> RecordedRequest:
        """The one request received; fails when there were none or several."""
        requests = self.requests
        assert len(requests) == 1, f"expected exactly one request, got {[(r.method, r.path) for r in requests]}"
        return requests[0]

    def _answer(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._requests.append(request)
            handler = self._routes.get((request.method, request.path)) or self._fallback
        if handler is None:
            return Reply(404, status_error(404, "NotFound", "the server could not find the requested resource"))
        return handler(request)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class _Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                request = RecordedRequest(
                    method=self.command,
                    path=parts.path,
                    query=parse_qs(parts.query),
                    headers={name.lower(): value for name, value in self.headers.items()},
                    body=json.loads(raw) if raw else None,
                )
                reply = api._answer(request)
                payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                content_type = "text/plain" if isinstance(reply.body, bytes) else "application/json"
                self.send_header("Content-Type", reply.headers.get("Content-Type", content_type))
                for name, value in reply.headers.items():
                    if name != "Content-Type":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass  # keep test output clean

        return _Handler
