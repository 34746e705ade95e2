//! HTTPS through the egress proxy against the same request direct, on loopback, in the
//! same run (alternating), and 200 concurrent connections through one proxy. A third way,
//! in the same rotation: through a proxy that injects a secret at the edge (TLS terminated
//! with the sandbox's CA, the placeholder replaced, TLS again to the verified upstream).
//!
//! Each request: TCP connect (+ CONNECT through the proxy), TLS handshake (rustls, the
//! upstream's certificate verified against a CA made for the run), `GET /`, the whole
//! response. The proxy decides with the guard alone (rules + SSRF guard; the upstream's
//! address is named by the rule). `cargo bench -p sandboxio-egress --bench proxy`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sandboxio_core::NetworkMode;
use sandboxio_egress::edge::{upstream_trust, LoadedSecret};
use sandboxio_egress::rules::HostGlob;
use sandboxio_egress::secrets::SecretValue;
use sandboxio_egress::{Edge, EgressConfig, Guard, GuardOnly, Proxy, Resolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;

const ROUNDS: usize = 400;
const WARMUP: usize = 40;
const CONCURRENT: usize = 200;

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let ok = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl")
        .status
        .success();
    assert!(ok, "openssl {args:?}");
}

fn certs(dir: &std::path::Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=bench CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=bench.test",
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
        ],
    );
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=DNS:bench.test,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "ext",
            "-out",
            "srv.pem",
        ],
    );
}

async fn upstream(dir: &std::path::Path) -> SocketAddr {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("srv.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("srv.key")).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = s.set_nodelay(true);
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let mut got = Vec::new();
                while !got.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = "hello from the bench upstream\n";
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}

fn connector(dir: &std::path::Path) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// One HTTPS request; through `proxy` (CONNECT) when given.
async fn request(
    tls: &tokio_rustls::TlsConnector,
    up: SocketAddr,
    proxy: Option<SocketAddr>,
) -> Result<(), String> {
    request_as(tls, "bench.test", up, proxy, "").await
}

/// A trust store holding only `pem`'s certificates.
fn connector_for(pem: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// One HTTPS request to `name`, with `extra` header lines.
async fn request_as(
    tls: &tokio_rustls::TlsConnector,
    name: &str,
    up: SocketAddr,
    proxy: Option<SocketAddr>,
    extra: &str,
) -> Result<(), String> {
    let mut s = TcpStream::connect(proxy.unwrap_or(up))
        .await
        .map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    if proxy.is_some() {
        let req = format!("CONNECT {up} HTTP/1.1\r\nhost: {up}\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut b).await {
                Ok(1) => head.push(b[0]),
                _ => return Err("proxy closed".into()),
            }
        }
        if !head.starts_with(b"HTTP/1.1 200") {
            return Err(String::from_utf8_lossy(&head).into_owned());
        }
    }
    let server = ServerName::try_from(name.to_string()).unwrap();
    let mut t = tls.connect(server, s).await.map_err(|e| e.to_string())?;
    let req = format!("GET / HTTP/1.1\r\nhost: {name}\r\n{extra}connection: close\r\n\r\n");
    t.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = t.read_to_end(&mut out).await;
    if !out.starts_with(b"HTTP/1.1 200") || !out.ends_with(b"upstream\n") {
        return Err(format!("bad answer: {:?}", String::from_utf8_lossy(&out)));
    }
    Ok(())
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        certs(dir.path());
        let up = upstream(dir.path()).await;
        let tls = connector(dir.path());
        let cfg = EgressConfig::default();
        let rules = cfg
            .rules_for(&NetworkMode::Allowlist { allow: vec![up.to_string()] })
            .unwrap()
            .unwrap();
        let guard = Guard::new(rules, Resolver::System, "bench");
        let proxy = Proxy::new(Arc::new(GuardOnly(Arc::new(guard))));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = l.local_addr().unwrap();
        tokio::spawn(proxy.clone().serve(l));

        // The edge: a secret bound to the upstream's address, its CA in the client's trust,
        // the bench CA as `upstream_ca`.
        let secret = Arc::new(LoadedSecret {
            name: "BENCH_TOKEN".into(),
            value: SecretValue::new(b"bench-secret-value".to_vec()).unwrap(),
            hosts: vec![HostGlob::parse("127.0.0.1").unwrap()],
        });
        let trust = upstream_trust(Some(&dir.path().join("ca.pem"))).unwrap();
        let edge = Arc::new(Edge::new(vec![secret], &trust).unwrap());
        let auth = format!("authorization: Bearer {}\r\n", edge.placeholders()[0].1);
        let edge_tls = connector_for(&edge.ca_pem());
        let rules = cfg
            .rules_for(&NetworkMode::Allowlist { allow: vec![up.to_string()] })
            .unwrap()
            .unwrap();
        let guard = Guard::new(rules, Resolver::System, "bench");
        let edge_proxy = Proxy::with_edge(Arc::new(GuardOnly(Arc::new(guard))), Some(edge));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let e = l.local_addr().unwrap();
        tokio::spawn(edge_proxy.clone().serve(l));

        for _ in 0..WARMUP {
            request(&tls, up, None).await.unwrap();
            request(&tls, up, Some(p)).await.unwrap();
            request_as(&edge_tls, "127.0.0.1", up, Some(e), &auth).await.unwrap();
        }
        let (mut direct, mut proxied, mut injected) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..ROUNDS {
            // Rotate which goes first, so none always runs on a warmer cache.
            let mut order = [0, 1, 2];
            order.rotate_left(i % 3);
            for way in order {
                let t = Instant::now();
                match way {
                    0 => request(&tls, up, None).await.unwrap(),
                    1 => request(&tls, up, Some(p)).await.unwrap(),
                    _ => request_as(&edge_tls, "127.0.0.1", up, Some(e), &auth).await.unwrap(),
                }
                let d = t.elapsed();
                [&mut direct, &mut proxied, &mut injected][way].push(d);
            }
        }
        let (i50, i99) = (pct(&mut injected, 0.5), pct(&mut injected, 0.99));
        let (d50, d99) = (pct(&mut direct, 0.5), pct(&mut direct, 0.99));
        let (p50, p99) = (pct(&mut proxied, 0.5), pct(&mut proxied, 0.99));
        println!("https request, {ROUNDS} rounds each, alternating, loopback:");
        println!("  direct        p50 {:8.1} us  p99 {:8.1} us", us(d50), us(d99));
        println!("  through proxy p50 {:8.1} us  p99 {:8.1} us", us(p50), us(p99));
        println!(
            "  overhead p50 {:.1} us ({:.2}x direct), p99 {:.1} us",
            us(p50) - us(d50),
            us(p50) / us(d50),
            us(p99) - us(d99)
        );
        println!("  secret injected at the edge p50 {:8.1} us  p99 {:8.1} us", us(i50), us(i99));
        println!(
            "  edge overhead p50 {:.1} us ({:.2}x direct, {:.2}x tunnel)",
            us(i50) - us(d50),
            us(i50) / us(d50),
            us(i50) / us(p50)
        );
        println!("edge proxy summary: {:?}", edge_proxy.summary());

        let t = Instant::now();
        let tasks: Vec<_> = (0..CONCURRENT)
            .map(|_| {
                let tls = tls.clone();
                tokio::spawn(async move { request(&tls, up, Some(p)).await })
            })
            .collect();
        let mut errors = Vec::new();
        for task in tasks {
            if let Err(e) = task.await.unwrap() {
                errors.push(e);
            }
        }
        println!(
            "{CONCURRENT} concurrent https connections through one proxy: {} ok, {} errors, {:.1} ms in all",
            CONCURRENT - errors.len(),
            errors.len(),
            t.elapsed().as_secs_f64() * 1e3
        );
        if let Some(e) = errors.first() {
            println!("  first error: {e}");
        }
        println!("proxy summary: {:?}", proxy.summary());
        assert!(errors.is_empty());
    });
}
