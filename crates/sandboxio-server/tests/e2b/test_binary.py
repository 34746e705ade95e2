"""Binary output through envd's process stream: the bytes a command writes (NUL, bytes
that are not UTF-8, a character split across writes) reach the client unchanged on the
wire, and the SDK decodes them as E2B's envd would have them decoded."""

import base64
import json
import struct

import httpx
from e2b import Sandbox

# NUL, an invalid byte (0xff), then "é" (0xc3 0xa9) split across two writes.
SCRIPT = r"printf 'a\000b\377c\303'; sleep 0.2; printf '\251d\n'"
BYTES = b"a\x00b\xffc\xc3\xa9d\n"


def _envelopes(raw: bytes):
    i = 0
    while i + 5 <= len(raw):
        flags, n = raw[i], struct.unpack(">I", raw[i + 1:i + 5])[0]
        yield flags, json.loads(raw[i + 5:i + 5 + n])
        i += 5 + n


def test_binary_stdout_reaches_the_wire_byte_for_byte(server):
    sbx = Sandbox.create()
    try:
        req = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", SCRIPT]}}
        body = json.dumps(req).encode()
        r = httpx.post(
            f"{server.url}/process.Process/Start",
            content=bytes([0]) + struct.pack(">I", len(body)) + body,
            headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983",
                     "X-Access-Token": sbx._envd_access_token,
                     "Content-Type": "application/connect+json",
                     "Connect-Protocol-Version": "1"},
            timeout=60)
        assert r.status_code == 200, r.text
        out, ends = b"", []
        for flags, msg in _envelopes(r.content):
            if flags & 0x02:
                assert "error" not in msg, msg
                continue
            ev = msg.get("event", {})
            if "data" in ev and "stdout" in ev["data"]:
                out += base64.b64decode(ev["data"]["stdout"])
            if "end" in ev:
                ends.append(ev["end"])
        assert out == BYTES
        assert len(ends) == 1 and ends[0].get("exitCode", 0) == 0, ends
    finally:
        sbx.kill()


def test_the_sdk_decodes_binary_stdout_as_envd_output(server):
    sbx = Sandbox.create()
    try:
        chunks = []
        r = sbx.commands.run(SCRIPT, on_stdout=chunks.append)
        # NUL survives; the invalid byte is one U+FFFD; the split "é" is whole again.
        assert r.stdout == BYTES.decode("utf-8", "replace") == "a\x00b\ufffdcéd\n"
        assert "".join(chunks) == r.stdout
    finally:
        sbx.kill()
