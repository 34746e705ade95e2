"""Runs inside the sandbox for the egress suite; prints one line per finding."""
import os
import socket
import ssl
import sys
import urllib.request

PROXY = ("127.0.0.1", 3128)


def urllib_check():
    plain = urllib.request.urlopen("http://allowed.test/", timeout=10).read()
    ctx = ssl.create_default_context(cafile=os.environ["SANDBOX_INPUT"] + "/ca.pem")
    tls = urllib.request.urlopen("https://secure.test/", timeout=10, context=ctx).read()
    if b"hello" in plain and b"hello" in tls:
        print("urllib ok")


def dns_check(name):
    try:
        socket.getaddrinfo(name, 80)
        print("dns answered")
    except OSError as e:
        print("dns refused", e)


def raw_check(name):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("203.0.113.10", 80))
        print("tcp connected")
    except OSError as e:
        print("tcp refused", e)
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00\x00\x01\x00\x01"
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    try:
        u.sendto(q, ("203.0.113.53", 53))
        u.recvfrom(512)
        print("udp answered")
    except OSError as e:
        print("udp refused", e)


def connect_in_connect():
    s = socket.create_connection(PROXY, timeout=10)
    s.sendall(b"CONNECT relay.test:80 HTTP/1.1\r\nHost: relay.test:80\r\n\r\n")
    head = s.recv(4096)
    if not head.startswith(b"HTTP/1.1 200"):
        print("outer connect failed", head[:80])
        return
    s.sendall(b"CONNECT secure.test:443 HTTP/1.1\r\nHost: secure.test:443\r\n\r\n")
    try:
        rest = s.recv(4096)
    except OSError:
        rest = b""
    print("inner connect refused" if rest == b"" else f"inner connect answered {rest[:80]!r}")


def escape():
    socks = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                socks.append(fd)
        except OSError:
            pass  # the directory's own fd, closed by now
    print("fds clean" if not socks else f"socket fds {socks}")
    b = socket.socket()
    try:
        b.bind(PROXY)
        print("port free")
    except OSError:
        print("port taken")
    with open("/proc/net/dev") as f:
        ifaces = sorted(l.split(":")[0].strip() for l in f.readlines()[2:])
    print("interfaces", " ".join(ifaces))
    found = []
    for top in ["/tmp", "/workspace", "/output", "/input", "/dev", "/etc", "/run", "/var"]:
        for d, _, files in os.walk(top):
            for n in files:
                p = os.path.join(d, n)
                try:
                    if os.path.exists(p) and __import__("stat").S_ISSOCK(os.lstat(p).st_mode):
                        found.append(p)
                except OSError:
                    pass
    print("no socket files" if not found else f"socket files {found}")
    for junk in [b"\x00\x01\x02garbage\r\n\r\n", b"GET / HTTP/1.1\r\n" + b"x" * 100000 + b"\r\n\r\n"]:
        try:
            g = socket.create_connection(PROXY, timeout=5)
            g.sendall(junk)
            g.recv(100)
            g.close()
        except OSError:
            pass


what = sys.argv[1]
if what == "urllib":
    urllib_check()
elif what == "dns":
    dns_check(sys.argv[2])
elif what == "raw":
    raw_check(sys.argv[2])
elif what == "connect-in-connect":
    connect_in_connect()
elif what == "escape":
    escape()
