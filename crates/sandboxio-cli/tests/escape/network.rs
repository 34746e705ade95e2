//! Network (mode `none`, the default): no TCP, UDP, raw or packet sockets, no host Unix
//! sockets (abstract or path), no DNS. Every server here is one the test starts itself on
//! 127.0.0.1 (or a Unix socket it owns).

use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::time::Duration;

use crate::harness::*;

/// Socket creation denied by the seccomp filter (no network: only AF_UNIX).
const SOCKET_DENIED: &[&str] = &["EPERM", "EACCES", "EAFNOSUPPORT"];

const TCP: &str = r#"
port = int(sys.argv[1])
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    say('socket', 'OK')
    s.settimeout(2)
    attempt('connect', lambda: s.connect(('127.0.0.1', port)))
except OSError as e:
    say('socket', ename(e.errno))
try:
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    say('socket6', 'OK')
except OSError as e:
    say('socket6', ename(e.errno))
"#;

#[test]
fn tcp_to_host_loopback_is_blocked() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    // Control: the payload does reach the server from the host.
    let control = host_control(TCP, &[&port]);
    assert_eq!(control["connect"], "OK", "control: {control:?}");
    let _ = listener.accept();

    let out = Sandbox::new().py(TCP, &[&port]);
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!(
            "ESCAPE: the host server got a connection from {peer}\n{}",
            out.describe()
        ),
        Err(e) => panic!("accept: {e}"),
    }
    out.expect_errno("socket", SOCKET_DENIED);
    out.expect_errno("socket6", SOCKET_DENIED);
}

#[test]
fn bash_dev_tcp_to_host_loopback_is_blocked() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let m = marker("devtcp");
    let out = Sandbox::new().attack(&[
        "/bin/bash",
        "-c",
        &format!("echo {m} > /dev/tcp/127.0.0.1/{port}"),
    ]);
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!("ESCAPE: connection from {peer}\n{}", out.describe()),
        Err(e) => panic!("accept: {e}"),
    }
    assert_ne!(out.exit_code(), Some(0), "{}", out.describe());
    assert!(
        out.stderr().contains("Operation not permitted")
            || out.stderr().contains("Permission denied")
            || out.stderr().contains("Address family not supported"),
        "expected a denied socket, got:\n{}",
        out.describe()
    );
}

#[test]
fn udp_to_host_loopback_does_not_arrive() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port().to_string();
    let m = marker("udp");
    let script = r#"
port, m = int(sys.argv[1]), sys.argv[2]
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    say('socket', 'OK')
    for i in range(5):
        attempt('send%d' % i, lambda: s.sendto(m.encode(), ('127.0.0.1', port)))
except OSError as e:
    say('socket', ename(e.errno))
"#;
    let out = Sandbox::new().py(script, &[&port, &m]);
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 512];
    match sock.recv_from(&mut buf) {
        Ok((n, from)) => panic!(
            "ESCAPE: the host UDP socket received {:?} from {from}\n{}",
            String::from_utf8_lossy(&buf[..n]),
            out.describe()
        ),
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "recv: {e}"
        ),
    }
    // Landlock does not cover UDP: the seccomp socket filter must.
    out.expect_errno("socket", SOCKET_DENIED);
}

#[test]
fn raw_and_packet_sockets_are_denied() {
    let script = r#"
AF_PACKET, ETH_P_ALL = 17, 0x0003
cases = [
    ('packet_raw', AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)),
    ('packet_dgram', AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL)),
    ('inet_raw_icmp', socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    ('inet_raw_raw', socket.AF_INET, socket.SOCK_RAW, 255),
    ('inet6_raw', socket.AF_INET6, socket.SOCK_RAW, 58),
    ('inet_icmp_dgram', socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP),
]
for name, fam, typ, proto in cases:
    attempt(name, lambda: socket.socket(fam, typ, proto).close())
"#;
    let out = Sandbox::new().py(script, &[]);
    for l in [
        "packet_raw",
        "packet_dgram",
        "inet_raw_icmp",
        "inet_raw_raw",
        "inet6_raw",
        "inet_icmp_dgram",
    ] {
        out.expect_errno(l, SOCKET_DENIED);
    }
}

#[test]
fn only_unix_sockets_can_be_created() {
    let script = r#"
cases = [('netlink_route', 16, socket.SOCK_RAW, 0), ('netlink_audit', 16, socket.SOCK_RAW, 9),
         ('alg', 38, socket.SOCK_SEQPACKET, 0), ('vsock', 40, socket.SOCK_STREAM, 0),
         ('xdp', 44, socket.SOCK_RAW, 0), ('tipc', 30, socket.SOCK_RDM, 0),
         ('family15', 15, socket.SOCK_RAW, 2), ('unix', socket.AF_UNIX, socket.SOCK_STREAM, 0)]
for name, fam, typ, proto in cases:
    attempt(name, lambda: socket.socket(fam, typ, proto).close())
"#;
    let out = Sandbox::new().py(script, &[]);
    for l in [
        "netlink_route",
        "netlink_audit",
        "alg",
        "vsock",
        "xdp",
        "tipc",
        "family15",
    ] {
        out.expect_errno(l, SOCKET_DENIED);
    }
    assert_eq!(
        out.result("unix"),
        "OK",
        "AF_UNIX must work\n{}",
        out.describe()
    );
}

#[test]
fn network_namespace_has_only_loopback() {
    // Second layer, independent of seccomp: the net namespace has no way out.
    let script = r#"
with open('/proc/net/dev') as f:
    lines = f.read().splitlines()[2:]
say('ifaces', ','.join(sorted(l.split(':')[0].strip() for l in lines)))
with open('/proc/net/route') as f:
    say('routes', len(f.read().splitlines()) - 1)
"#;
    let out = Sandbox::new().py(script, &[]);
    let ifaces = out.result("ifaces");
    assert!(
        ifaces == "lo" || ifaces.is_empty(),
        "interfaces other than lo in the sandbox: {ifaces}\n{}",
        out.describe()
    );
    let routes: i64 = out.result("routes").parse().unwrap();
    assert!(
        routes <= 0,
        "routes in the sandbox: {routes}\n{}",
        out.describe()
    );
}

#[test]
fn cannot_connect_to_host_abstract_unix_socket() {
    let name = marker("abstract");
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = r#"
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(2)
attempt('connect', lambda: s.connect('\0' + sys.argv[1]))
"#;
    let control = host_control(script, &[&name]);
    assert_eq!(control["connect"], "OK", "control: {control:?}");
    let _ = listener.accept();

    let out = Sandbox::new().py(script, &[&name]);
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok(_) => panic!(
            "ESCAPE: the host abstract socket got a connection\n{}",
            out.describe()
        ),
        Err(e) => panic!("accept: {e}"),
    }
    // The abstract namespace belongs to the network namespace: nothing listens there.
    out.expect_errno("connect", &["ECONNREFUSED", "EPERM", "EACCES"]);
}

#[test]
fn cannot_connect_to_host_unix_socket_path() {
    let host = host_dir();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = host.path().join("host.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let p = path.to_string_lossy().into_owned();
    let script = r#"
def conn(p):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(p)
attempt('connect', lambda: conn(sys.argv[1]))
# Well-known host daemons' sockets: only inside the sandbox (never poked from the host).
for name, p in [] if len(sys.argv) < 3 else [('docker', '/var/run/docker.sock'), ('dbus', '/run/dbus/system_bus_socket'),
                ('systemd', '/run/systemd/private'), ('journal', '/run/systemd/journal/socket')]:
    attempt(name, lambda: conn(p))
"#;
    let control = host_control(script, &[&p]);
    assert_eq!(control["connect"], "OK", "control: {control:?}");
    let _ = listener.accept();

    let out = Sandbox::new().py(script, &[&p, "all"]);
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok(_) => panic!(
            "ESCAPE: the host unix socket got a connection\n{}",
            out.describe()
        ),
        Err(e) => panic!("accept: {e}"),
    }
    // The host path does not exist inside.
    out.expect_errno("connect", &["ENOENT"]);
    for l in ["docker", "dbus", "systemd", "journal"] {
        out.expect_errno(l, &["ENOENT"]);
    }
}

#[test]
fn dns_resolution_fails() {
    // Gate: resolve only if the sandbox has no interface but lo, so that even a broken
    // sandbox cannot send a query anywhere but its own loopback.
    let script = r#"
with open('/proc/net/dev') as f:
    ifaces = [l.split(':')[0].strip() for l in f.read().splitlines()[2:]]
if any(i != 'lo' for i in ifaces):
    say('dns', 'REFUSED_INTERFACES_' + ','.join(ifaces))
else:
    for i, name in enumerate(['example.com', 'sbx-escape-test.invalid']):
        try:
            socket.setdefaulttimeout(3)
            r = socket.getaddrinfo(name, 80)
            say('dns%d' % i, 'RESOLVED:' + str(r[0][4]))
        except socket.gaierror as e:
            say('dns%d' % i, 'GAIERROR')
        except OSError as e:
            say('dns%d' % i, ename(e.errno))
    say('dns', 'done')
try:
    with open('/etc/resolv.conf') as f:
        ns = [l.split()[1] for l in f if l.startswith('nameserver')]
    say('nameservers', ','.join(ns) or 'none')
except OSError as e:
    say('nameservers', ename(e.errno))
"#;
    let out = Sandbox::new().py(script, &[]);
    assert_eq!(out.result("dns"), "done", "{}", out.describe());
    for l in ["dns0", "dns1"] {
        let got = out.result(l);
        assert!(
            got == "GAIERROR" || SOCKET_DENIED.contains(&got.as_str()),
            "{l}: name resolution worked: {got}\n{}",
            out.describe()
        );
    }
}

/// A host directory bound in (read-only here) that holds a host daemon's Unix socket: the
/// bind brings the socket into the sandbox, and no network setting covers a Unix socket,
/// so with host directories bound in the sandbox gets no `socket()` at all (a pair still
/// works). The probe reached a listener of the host's user through such a mount.
#[test]
fn cannot_connect_to_a_host_unix_socket_in_a_mount() {
    let host = host_dir();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = host.path().join("agent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    listener.set_nonblocking(true).unwrap();
    // And a datagram socket (as journald's or syslog's), which any datagram socket can
    // send to by path.
    let dpath = host.path().join("log.sock");
    let dlistener = std::os::unix::net::UnixDatagram::bind(&dpath).unwrap();
    dlistener.set_nonblocking(true).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dpath, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let script = r#"
def conn(p):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(p)
attempt('connect', lambda: conn(sys.argv[1]))
attempt('pair', lambda: [x.close() for x in socket.socketpair()] and None)
def dgram(p):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b'hello', p)
attempt('dgram', lambda: dgram(sys.argv[2]))
"#;
    let out = Sandbox::new()
        .mount(&format!("{}:/sock:ro", host.path().display()))
        .py(script, &["/sock/agent.sock", "/sock/log.sock"]);
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok(_) => panic!(
            "ESCAPE: the host unix socket in the mount got a connection\n{}",
            out.describe()
        ),
        Err(e) => panic!("accept: {e}"),
    }
    out.expect_errno("connect", SOCKET_DENIED);
    assert_eq!(
        out.result("pair"),
        "OK",
        "socketpair works\n{}",
        out.describe()
    );
    out.expect_errno("dgram", SOCKET_DENIED);
    let mut buf = [0u8; 16];
    assert!(
        dlistener.recv(&mut buf).is_err(),
        "ESCAPE: the host datagram socket in the mount got a message\n{}",
        out.describe()
    );
}
