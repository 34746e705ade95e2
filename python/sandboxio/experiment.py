"""Seed 000's experiment runner, backed by the gateway: ``run_in_sandbox(script,
config, input_dir=...)`` runs a Python script as one ``run_code`` operation (policy,
limits, one record) instead of a bare subprocess. The script reads ``$SANDBOX_INPUT``
(``input_dir``, read-only) and writes ``$SANDBOX_OUTPUT`` (``result.output_dir``, a fresh
directory that outlives the call; the caller removes it)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from sandboxio.backends.base import Backend
from sandboxio.errors import InvalidArgument
from sandboxio.sync import SyncSandbox

MIB = 1 << 20


@dataclass
class SandboxConfig:
    """Configuration for a sandboxed experiment execution."""

    timeout_seconds: int = 300
    max_memory_mb: int = 2048
    allowed_network: bool = False
    readonly_paths: list[str] = field(default_factory=list)
    env_allowlist: list[str] = field(default_factory=lambda: ["PATH", "PYTHONPATH", "HOME"])


@dataclass
class SandboxResult:
    """Outcome of a sandboxed run."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    output_dir: Path


def run_in_sandbox(
    script_path: Path,
    config: SandboxConfig,
    input_dir: Optional[Path] = None,
    *,
    backend: Backend | None = None,
) -> SandboxResult:
    """Execute a Python script in a sandbox, through the gateway.

    The script runs with only allowlisted host environment variables, no network unless
    ``allowed_network`` (and policy) allow it, and the time and memory limits of
    ``config``. A timeout is a result (``timed_out=True``, exit code -1); a denial
    raises ``OperationDenied``.
    """
    if config.readonly_paths:
        raise InvalidArgument(
            "readonly_paths is not supported: put read-only inputs in `input_dir`, which the script sees at $SANDBOX_INPUT"
        )
    if config.timeout_seconds <= 0 or config.max_memory_mb <= 0:
        raise InvalidArgument("timeout_seconds and max_memory_mb must be positive")
    code = Path(script_path).read_text()
    output_dir = Path(tempfile.mkdtemp(prefix="sandbox_")) / "output"
    output_dir.mkdir()
    with SyncSandbox.create(backend) as sbx:
        r = sbx.run_code(
            code,
            timeout=float(config.timeout_seconds),
            memory_bytes=config.max_memory_mb * MIB,
            env_allowlist=list(config.env_allowlist),
            input_dir=Path(input_dir).resolve() if input_dir is not None else None,
            output_dir=output_dir,
            network=config.allowed_network,
        )
    if r.timed_out:
        return SandboxResult(
            exit_code=-1,
            stdout="",
            stderr="Process killed: exceeded timeout",
            timed_out=True,
            output_dir=output_dir,
        )
    return SandboxResult(
        exit_code=r.exit_code if r.exit_code is not None else -1,
        stdout=r.stdout,
        stderr=r.stderr,
        timed_out=False,
        output_dir=output_dir,
    )
