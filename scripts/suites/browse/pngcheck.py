"""Prints `png WIDTHxHEIGHT` for a valid PNG (signature, IHDR first, every chunk's CRC),
else `not a png: <why>`."""
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
if not data.startswith(b"\x89PNG\r\n\x1a\n"):
    sys.exit(print("not a png: bad signature") or 1)
i, first, size, ended = 8, True, None, False
while i + 8 <= len(data):
    (length,) = struct.unpack("!I", data[i : i + 4])
    kind = data[i + 4 : i + 8]
    body = data[i + 8 : i + 8 + length]
    (crc,) = struct.unpack("!I", data[i + 8 + length : i + 12 + length])
    if zlib.crc32(kind + body) != crc:
        sys.exit(print(f"not a png: bad crc in {kind!r}") or 1)
    if first and kind != b"IHDR":
        sys.exit(print("not a png: IHDR is not first") or 1)
    if kind == b"IHDR":
        size = struct.unpack("!II", body[:8])
    first = False
    i += 12 + length
    if kind == b"IEND":
        ended = True
        break
if not ended or size is None:
    sys.exit(print("not a png: no IEND") or 1)
print(f"png {size[0]}x{size[1]}")
