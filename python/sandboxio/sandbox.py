"""``Sandbox``: an agent's workspace behind the gateway. Every method is one operation
through the whole chain (kill switch, policy, rate limit, budget, approval, sandbox,
record) and leaves exactly one record, rendered to the audit sinks and to an
``execute_tool`` span under the caller's current span.

    async with await Sandbox.create() as sbx:
        r = await sbx.run_code("print(1 + 1)")
        await sbx.write_file("data.csv", b"a,b\\n1,2\\n")
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
import math
import os
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Sequence

from sandboxio import _native, _outcome, _redaction, otel
from sandboxio._log import set_debug
from sandboxio.backends.base import Answer, Backend, Session, StreamHandle
from sandboxio.capability import Capability
from sandboxio.errors import (
    E_SECRET_IN_BINARY,
    BackendUnavailable,
    InvalidArgument,
    OperationFailed,
    SandboxClosed,
    SandboxioError,
    from_native,
)
from sandboxio.events import AuditEvent
from sandboxio.results import ExecResult, FileEntry, StreamEvent

logger = logging.getLogger("sandboxio")

_default_backend: Backend | None = None


def default_backend() -> Backend:
    """A ``LocalBackend`` with the default state directory, made on first use."""
    global _default_backend
    if _default_backend is None:
        from sandboxio.backends.local import LocalBackend

        _default_backend = LocalBackend()
    return _default_backend


def _stdin_wire(stdin: str | bytes | bytearray | memoryview | None) -> tuple[str | None, str | None]:
    """Standard input as the options carry it: text as it is, bytes as base64 with
    ``stdin_encoding`` (the flag the answers' output uses)."""
    if stdin is None or isinstance(stdin, str):
        return stdin, None
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(stdin)).decode("ascii"), "base64"
    raise InvalidArgument(f"stdin must be str or bytes, not {type(stdin).__name__}")


# How long a cancelled operation's caller waits for the operation to end (its program
# killed, its record written, its reservation released) before ``CancelledError`` goes on
# anyway: what could take longer is a wait for an approval, which the kill does not end.
_SETTLE_S = 5.0


async def _settle(session: Session) -> None:
    """After an operation's awaitable was cancelled: waits (bounded) until the backend has
    ended it, so that the next operation sees its record and its budget released."""
    settle: Callable[[], Awaitable[None]] | None = getattr(session, "settle", None)
    if settle is None:
        return
    await asyncio.wait([asyncio.ensure_future(settle())], timeout=_SETTLE_S)


# The largest timeout the options carry (in ms, a u64 in the gateway): 100 years.
_MAX_TIMEOUT_MS = 100 * 365 * 24 * 3600 * 1000


def _seconds_ms(seconds: float | None) -> int | None:
    """A ``timeout=`` in seconds as whole milliseconds, rounded to the nearest and at least
    1 (a timeout under 1 ms is 1 ms, never none). Not a finite positive number of seconds
    (a string, ``nan``, ``inf``, ``True``, 0 or less): ``InvalidArgument``."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidArgument(f"timeout must be a number of seconds, not {type(seconds).__name__} `{seconds!r}`")
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"timeout must be a positive, finite number of seconds, got `{seconds}`")
    ms = max(1, round(seconds * 1000))
    if ms > _MAX_TIMEOUT_MS:
        raise InvalidArgument(f"timeout `{seconds}` s is longer than the largest one taken (100 years)")
    return ms


def _content(data: Any) -> bytes:
    """``write_file``'s data: text (UTF-8) or bytes-like; anything else (an int, which
    ``bytes()`` would make that many NUL bytes, a list of ints) is ``InvalidArgument``."""
    if isinstance(data, str):
        return _utf8(data, "the file's text")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgument(f"write_file takes str or bytes, not {type(data).__name__}")


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgument(f"{what} is not valid Unicode text (it holds a lone surrogate): {e.reason}") from None


def _argv(cmd: Any) -> list[str]:
    """``run``'s command: a string for ``sh -c``, or a sequence of arguments (each made a
    string). Bytes, ``None`` or a non-sequence is ``InvalidArgument``, the same with
    every backend."""
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    if isinstance(cmd, (bytes, bytearray, memoryview)) or not isinstance(cmd, Sequence):
        raise InvalidArgument(f"a command is a str (for `sh -c`) or a sequence of str, not {type(cmd).__name__}")
    argv = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in cmd]
    for a in argv:
        if isinstance(a, bool) or not isinstance(a, (str, int, float)):
            raise InvalidArgument(f"a command's arguments are str, not {type(a).__name__}")
    return [str(a) for a in argv]


class Sandbox:
    """Create with ``await Sandbox.create(...)`` (or ``backend.create(...)``)."""

    def __init__(self, backend: Backend, session: Session, secrets: Sequence[str]) -> None:
        self._backend = backend
        self._s = session
        self._secrets = tuple(secrets)
        _redaction.register(self._secrets)
        self._released = False

    @classmethod
    async def create(
        cls,
        backend: Backend | None = None,
        *,
        tier: str | None = None,
        secrets: Sequence[str] = (),
        agent: str | None = None,
        labels: Mapping[str, str] | None = None,
        debug: bool | None = None,
    ) -> Sandbox:
        """Opens a sandbox. ``secrets`` are redacted, by value, from everything sandboxio
        writes (records, events, spans, logs, errors, reprs); ``labels`` go to the
        records and the cost ledger."""
        set_debug(debug)
        b = backend if backend is not None else default_backend()
        session = await b.open_session(tier=tier, secrets=list(secrets), agent=agent, labels=dict(labels or {}))
        sbx = cls(b, session, secrets)
        if logger.isEnabledFor(logging.DEBUG):
            # The text, not the object: a handler that keeps records must not keep the
            # sandbox (and its native session) alive until the interpreter shuts down.
            logger.debug("sandbox opened: %s", repr(sbx))
        return sbx

    # -- identity -------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._s.id

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def tier(self) -> str:
        return self._s.tier

    @property
    def capabilities(self) -> Capability:
        return Capability(self._s.capabilities()) & self._backend.capabilities

    @property
    def closed(self) -> bool:
        return self._s.closed

    def __repr__(self) -> str:
        state = "closed" if self.closed else "running"
        text = f"<Sandbox {self._backend.name}:{self.id[:4]}… {self.tier} {state} caps={self.capabilities.names()}>"
        return _redaction.redact(text)

    # -- operations ------------------------------------------------------------------

    def _options(self, span: Any, **kw: Any) -> str:
        opts = {k: v for k, v in kw.items() if v is not None and v != {}}
        tp = otel.traceparent(span)
        if tp is not None:
            opts["traceparent"] = tp
        # Most calls set nothing: `json.dumps` took ~28 us of the 42 this method took on
        # the event loop's thread right after it waited for the previous operation.
        return json.dumps(opts) if opts else "{}"

    async def _op(self, tool: str, call: Callable[..., Awaitable[Answer]], *args: Any) -> _outcome.Outcome:
        """One operation: ``call(span, *args)`` answers the session's awaitable."""
        if self.closed:
            raise SandboxClosed()
        capture = self._backend.audit.capture_code
        with otel.operation_span(tool, self._backend.name) as span:
            try:
                answer = await call(span, *args)
            except UnicodeEncodeError as e:
                # A lone surrogate in code, an argument, a path or the environment: the
                # in-process backend cannot pass it on (the HTTP server answers SBX_E1805,
                # `InvalidArgument` too).
                bad = InvalidArgument(f"{tool}: a text argument is not valid Unicode (it holds a lone surrogate): {e.reason}")
                otel.finish(span, None, capture_code=capture, error=bad.code)
                raise bad from None
            except asyncio.CancelledError:
                # The backend fired the operation's cancel token and lets it run to its
                # record; the caller's next operation must find it ended.
                await _settle(self._s)
                raise
            except _native.NativeError as e:
                err = from_native(e)
                otel.finish(span, None, capture_code=capture, error=err.code)
                raise err from None
            except SandboxioError as e:
                otel.finish(span, None, capture_code=capture, error=e.code)
                raise
            # The in-process backend answers the values themselves; the others, JSON.
            if type(answer) is _outcome.Outcome:
                out = answer
            else:
                out = _outcome.parse(str(answer), capture_code=capture)
            try:
                _outcome.check(out)
            except SandboxioError as e:
                otel.finish(span, out.record, capture_code=capture, error=e.code)
                raise
            if span is not None and span.is_recording():
                otel.finish(span, out.record, capture_code=capture)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "operation %s %s: %s at %s in %d ms",
                out.record.operation_id,
                out.record.event,
                out.record.status,
                out.record.layer,
                out.record.duration_ms,
            )
        return out

    def _exec_result(self, out: _outcome.Outcome) -> ExecResult:
        r = out.result
        if r is None:
            raise SandboxioError(f"operation {out.record.operation_id} answered no result", code="SBX_E2105")
        if isinstance(r, ExecResult):  # made in process (`python/src/answer.rs`)
            return r
        try:
            return ExecResult.from_outcome(r, out.record)
        except _outcome.MALFORMED as e:
            raise _outcome.malformed("its result", e) from None

    async def run(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        memory_bytes: int | None = None,
        rationale: str | None = None,
    ) -> ExecResult:
        """Runs a command: a string goes to ``sh -c``, a sequence is the argv. ``stdin`` is
        text or bytes (any bytes, passed exactly)."""
        argv = _argv(cmd)
        if not argv:
            raise InvalidArgument("a command needs at least a program name")

        def call(span: Any) -> Awaitable[Answer]:
            text, encoding = _stdin_wire(stdin)
            opts = self._options(
                span, env=dict(env or {}), stdin=text, stdin_encoding=encoding, timeout_ms=_seconds_ms(timeout),
                memory_bytes=memory_bytes, rationale=rationale,
            )
            return self._s.exec(argv, opts)

        return self._exec_result(await self._op("exec", call))

    async def run_code(
        self,
        code: str,
        *,
        language: str = "python",
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        memory_bytes: int | None = None,
        env_allowlist: Sequence[str] | None = None,
        input_dir: str | os.PathLike[str] | None = None,
        output_dir: str | os.PathLike[str] | None = None,
        network: bool = False,
        rationale: str | None = None,
    ) -> ExecResult:
        """Runs code (``python``, ``node`` or ``bash``). The program reads
        ``$SANDBOX_INPUT`` (the workspace, or ``input_dir``, read-only) and writes
        ``$SANDBOX_OUTPUT`` (copied back to the workspace, or to ``output_dir``).
        ``network=True`` asks for full network access, which policy must allow."""
        if (
            not env and stdin is None and timeout is None and memory_bytes is None and rationale is None
            and env_allowlist is None and input_dir is None and output_dir is None and not network
        ):
            # Nothing set, the common call: no keyword call of `_options` to filter them
            # (the event loop's thread runs this cold, right after it woke for the
            # previous operation), and no closure, whose cells this function made on
            # every call.
            return self._exec_result(await self._op("run_code", self._run_code_plain, language, code))
        given = {
            "env": env, "stdin": stdin, "timeout": timeout, "memory_bytes": memory_bytes, "rationale": rationale,
            "env_allowlist": env_allowlist, "input_dir": input_dir, "output_dir": output_dir, "network": network,
        }
        return self._exec_result(await self._op("run_code", self._run_code_options, language, code, given))

    def _run_code_plain(self, span: Any, language: str, code: str) -> Awaitable[Answer]:
        """``run_code`` with no option set: the options are the span's traceparent at most."""
        tp = otel.traceparent(span)
        return self._s.run_code(language, code, "{}" if tp is None else json.dumps({"traceparent": tp}))

    def _run_code_options(self, span: Any, language: str, code: str, given: dict[str, Any]) -> Awaitable[Answer]:
        env, env_allowlist = given["env"], given["env_allowlist"]
        input_dir, output_dir = given["input_dir"], given["output_dir"]
        text, encoding = _stdin_wire(given["stdin"])
        opts = self._options(
            span, env=dict(env or {}), stdin=text, stdin_encoding=encoding, timeout_ms=_seconds_ms(given["timeout"]),
            memory_bytes=given["memory_bytes"], rationale=given["rationale"],
            env_allowlist=list(env_allowlist) if env_allowlist is not None else None,
            input_dir=os.fspath(input_dir) if input_dir is not None else None,
            output_dir=os.fspath(output_dir) if output_dir is not None else None,
            network={"mode": "full"} if given["network"] else None,
        )
        return self._s.run_code(language, code, opts)

    async def stream(
        self,
        code: str | None = None,
        *,
        cmd: str | Sequence[str] | None = None,
        language: str = "python",
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Yields output while the program runs, then its exit; one record in all."""
        if (code is None) == (cmd is None):
            raise InvalidArgument("stream needs either `code` or `cmd`")
        argv = None if cmd is None else _argv(cmd)
        self._backend.require(Capability.STREAM, "streaming output")
        if self.closed:
            raise SandboxClosed()
        capture = self._backend.audit.capture_code
        with otel.operation_span("exec" if argv else "run_code", self._backend.name) as span:
            opts = self._options(span, env=dict(env or {}), timeout_ms=_seconds_ms(timeout))
            h: StreamHandle | None = None
            ended = False
            try:
                h = self._s.stream(language if argv is None else None, code, argv, opts)
                await h.start()
                exit_ev: StreamEvent | None = None
                while True:
                    raw = await h.next()
                    if raw is None:
                        break
                    try:
                        ev = _stream_event(json.loads(raw))
                    except _outcome.MALFORMED as e:
                        raise _outcome.malformed("a stream event", e) from None
                    if ev.kind == "exit":
                        # Yielded once the outcome says what the output events left out.
                        exit_ev = ev
                        continue
                    yield ev
                ended = True
                failed: BaseException | None = None
                try:
                    out = _outcome.parse(await h.outcome(), capture_code=capture)
                except (_native.NativeError, SandboxioError) as e:
                    failed = e
                if exit_ev is not None and failed is None:
                    try:
                        exit_ev = _exit_event(exit_ev, out.result)
                    except _outcome.MALFORMED as e:
                        failed = _outcome.malformed("its result", e)
                if exit_ev is not None:
                    yield exit_ev
                if failed is not None:
                    raise failed
            except _native.NativeError as e:
                err = from_native(e)
                otel.finish(span, None, capture_code=capture, error=err.code)
                raise err from None
            finally:
                if not ended and h is not None:
                    # Closed early (``break``, ``aclose()``) or the task was cancelled: the
                    # program must not outlive the iterator.
                    await h.cancel()
            try:
                _outcome.check(out)
            except SandboxioError as e:
                otel.finish(span, out.record, capture_code=capture, error=e.code)
                raise
            otel.finish(span, out.record, capture_code=capture)

    async def read_file(self, path: str) -> bytes:
        def call(span: Any) -> Awaitable[Answer]:
            return self._s.read_file(path, otel.traceparent(span))

        out = await self._op("file_read", call)
        v = out.tool_output or {}
        if "entries" in v:
            raise InvalidArgument(_redaction.redact(f"`{path}` is a directory; use list_files"))
        if "content_base64" in v:
            return _file_bytes(path, str(v["content_base64"]), out.record)
        return str(v.get("content", "")).encode()

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read_file(path)).decode(encoding)

    async def write_file(self, path: str, data: str | bytes) -> AuditEvent:
        content = _content(data)

        def call(span: Any) -> Awaitable[Answer]:
            return self._s.write_file(path, content, otel.traceparent(span))

        return (await self._op("file_write", call)).record

    async def list_files(self, path: str = ".") -> list[FileEntry]:
        def call(span: Any) -> Awaitable[Answer]:
            return self._s.list_files(path, otel.traceparent(span))

        out = await self._op("file_list", call)
        v = out.tool_output or {}
        if "entries" not in v:
            raise InvalidArgument(_redaction.redact(f"`{path}` is a file; use read_file"))
        try:
            return [FileEntry(str(e["name"]), bool(e["is_dir"]), int(e.get("size", 0))) for e in v["entries"]]
        except _outcome.MALFORMED as e:
            raise _outcome.malformed("a listing's entry", e) from None

    async def delete_file(self, path: str) -> AuditEvent:
        def call(span: Any) -> Awaitable[Answer]:
            return self._s.delete_file(path, otel.traceparent(span))

        return (await self._op("file_delete", call)).record

    # -- lifetime --------------------------------------------------------------------

    async def close(self) -> None:
        """Ends the sandbox and removes its workspace. Idempotent."""
        if not self._released:
            self._released = True
            await self._s.aclose()
            _redaction.unregister(self._secrets)

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __del__(self) -> None:
        if not getattr(self, "_released", True):
            _redaction.unregister(self._secrets)


def _file_bytes(path: str, text: str, record: AuditEvent) -> bytes:
    """A binary file's content from its base64 answer, strictly: the answer is redacted as
    text, so a secret in the bytes became a marker inside the base64, which no decoding
    turns back into the file's bytes. That content is refused with ``SBX_E2107`` rather
    than returned garbled (or as a bare ``binascii.Error``)."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    if "[REDACTED" in text:
        raise OperationFailed(
            _redaction.redact(
                f"`{path}` is binary and holds one of this sandbox's secrets, which cannot be "
                "redacted from binary content, so it is not returned; read it as a program's "
                f"output instead (`run('cat \"$SANDBOX_INPUT/{path}\"')`, whose bytes are "
                "redacted) or keep the secret out of the file"
            ),
            code=E_SECRET_IN_BINARY,
            record=record,
        )
    raise BackendUnavailable(
        _redaction.redact(f"the content of `{path}` was answered as base64 that does not decode"),
    )


def _exit_event(ev: StreamEvent, result: Any) -> StreamEvent:
    """The ``exit`` event with what the operation's result says of the output (truncated,
    bytes written in all) and of a timeout."""
    if isinstance(result, ExecResult):
        r: Mapping[str, Any] = {
            "stdout_truncated": result.stdout_truncated, "stderr_truncated": result.stderr_truncated,
            "stdout_bytes": result.stdout_bytes, "stderr_bytes": result.stderr_bytes, "timed_out": result.timed_out,
        }
    elif isinstance(result, Mapping):
        r = result
    else:
        return ev
    return dataclasses.replace(
        ev,
        stdout_truncated=bool(r.get("stdout_truncated")),
        stderr_truncated=bool(r.get("stderr_truncated")),
        stdout_bytes=int(r.get("stdout_bytes") or 0),
        stderr_bytes=int(r.get("stderr_bytes") or 0),
        timed_out=bool(r.get("timed_out")),
    )


def _stream_event(d: Mapping[str, Any]) -> StreamEvent:
    """One event of the wire form both backends send (`ExecEvent`): ``{"type": "stdout" |
    "stderr", "data", "encoding"?, "elapsed_us"}`` or ``{"type": "exit", "exit": {"code" |
    "signal"}, "elapsed_us"}``."""
    kind = d.get("type")
    if kind == "exit":
        ex = d.get("exit")
        code = ex.get("code") if isinstance(ex, dict) else None
        sig = ex.get("signal") if isinstance(ex, dict) else None
        return StreamEvent("exit", b"", int(d.get("elapsed_us", 0)), code, sig)
    raw = d.get("data", "")
    data = base64.b64decode(raw, validate=True) if d.get("encoding") == "base64" else str(raw).encode()
    return StreamEvent("stderr" if kind == "stderr" else "stdout", data, int(d.get("elapsed_us", 0)))
