"""Shared fixtures: a fresh in-process backend (its own state directory) per test."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Coroutine, Iterator, TypeVar

import pytest

from sandboxio import AuditConfig, LocalBackend

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def backend(state_dir: Path) -> Iterator[LocalBackend]:
    yield LocalBackend(state_dir=state_dir)


def make_backend(state_dir: Path, **kw: Any) -> LocalBackend:
    kw.setdefault("audit", AuditConfig())
    return LocalBackend(state_dir=state_dir, **kw)


@pytest.fixture(scope="session")
def otel_exporter() -> Any:
    """The host application's tracing: an SDK provider with an in-memory exporter, set
    once for this process (as an application would at start)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter
