//! Loopback fixtures: an HTTP upstream, an echo upstream, a name server, and a proxy.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use sandboxio_core::NetworkMode;
use sandboxio_egress::{Budget, EgressConfig, Guard, GuardOnly, Limits, Proxy, Resolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// An HTTP server answering every request with its request line and headers as the body.
pub async fn http_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let head = read_head(&mut s).await;
                let body = head.to_ascii_lowercase();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

/// A TCP server echoing what it reads; everything it received is kept.
pub async fn echo_upstream() -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let keep = keep.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            keep.lock().unwrap().extend_from_slice(&buf[..n]);
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// A name server answering A queries from `table`; every name asked is logged.
pub async fn name_server(table: &[(&str, [u8; 4])]) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = s.local_addr().unwrap();
    let table: Vec<(String, [u8; 4])> = table.iter().map(|(n, a)| (n.to_string(), *a)).collect();
    let log = Arc::new(Mutex::new(Vec::new()));
    let keep = log.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        loop {
            let (n, peer) = s.recv_from(&mut buf).await.unwrap();
            let q = &buf[..n];
            let mut labels = Vec::new();
            let mut i = 12;
            while q[i] != 0 {
                let l = q[i] as usize;
                labels.push(String::from_utf8_lossy(&q[i + 1..i + 1 + l]).to_string());
                i += 1 + l;
            }
            let qtype = u16::from_be_bytes([q[i + 1], q[i + 2]]);
            let name = labels.join(".");
            keep.lock().unwrap().push(name.clone());
            let mut r = q[..i + 5].to_vec();
            r[2] = 0x81;
            r[3] = 0x80;
            match table.iter().find(|(n, _)| *n == name) {
                Some((_, a)) if qtype == 1 => {
                    r[7] = 1;
                    r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
                    r.extend_from_slice(a);
                }
                Some(_) => {}
                None => r[3] = 0x83,
            }
            s.send_to(&r, peer).await.unwrap();
        }
    });
    (addr, log)
}

/// A proxy deciding with the guard alone (rules, lookup at `ns`, SSRF guard).
pub async fn proxy(
    allow: &[String],
    allow_private: &[&str],
    ns: SocketAddr,
) -> (SocketAddr, Arc<Proxy>) {
    proxy_with(allow, allow_private, ns, Limits::default()).await
}

/// [`proxy`] with its own limits.
pub async fn proxy_with(
    allow: &[String],
    allow_private: &[&str],
    ns: SocketAddr,
    limits: Limits,
) -> (SocketAddr, Arc<Proxy>) {
    proxy_in(allow, allow_private, ns, limits, Budget::process()).await
}

/// [`proxy_with`] drawing on `budget`.
pub async fn proxy_in(
    allow: &[String],
    allow_private: &[&str],
    ns: SocketAddr,
    limits: Limits,
    budget: Budget,
) -> (SocketAddr, Arc<Proxy>) {
    let section = sandboxio_config::NetworkSection {
        allow_private: allow_private.iter().map(|s| s.to_string()).collect(),
        resolver: vec![ns.to_string()],
        ..Default::default()
    };
    let cfg = EgressConfig::from_section(&section).unwrap();
    let rules = cfg
        .rules_for(&NetworkMode::Allowlist {
            allow: allow.to_vec(),
        })
        .unwrap()
        .unwrap();
    let guard = Guard::new(rules, Resolver::new(&cfg.resolver), "t");
    let proxy = Proxy::with_budget(Arc::new(GuardOnly(Arc::new(guard))), None, limits, budget);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(proxy.clone().serve(l));
    (addr, proxy)
}

pub async fn read_head(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(1) => got.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).to_string()
}

/// Sends `request` and reads until the peer closes.
pub async fn exchange(proxy: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).to_string()
}
