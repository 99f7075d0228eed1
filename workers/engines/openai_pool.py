"""A lean HTTP/1.1 client for the openai engine's streamed POSTs, and its read watchdog.

Keep-alive connections to one server, plain HTTP/1.1 over TCP or TLS; the response body comes
back as lines, each with the ``time.perf_counter()`` (seconds) at which the bytes that completed
it were read. ``transport: httpx`` in a config uses httpx instead (proxies, HTTP/2, redirects).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from .base import EngineError
from .openai_stream import TRANSIENT_STATUS, error_message


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()


class Pool:
    """A lean HTTP/1.1 client for streamed POSTs: keep-alive connections to one server.

    httpx's pool costs O(open connections) per request and looked up an uninstalled
    module on every request; at 400 requests/s on 2 cores the client fell seconds behind
    schedule. This one costs a few tens of microseconds per request, which is what an
    open-loop load generator needs. Plain HTTP/1.1 and TLS only: no proxies, no HTTP/2,
    no redirects (``transport: httpx`` has them).
    """

    def __init__(
        self,
        *,
        base_url: str,
        headers: dict[str, str],
        read_timeout_s: float,
        connect_timeout_s: float,
        max_connections: int | None,
    ):
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.port = parts.port or (443 if self.ssl else 80)
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._slots = asyncio.Semaphore(int(max_connections)) if max_connections else None
        self._idle: list[_Connection] = []
        host_header = parts.netloc.rsplit("@", 1)[-1]
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head_prefix = f"Host: {host_header}\r\nUser-Agent: specreview\r\nAccept: text/event-stream\r\n"
        self._head_prefix += "Content-Type: application/json\r\n" + extra

    def request_head(self, *, path: str, length: int, request_id: str) -> bytes:
        return (
            f"POST {path} HTTP/1.1\r\n{self._head_prefix}X-Request-Id: {request_id}\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode("latin-1")

    async def _connect(self, url: str) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.ssl, limit=1 << 20
                )
        except TimeoutError as exc:
            raise EngineError(f"timed out connecting to {url}", transient=True) from exc
        except OSError as exc:
            raise EngineError(f"cannot connect to {url}: {exc.strerror or exc}", transient=True) from exc
        return _Connection(reader, writer)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.writer.close()

    async def post_lines(self, *, data: bytes, url: str) -> AsyncIterator[tuple[str, float]]:
        """Send one request and yield the response body's lines with the perf_counter time
        (seconds) at which the bytes that completed each line were read."""
        if self._slots is not None:
            await self._slots.acquire()
        watchdog = _Watchdog(timeout_s=self.read_timeout_s)
        conn: _Connection | None = None
        reusable = False
        try:
            conn, status, headers = await self._send(data=data, url=url, watchdog=watchdog)
            if status >= 400:
                raw = b"".join([piece async for piece, _ in self._body(conn, headers, watchdog)])
                reusable = _keep_alive(headers)
                raise EngineError(
                    f"{status} from {url}: {error_message(raw)}", transient=status in TRANSIENT_STATUS
                )
            buffer = b""
            async for piece, t in self._body(conn, headers, watchdog):
                buffer += piece
                while (cut := buffer.find(b"\n")) >= 0:
                    line, buffer = buffer[:cut], buffer[cut + 1 :]
                    yield line.rstrip(b"\r").decode("utf-8", "replace"), t
            if buffer:
                yield buffer.decode("utf-8", "replace"), time.perf_counter()
            reusable = _keep_alive(headers)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError) as exc:
            if watchdog.fired:
                raise EngineError(f"no data from {url} for {self.read_timeout_s} s", transient=True) from exc
            raise EngineError(
                f"the connection to {url} broke mid-stream ({type(exc).__name__}: {exc})", transient=True
            ) from exc
        except ValueError as exc:
            raise EngineError(f"malformed HTTP response from {url}: {exc}") from exc
        finally:
            watchdog.cancel()
            if conn is not None:
                if reusable and conn.usable():
                    self._idle.append(conn)
                else:
                    conn.writer.close()
            if self._slots is not None:
                self._slots.release()

    async def _send(
        self, *, data: bytes, url: str, watchdog: _Watchdog
    ) -> tuple[_Connection, int, dict[str, str]]:
        """Write the request and read the response head. A kept-alive connection that the
        server closed meanwhile fails before any response byte: then retry once on a new one."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.usable():
                conn.writer.close()
                continue
            try:
                watchdog.attach(conn.writer.transport)
                conn.writer.write(data)
                return (conn, *await self._head(conn, watchdog))
            except (asyncio.IncompleteReadError, ConnectionError):
                conn.writer.close()
                if watchdog.fired:
                    raise
        conn = await self._connect(url)
        try:
            watchdog.attach(conn.writer.transport)
            conn.writer.write(data)
            return (conn, *await self._head(conn, watchdog))
        except BaseException:
            conn.writer.close()
            raise

    @staticmethod
    async def _head(conn: _Connection, watchdog: _Watchdog) -> tuple[int, dict[str, str]]:
        raw = await conn.reader.readuntil(b"\r\n\r\n")
        watchdog.touch()
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError(f"bad status line {lines[0][:100]!r}")
        headers = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        headers[":version"] = parts[0]
        return int(parts[1]), headers

    @staticmethod
    async def _body(
        conn: _Connection, headers: dict[str, str], watchdog: _Watchdog
    ) -> AsyncIterator[tuple[bytes, float]]:
        reader = conn.reader
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readline()
                if not size_line:
                    raise asyncio.IncompleteReadError(b"", None)
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                piece = await reader.readexactly(size + 2)
                watchdog.touch()
                yield piece[:-2], time.perf_counter()
        elif "content-length" in headers:
            remaining = int(headers["content-length"])
            while remaining > 0:
                piece = await reader.read(min(remaining, 1 << 16))
                if not piece:
                    raise asyncio.IncompleteReadError(b"", remaining)
                watchdog.touch()
                remaining -= len(piece)
                yield piece, time.perf_counter()
        else:
            headers["connection"] = "close"  # the body ends when the server closes
            while piece := await reader.read(1 << 16):
                watchdog.touch()
                yield piece, time.perf_counter()


class _Watchdog:
    """Aborts the connection of a request that has heard nothing for ``timeout_s`` seconds.

    One timer per request, re-armed lazily, instead of a timeout context around every read:
    those cost a quarter of the client's time per request at high rates.
    """

    __slots__ = ("_loop", "_timeout_s", "_last", "_handle", "_transport", "fired")

    def __init__(self, *, timeout_s: float):
        self._loop = asyncio.get_running_loop()
        self._timeout_s = timeout_s
        self._last = self._loop.time()
        self._transport: asyncio.BaseTransport | None = None
        self.fired = False
        self._handle = self._loop.call_at(self._last + timeout_s, self._check)

    def attach(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._last = self._loop.time()

    def touch(self) -> None:
        self._last = self._loop.time()

    def _check(self) -> None:
        due = self._last + self._timeout_s
        if self._loop.time() < due or self._transport is None:
            self._handle = self._loop.call_at(max(due, self._loop.time() + 0.1), self._check)
            return
        self.fired = True
        self._transport.abort()  # type: ignore[attr-defined]

    def cancel(self) -> None:
        self._handle.cancel()


def _keep_alive(headers: dict[str, str]) -> bool:
    connection = headers.get("connection", "").lower()
    if headers.get(":version") == "HTTP/1.0":
        return connection == "keep-alive"
    return connection != "close"
