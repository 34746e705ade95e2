"""Tracing through the host's OpenTelemetry: execute_tool spans under the caller's
invoke_agent span, attribute names from sandboxio.otel, nothing imported at import time,
nothing recorded without a provider, no provider or exporter installed by sandboxio."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from conftest import run
from sandboxio import AuditConfig, LocalBackend, OperationDenied, Sandbox, otel


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_import_sandboxio_imports_no_opentelemetry_and_prints_nothing(tmp_path: Path) -> None:
    p = _python(
        """
        import sys
        import sandboxio
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        assert loaded == [], loaded
        """,
        tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == "" and p.stderr == ""


def test_without_a_provider_spans_are_non_recording_and_nothing_is_installed(tmp_path: Path) -> None:
    p = _python(
        f"""
        import asyncio, sys
        import sandboxio
        from sandboxio import LocalBackend, Sandbox

        async def main():
            async with await Sandbox.create(LocalBackend(state_dir={str(tmp_path / 'state')!r})) as sbx:
                return await sbx.run_code("print(1)")

        r = asyncio.run(main())
        assert "opentelemetry.trace" in sys.modules, "the API was not used on the first operation"
        from opentelemetry import trace
        assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider", trace.get_tracer_provider()
        assert r.record.trace_id is None, r.record.trace_id  # no valid span context: nothing recorded
        with sandboxio.otel.operation_span("probe", "local") as span:
            assert not span.is_recording()
        print("ok")
        """,
        tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == "ok\n"


def test_spans_nest_under_the_callers_invoke_agent_span(state_dir: Path, otel_exporter: Any) -> None:
    from opentelemetry import trace

    otel_exporter.clear()
    tracer = trace.get_tracer("host.agent")
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(capture_code=True))

    async def main() -> Any:
        with tracer.start_as_current_span("invoke_agent planner") as agent:
            async with await Sandbox.create(b) as sbx:
                r = await sbx.run_code("print(2)")
                await sbx.write_file("x.txt", "1")
                try:
                    await sbx.read_file("../outside")
                except OperationDenied:
                    pass
        return agent, r

    agent, r = run(main())
    spans = otel_exporter.get_finished_spans()
    tools = [s for s in spans if s.name.startswith(otel.SPAN_NAME_PREFIX)]
    assert [s.name for s in tools] == ["execute_tool run_code", "execute_tool file_write", "execute_tool file_read"]
    actx = agent.get_span_context()
    for s in tools:
        assert s.parent is not None and s.parent.span_id == actx.span_id
        assert s.context.trace_id == actx.trace_id
        assert s.attributes[otel.GEN_AI_OPERATION_NAME] == "execute_tool"
        assert s.attributes[otel.BACKEND] == "local"
    run_span = tools[0]
    assert run_span.attributes[otel.ISOLATION_TIER] == "namespace"
    assert run_span.attributes[otel.EXIT_CODE] == 0
    assert run_span.attributes[otel.SANDBOX_ID]
    assert run_span.attributes[otel.CODE] == "print(2)"
    assert run_span.attributes[otel.GEN_AI_TOOL_CALL_ID] == r.record.operation_id
    # The record carries the caller's trace: the three renderings are one record.
    assert r.record.trace_id == f"{actx.trace_id:032x}"
    denied = tools[2]
    assert denied.status.status_code.name == "ERROR"
    assert denied.attributes[otel.DECISION] == "deny"


def test_attribute_names_live_in_one_module() -> None:
    assert otel.SEMCONV_VERSION == "1.37.0"
    src = Path(otel.__file__).parent
    for f in src.rglob("*.py"):
        if f.name == "otel.py":
            continue
        text = f.read_text()
        assert "sandboxio.exit_code" not in text and "gen_ai." not in text, f


def test_a_provider_named_by_the_environment_is_seen_without_asking_the_api(tmp_path: Path) -> None:
    # `_no_provider` reads the environment's mapping itself (not `os.environ`'s raising
    # lookup): a provider named there must still make the operation's span a recording
    # one, exactly as `get_tracer_provider()` would.
    p = _python(
        """
        import os
        from opentelemetry import trace
        from sandboxio import otel

        assert otel._no_provider(trace) and otel._ENV_DATA is not None
        os.environ["OTEL_PYTHON_TRACER_PROVIDER"] = "sdk_tracer_provider"
        assert not otel._no_provider(trace)
        with otel.operation_span("probe", "local") as span:
            assert span.is_recording(), span
        assert type(trace.get_tracer_provider()).__name__ == "TracerProvider"
        del os.environ["OTEL_PYTHON_TRACER_PROVIDER"]
        assert not otel._no_provider(trace)  # set now, in code
        print("ok")
        """,
        tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == "ok\n"
