"""A server on 127.0.0.1 that answers every request with a 500 whose body echoes the
request's Authorization header (as a careless proxy would), padded past any sane length."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PADDING = "x" * 6000


class _Echo(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        message = f"upstream refused: Authorization: {self.headers.get('Authorization')} {PADDING}"
        body = json.dumps({"error": {"message": message, "code": 500}}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:  # quiet test output
        pass


@contextlib.contextmanager
def echo_server() -> Iterator[tuple[str, list]]:
    """Yields (base_url ending in /v1, the Authorization headers it has seen)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    httpd.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", httpd.seen  # type: ignore[attr-defined]
    finally:
        httpd.shutdown()
        httpd.server_close()
