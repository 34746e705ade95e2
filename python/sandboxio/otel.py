"""OpenTelemetry: every attribute name sandboxio writes, and the span of one operation.

Operations are GenAI ``execute_tool`` spans (semantic conventions 1.37.0,
``SEMCONV_VERSION``) that join the host application's current span (its ``invoke_agent``
span) and its tracer provider. The OpenTelemetry API is imported on the first operation,
never at ``import sandboxio``; without it, or with no tracer provider configured, the span
is non-recording and nothing else happens. sandboxio installs no provider or exporter.
No other module writes an attribute name. Attribute values come from the operation's
record, which the gateway redacted before any renderer saw it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import TYPE_CHECKING, Any, ContextManager, Iterator

if TYPE_CHECKING:
    from sandboxio.events import AuditEvent

SEMCONV_VERSION = "1.37.0"
TRACER_NAME = "sandboxio"

# From the GenAI semantic conventions.
SPAN_NAME_PREFIX = "execute_tool"
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_OPERATION_EXECUTE_TOOL = "execute_tool"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"

# The convention has no vocabulary for a sandbox: these are sandboxio's own.
BACKEND = "sandboxio.backend"
ISOLATION_TIER = "sandboxio.isolation.tier"
SANDBOX_ID = "sandboxio.sandbox.id"
EXIT_CODE = "sandboxio.exit_code"
DURATION_MS = "sandboxio.duration_ms"
BYTES_IN = "sandboxio.bytes_in"
BYTES_OUT = "sandboxio.bytes_out"
NETWORK_DENIALS = "sandboxio.network_denials"
DECISION = "sandboxio.decision"
LAYER = "sandboxio.layer"
STATUS = "sandboxio.status"
ERROR_CODE = "sandboxio.error_code"
CODE = "sandboxio.code"  # only with AuditConfig(capture_code=True); redacted

_trace: Any = None
_unavailable = False

# `get_tracer_provider()` with none set looks `OTEL_PYTHON_TRACER_PROVIDER` up in
# `os.environ`, whose miss raises and catches two `KeyError`s: 29 us per operation on the
# event loop's thread, cold. `_no_provider` answers the same question from the
# environment's own mapping; where that is not there, the API is asked.
_ENV_DATA: Any = getattr(os.environ, "_data", None)
try:
    _PROVIDER_KEY: Any = os.environ.encodekey("OTEL_PYTHON_TRACER_PROVIDER")
except Exception:  # noqa: BLE001 (not CPython's `os._Environ`: ask the API)
    _ENV_DATA = None
_UNKNOWN = object()


def _no_provider(trace: Any) -> bool:
    """True when no tracer provider is set, in code or by the environment; False when one
    is, or when this cannot tell (the caller then asks ``get_tracer_provider``)."""
    return (
        _ENV_DATA is not None
        and getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None
        and _PROVIDER_KEY not in _ENV_DATA
    )


def _api() -> Any:
    """``opentelemetry.trace``, imported on first use; ``None`` when not installed."""
    global _trace, _unavailable
    if _trace is None and not _unavailable:
        try:
            _trace = importlib.import_module("opentelemetry.trace")
        except ImportError:
            _unavailable = True
    return _trace


def traceparent(span: Any) -> str | None:
    """The W3C ``traceparent`` of a span with a valid context, else ``None``."""
    if span is None:
        return None
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


class _Unrecorded:
    """Stands for the span of an operation when no tracer provider is configured: it
    records nothing (what the API's span would do) and carries the caller's current span
    context, so the operation still joins the caller's trace. Creating the API's
    non-recording span instead cost each operation a tracer, a span and two context
    switches (about 16 us of CPU) for the same outcome. It is its own context manager:
    entering a generator's (``contextlib.contextmanager``) took 66 us instead of 51 on the
    event loop's thread, which runs it cold after waiting for the previous operation."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def get_span_context(self) -> Any:
        return self._ctx

    def is_recording(self) -> bool:
        return False

    def __enter__(self) -> _Unrecorded:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _NoSpan:
    """The operation's context without the OpenTelemetry API: no span (``None``)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def operation_span(tool_name: str, backend: str) -> ContextManager[Any]:
    """The span of one operation, current while it runs; ``None`` without the API."""
    trace = _trace if _trace is not None else _api()
    if trace is None:
        return _NO_SPAN
    if _no_provider(trace) or type(trace.get_tracer_provider()) is trace.ProxyTracerProvider:
        # No provider configured (one set later is seen at the next operation).
        return _Unrecorded(trace.get_current_span().get_span_context())
    return _recording_span(trace, tool_name, backend)


@contextlib.contextmanager
def _recording_span(trace: Any, tool_name: str, backend: str) -> Iterator[Any]:
    # The global provider, fetched every time: a provider configured later is used.
    tracer = trace.get_tracer(TRACER_NAME, schema_url=f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}")
    attributes = {
        GEN_AI_OPERATION_NAME: GEN_AI_OPERATION_EXECUTE_TOOL,
        GEN_AI_TOOL_NAME: tool_name,
        BACKEND: backend,
    }
    with tracer.start_as_current_span(
        f"{SPAN_NAME_PREFIX} {tool_name}",
        kind=trace.SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def finish(span: Any, event: AuditEvent | None, *, capture_code: bool, error: str | None = None) -> None:
    """Sets the record's attributes (and the error status) on the operation's span."""
    if span is None or not span.is_recording():
        return
    if event is not None:
        attrs: dict[str, Any] = {
            GEN_AI_TOOL_CALL_ID: event.operation_id,
            DURATION_MS: event.duration_ms,
            BYTES_IN: event.bytes_in,
            BYTES_OUT: event.bytes_out,
            NETWORK_DENIALS: event.network_denials,
            DECISION: event.decision,
            LAYER: event.layer,
            STATUS: event.status,
        }
        if event.isolation is not None:
            attrs[ISOLATION_TIER] = event.isolation.value
        if event.sandbox_id:
            attrs[SANDBOX_ID] = event.sandbox_id
        if event.exit_code is not None:
            attrs[EXIT_CODE] = event.exit_code
        if event.error_code:
            attrs[ERROR_CODE] = event.error_code
        if capture_code and event.code is not None:
            attrs[CODE] = event.code
        span.set_attributes(attrs)
    if error is not None:
        trace = _api()
        if trace is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, error))
