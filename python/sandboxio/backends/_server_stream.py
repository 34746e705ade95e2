"""``Sandbox.stream`` over ``ServerBackend``: the server's streamed exec (NDJSON, one JSON
message a line: ``start``, ``stdout``/``stderr``, ``exit``, then ``result`` or ``error``;
``heartbeat`` while idle). Output events are yielded in the order the server read them,
bytes intact (base64 where not UTF-8). Closing the iterator early, or cancelling the task
that reads it, kills the command on the server (``DELETE`` of its process, then the
connection is closed): its whole process tree ends and its one record says cancelled.

A command that ends within the server's first 250 ms, or that waited for an approval, is
answered whole; its output is then yielded as one event per stream, then its exit."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from sandboxio._redaction import redact
from sandboxio.backends import _http
from sandboxio.errors import BackendUnavailable, SandboxioError

if TYPE_CHECKING:
    from sandboxio.backends.server import ServerBackend


def malformed(what: str) -> BackendUnavailable:
    """The error for a stream this client cannot read (``SBX_E2104``)."""
    return BackendUnavailable(redact(f"the server's answer is malformed: {what}"))

NDJSON = "application/x-ndjson"
# How long a cancellation waits for the server to confirm the kill.
CANCEL_WAIT_S = 10.0


def whole_events(outcome: str) -> list[str]:
    """The events of a command answered whole: its output, then its exit."""
    d = json.loads(outcome)
    r = d.get("result")
    if not isinstance(r, dict):
        return []
    out: list[str] = []
    for kind in ("stdout", "stderr"):
        data = r.get(kind) or ""
        if data:
            ev: dict[str, Any] = {"type": kind, "data": data, "elapsed_us": 0}
            if r.get(f"{kind}_encoding") == "base64":
                ev["encoding"] = "base64"
            out.append(json.dumps(ev))
    exit_ = r.get("exit")
    if isinstance(exit_, dict):
        out.append(json.dumps({"type": "exit", "exit": exit_, "elapsed_us": int(r.get("duration_ms") or 0) * 1000}))
    return out


class ServerStream:
    """One streamed exec or run_code (``StreamHandle``)."""

    def __init__(self, backend: ServerBackend, path: str, sandbox_path: str, body: dict[str, Any], traceparent: str | None) -> None:
        self._b = backend
        self._path = path
        self._sandbox_path = sandbox_path
        self._body = body
        self._tp = traceparent
        self._res: _http.Response | None = None
        self._buf = b""
        self._queued: list[str] = []
        self._outcome: str | None = None
        self._error: BaseException | None = None
        self._process: str | None = None
        self._ended = False

    async def start(self) -> None:
        headers = {
            "Authorization": f"Bearer {self._b._key}",  # noqa: SLF001 (same package)
            "Accept": NDJSON,
            "Content-Type": "application/json",
        }
        if self._tp:
            headers["traceparent"] = self._tp
        body = json.dumps(self._body).encode()
        started = time.monotonic()
        try:
            res = await _http.request(self._b.url, "POST", self._path, headers, body, connect_timeout=self._b.timeout)
        except _http.HttpError as e:
            raise self._b.unreachable(e, body) from None
        if 300 <= res.status < 400:
            res.close()
            raise self._b.redirected(res.status, res.headers)
        ctype = res.headers.get("content-type", "")
        if res.status == 200 and ctype.startswith(NDJSON):
            self._res = res
            self._process = res.headers.get("sandboxio-process-id")
            return
        # Answered whole: finished at once, asked for approval (202), or refused.
        try:
            raw = await res.read_all(self._b.max_answer_bytes)
        except _http.TooLarge:
            raise BackendUnavailable(
                redact(f"the answer of `{self._b.url}` is larger than {self._b.max_answer_bytes} bytes (`max_answer_bytes`)")
            ) from None
        except (_http.HttpError, OSError, asyncio.IncompleteReadError) as e:
            raise BackendUnavailable(redact(f"reading the answer of `{self._b.url}` failed: {e}")) from None
        finally:
            res.close()
        self._outcome = await self._b.settle(res.status, raw, started=started)
        self._queued = whole_events(self._outcome)
        self._ended = True

    async def _line(self) -> bytes | None:
        assert self._res is not None
        limit = self._b.max_answer_bytes
        while b"\n" not in self._buf:
            if len(self._buf) > limit:
                raise BackendUnavailable(
                    redact(
                        f"a line of the stream from `{self._b.url}` is larger than {limit} bytes "
                        "(`max_answer_bytes`): not read further"
                    )
                )
            try:
                chunk = await self._res.read_chunk()
            except (_http.HttpError, OSError, asyncio.IncompleteReadError) as e:
                raise BackendUnavailable(redact(f"the stream from `{self._b.url}` broke: {e}")) from None
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        if len(line) > limit:
            raise BackendUnavailable(
                redact(f"a line of the stream from `{self._b.url}` is larger than {limit} bytes (`max_answer_bytes`)")
            )
        return line

    async def next(self) -> str | None:
        if self._queued:
            return self._queued.pop(0)
        if self._ended or self._res is None:
            return None
        while True:
            line = await self._line()
            if line is None:
                self._finish()
                self._error = BackendUnavailable("the server's stream ended before the command's result")
                return None
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                self._finish()
                raise BackendUnavailable(redact(f"the server's stream sent a line that is not JSON: {line[:80]!r}")) from None
            if not isinstance(msg, dict):
                self._finish()
                raise malformed(f"a line of the stream is a JSON {type(msg).__name__}, not a JSON object")
            kind = msg.get("type")
            if kind in ("stdout", "stderr", "exit"):
                return line.decode()
            if kind == "start":
                self._process = str(msg.get("process_id") or self._process or "")
                continue
            if kind == "result":
                self._outcome = json.dumps({"record": msg.get("record"), "result": msg.get("result"), "tool_output": None})
            elif kind == "error":
                problem = msg.get("problem")
                try:
                    if not isinstance(problem, dict):
                        raise malformed("the stream's `error` has no `problem` object")
                    status = problem.get("status") or 500
                    if not isinstance(status, int):
                        raise malformed("the stream's `problem` has a `status` that is not a number")
                    self._outcome = self._b.answer(status, problem)
                except BaseException as e:  # a problem without a record: raised by outcome()
                    self._error = e
            else:  # heartbeat, or a message this client does not know
                continue
            self._finish()
            return None

    def _finish(self) -> None:
        self._ended = True
        if self._res is not None:
            self._res.close()

    async def outcome(self) -> str:
        while not self._ended:
            if await self.next() is None:
                break
        if self._error is not None:
            raise self._error
        if self._outcome is None:
            raise BackendUnavailable("the server's stream ended before the command's result")
        return self._outcome

    async def cancel(self) -> None:
        """Kills the command on the server if it is still running (idempotent)."""
        if self._ended:
            return
        self._ended = True
        try:
            if self._process:
                pid = urllib.parse.quote(self._process, safe="")
                await asyncio.wait_for(
                    self._b.call("DELETE", f"{self._sandbox_path}/processes/{pid}"),
                    CANCEL_WAIT_S,
                )
        except (asyncio.TimeoutError, SandboxioError):
            pass  # closing the connection below cancels it too
        finally:
            if self._res is not None:
                self._res.close()
