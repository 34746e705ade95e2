"""A minimal HTTP/1.1 client on asyncio, for every call of ``ServerBackend``: one request
per connection, the body read as it comes (``Content-Length``, chunked, or until the
connection closes). Closing the response (or cancelling the task that awaits it) closes
the socket, which the server notices as the client going away: it cancels what it ran
for the request (``crates/sandboxio-server/src/launch.rs``). Nothing runs in a thread, so
a cancelled call leaves nothing behind for ``asyncio.run()`` to wait for at exit.

What the server sent is kept even when the connection then fails: a server that refuses a
body too large for it (413) answers before it has read all of it and closes, and the
client's further writes then fail (broken pipe, reset). The answer read before that is
still the answer."""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from typing import Mapping

# Bounds on what the server may send before the body (a status line and its headers).
MAX_HEAD_LINE = 16 * 1024
MAX_HEADERS = 100
# How much of the body is written before the writer waits for the socket to take it.
_HIGH_WATER = 256 * 1024
# How much of the answer is buffered before the socket is no longer read (until the
# reader takes some): a slow reader of a stream does not make the buffer grow.
_READ_HIGH = 4 * 1024 * 1024


class HttpError(Exception):
    """The connection failed or the server's answer was not HTTP/1.1 as expected."""


class SendFailed(HttpError):
    """The connection failed while the request was sent, and no answer was read."""


class TooLarge(HttpError):
    """The answer (or one line of a stream) is larger than the caller's bound."""


class NoAnswer(HttpError):
    """The request was sent (into the socket's buffers, at least), and the connection
    failed before the first line of an answer: nothing of one was read."""


class _Conn(asyncio.Protocol):
    """One connection: what arrived is buffered here and stays readable after the
    connection is lost (unlike ``asyncio.StreamReader``, which then raises at once)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self._wake: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._paused = False
        self._reading_paused = False

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > _READ_HIGH and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._notify()

    def eof_received(self) -> bool:
        self.eof = True
        self._notify()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if exc is not None and self.error is None:
            self.error = exc
        self._notify()
        self._resume()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._resume()

    # -- helpers ------------------------------------------------------------------------

    def _notify(self) -> None:
        w, self._wake = self._wake, None
        if w is not None and not w.done():
            w.set_result(None)

    def _resume(self) -> None:
        w, self._writable = self._writable, None
        if w is not None and not w.done():
            w.set_result(None)

    async def wait_data(self) -> None:
        """Until more data arrived or the connection ended."""
        if self.eof:
            return
        self._wake = asyncio.get_running_loop().create_future()
        await self._wake

    async def drain(self) -> None:
        """Until the socket took what was written (down to the low-water mark)."""
        while self._paused and not self.eof:
            self._writable = asyncio.get_running_loop().create_future()
            await self._writable
        if self.eof and self.error is not None:
            raise ConnectionResetError(str(self.error) or type(self.error).__name__)

    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _take(self, n: int) -> bytes:
        data = bytes(self.buf[:n])
        del self.buf[:n]
        if self._reading_paused and len(self.buf) < _READ_HIGH // 2 and self.transport is not None:
            self._reading_paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()
        return data

    async def read_line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                return self._take(i + 2)
            if len(self.buf) > MAX_HEAD_LINE:
                raise HttpError("a line of the answer is too long")
            if self.eof:
                raise HttpError(f"the connection closed mid-answer{_why(self.error)}")
            await self.wait_data()

    async def read_some(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` only at the end of the connection."""
        while not self.buf:
            if self.eof:
                if self.error is not None:
                    raise HttpError(f"the connection failed{_why(self.error)}")
                return b""
            await self.wait_data()
        return self._take(n)

    async def read_exactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes (a few: a chunk's data is read with ``read_some``)."""
        while len(self.buf) < n:
            if self.eof:
                raise HttpError(f"the connection closed before the end of the body{_why(self.error)}")
            if self._reading_paused and self.transport is not None and not self.transport.is_closing():
                # More than the buffer's high-water mark is wanted: reading must go on.
                self._reading_paused = False
                self.transport.resume_reading()
            await self.wait_data()
        return self._take(n)


def _why(e: BaseException | None) -> str:
    return f": {e}" if e is not None else ""


class Response:
    """A response whose body is read on demand."""

    def __init__(self, status: int, headers: dict[str, str], conn: _Conn) -> None:
        self.status = status
        self.headers = headers
        self._c = conn
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left: int | None = None
        if length is not None and not self._chunked:
            if not length.isdigit() or not length.isascii():
                raise HttpError(f"the answer's Content-Length `{length[:40]}` is not a number")
            self._left = int(length)
        # What is left of the current chunk (a chunk of any size is read in pieces, as
        # it comes: never waited for whole in the buffer).
        self._chunk_left = 0
        self._done = False

    async def read_chunk(self) -> bytes:
        """The next piece of the body (at most 64 KiB), or ``b""`` at its end."""
        if self._done:
            return b""
        if self._chunked:
            if self._chunk_left == 0:
                line = await self._c.read_line()
                hexa = line.split(b";", 1)[0].strip()
                if not hexa or len(hexa) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in hexa):
                    raise HttpError("a chunk size that is not hexadecimal")
                size = int(hexa, 16)
                if size == 0:
                    self._done = True
                    return b""
                self._chunk_left = size
            data = await self._c.read_some(min(self._chunk_left, 65536))
            if not data:
                raise HttpError("the connection closed before the end of a chunk")
            self._chunk_left -= len(data)
            if self._chunk_left == 0 and await self._c.read_exactly(2) != b"\r\n":
                raise HttpError("a chunk that does not end with CRLF")
            return data
        if self._left is not None:
            if self._left == 0:
                self._done = True
                return b""
            data = await self._c.read_some(min(self._left, 65536))
            if not data:
                raise HttpError("the connection closed before the end of the body")
            self._left -= len(data)
            return data
        data = await self._c.read_some(65536)
        if not data:
            self._done = True
        return data

    async def read_all(self, limit: int) -> bytes:
        """The rest of the body, up to ``limit`` bytes (``TooLarge`` beyond)."""
        out = bytearray()
        while True:
            c = await self.read_chunk()
            if not c:
                return bytes(out)
            out += c
            if len(out) > limit:
                raise TooLarge(f"the answer is larger than {limit} bytes")

    def close(self) -> None:
        """Closes the connection (idempotent); the server sees the client go away."""
        self._done = True
        self._c.close()


async def request(
    url: str,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes | None,
    *,
    connect_timeout: float,
) -> Response:
    """Sends one request and reads the status line and headers. Cancelled, it closes the
    connection. A body the server refuses before reading it all still gets its answer
    (the status and headers sent before the connection failed)."""
    u = urllib.parse.urlparse(url)
    tls = u.scheme == "https"
    host = u.hostname or "localhost"
    port = u.port or (443 if tls else 80)
    loop = asyncio.get_running_loop()
    try:
        _, conn = await asyncio.wait_for(
            loop.create_connection(_Conn, host, port, ssl=ssl.create_default_context() if tls else None),
            connect_timeout,
        )
    except (OSError, asyncio.TimeoutError, ssl.SSLError) as e:
        raise HttpError(f"cannot connect: {e or 'timed out'}") from None
    if any(c in path for c in " \r\n\t\0"):
        raise HttpError("a request path with whitespace or a control character")
    # Host and port only: whatever stood before an `@` (ServerBackend refuses it) is never sent.
    lines = [f"{method} {path} HTTP/1.1", f"Host: {u.netloc.rpartition('@')[2]}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    try:
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        sent = False
        try:
            assert conn.transport is not None
            conn.transport.write(head)
            view = memoryview(body or b"")
            for i in range(0, len(view), _HIGH_WATER):
                if conn.eof or conn.buf or conn.closing():
                    break  # the server answered (or left) before taking the whole body
                conn.transport.write(view[i : i + _HIGH_WATER])
                await conn.drain()
            else:
                sent = not conn.closing()
        except OSError:
            pass
        try:
            status_line = await conn.read_line()
        except HttpError as e:
            if not sent:
                raise SendFailed(f"sending the request failed: {e}") from None
            raise NoAnswer(f"no answer: {e}") from None
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise HttpError("the server did not answer HTTP/1.1")
        if not (len(parts[1]) == 3 and parts[1].isdigit()):
            raise HttpError(f"the answer's status `{parts[1][:20]}` is not a 3-digit number")
        status = int(parts[1])
        got: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = await conn.read_line()
            if line == b"\r\n":
                break
            k, _, v = line.decode("latin-1").partition(":")
            got[k.strip().lower()] = v.strip()
        else:
            raise HttpError("too many headers")
        if 100 <= status < 200:
            raise HttpError(f"an interim answer ({status}) this client did not ask for")
        return Response(status, got, conn)
    except (OSError, ValueError) as e:
        conn.close()
        raise HttpError(f"reading the answer failed: {e}") from None
    except BaseException:
        conn.close()
        raise
