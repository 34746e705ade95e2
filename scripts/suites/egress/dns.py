"""A test resolver for the egress suite: answers A queries from a fixed table, logs every
query it receives (one name per line) so the suite can prove what reached it."""
import socket
import struct
import sys

TABLE = {}
for pair in sys.argv[3].split(","):
    name, ip = pair.split("=")
    TABLE[name.lower()] = ip

log = open(sys.argv[4], "a", buffering=1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, peer = s.recvfrom(1500)
    if len(data) < 12:
        continue
    (qid,) = struct.unpack("!H", data[:2])
    labels, i = [], 12
    while i < len(data) and data[i] != 0:
        n = data[i]
        labels.append(data[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype = struct.unpack("!H", data[i + 1 : i + 3])[0] if i + 3 <= len(data) else 0
    question = data[12 : i + 5]
    name = ".".join(labels).lower()
    log.write(f"{name} {qtype}\n")
    ip = TABLE.get(name)
    if ip is None:
        flags, answers = 0x8183, b""  # NXDOMAIN
        count = 0
    elif qtype == 1:
        flags, count = 0x8180, 1
        answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(ip)
    else:
        flags, count, answers = 0x8180, 0, b""
    s.sendto(struct.pack("!HHHHHH", qid, flags, 1, count, 0, 0) + question + answers, peer)
