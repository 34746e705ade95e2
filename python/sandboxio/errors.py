"""Typed errors. Each carries a stable code (``SBX_Ennnn``, see docs/ERRORS.md) and a
class (``usage``, ``denied``, ``interrupted``, ``integrity``, ``internal``). Messages and
``__notes__`` are redacted before an error is raised."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxio import _native

if TYPE_CHECKING:
    from sandboxio.events import AuditEvent

E_INVALID_ARGUMENT: str = _native.E_INVALID_ARGUMENT
E_SANDBOX_CLOSED: str = _native.E_SANDBOX_CLOSED
E_CAPABILITY_NOT_SUPPORTED: str = _native.E_CAPABILITY_NOT_SUPPORTED
E_BACKEND_UNAVAILABLE: str = _native.E_BACKEND_UNAVAILABLE
E_OPERATION_DENIED: str = _native.E_OPERATION_DENIED
E_PYTHON_CALLBACK_FAILED: str = _native.E_PYTHON_CALLBACK_FAILED
E_SECRET_IN_BINARY: str = _native.E_SECRET_IN_BINARY
E_RUNTIME_STOPPED: str = _native.E_RUNTIME_STOPPED
E_AUDIT_SINK_FAILED = "SBX_E1601"
# The gateway's answer when the record of an operation could not be written (fail mode).
E_UNRECORDED = "SBX_E1511"


class SandboxioError(Exception):
    """Base of every error sandboxio raises."""

    code: str
    error_class: str

    def __init__(self, message: str, *, code: str, error_class: str = "internal") -> None:
        super().__init__(message)
        self.code = code
        self.error_class = error_class

    def __str__(self) -> str:
        return f"[{self.code}] {self.args[0] if self.args else ''}"


class InvalidArgument(SandboxioError, ValueError):
    """An argument was not valid; nothing was changed."""

    def __init__(self, message: str, *, code: str = E_INVALID_ARGUMENT) -> None:
        super().__init__(message, code=code, error_class="usage")


class SandboxClosed(SandboxioError):
    """The sandbox was closed."""

    def __init__(self, message: str = "the sandbox is closed") -> None:
        super().__init__(message, code=E_SANDBOX_CLOSED, error_class="usage")


class CapabilityNotSupported(SandboxioError):
    """The backend lacks the capability the call needs (see ``Capability``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=E_CAPABILITY_NOT_SUPPORTED, error_class="usage")


class BackendUnavailable(SandboxioError):
    """A remote backend could not be reached or answered something unreadable."""

    def __init__(self, message: str, *, code: str = E_BACKEND_UNAVAILABLE) -> None:
        super().__init__(message, code=code, error_class="internal")


class OperationDenied(SandboxioError):
    """A layer of the chain stopped the operation; ``record`` says which and why."""

    record: AuditEvent | None

    def __init__(self, message: str, *, code: str, record: AuditEvent | None = None) -> None:
        super().__init__(message, code=code, error_class="denied")
        self.record = record

    @property
    def layer(self) -> str | None:
        return self.record.layer if self.record is not None else None


class OperationFailed(SandboxioError):
    """The operation was allowed but could not complete (a missing file, a tool error)."""

    record: AuditEvent | None

    def __init__(self, message: str, *, code: str, record: AuditEvent | None = None) -> None:
        super().__init__(message, code=code, error_class="internal")
        self.record = record


class AuditSinkError(SandboxioError):
    """With ``on_sink_failure="fail"``: an audit sink failed or timed out, so the
    operation failed (``SBX_E1601``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=E_AUDIT_SINK_FAILED, error_class="internal")


class AuditSinkWarning(UserWarning):
    """With ``on_sink_failure="warn"``: an audit sink failed or timed out; the operation
    went on."""


def add_note(err: BaseException, note: str) -> None:
    """``err.add_note(note)``, also on Python 3.10."""
    notes = list(getattr(err, "__notes__", []))
    notes.append(note)
    setattr(err, "__notes__", notes)


def from_native(err: BaseException) -> SandboxioError:
    """The typed error for a ``_native.NativeError(code, class, message)``."""
    args = getattr(err, "args", ())
    if len(args) != 3:
        return SandboxioError(str(err), code=E_PYTHON_CALLBACK_FAILED)
    code, klass, message = (str(a) for a in args)
    if code in (E_AUDIT_SINK_FAILED, E_UNRECORDED):
        err = AuditSinkError(f"an audit sink failed, so the operation failed: {message}")
        add_note(err, f"gateway code {code}")
        return err
    if code == E_SANDBOX_CLOSED:
        return SandboxClosed(message)
    if klass == "usage":
        return InvalidArgument(message, code=code)
    if klass == "denied":
        return OperationDenied(message, code=code)
    return SandboxioError(message, code=code, error_class=klass)
