"""``ServerBackend``: an HTTP client of ``sandboxio serve`` (the API is in
crates/sandboxio-server/README.md). The server runs the chain; this backend sends each
operation with the API key and the caller's ``traceparent`` and answers the server's
record, so results, errors and spans look the same as with ``LocalBackend``."""

from __future__ import annotations

import asyncio
import atexit
import base64
import ipaddress
import json
import threading
import time
import urllib.parse
import urllib.request
import weakref
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Mapping, Sequence

from sandboxio import _redaction
from sandboxio._redaction import redact
from sandboxio.audit import AuditConfig
from sandboxio.backends import _http
from sandboxio.backends._server_stream import ServerStream
from sandboxio.backends.base import Backend, Session
from sandboxio.capability import Capability
from sandboxio.errors import (
    E_BACKEND_UNAVAILABLE,
    BackendUnavailable,
    CapabilityNotSupported,
    InvalidArgument,
    SandboxioError,
)
from sandboxio.events import CostEntry, _ts

# How long to wait for a person, per long-poll, when an operation asks for approval.
APPROVAL_POLL_S = 60
# The server's JSON body limit unless configured otherwise (`--json-limit`, per tenant
# `json_limit`; crates/sandboxio-server/README.md "Limits and operations").
DEFAULT_JSON_LIMIT = 1024 * 1024
# Its upload limit (`write_file`'s raw body) unless configured otherwise (`--upload-limit`).
DEFAULT_UPLOAD_LIMIT = 16 * 1024 * 1024
# How long a cancelled call waits for the server to take its approval's withdrawal.
WITHDRAW_WAIT_S = 5.0
# The server's code for a body larger than its limit (HTTP 413).
E_BODY_TOO_LARGE = "SBX_E1807"
# The most this client reads of an answer (every call but a file's download) and of one
# line of a streamed exec, unless `max_answer_bytes` says otherwise. An exec's answer holds
# its output, which the server captures up to the sandbox's `stdout_cap`/`stderr_cap` (1
# MiB each unless its configuration says otherwise): two such streams take at most about
# 13 MiB as JSON (6 bytes for each control character), far below this. Raise it for a
# server whose caps are above 16 MiB. A streamed exec's lines carry at most 64 KiB of
# output each.
DEFAULT_MAX_ANSWER = 64 * 1024 * 1024
# The most a file's download reads, unless `max_download_bytes` says otherwise: the
# server's ceiling for one file (`file_size`, 1 GiB unless `[limits.max]` raises it).
DEFAULT_MAX_DOWNLOAD = 1024 * 1024 * 1024
# How long the client waits before it polls again an approval whose poll answered at once
# (a long poll answers after up to 60 s): doubled at each quick answer, up to the maximum.
POLL_BACKOFF_MIN_S = 0.1
POLL_BACKOFF_MAX_S = 5.0


def _loopback(host: str) -> bool:
    """Whether ``host`` (a URL's hostname) can only be this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def malformed(what: str) -> BackendUnavailable:
    """The error for an answer this client cannot read (``SBX_E2104``)."""
    return BackendUnavailable(redact(f"the server's answer is malformed: {what}"))


def _why(e: BaseException) -> str:
    """An exception raised while reading an answer, as a short phrase."""
    text = str(e)
    if len(text) > 200:
        text = text[:200] + "..."
    return f"{type(e).__name__}: {text}"


class ServerBackend(Backend):
    """``ServerBackend("http://127.0.0.1:8700", api_key="sbxk_...")``."""

    name = "server"

    def __init__(
        self,
        url: str,
        *,
        api_key: str,
        audit: AuditConfig | None = None,
        timeout: float = 330.0,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD,
        allow_insecure_http: bool = False,
    ) -> None:
        # The url is not shown in these errors: it may hold a credential.
        if not isinstance(url, str):
            raise InvalidArgument("the server url must be a str: http(s)://host:port")
        try:
            parsed = urllib.parse.urlparse(url)
            host = parsed.hostname or ""
            _ = parsed.port
        except ValueError:
            raise InvalidArgument("the server url is not a valid URL: http(s)://host:port") from None
        if "@" in parsed.netloc:
            raise InvalidArgument(
                "the server url must not hold credentials (`user:password@`), which would be sent and "
                "shown with it: give the API key as `api_key=`"
            )
        if parsed.scheme not in ("http", "https") or not host or not parsed.netloc.isprintable() or " " in parsed.netloc:
            raise InvalidArgument(redact(f"server url `{url}` must be http(s)://host:port"))
        if parsed.scheme == "http" and not _loopback(host) and not allow_insecure_http:
            raise InvalidArgument(
                redact(
                    f"plain http to `{host}` would send the API key in cleartext: use https, or pass "
                    "allow_insecure_http=True (a network you trust, e.g. a private one)"
                )
            )
        if not isinstance(api_key, str) or not api_key:
            raise InvalidArgument("an API key is needed (`sandboxio keys create --tenant ...`)")
        if not (api_key.isascii() and api_key.isprintable()) or any(c.isspace() for c in api_key):
            raise InvalidArgument("the API key holds whitespace or a character an HTTP header cannot carry")
        for name, v in (("max_answer_bytes", max_answer_bytes), ("max_download_bytes", max_download_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidArgument(f"`{name}` must be a positive number of bytes, not `{v!r}`")
        self.url = url.rstrip("/")
        self._key = api_key
        self.max_answer_bytes = max_answer_bytes
        self.max_download_bytes = max_download_bytes
        # The key is redacted from every message, note, log record and repr of the package.
        _redaction.register([api_key])
        weakref.finalize(self, _redaction.unregister, [api_key])
        self.audit = audit if audit is not None else AuditConfig()
        if any(type(sink).__name__ != "NoopSink" for sink in self.audit.sinks):
            raise InvalidArgument(
                "the server writes the audit trail; Python sinks are not supported with ServerBackend"
            )
        self.timeout = timeout

    @property
    def capabilities(self) -> Capability:
        return (
            Capability.EXEC
            | Capability.RUN_CODE
            | Capability.FILESYSTEM
            | Capability.STREAM
            | Capability.RESOURCE_LIMITS
            | Capability.COST_REPORTING
        )

    # -- HTTP ---------------------------------------------------------------------------

    def _headers(self, content_type: str | None, traceparent: str | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self._key}", "Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if traceparent:
            headers["traceparent"] = traceparent
        return headers

    async def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        json_body: Any = None,
        traceparent: str | None = None,
        limit: int | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on its own connection (``_http``), read whole, up to ``limit`` bytes
        (``max_answer_bytes`` unless given). Cancelled (a task cancel,
        ``asyncio.wait_for``), it closes the connection at once, and the server cancels
        what it ran for it: a command is killed and recorded ``cancelled``. A redirect is
        not followed: it is an error."""
        bound = self.max_answer_bytes if limit is None else limit
        ctype = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            ctype = "application/json"
        elif body is not None:
            ctype = "application/octet-stream"
        headers = self._headers(ctype, traceparent)

        async def once() -> tuple[int, dict[str, str], bytes]:
            res = await _http.request(self.url, method, path, headers, body, connect_timeout=self.timeout)
            try:
                if 300 <= res.status < 400:
                    raise self.redirected(res.status, res.headers)
                return res.status, res.headers, await res.read_all(bound)
            finally:
                res.close()

        try:
            return await asyncio.wait_for(once(), self.timeout)
        except _http.TooLarge:
            knob = "max_answer_bytes" if limit is None else "max_download_bytes"
            raise BackendUnavailable(
                redact(f"the answer of `{self.url}` is larger than {bound} bytes (`{knob}`): not read further")
            ) from None
        except _http.HttpError as e:
            raise self.unreachable(e, body, DEFAULT_JSON_LIMIT if json_body is not None else DEFAULT_UPLOAD_LIMIT) from None
        except asyncio.TimeoutError:
            raise BackendUnavailable(redact(f"`{self.url}` did not answer within {self.timeout} s")) from None

    def redirected(self, status: int, headers: Mapping[str, str]) -> BackendUnavailable:
        where = headers.get("location", "")[:200]
        return BackendUnavailable(
            redact(f"`{self.url}` answered {status}, a redirect (to `{where}`), which is not followed")
        )

    def unreachable(self, e: _http.HttpError, body: bytes | None, limit: int = DEFAULT_JSON_LIMIT) -> SandboxioError:
        """The error for a request that failed. Its answer is read even when sending the
        body failed (the server refuses a body too large before reading all of it, and
        closes); only when none could be read, a body above the server's documented
        default ``limit`` whose sending was cut off is ``SBX_E1807`` all the same (the
        server's 413, lost with the connection). Anything else is ``BackendUnavailable``."""
        # Cut off while it was sent, or sent (into the socket's buffers) and then no answer
        # at all: the server refusing a body larger than it accepts looks like either,
        # depending on timing.
        if isinstance(e, (_http.SendFailed, _http.NoAnswer)) and body is not None and len(body) > limit:
            what = "JSON" if limit == DEFAULT_JSON_LIMIT else "upload"
            return InvalidArgument(
                redact(
                    f"the request to `{self.url}` ({len(body)} bytes) was cut off by the server while "
                    f"it was sent ({e}): larger than the server accepts (its {what} limit is "
                    f"{limit} bytes unless configured otherwise)"
                ),
                code=E_BODY_TOO_LARGE,
            )
        return BackendUnavailable(redact(f"cannot reach `{self.url}`: {e}"))

    async def outcome(self, method: str, path: str, **kw: Any) -> str:
        """An operation's answer as outcome JSON (waiting out an approval), or an error."""
        started = time.monotonic()
        status, _, raw = await self.call(method, path, **kw)
        return await self.settle(status, raw, started=started)

    async def settle(self, status: int, raw: bytes, *, started: float | None = None) -> str:
        """The outcome JSON of an answer, after waiting out an approval (202): polled
        (a long poll) until the operation's ``timeout`` from ``started`` has passed, with a
        growing pause after each poll the server answered at once. Cancelled while it
        waits, or given up, it withdraws the request (``withdraw``)."""
        deadline = (time.monotonic() if started is None else started) + self.timeout
        approval: str | None = None
        delay = POLL_BACKOFF_MIN_S
        try:
            while status == 202:
                d = _json(raw)
                if d.get("approval_id") is not None:
                    approval = str(d["approval_id"])
                wait = self._wait_path(d.get("wait"), approval)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._gave_up(approval)
                t0 = time.monotonic()
                try:
                    status, _, raw = await asyncio.wait_for(self.call("GET", wait), left)
                except asyncio.TimeoutError:
                    raise self._gave_up(approval) from None
                if status == 408 or (status == 202 and not raw):
                    status, raw = 202, b""
                if status == 202 and time.monotonic() - t0 < 1.0:
                    # Answered at once: not a long poll. Wait before the next one.
                    await asyncio.sleep(max(0.0, min(delay, deadline - time.monotonic())))
                    delay = min(delay * 2, POLL_BACKOFF_MAX_S)
                else:
                    delay = POLL_BACKOFF_MIN_S
        except BaseException:
            # Cancelled, given up, or the poll failed: nobody will use the outcome.
            if approval is not None:
                await self.withdraw(approval)
            raise
        return self.answer(status, _json(raw))

    @staticmethod
    def _wait_path(wait: Any, approval: str | None) -> str:
        """Where to poll an approval's outcome: the server's ``wait``, a path on it."""
        if wait is None:
            if approval is None:
                raise malformed("a 202 (approval) answer with neither `approval_id` nor `wait`")
            return f"/v1/approvals/{urllib.parse.quote(approval, safe='')}/outcome?timeout={APPROVAL_POLL_S}"
        if (
            not isinstance(wait, str)
            or not wait.startswith("/")
            or wait.startswith("//")
            or not (wait.isascii() and wait.isprintable())
            or " " in wait
        ):
            raise malformed("a 202 (approval) answer whose `wait` is not a path on this server")
        return wait

    def _gave_up(self, approval: str | None) -> BackendUnavailable:
        return BackendUnavailable(
            redact(
                f"no outcome from `{self.url}` within {self.timeout} s: the operation waited for "
                f"approval `{approval}`, now withdrawn (a longer `timeout` waits longer)"
            )
        )

    async def withdraw(self, approval_id: str) -> None:
        """Best effort, bounded: denies the pending approval of an operation whose caller
        was cancelled, so that nobody can approve it later and it runs for no one. The
        server's API has no withdrawal by the asker, so this is a ``deny`` recorded under
        the caller's key, which needs the ``approve`` scope; without it the approval stays
        pending until it is decided, expires, or its sandbox is closed."""
        path = f"/v1/approvals/{urllib.parse.quote(approval_id)}/deny"
        body = {"reason": "withdrawn: the caller cancelled the operation while it waited for approval"}
        try:
            await asyncio.wait_for(self.call("POST", path, json_body=body), WITHDRAW_WAIT_S)
        except (asyncio.TimeoutError, SandboxioError):
            pass

    @staticmethod
    def answer(status: int, d: dict[str, Any]) -> str:
        """The outcome JSON of a final answer; a problem without a record raises."""
        if status < 400 and "record" not in d:
            raise malformed(f"a {status} answer to an operation has no `record`")
        if status >= 400 or "record" not in d:
            if isinstance(d.get("record"), dict):
                return json.dumps({"record": d["record"], "result": None})
            code = str(d.get("code") or E_BACKEND_UNAVAILABLE)
            if status in (400, 413, 422):
                # Bad input, as LocalBackend says it: `except InvalidArgument` catches both.
                raise InvalidArgument(redact(f"server answered {status}: {d.get('detail') or d.get('title') or ''}"), code=code)
            klass = "usage" if status == 404 else "internal"
            raise SandboxioError(redact(f"server answered {status}: {d.get('detail') or d.get('title') or ''}"), code=code, error_class=klass)
        for k, v in (("record", d["record"]), ("result", d.get("result")), ("output", d.get("output"))):
            if not isinstance(v, dict) and (k == "record" or v is not None):
                raise malformed(f"the operation's `{k}` is not a JSON object")
        return json.dumps({"record": d["record"], "result": d.get("result"), "tool_output": d.get("output")})

    # -- Backend ------------------------------------------------------------------------

    async def open_session(
        self,
        *,
        tier: str | None,
        secrets: Sequence[str],
        agent: str | None,
        labels: Mapping[str, str],
    ) -> Session:
        # The server's API takes neither (`POST /v1/sandboxes` and the operations have no
        # field for a caller's secrets or agent): sent nowhere, they would be dropped in
        # silence, and the secrets would reach the server's trail and answers unredacted.
        if secrets:
            raise CapabilityNotSupported(
                "the `server` backend cannot take `secrets=`: the server's API has no way to "
                "receive them, so it could not redact them from its records and answers. "
                "Register them on the server instead (`[[secrets]]` in its configuration, or "
                "`sandboxio secrets set`), whose values it redacts from everything it writes"
            )
        if agent is not None:
            raise CapabilityNotSupported(
                "the `server` backend cannot take `agent=`: the server's API has no field for "
                "it; its records name the API key's tenant and key (mint a key per agent)"
            )
        body: dict[str, Any] = {"labels": dict(labels)}
        if tier is not None:
            body["tier"] = tier
        status, _, raw = await self.call("POST", "/v1/sandboxes", json_body=body)
        d = _json(raw)
        if status >= 400:
            code = str(d.get("code") or E_BACKEND_UNAVAILABLE)
            if status in (400, 422):
                raise InvalidArgument(redact(str(d.get("detail", ""))), code=code)
            raise SandboxioError(redact(f"creating a sandbox: {d.get('detail', status)}"), code=code, error_class="internal")
        sid = d.get("id")
        if status not in (200, 201) or not isinstance(sid, str) or not sid:
            raise malformed(f"creating a sandbox answered {status} without an `id` (a non-empty string)")
        return _ServerSession(self, sid, str(d.get("tier") or tier or "namespace"))

    async def costs(
        self,
        *,
        since: datetime,
        until: datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[CostEntry]:
        self.require(Capability.COST_REPORTING, "cost reporting")
        for t in (since, until):
            if t is not None and (not isinstance(t, datetime) or t.tzinfo is None):
                raise InvalidArgument("times must be timezone-aware (e.g. `datetime.now(timezone.utc)`)")
        secs = max(1, int((datetime.now(timezone.utc) - since).total_seconds()))
        status, _, raw = await self.call("GET", f"/v1/costs?since={secs}s")
        d = _json(raw)
        if status >= 400:
            raise SandboxioError(redact(str(d.get("detail", status))), code=str(d.get("code") or E_BACKEND_UNAVAILABLE))
        out = []
        for e in _entries(d, "the cost report"):
            try:
                entry = CostEntry(
                    object_id=str(e["object_id"]),
                    description=str(e.get("description", "")),
                    interval_start=_ts(e["interval_start"]),
                    cost_usd=Decimal(str(e["cost_usd"])),
                    labels={str(k): str(v) for k, v in (e.get("labels") or {}).items()},
                )
            except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as x:
                raise malformed(f"an entry of the cost report: {_why(x)}") from None
            if until is not None and entry.interval_start > until:
                continue
            if labels and any(entry.labels.get(k) != v for k, v in labels.items()):
                continue
            out.append(entry)
        return out

    def __repr__(self) -> str:
        return f"<ServerBackend {self.url} caps={self.capabilities.names()}>"


def _json(raw: bytes) -> dict[str, Any]:
    try:
        v = json.loads(raw or b"{}")
    except ValueError:
        raise BackendUnavailable("the server answered something that is not JSON") from None
    if not isinstance(v, dict):
        raise malformed(f"a JSON {type(v).__name__}, not a JSON object")
    return v


def _entries(d: dict[str, Any], what: str) -> list[dict[str, Any]]:
    """The ``entries`` of a listing or report: a list of objects."""
    entries = d.get("entries", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise malformed(f"the `entries` of {what} are not a list of JSON objects")
    return entries


# Sandboxes dropped without `close()`: each is deleted on the server, best effort, when its
# session is collected (in a daemon thread: a collection may run on the event loop's
# thread, which must not wait for the network) or, at the latest, at interpreter exit
# (synchronously, bounded), so none stays `running` on the server until its idle timeout,
# counting against the tenant's `max_sandboxes`.
_DROP_DELETE_S = 5.0
_drop_lock = threading.Lock()
_drop_live: set[weakref.finalize[Any, Any]] = set()
_drop_threads: set[threading.Thread] = set()
_exiting = False


def _delete_dropped(url: str, key: str, path: str) -> None:
    """Deletes a dropped sandbox (the finalizer of its session): never raises."""

    def run() -> None:
        req = urllib.request.Request(url + path, method="DELETE", headers={"Authorization": f"Bearer {key}"})
        try:
            urllib.request.urlopen(req, timeout=_DROP_DELETE_S).close()
        except Exception:  # noqa: BLE001 (best effort: the server's reaper ends it anyway)
            pass
        finally:
            with _drop_lock:
                _drop_threads.discard(threading.current_thread())

    if _exiting:
        run()
        return
    t = threading.Thread(target=run, name="sandboxio-drop-delete", daemon=True)
    with _drop_lock:
        _drop_threads.add(t)
    try:
        t.start()
    except RuntimeError:  # no new threads (the interpreter is finalising)
        with _drop_lock:
            _drop_threads.discard(t)


@atexit.register
def _delete_dropped_at_exit() -> None:
    """At exit: deletes the sandboxes still open (nothing can use them after), and waits
    (bounded) for the deletions already started."""
    global _exiting
    _exiting = True
    with _drop_lock:
        live = list(_drop_live)
        _drop_live.clear()
    for f in live:
        f()
    deadline = time.monotonic() + _DROP_DELETE_S
    with _drop_lock:
        threads = list(_drop_threads)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


class _ServerSession:
    def __init__(self, backend: ServerBackend, sid: str, tier: str) -> None:
        self._b = backend
        self._id = sid
        self._tier = tier
        self._closed = False
        # Not a bound method nor `self` in its arguments: it must not keep the session alive.
        self._drop = weakref.finalize(self, _delete_dropped, backend.url, backend._key, self._path(""))
        with _drop_lock:
            for f in [f for f in _drop_live if not f.alive]:
                _drop_live.discard(f)
            _drop_live.add(self._drop)

    @property
    def id(self) -> str:
        return self._id

    @property
    def tier(self) -> str:
        return self._tier

    @property
    def closed(self) -> bool:
        return self._closed

    def capabilities(self) -> int:
        return int(self._b.capabilities.value)

    def _path(self, tail: str) -> str:
        return f"/v1/sandboxes/{urllib.parse.quote(self._id)}{tail}"

    @staticmethod
    def _run_body(options: str) -> tuple[dict[str, Any], str | None]:
        o = json.loads(options)
        body: dict[str, Any] = {}
        for k in ("env", "stdin", "stdin_encoding", "rationale"):
            if o.get(k):
                body[k] = o[k]
        if o.get("timeout_ms"):
            body["timeout"] = f"{int(o['timeout_ms'])}ms"
        unsupported = sorted(set(o) - {"env", "stdin", "stdin_encoding", "rationale", "timeout_ms", "traceparent"})
        if unsupported:
            raise InvalidArgument(f"the server backend does not take {', '.join(unsupported)}")
        return body, o.get("traceparent")

    async def exec(self, argv: Sequence[str], options: str) -> str:
        body, tp = self._run_body(options)
        body["argv"] = list(argv)
        return await self._b.outcome("POST", self._path("/exec"), json_body=body, traceparent=tp)

    async def run_code(self, language: str, code: str, options: str) -> str:
        body, tp = self._run_body(options)
        body.update(language=language, code=code)
        return await self._b.outcome("POST", self._path("/run_code"), json_body=body, traceparent=tp)

    def _synthetic(self, event: str, headers: dict[str, str], output: Any) -> str:
        record = {
            "ts": datetime.now(timezone.utc).isoformat(),
            "event": event,
            "operation_id": headers.get("sandboxio-operation-id", ""),
            "trace_id": headers.get("sandboxio-trace-id"),
            "sandbox_id": self._id,
            "backend": "server",
            "verdict": "allow",
            "status": "ok",
            "layer": "sandbox",
        }
        return json.dumps({"record": record, "result": None, "tool_output": output})

    async def read_file(self, path: str, traceparent: str | None) -> str:
        q = urllib.parse.quote(path)
        status, headers, raw = await self._b.call(
            "GET", self._path(f"/files?path={q}"), traceparent=traceparent, limit=self._b.max_download_bytes
        )
        if status == 200 and headers.get("content-type", "").startswith("application/json"):
            # A directory: the server answers its listing as JSON (a file is always
            # `application/octet-stream`). As a listing, `Sandbox.read_file` refuses it
            # with `InvalidArgument`, as LocalBackend does.
            listing = _json(raw)
            if "entries" in listing:
                return self._synthetic("file_read", headers, {"path": path, "entries": _entries(listing, "a listing")})
        if status == 200:
            return self._synthetic("file_read", headers, {"path": path, "content_base64": base64.b64encode(raw).decode()})
        return await self._b.outcome("GET", self._path(f"/files?path={q}"), traceparent=traceparent)

    async def list_files(self, path: str, traceparent: str | None) -> str:
        q = urllib.parse.quote(path)
        status, headers, raw = await self._b.call("GET", self._path(f"/files/list?path={q}"), traceparent=traceparent)
        if status == 200:
            entries = [
                {"name": e.get("name"), "is_dir": e.get("is_dir", False), "size": e.get("size", 0)}
                for e in _entries(_json(raw), "a listing")
            ]
            return self._synthetic("file_read", headers, {"path": path, "entries": entries})
        return await self._b.outcome("GET", self._path(f"/files/list?path={q}"), traceparent=traceparent)

    async def write_file(self, path: str, content: bytes, traceparent: str | None) -> str:
        q = urllib.parse.quote(path)
        return await self._b.outcome("PUT", self._path(f"/files?path={q}"), body=content, traceparent=traceparent)

    async def delete_file(self, path: str, traceparent: str | None) -> str:
        q = urllib.parse.quote(path)
        return await self._b.outcome("DELETE", self._path(f"/files?path={q}"), traceparent=traceparent)

    def stream(self, language: str | None, code: str | None, argv: Sequence[str] | None, options: str) -> ServerStream:
        body, tp = self._run_body(options)
        if argv is not None:
            body["argv"] = list(argv)
            path = self._path("/exec")
        else:
            body.update(language=language, code=code)
            path = self._path("/run_code")
        return ServerStream(self._b, path, self._path(""), body, tp)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._drop.detach()
            with _drop_lock:
                _drop_live.discard(self._drop)
            await self._b.call("DELETE", self._path(""))
