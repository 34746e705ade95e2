"""sandboxio: run agent code and tools behind a policy gateway, from Python.

The Rust core runs in-process (``LocalBackend``) or behind ``sandboxio serve``
(``ServerBackend``). Every operation passes the gateway's chain and leaves one redacted
record, rendered to the audit sinks of ``AuditConfig`` and to an OpenTelemetry span under
the caller's current span. Importing this package imports no OpenTelemetry module,
configures no logging handler and prints nothing.
"""

from sandboxio._log import logger as _logger  # noqa: F401  (NullHandler, redaction filter)
from sandboxio.approval import ApprovalRequest
from sandboxio.audit import (
    AuditConfig,
    AuditSink,
    FileSink,
    LoggingSink,
    NoopSink,
    QueueSink,
)
from sandboxio.backends.base import Backend
from sandboxio.backends.e2b import E2BBackend
from sandboxio.backends.local import LocalBackend
from sandboxio.backends.server import ServerBackend
from sandboxio.budget import BudgetGuard, CostCategory
from sandboxio.capability import Capability
from sandboxio.errors import (
    AuditSinkError,
    AuditSinkWarning,
    BackendUnavailable,
    CapabilityNotSupported,
    InvalidArgument,
    OperationDenied,
    OperationFailed,
    SandboxClosed,
    SandboxioError,
)
from sandboxio.events import AuditEvent, CostEntry, IsolationTier
from sandboxio.experiment import SandboxConfig, SandboxResult, run_in_sandbox
from sandboxio.results import ExecResult, FileEntry, StreamEvent
from sandboxio.safety import SafetyBoundary
from sandboxio.sandbox import Sandbox
from sandboxio.sync import SyncSandbox

__all__ = [
    "ApprovalRequest",
    "AuditConfig",
    "AuditEvent",
    "AuditSink",
    "AuditSinkError",
    "AuditSinkWarning",
    "Backend",
    "E2BBackend",
    "BackendUnavailable",
    "BudgetGuard",
    "Capability",
    "CapabilityNotSupported",
    "CostCategory",
    "CostEntry",
    "ExecResult",
    "FileEntry",
    "FileSink",
    "InvalidArgument",
    "IsolationTier",
    "LocalBackend",
    "LoggingSink",
    "NoopSink",
    "OperationDenied",
    "OperationFailed",
    "QueueSink",
    "SafetyBoundary",
    "Sandbox",
    "SandboxClosed",
    "SandboxConfig",
    "SandboxResult",
    "SandboxioError",
    "ServerBackend",
    "StreamEvent",
    "SyncSandbox",
    "run_in_sandbox",
]
