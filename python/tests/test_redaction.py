"""A canary secret (given in ``secrets=``) and a credential-shaped host variable never
appear in events, spans, log records, exception text or notes, results or reprs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from conftest import run
from sandboxio import AuditConfig, AuditEvent, LocalBackend, LoggingSink, OperationDenied, Sandbox

CANARY = "canary-7f3a9c1e5b2d4f60"
GH_TOKEN = "ghp_" + "R9x2Lq7TzW4mN8vB1cK5yH3jP6sD0fGaE2uQ"


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def emit(self, event: AuditEvent) -> None:
        self.events.append(event)


def test_the_canary_reaches_no_sink_span_log_error_or_repr(
    state_dir: Path, otel_exporter: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", GH_TOKEN)
    otel_exporter.clear()
    sink = ListSink()
    b = LocalBackend(
        state_dir=state_dir,
        audit=AuditConfig(sinks=(sink, LoggingSink()), capture_code=True),
        debug=True,
    )
    seen: list[str] = []

    async def main() -> None:
        sbx = await Sandbox.create(b, secrets=[CANARY])
        seen.append(repr(sbx))
        r = await sbx.run_code(f"secret = {CANARY!r}\nprint(secret)\nprint({GH_TOKEN!r})")
        seen.extend([r.stdout, r.stderr, repr(r), repr(r.record)])
        await sbx.write_file(f"{CANARY}.txt", CANARY)
        seen.extend(e.name for e in await sbx.list_files())
        try:
            await sbx.read_file(f"../{CANARY}/x")
        except OperationDenied as e:
            seen.append(str(e))
            seen.extend(getattr(e, "__notes__", []))
            seen.append(repr(e.record))
        else:
            pytest.fail("a path outside the workspace was not denied")
        seen.append(repr(sbx))
        await sbx.close()

    with caplog.at_level(logging.DEBUG, logger="sandboxio"):
        run(main())

    logs = [r.getMessage() for r in caplog.records]
    events = [repr(e.as_dict()) for e in sink.events]
    spans = [repr(dict(s.attributes or {})) + s.name for s in otel_exporter.get_finished_spans()]
    everything = seen + logs + events + spans
    assert events and spans and logs, "nothing was rendered: the test would prove nothing"
    for text in everything:
        assert CANARY not in text, text
        assert GH_TOKEN not in text, text
    # What was redacted is still visibly there, as a placeholder.
    assert any("[REDACTED" in e for e in events)
    assert any("[REDACTED" in s for s in seen)


@pytest.mark.parametrize("prefix", [b"", b"a", b"ab"])
def test_a_binary_file_holding_a_secret_is_refused_never_garbled(backend: LocalBackend, prefix: bytes) -> None:
    """The file-read answer is redacted as text: a secret inside binary content becomes a
    marker inside its base64, which decodes to garbage (or fails in `binascii`). Such a
    read raises `OperationFailed` with `SBX_E2107` (the secret nowhere in it); binary files
    without a secret, and text files with one, read as before."""
    from sandboxio import OperationFailed
    from sandboxio.errors import E_SECRET_IN_BINARY

    data = prefix + b"\xff\x00" + CANARY.encode() + b"\x00\xfe"

    async def main() -> tuple[OperationFailed, bytes, bytes, bytes]:
        async with await Sandbox.create(backend, secrets=[CANARY]) as sbx:
            await sbx.write_file("bin", data)
            with pytest.raises(OperationFailed) as refused:
                await sbx.read_file("bin")
            await sbx.write_file("plain.bin", prefix + b"\xff\x00\x01\xfe")
            plain = await sbx.read_file("plain.bin")
            await sbx.write_file("notes.txt", f"token={CANARY}\n")
            text = await sbx.read_file("notes.txt")
            # As a program's output the same bytes come back redacted byte for byte.
            out = (await sbx.run('cat "$SANDBOX_INPUT/bin"')).stdout_raw
            return refused.value, plain, text, out

    err, plain, text, out = run(main())
    assert err.code == E_SECRET_IN_BINARY and err.error_class == "internal"
    assert CANARY not in str(err) and "secret" in str(err)
    assert err.record is not None and err.record.event == "file_read"
    assert plain == prefix + b"\xff\x00\x01\xfe"
    assert CANARY.encode() not in text and text.startswith(b"token=[REDACTED")
    assert CANARY.encode() not in out and out.startswith(prefix + b"\xff\x00[REDACTED")
