"""Receivers on 127.0.0.1 for the notification tests: an HTTP server that records each POST (and
answers the statuses it is told to, in order) and a minimal SMTP server that records each message."""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answered in order; 200 once used up
    messages: list[str] = field(default_factory=list)


@contextlib.contextmanager
def http_receiver() -> Iterator[tuple[str, Received]]:
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            got.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(got.statuses.pop(0) if got.statuses else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def smtp_receiver() -> Iterator[tuple[int, Received]]:
    """Speaks just enough SMTP (HELO/EHLO, MAIL, RCPT, DATA, QUIT) for Django's backend."""
    got = Received()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            self.wfile.write(b"220 127.0.0.1 test SMTP\r\n")
            while line := self.rfile.readline():
                verb = line[:4].upper()
                if verb == b"DATA":
                    self.wfile.write(b"354 end with .\r\n")
                    data = []
                    while (row := self.rfile.readline()) not in (b".\r\n", b""):
                        data.append(row.decode("utf-8", "replace"))
                    got.messages.append("".join(data))
                    self.wfile.write(b"250 queued\r\n")
                elif verb == b"QUIT":
                    self.wfile.write(b"221 bye\r\n")
                    return
                elif verb == b"EHLO":
                    self.wfile.write(b"250-127.0.0.1\r\n250 8BITMIME\r\n")
                else:
                    self.wfile.write(b"250 ok\r\n")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], got
    finally:
        server.shutdown()
        server.server_close()
