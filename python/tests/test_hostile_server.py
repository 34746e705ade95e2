"""ServerBackend against hostile servers (fakes on loopback, one per test): answers with
large chunks, endless bodies and lines, malformed answers, an endless approval wait, and
credentials where they do not belong. Whatever the server sends, a call ends in bounded
time and memory with a `SandboxioError` (`BackendUnavailable`, `SBX_E2104`) that names
what was wrong, and the API key is never shown."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from conftest import run
from sandboxio import BackendUnavailable, InvalidArgument, Sandbox, SandboxioError, ServerBackend

KEY = "sbxk_0123456789abcdef_" + "f" * 64
MIB = 1024 * 1024


class Fake:
    """A server on 127.0.0.1 whose every answer is `handler(request_line, headers, conn)`;
    it keeps the request lines and headers it was sent."""

    def __init__(self, handler: Callable[[str, dict[str, str], socket.socket], None]) -> None:
        self.handler = handler
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                d = conn.recv(65536)
                if not d:
                    return
                data += d
            head, _, rest = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
            length = int(headers.get("content-length", "0"))
            while len(rest) < length:
                d = conn.recv(65536)
                if not d:
                    break
                rest += d
            self.requests.append((lines[0], headers))
            self.handler(lines[0], headers, conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def fake() -> Iterator[Callable[..., Fake]]:
    made: list[Fake] = []

    def make(handler: Callable[[str, dict[str, str], socket.socket], None]) -> Fake:
        f = Fake(handler)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def answer(status: str, body: bytes, ctype: str = "application/json", extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
        + body
    )


CREATED = answer("201 Created", json.dumps({"id": "sbx1", "tier": "namespace"}).encode())


def on_create(rest: Callable[[str, dict[str, str], socket.socket], None]) -> Callable[[str, dict[str, str], socket.socket], None]:
    """A handler that creates sandbox `sbx1`, and answers everything else with `rest`."""

    def h(line: str, headers: dict[str, str], conn: socket.socket) -> None:
        if line.startswith("POST /v1/sandboxes "):
            conn.sendall(CREATED)
        elif line.startswith("DELETE "):
            conn.sendall(answer("204 No Content", b""))
        else:
            rest(line, headers, conn)

    return h


def assert_backend_error(e: BaseException, *words: str) -> None:
    assert isinstance(e, BackendUnavailable), repr(e)
    assert e.code == "SBX_E2104"
    for w in words:
        assert w in str(e), str(e)


# -- 8: chunks of any size ---------------------------------------------------------------


def test_a_chunk_larger_than_the_read_buffer_is_read_at_once(fake: Callable[..., Fake]) -> None:
    """One 5 MiB chunk (more than the 4 MiB the client buffers before it stops reading
    the socket): the whole answer is read as soon as it arrived, not after `timeout`."""
    body = b'{"id":"' + b"a" * (5 * MIB) + b'"}'

    def h(line: str, headers: dict[str, str], conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.sendall(b"%x\r\n" % len(body) + body + b"\r\n" + b"%x\r\n" % 3 + b"end\r\n0\r\n\r\n")

    f = fake(h)
    b = ServerBackend(f.url, api_key=KEY, timeout=8)
    t0 = time.monotonic()
    status, _, raw = run(b.call("GET", "/v1/anything"))
    assert time.monotonic() - t0 < 5
    assert status == 200 and raw == body + b"end"


def test_a_chunk_that_is_not_closed_by_crlf_is_an_error(fake: Callable[..., Fake]) -> None:
    def h(line: str, headers: dict[str, str], conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n")

    b = ServerBackend(fake(h).url, api_key=KEY, timeout=5)
    with pytest.raises(SandboxioError) as e:
        run(b.call("GET", "/v1/anything"))
    assert_backend_error(e.value, "chunk")


# -- 9: bounded answers and stream lines -------------------------------------------------


def _endless(total: int) -> Callable[[str, dict[str, str], socket.socket], None]:
    def h(line: str, headers: dict[str, str], conn: socket.socket) -> None:
        conn.sendall(b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n\r\n{"id":"')
        sent, piece = 0, b"a" * MIB
        while sent < total:
            conn.sendall(piece)
            sent += len(piece)

    return h


def test_an_endless_answer_is_cut_at_the_default_cap(fake: Callable[..., Fake]) -> None:
    """A body with no length that goes on (100 MiB here, or forever) ends the call at the
    default cap (64 MiB), with an error that says so, instead of reading it all."""
    b = ServerBackend(fake(_endless(100 * MIB)).url, api_key=KEY, timeout=30)
    with pytest.raises(SandboxioError) as e:
        run(Sandbox.create(b))
    assert_backend_error(e.value, "larger than", str(64 * MIB))


def test_the_answer_cap_can_be_set(fake: Callable[..., Fake]) -> None:
    b = ServerBackend(fake(_endless(8 * MIB)).url, api_key=KEY, timeout=30, max_answer_bytes=MIB)
    with pytest.raises(SandboxioError) as e:
        run(Sandbox.create(b))
    assert_backend_error(e.value, "larger than", str(MIB), "max_answer_bytes")
    with pytest.raises(InvalidArgument):
        ServerBackend("http://127.0.0.1:1", api_key=KEY, max_answer_bytes=0)


def test_an_endless_stream_line_is_cut_at_the_cap(fake: Callable[..., Fake]) -> None:
    def stream(line: str, headers: dict[str, str], conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b"x" * MIB
        for _ in range(16):
            conn.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        conn.sendall(b"0\r\n\r\n")

    b = ServerBackend(fake(on_create(stream)).url, api_key=KEY, timeout=30, max_answer_bytes=2 * MIB)

    async def main() -> None:
        async with await Sandbox.create(b) as sbx:
            async for _ in sbx.stream("print(1)"):
                pass

    with pytest.raises(SandboxioError) as e:
        run(main())
    assert_backend_error(e.value, "line", "larger than")


# -- 10: malformed answers are typed errors ----------------------------------------------


@pytest.mark.parametrize(
    "reply, words",
    [
        (answer("201 Created", b"[]"), ["not a JSON object"]),
        (answer("201 Created", b"{}"), ["`id`"]),
        (answer("201 Created", b'{"id": ["x"]}'), ["`id`"]),
        (answer("201 Created", b"<html>"), ["not JSON"]),
        (answer("307 Temporary Redirect", b"", extra="Location: http://127.0.0.2:1/steal\r\n"), ["307", "redirect"]),
        (b"HTTP/1.1 201 Created\r\nContent-Length: 12x\r\n\r\n{}", ["Content-Length"]),
        (b"HTTP/1.1 2x1 Created\r\nContent-Length: 2\r\n\r\n{}", ["status"]),
    ],
    ids=["list", "no-id", "id-not-a-string", "not-json", "redirect", "bad-length", "bad-status"],
)
def test_a_malformed_answer_to_create_is_a_typed_error(fake: Callable[..., Fake], reply: bytes, words: list[str]) -> None:
    f = fake(lambda line, headers, conn: conn.sendall(reply))
    with pytest.raises(SandboxioError) as e:
        run(Sandbox.create(ServerBackend(f.url, api_key=KEY, timeout=5)))
    assert_backend_error(e.value, *words)
    # A redirect is never followed.
    assert all(line.startswith("POST /v1/sandboxes ") for line, _ in f.requests)


RECORD = {"ts": "2025-01-01T00:00:00Z", "event": "exec", "verdict": "allow", "status": "ok", "layer": "sandbox"}


@pytest.mark.parametrize(
    "body",
    [
        b"[1, 2]",
        b'{"record": [1]}',
        b'{"record": {"event": "exec"}, "result": {}}',
        json.dumps({"record": {**RECORD, "ts": "yesterday"}, "result": {}}).encode(),
        json.dumps({"record": RECORD, "result": [1]}).encode(),
        json.dumps({"record": RECORD, "result": {"stdout": "%%", "stdout_encoding": "base64"}}).encode(),
        json.dumps({"record": RECORD, "result": {"duration_ms": "long"}}).encode(),
    ],
    ids=["list", "record-list", "record-no-ts", "record-bad-ts", "result-list", "bad-base64", "bad-duration"],
)
def test_a_malformed_answer_to_run_is_a_typed_error(fake: Callable[..., Fake], body: bytes) -> None:
    f = fake(on_create(lambda line, headers, conn: conn.sendall(answer("200 OK", body))))

    async def main() -> None:
        async with await Sandbox.create(ServerBackend(f.url, api_key=KEY, timeout=5)) as sbx:
            await sbx.run(["true"])

    with pytest.raises(SandboxioError) as e:
        run(main())
    assert_backend_error(e.value, "malformed")


@pytest.mark.parametrize(
    "line",
    [
        b"{not json\n",
        b"[1,2]\n",
        b'{"type": "stdout", "data": "%%", "encoding": "base64", "elapsed_us": 1}\n',
        b'{"type": "stdout", "data": "x", "elapsed_us": "soon"}\n',
        b'{"type": "error", "problem": [1]}\n',
        b'{"type": "result", "record": "r", "result": null}\n',
    ],
    ids=["not-json", "list", "bad-base64", "bad-elapsed", "problem-list", "record-string"],
)
def test_a_malformed_stream_line_is_a_typed_error(fake: Callable[..., Fake], line: bytes) -> None:
    def stream(request: str, headers: dict[str, str], conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.sendall(b"%x\r\n" % len(line) + line + b"\r\n0\r\n\r\n")

    f = fake(on_create(stream))

    async def main() -> None:
        async with await Sandbox.create(ServerBackend(f.url, api_key=KEY, timeout=5)) as sbx:
            async for _ in sbx.stream("print(1)"):
                pass

    with pytest.raises(SandboxioError) as e:
        run(main())
    assert_backend_error(e.value)
    assert "malformed" in str(e.value) or "not JSON" in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "body",
    [b'{"entries": 5}', b'{"entries": [1]}', b'{"entries": [{}]}', b'{"entries": [{"object_id": "x", "interval_start": "x", "cost_usd": "x"}]}'],
    ids=["not-a-list", "entry-not-an-object", "entry-empty", "entry-bad-values"],
)
def test_a_malformed_cost_report_is_a_typed_error(fake: Callable[..., Fake], body: bytes) -> None:
    from datetime import datetime, timezone

    f = fake(lambda line, headers, conn: conn.sendall(answer("200 OK", body)))
    with pytest.raises(SandboxioError) as e:
        run(ServerBackend(f.url, api_key=KEY, timeout=5).costs(since=datetime.now(timezone.utc)))
    assert_backend_error(e.value, "malformed")


@pytest.mark.parametrize("body", [b'{"entries": 5}', b'{"entries": [1]}', b'[]'], ids=["not-a-list", "entry", "list"])
def test_a_malformed_listing_is_a_typed_error(fake: Callable[..., Fake], body: bytes) -> None:
    f = fake(on_create(lambda line, headers, conn: conn.sendall(answer("200 OK", body))))

    async def main() -> None:
        async with await Sandbox.create(ServerBackend(f.url, api_key=KEY, timeout=5)) as sbx:
            await sbx.list_files()

    with pytest.raises(SandboxioError) as e:
        run(main())
    assert_backend_error(e.value, "malformed")


# -- 11: an approval wait has backoff and a deadline -------------------------------------


@pytest.mark.parametrize("poll", [b"202 Accepted", b"408 Request Timeout"])
def test_an_approval_wait_answered_at_once_backs_off_and_ends_at_the_timeout(fake: Callable[..., Fake], poll: bytes) -> None:
    """A server that answers every operation and every poll at once with 202 (or 408):
    the client waits between polls and gives up at its `timeout`."""
    wait = json.dumps({"approval_id": "apr_x", "wait": "/v1/approvals/apr_x/outcome?timeout=60"}).encode()

    def h(line: str, headers: dict[str, str], conn: socket.socket) -> None:
        if line.startswith("POST /v1/sandboxes/sbx1/exec"):
            conn.sendall(answer("202 Accepted", wait))
        else:
            conn.sendall(answer(poll.decode(), wait if poll.startswith(b"202") else b"{}"))

    f = fake(on_create(h))
    b = ServerBackend(f.url, api_key=KEY, timeout=2)

    async def main() -> None:
        async with await Sandbox.create(b) as sbx:
            await asyncio.wait_for(sbx.run(["true"]), 20)

    t0 = time.monotonic()
    with pytest.raises(SandboxioError) as e:
        run(main())
    took = time.monotonic() - t0
    assert_backend_error(e.value, "approval", "2")
    assert took < 10, took
    polls = [line for line, _ in f.requests if "/outcome" in line]
    assert 1 <= len(polls) <= 20, len(polls)
    # Given up, the approval is withdrawn (a deny), so it does not run for no one.
    assert any(line.startswith("POST /v1/approvals/apr_x/deny") for line, _ in f.requests)


def test_an_approval_wait_path_from_the_server_cannot_inject_a_header(fake: Callable[..., Fake]) -> None:
    bad = json.dumps({"approval_id": "apr_x", "wait": "/x HTTP/1.1\r\nX-Evil: 1\r\n\r\nGET /y"}).encode()

    def h(line: str, headers: dict[str, str], conn: socket.socket) -> None:
        if line.startswith("POST /v1/sandboxes/sbx1/exec"):
            conn.sendall(answer("202 Accepted", bad))
        else:
            conn.sendall(answer("200 OK", json.dumps({"record": {**RECORD, "decision": "allow"}, "result": {}}).encode()))

    f = fake(on_create(h))

    async def main() -> None:
        async with await Sandbox.create(ServerBackend(f.url, api_key=KEY, timeout=5)) as sbx:
            await sbx.run(["true"])

    with pytest.raises(SandboxioError) as e:
        run(main())
    assert_backend_error(e.value, "wait")
    assert not any("x-evil" in headers for _, headers in f.requests)


# -- 12: plain http only to loopback, no credentials in the url, the key never shown -----


@pytest.mark.parametrize("url", ["http://203.0.113.7:8700", "http://sandboxio.example:8700", "http://10.0.0.1"])
def test_plain_http_to_another_host_is_refused_unless_allowed(url: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        ServerBackend(url, api_key=KEY)
    assert "https" in str(e.value) and "allow_insecure_http" in str(e.value)
    assert KEY not in str(e.value)
    ServerBackend(url, api_key=KEY, allow_insecure_http=True)
    ServerBackend(url.replace("http://", "https://"), api_key=KEY)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8700", "http://127.9.8.7", "http://localhost:1", "http://[::1]:8700"])
def test_plain_http_to_loopback_is_accepted(url: str) -> None:
    ServerBackend(url, api_key=KEY)


@pytest.mark.parametrize(
    "url",
    [
        "http://user:sbxk_0123456789abcdef_SECRETSECRET@127.0.0.1:8700",
        "https://sbxk_0123456789abcdef_SECRETSECRET@sandboxio.example",
        "http://:SECRETSECRET@127.0.0.1:8700",
    ],
)
def test_credentials_in_the_url_are_refused_and_never_shown(url: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        ServerBackend(url, api_key=KEY)
    assert "SECRETSECRET" not in str(e.value) and "SECRETSECRET" not in repr(e.value)
    assert "api_key" in str(e.value)


@pytest.mark.parametrize("key", ["sbxk_a\r\nX-Evil: 1", "sbxk_a\nb", "sbxk a"])
def test_a_key_that_could_break_the_header_is_refused(key: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        ServerBackend("http://127.0.0.1:1", api_key=key)
    assert key not in str(e.value)


def test_the_key_is_never_in_reprs_errors_or_logs(fake: Callable[..., Fake], caplog: Any) -> None:
    """A server that echoes the request's Authorization header in its problems: the key is
    in no repr, no error and no log record."""

    def h(line: str, headers: dict[str, str], conn: socket.socket) -> None:
        echo = json.dumps({"code": "SBX_E1899", "title": "no", "detail": f"you sent {headers.get('authorization')}"}).encode()
        conn.sendall(answer("500 Internal Server Error", echo))

    f = fake(h)
    b = ServerBackend(f.url, api_key=KEY, timeout=5)
    assert KEY not in repr(b) and KEY not in str(vars(b).get("url"))
    caplog.set_level(logging.DEBUG, logger="sandboxio")
    with pytest.raises(SandboxioError) as e:
        run(Sandbox.create(b))
    assert KEY not in str(e.value) and KEY not in repr(e.value)
    assert "[REDACTED]" in str(e.value)
    with pytest.raises(SandboxioError) as e2:
        run(b.outcome("POST", "/v1/sandboxes/x/exec", json_body={"argv": ["true"]}))
    assert KEY not in str(e2.value)
    assert KEY not in caplog.text
    # What was sent: the host and port as Host, the key only in Authorization.
    assert all(headers["host"] == f.url.removeprefix("http://") for _, headers in f.requests)


def test_a_timeout_error_shows_no_key(fake: Callable[..., Fake]) -> None:
    f = fake(lambda line, headers, conn: time.sleep(3))
    b = ServerBackend(f.url, api_key=KEY, timeout=0.5)
    with pytest.raises(SandboxioError) as e:
        run(Sandbox.create(b))
    assert KEY not in str(e.value) and "did not answer" in str(e.value)
