"""``E2BBackend``: the same ``Sandbox`` API over the official E2B SDK (the optional extra
``sandboxio[e2b]``). It talks to whatever the SDK is pointed at: E2B's cloud, or
``sandboxio serve`` with ``[e2b] enabled = true`` (``E2B_API_URL`` / ``E2B_SANDBOX_URL``),
where the server's chain decides every operation and writes the audit trail.

Each call is one E2B SDK call; the answer is turned into the outcome this package reads
(a record and a result). E2B gives no operation ids or costs, so records carry none and
``costs()`` is not supported (no ``COST_REPORTING``, as the seed says). A refusal by a
sandboxio server (``sandboxio[SBX_Ennnn]: denied at <layer>: <reason>``) becomes
``OperationDenied`` with that code and layer."""

from __future__ import annotations

import base64
import codecs
import json
import re
import shlex
import time
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from sandboxio._redaction import redact
from sandboxio.audit import AuditConfig
from sandboxio.backends.base import Backend, Session
from sandboxio.capability import Capability
from sandboxio.errors import (
    E_BACKEND_UNAVAILABLE,
    CapabilityNotSupported,
    InvalidArgument,
    SandboxioError,
)

_REFUSAL = re.compile(r"sandboxio\[(SBX_E\d{4})\]: (?:denied at (\w[\w ]*?): )?(.*)", re.S)
_APPROVAL = re.compile(r"approval_id=([\w-]+)")

# What `run_code` runs for each language, as one command (E2B's base SDK has no kernel).
_INTERPRETERS = {"python": ["python3", "-c"], "node": ["node", "-e"], "bash": ["bash", "-c"]}


def _sdk() -> Any:
    try:
        import e2b
    except ImportError:
        raise CapabilityNotSupported(
            "the e2b backend needs the E2B SDK: pip install 'sandboxio[e2b]'"
        ) from None
    return e2b


class E2BBackend(Backend):
    """``E2BBackend(api_key=None, template="base", timeout=300)``; other keyword arguments
    go to ``AsyncSandbox.create`` (e.g. ``api_url``, ``sandbox_url``, ``domain``)."""

    name = "e2b"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        template: str = "base",
        timeout: int = 300,
        audit: AuditConfig | None = None,
        **sdk_options: Any,
    ) -> None:
        _sdk()
        if timeout <= 0:
            raise InvalidArgument(f"timeout `{timeout}` must be a positive number of seconds")
        self.template = template
        self.timeout = timeout
        self._opts = dict(sdk_options)
        if api_key is not None:
            self._opts["api_key"] = api_key
        self.audit = audit if audit is not None else AuditConfig()
        if len(self.audit.sinks) > 1 or type(self.audit.sinks[0]).__name__ != "NoopSink":
            raise InvalidArgument(
                "the e2b backend writes no audit events here; a sandboxio server behind it writes the trail"
            )

    @property
    def capabilities(self) -> Capability:
        return Capability.EXEC | Capability.RUN_CODE | Capability.FILESYSTEM

    async def open_session(
        self,
        *,
        tier: str | None,
        secrets: Sequence[str],
        agent: str | None,
        labels: Mapping[str, str],
    ) -> Session:
        if tier is not None:
            raise InvalidArgument("the e2b backend takes no tier: the template decides")
        e2b = _sdk()
        metadata = dict(labels)
        if agent:
            metadata["agent"] = agent
        try:
            sbx = await e2b.AsyncSandbox.create(
                template=self.template, timeout=self.timeout, metadata=metadata, **self._opts
            )
        except Exception as e:  # noqa: BLE001 - every SDK failure becomes a coded error
            raise _error(e, "creating a sandbox") from None
        return _E2BSession(sbx)

    def __repr__(self) -> str:
        return f"<E2BBackend template={self.template} caps={self.capabilities.names()}>"


class _Recorder:
    """In place of the SDK command handle's UTF-8 decoder of one output stream: keeps
    the bytes as they came, and decodes them as the SDK did (for its own ``str``)."""

    def __init__(self) -> None:
        self.raw = bytearray()
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def decode(self, data: bytes, final: bool = False) -> str:
        self.raw += data
        return self._text.decode(data, final)

    def reset(self) -> None:
        self._text.reset()


def _recorders(handle: Any) -> tuple[_Recorder, _Recorder]:
    """The output bytes of a command the SDK started (``commands.run(background=True)``,
    whose handle has not read any event yet: nothing awaited since it was made). The
    SDK's result holds ``str`` decoded with replacement characters, not the bytes, so its
    two decoders are replaced by recorders."""
    for name in ("_stdout_decoder", "_stderr_decoder"):
        if not hasattr(handle.__dict__.get(name), "decode"):
            raise CapabilityNotSupported(
                "this E2B SDK's command handle has no output decoder to read the bytes from "
                "(sandboxio is tested with e2b 2.63)"
            )
    out, err = _Recorder(), _Recorder()
    handle._stdout_decoder, handle._stderr_decoder = out, err
    return out, err


def _output(result: dict[str, Any], key: str, raw: bytes) -> None:
    """``stdout``/``stderr`` of a result: the text, or base64 of bytes that are not UTF-8
    (``stdout_encoding``), as the server answers them."""
    try:
        result[key] = raw.decode("utf-8")
    except UnicodeDecodeError:
        result[key] = base64.b64encode(raw).decode("ascii")
        result[f"{key}_encoding"] = "base64"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _error(e: Exception, doing: str) -> SandboxioError:
    msg = redact(str(e))
    m = _REFUSAL.search(msg)
    code = m.group(1) if m else E_BACKEND_UNAVAILABLE
    return SandboxioError(f"{doing}: {msg}", code=code, error_class="internal")


class _E2BSession:
    def __init__(self, sbx: Any) -> None:
        self._sbx = sbx
        self._closed = False

    @property
    def id(self) -> str:
        return str(self._sbx.sandbox_id)

    @property
    def tier(self) -> str:
        return "e2b"

    @property
    def closed(self) -> bool:
        return self._closed

    def capabilities(self) -> int:
        return int((Capability.EXEC | Capability.RUN_CODE | Capability.FILESYSTEM).value)

    def _record(self, event: str, **kw: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "ts": _now(),
            "event": event,
            "tool_name": event,
            "operation_id": "",
            "sandbox_id": self.id,
            "session_id": self.id,
            "backend": "e2b",
            "verdict": "allow",
            "status": "ok",
            "layer": "sandbox",
        }
        rec.update(kw)
        return rec

    def _refused(self, event: str, e: Exception) -> str | None:
        """The outcome of an operation a sandboxio server refused, if it was one."""
        msg = redact(str(e))
        m = _REFUSAL.search(msg)
        if not m:
            return None
        code, layer, reason = m.group(1), m.group(2), m.group(3)
        approval = _APPROVAL.search(msg)
        rec = self._record(
            event,
            verdict="deny",
            status="denied",
            layer=(layer or ("approval" if approval else "gateway")).strip(),
            reason=reason.strip(),
            error_code=code,
            approval_id=approval.group(1) if approval else None,
        )
        return json.dumps({"record": rec, "result": None})

    @staticmethod
    def _options(options: str) -> dict[str, Any]:
        o = json.loads(options)
        unsupported = sorted(set(o) - {"env", "timeout_ms", "traceparent", "rationale"})
        if unsupported:
            raise InvalidArgument(f"the e2b backend does not take {', '.join(unsupported)}")
        return dict(o)

    async def _command(self, event: str, argv: Sequence[str], options: str) -> str:
        e2b = _sdk()
        o = self._options(options)
        timeout = (o["timeout_ms"] / 1000.0) if o.get("timeout_ms") else 60.0
        t0 = time.monotonic()
        try:
            handle = await self._sbx.commands.run(
                shlex.join(argv), envs=dict(o.get("env") or {}), timeout=timeout, background=True
            )
            try:
                out, err = _recorders(handle)
            except CapabilityNotSupported:
                await handle.kill()
                raise
            try:
                r = await handle.wait()
                exit_code, error = r.exit_code, r.error
            except e2b.CommandExitException as x:
                exit_code, error = x.exit_code, x.error
            except BaseException:
                await handle.disconnect()
                raise
        except SandboxioError:
            raise
        except Exception as x:  # noqa: BLE001
            refused = self._refused(event, x)
            if refused is not None:
                return refused
            raise _error(x, f"running {event}") from None
        ms = int((time.monotonic() - t0) * 1000)
        rec = self._record(
            event,
            argv=list(argv),
            exit_code=exit_code,
            duration_ms=ms,
            status="ok" if exit_code == 0 else "failed",
        )
        result: dict[str, Any] = {
            "sandbox_id": self.id,
            "duration_ms": ms,
            "timed_out": bool(error and "time limit" in str(error)),
        }
        _output(result, "stdout", bytes(out.raw))
        _output(result, "stderr", bytes(err.raw))
        return json.dumps({"record": rec, "result": result})

    async def exec(self, argv: Sequence[str], options: str) -> str:
        return await self._command("exec", argv, options)

    async def run_code(self, language: str, code: str, options: str) -> str:
        interp = _INTERPRETERS.get(language)
        if interp is None:
            raise InvalidArgument(f"language `{language}` is not one of python, node, bash")
        return await self._command("run_code", [*interp, code], options)

    async def _file(self, event: str, path: str, call: Any) -> str:
        try:
            output = await call()
        except Exception as x:  # noqa: BLE001
            refused = self._refused(event, x)
            if refused is not None:
                return refused
            e2b = _sdk()
            if isinstance(x, e2b.NotFoundException):
                rec = self._record(event, path=path, status="failed", reason=redact(str(x)))
                return json.dumps({"record": rec, "result": None})
            raise _error(x, f"{event} `{path}`") from None
        return json.dumps({"record": self._record(event, path=path), "result": None, "tool_output": output})

    async def read_file(self, path: str, traceparent: str | None) -> str:
        async def call() -> Any:
            import base64

            data = await self._sbx.files.read(path, format="bytes")
            return {"path": path, "content_base64": base64.b64encode(bytes(data)).decode()}

        return await self._file("file_read", path, call)

    async def list_files(self, path: str, traceparent: str | None) -> str:
        async def call() -> Any:
            entries = await self._sbx.files.list(path)
            return {
                "path": path,
                "entries": [
                    {"name": e.name, "is_dir": e.type is not None and e.type.value == "dir", "size": int(e.size or 0)}
                    for e in entries
                ],
            }

        return await self._file("file_read", path, call)

    async def write_file(self, path: str, content: bytes, traceparent: str | None) -> str:
        async def call() -> Any:
            await self._sbx.files.write(path, content)
            return {"path": path, "bytes": len(content)}

        return await self._file("file_write", path, call)

    async def delete_file(self, path: str, traceparent: str | None) -> str:
        async def call() -> Any:
            await self._sbx.files.remove(path)
            return {"path": path}

        return await self._file("file_delete", path, call)

    def stream(self, language: str | None, code: str | None, argv: Sequence[str] | None, options: str) -> Any:
        raise CapabilityNotSupported("the e2b backend does not stream output through this API")

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                await self._sbx.kill()
            except Exception:  # noqa: BLE001 - closing is best effort; the sandbox times out
                pass
