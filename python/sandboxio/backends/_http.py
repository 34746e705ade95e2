"""A minimal HTTP/1.1 client on asyncio streams, for answers that arrive over time (the
server's streamed exec): one request per connection, the body read as it comes
(``Content-Length``, chunked, or until the connection closes). Closing the response
closes the socket, which the server notices as the client going away. Nothing else in the
package needs more than ``urllib``."""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from typing import Mapping

# Bounds on what the server may send before the body (a status line and its headers).
MAX_HEAD_LINE = 16 * 1024
MAX_HEADERS = 100


class HttpError(Exception):
    """The connection failed or the server's answer was not HTTP/1.1 as expected."""


class Response:
    """A response whose body is read on demand."""

    def __init__(self, status: int, headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.status = status
        self.headers = headers
        self._r = reader
        self._w = writer
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left: int | None = int(length) if length is not None and not self._chunked else None
        self._done = False

    async def read_chunk(self) -> bytes:
        """The next piece of the body, or ``b""`` at its end."""
        if self._done:
            return b""
        if self._chunked:
            line = await self._r.readuntil(b"\r\n")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise HttpError("a chunk size that is not hexadecimal") from None
            if size == 0:
                self._done = True
                return b""
            data = await self._r.readexactly(size)
            await self._r.readexactly(2)
            return data
        if self._left is not None:
            if self._left == 0:
                self._done = True
                return b""
            data = await self._r.read(min(self._left, 65536))
            if not data:
                raise HttpError("the connection closed before the end of the body")
            self._left -= len(data)
            return data
        data = await self._r.read(65536)
        if not data:
            self._done = True
        return data

    async def read_all(self, limit: int = 64 * 1024 * 1024) -> bytes:
        out = bytearray()
        while True:
            c = await self.read_chunk()
            if not c:
                return bytes(out)
            out += c
            if len(out) > limit:
                raise HttpError("the answer is larger than expected")

    def close(self) -> None:
        """Closes the connection (idempotent); the server sees the client go away."""
        self._done = True
        if not self._w.is_closing():
            self._w.close()


async def request(
    url: str,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes | None,
    *,
    connect_timeout: float,
) -> Response:
    """Sends one request and reads the status line and headers."""
    u = urllib.parse.urlparse(url)
    tls = u.scheme == "https"
    host = u.hostname or "localhost"
    port = u.port or (443 if tls else 80)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ssl.create_default_context() if tls else None, limit=MAX_HEAD_LINE * 4),
            connect_timeout,
        )
    except (OSError, asyncio.TimeoutError) as e:
        raise HttpError(f"cannot connect: {e or 'timed out'}") from None
    lines = [f"{method} {path} HTTP/1.1", f"Host: {u.netloc}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise HttpError("the server did not answer HTTP/1.1")
        status = int(parts[1])
        got: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = await reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            k, _, v = line.decode("latin-1").partition(":")
            got[k.strip().lower()] = v.strip()
        else:
            raise HttpError("too many headers")
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
        writer.close()
        raise HttpError(f"reading the answer failed: {e}") from None
    except BaseException:
        writer.close()
        raise
    return Response(status, got, reader, writer)
