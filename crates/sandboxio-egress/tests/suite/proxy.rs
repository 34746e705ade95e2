//! The proxy against real loopback servers and a real name server (UDP), deciding with
//! the guard alone: what is allowed goes through to the checked address, everything else
//! gets a 403 with the code and the reason, and nothing breaks the proxy.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::net::*;

const LOOP: [u8; 4] = [127, 0, 0, 1];
const META: [u8; 4] = [169, 254, 169, 254];

#[tokio::test]
async fn allowed_plain_http_reaches_the_checked_address_with_origin_form() {
    let up = http_upstream().await;
    let (ns, _) = name_server(&[("up.test", LOOP)]).await;
    let (p, proxy) = proxy(&[format!("up.test:{}", up.port())], &["127.0.0.1"], ns).await;
    let req = format!(
        "GET http://up.test:{}/simple/x?q=1 HTTP/1.1\r\nhost: up.test:{}\r\nproxy-authorization: secret\r\nconnection: close\r\n\r\n",
        up.port(),
        up.port()
    );
    let got = exchange(p, req.as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("get /simple/x?q=1 http/1.1"), "{got}");
    assert!(
        !got.contains("proxy-authorization"),
        "hop header forwarded: {got}"
    );
    assert_eq!(proxy.summary().allowed, 1);
    assert_eq!(proxy.summary().denials, 0);
}

#[tokio::test]
async fn an_unlisted_host_gets_403_with_the_reason_and_is_never_looked_up() {
    let (ns, log) = name_server(&[("up.test", LOOP)]).await;
    let (p, proxy) = proxy(&["up.test:80".into()], &["127.0.0.1"], ns).await;
    let got = exchange(
        p,
        b"GET http://other.test/ HTTP/1.1\r\nhost: other.test\r\n\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    assert!(
        got.contains("SBX_E2410") && got.contains("other.test"),
        "{got}"
    );
    let got = exchange(
        p,
        b"CONNECT other.test:443 HTTP/1.1\r\nhost: other.test:443\r\n\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    assert!(!log.lock().unwrap().iter().any(|n| n == "other.test"));
    let s = proxy.summary();
    assert_eq!(s.denials, 2);
    assert!(s.denied_hosts.contains("other.test:443") && s.denied_hosts.contains("other.test:80"));
}

#[tokio::test]
async fn names_resolving_to_metadata_or_loopback_are_refused_unless_named() {
    let up = http_upstream().await;
    let (ns, _) = name_server(&[("meta.test", META), ("loop.test", LOOP)]).await;
    let allow = vec![
        "meta.test:80".to_string(),
        format!("loop.test:{}", up.port()),
    ];
    let (p, _) = proxy(&allow, &[], ns).await;
    let got = exchange(
        p,
        b"GET http://meta.test/latest/meta-data/ HTTP/1.1\r\n\r\n",
    )
    .await;
    assert!(
        got.starts_with("HTTP/1.1 403") && got.contains("SBX_E2411"),
        "{got}"
    );
    assert!(got.contains("cloud metadata"), "{got}");
    let req = format!("CONNECT loop.test:{} HTTP/1.1\r\n\r\n", up.port());
    let got = exchange(p, req.as_bytes()).await;
    assert!(
        got.starts_with("HTTP/1.1 403") && got.contains("loopback"),
        "{got}"
    );
    // Literal addresses are judged the same way.
    let got = exchange(p, b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n").await;
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
}

#[tokio::test]
async fn a_tunnel_carries_bytes_both_ways() {
    let (echo, _) = echo_upstream().await;
    let (ns, _) = name_server(&[("echo.test", LOOP)]).await;
    let (p, _) = proxy(&[format!("echo.test:{}", echo.port())], &["127.0.0.1"], ns).await;
    let mut s = TcpStream::connect(p).await.unwrap();
    let req = format!("CONNECT echo.test:{} HTTP/1.1\r\n\r\n", echo.port());
    s.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s.write_all(b"\x16\x03\x01ping").await.unwrap();
    let mut back = [0u8; 7];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"\x16\x03\x01ping");
}

#[tokio::test]
async fn connect_inside_connect_is_refused_before_it_leaves() {
    let (echo, seen) = echo_upstream().await;
    let (ns, _) = name_server(&[("relay.test", LOOP)]).await;
    let (p, proxy) = proxy(&[format!("relay.test:{}", echo.port())], &["127.0.0.1"], ns).await;
    let mut s = TcpStream::connect(p).await.unwrap();
    let req = format!("CONNECT relay.test:{} HTTP/1.1\r\n\r\n", echo.port());
    s.write_all(req.as_bytes()).await.unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"));
    s.write_all(b"CONNECT forbidden.test:443 HTTP/1.1\r\nhost: forbidden.test:443\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(
        n,
        0,
        "the tunnel answered: {:?}",
        String::from_utf8_lossy(&rest)
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "the inner CONNECT left the proxy"
    );
    assert_eq!(proxy.summary().denials, 1);
}

#[tokio::test]
async fn garbage_and_oversized_heads_do_not_stop_the_proxy() {
    let up = http_upstream().await;
    let (ns, _) = name_server(&[("up.test", LOOP)]).await;
    let (p, _) = proxy(&[format!("up.test:{}", up.port())], &["127.0.0.1"], ns).await;
    let got = exchange(p, b"\x00\x01\x02 not http at all\r\n\r\n").await;
    assert!(!got.contains("200 OK"), "{got}");
    let got = exchange(p, b"GET /relative HTTP/1.1\r\nhost: up.test\r\n\r\n").await;
    assert!(
        got.starts_with("HTTP/1.1 400") && got.contains("SBX_E2414"),
        "{got}"
    );
    let mut huge = b"GET http://up.test/ HTTP/1.1\r\nx-pad: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 200 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    let mut s = TcpStream::connect(p).await.unwrap();
    let _ = s.write_all(&huge).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    assert!(!String::from_utf8_lossy(&out).contains("200 OK"));
    // Still serving.
    let req = format!(
        "GET http://up.test:{}/ok HTTP/1.1\r\nconnection: close\r\n\r\n",
        up.port()
    );
    let got = exchange(p, req.as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

#[tokio::test]
async fn an_address_named_by_a_rule_is_let_through_only_for_what_that_rule_allows() {
    let up = http_upstream().await;
    let (ns, _) = name_server(&[("rebind.test", LOOP)]).await;
    // The loopback address is named for port 1 only; rebind.test resolves to it.
    let allow = [
        format!("rebind.test:{}", up.port()),
        format!("127.0.0.1:{}", up.port()),
    ];
    let (p, _) = proxy(&allow[..1], &[], ns).await;
    let named_elsewhere = vec![allow[0].clone(), "127.0.0.1:1".to_string()];
    let (q, _) = proxy(&named_elsewhere, &[], ns).await;
    let req = format!(
        "GET http://rebind.test:{}/x HTTP/1.1\r\nconnection: close\r\n\r\n",
        up.port()
    );
    for proxy in [p, q] {
        let got = exchange(proxy, req.as_bytes()).await;
        assert!(
            got.starts_with("HTTP/1.1 403") && got.contains("SBX_E2411"),
            "{got}"
        );
        let got = exchange(
            proxy,
            format!("CONNECT rebind.test:{} HTTP/1.1\r\n\r\n", up.port()).as_bytes(),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    }
    // The rule naming the address for this port lets that connection through.
    let (r, _) = proxy(&allow[1..], &[], ns).await;
    let got = exchange(
        r,
        format!(
            "GET http://127.0.0.1:{}/x HTTP/1.1\r\nconnection: close\r\n\r\n",
            up.port()
        )
        .as_bytes(),
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

#[tokio::test]
async fn in_full_mode_an_address_named_for_other_tenants_and_ports_stays_refused() {
    use std::sync::Arc;

    use sandboxio_core::NetworkMode;
    use sandboxio_egress::{EgressConfig, Guard, GuardOnly, Proxy, Resolver};
    let up = http_upstream().await;
    let (ns, _) = name_server(&[("rebind.test", LOOP)]).await;
    let section = |tenants: Vec<String>, port: u16| sandboxio_config::NetworkSection {
        resolver: vec![ns.to_string()],
        rules: vec![sandboxio_config::EgressRuleSection {
            host: vec!["127.0.0.1".into()],
            ports: vec![port],
            tenants,
            ..Default::default()
        }],
        ..Default::default()
    };
    let serve = |section: sandboxio_config::NetworkSection| async move {
        let cfg = EgressConfig::from_section(&section).unwrap();
        let rules = cfg.rules_for(&NetworkMode::Full).unwrap().unwrap();
        let guard = Guard::new(rules, Resolver::new(&cfg.resolver), "t");
        let proxy = Proxy::new(Arc::new(GuardOnly(Arc::new(guard))));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(proxy.serve(l));
        addr
    };
    let get = |host: &str| {
        format!(
            "GET http://{host}:{}/x HTTP/1.1\r\nconnection: close\r\n\r\n",
            up.port()
        )
    };
    // Another port of the address, or the right port for other tenants: refused.
    for s in [
        section(vec![], 1),
        section(vec!["nobody-*".into()], up.port()),
    ] {
        let p = serve(s).await;
        for host in ["127.0.0.1", "rebind.test"] {
            let got = exchange(p, get(host).as_bytes()).await;
            assert!(
                got.starts_with("HTTP/1.1 403") && got.contains("SBX_E2411"),
                "{host}: {got}"
            );
        }
    }
    // The rule for this tenant and port: through, by its address.
    let p = serve(section(vec!["t".into()], up.port())).await;
    let got = exchange(p, get("127.0.0.1").as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

/// Opens a tunnel to `target` through the proxy at `p`; the stream and the answer's head.
async fn tunnel(p: std::net::SocketAddr, target: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(p).await.unwrap();
    let req = format!("CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut s).await;
    (s, head)
}

/// Whether the peer has answered (or closed) within `wait`.
async fn answers_within(s: &mut TcpStream, wait: Duration) -> bool {
    let mut b = [0u8; 1];
    tokio::time::timeout(wait, s.read(&mut b)).await.is_ok()
}

/// Tunnels kept their connection's place only until the upgrade: one sandbox held more
/// tunnels than the cap (and the supervisor's descriptors with them). A tunnel now holds
/// its connection's slot for its whole life, and the sandbox's tunnels are capped: past
/// the cap a CONNECT gets 503 with its code, counted.
#[tokio::test]
async fn tunnels_count_against_the_connection_cap_and_past_their_own_get_503() {
    use sandboxio_egress::Limits;
    let (echo, _) = echo_upstream().await;
    let (ns, _) = name_server(&[("echo.test", LOOP)]).await;
    let limits = Limits {
        connections: 3,
        tunnels: 2,
        idle: Duration::from_secs(30),
    };
    let allow = [format!("echo.test:{}", echo.port())];
    let (p, proxy) = proxy_with(&allow, &["127.0.0.1"], ns, limits).await;
    let target = format!("echo.test:{}", echo.port());
    let (t1, head) = tunnel(p, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (mut t2, head) = tunnel(p, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_, head) = tunnel(p, &target).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(head.contains("x-sandboxio-code: SBX_E2430"), "{head}");
    assert_eq!(proxy.summary().denials, 1);
    // The two tunnels hold two of the three connection slots: one idle connection takes
    // the last, and the next waits.
    let _idle = TcpStream::connect(p).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut waiting = TcpStream::connect(p).await.unwrap();
    waiting
        .write_all(b"GET /relative HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(
        !answers_within(&mut waiting, Duration::from_millis(700)).await,
        "a connection past the cap was served while tunnels held its slots"
    );
    // A tunnel closed gives its slot back: the waiting connection is served.
    drop(t1);
    assert!(answers_within(&mut waiting, Duration::from_secs(10)).await);
    // The remaining tunnel still carries bytes.
    t2.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), t2.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"ping");
}

/// A tunnel had no idle timeout: one that stopped sending held two descriptors forever.
#[tokio::test]
async fn an_idle_tunnel_is_closed_and_a_busy_one_is_not() {
    use sandboxio_egress::Limits;
    let (echo, _) = echo_upstream().await;
    let (ns, _) = name_server(&[("echo.test", LOOP)]).await;
    let limits = Limits {
        idle: Duration::from_secs(1),
        ..Limits::default()
    };
    let allow = [format!("echo.test:{}", echo.port())];
    let (p, _) = proxy_with(&allow, &["127.0.0.1"], ns, limits).await;
    let target = format!("echo.test:{}", echo.port());
    // Silent from the start.
    let (mut silent, head) = tunnel(p, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Busy: a byte every 400 ms for 2 s keeps it open, then silence closes it.
    let (mut busy, head) = tunnel(p, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        busy.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(5), busy.read_exact(&mut b))
            .await
            .expect("a busy tunnel was closed")
            .unwrap();
    }
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut rest))
        .await
        .expect("an idle tunnel stayed open");
    assert_eq!(n.unwrap_or(0), 0);
    let n = tokio::time::timeout(Duration::from_secs(5), busy.read_to_end(&mut rest))
        .await
        .expect("a tunnel idle after its traffic stayed open");
    assert_eq!(n.unwrap_or(0), 0);
}

/// A proxy for `up.test` (at 127.0.0.1) on `port` with one rule: plain HTTP, GET, paths
/// under `/simple/`.
async fn path_rule_proxy(ns: std::net::SocketAddr, port: u16) -> std::net::SocketAddr {
    use std::sync::Arc;

    use sandboxio_core::NetworkMode;
    use sandboxio_egress::{EgressConfig, Guard, GuardOnly, Proxy, Resolver};
    let section = sandboxio_config::NetworkSection {
        resolver: vec![ns.to_string()],
        allow_private: vec!["127.0.0.1".into()],
        rules: vec![sandboxio_config::EgressRuleSection {
            host: vec!["up.test".into()],
            ports: vec![port],
            schemes: vec!["http".into()],
            methods: vec!["GET".into()],
            paths: vec!["/simple/".into()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let cfg = EgressConfig::from_section(&section).unwrap();
    let rules = cfg
        .rules_for(&NetworkMode::Allowlist { allow: vec![] })
        .unwrap()
        .unwrap();
    let guard = Guard::new(rules, Resolver::new(&cfg.resolver), "t");
    let proxy = Proxy::new(Arc::new(GuardOnly(Arc::new(guard))));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(proxy.serve(l));
    addr
}

/// Paths that Tomcat, Jetty or Spring (`;` parameters), a server decoding twice (`%25`)
/// or a lax UTF-8 decoder (overlong `%c0%ae`) read as `..`, and `//..` (a server merging
/// slashes first reads `/simple//../admin` as `/admin`), passed a path rule: they now
/// match no rule, and nothing is forwarded.
#[tokio::test]
async fn paths_read_in_different_ways_match_no_path_rule() {
    let up = http_upstream().await;
    let (ns, _) = name_server(&[("up.test", LOOP)]).await;
    let p = path_rule_proxy(ns, up.port()).await;
    let get = |path: &str| {
        format!(
            "GET http://up.test:{}{path} HTTP/1.1\r\nconnection: close\r\n\r\n",
            up.port()
        )
    };
    let got = exchange(p, get("/simple/numpy/").as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    for path in [
        "/simple/..;/admin",
        "/simple/.%2e;x=1/admin",
        "/simple/..%3b/admin",
        "/simple/%252e%252e/admin",
        "/simple/%c0%ae%c0%ae/admin",
        // nginx and Apache merge slashes before dot segments: `/admin` there.
        "/simple//../admin",
        "/simple/x//y",
        "//simple/x",
    ] {
        let got = exchange(p, get(path).as_bytes()).await;
        assert!(
            got.starts_with("HTTP/1.1 403") && got.contains("SBX_E2410"),
            "{path}: {got}"
        );
    }
}

/// A GET with a body was forwarded; an upstream that does not read bodies on GET runs the
/// body as a second request that the rules never decided (here `GET /admin` past a
/// `/simple/` rule). Refused, and nothing reaches the upstream.
#[tokio::test]
async fn a_body_on_get_and_the_like_is_refused_before_it_leaves() {
    let (echo, seen) = echo_upstream().await;
    let (ns, _) = name_server(&[("up.test", LOOP)]).await;
    let p = path_rule_proxy(ns, echo.port()).await;
    let smuggled = "GET /admin HTTP/1.1\r\nhost: up.test\r\n\r\n";
    let port = echo.port();
    let with_length = format!(
        "GET http://up.test:{port}/simple/x HTTP/1.1\r\ncontent-length: {}\r\n\r\n{smuggled}",
        smuggled.len()
    );
    let chunked = format!(
        "GET http://up.test:{port}/simple/x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{smuggled}\r\n0\r\n\r\n",
        smuggled.len()
    );
    let head_with_length = with_length.replacen("GET", "HEAD", 1);
    for req in [with_length, chunked, head_with_length] {
        let got = exchange(p, req.as_bytes()).await;
        assert!(
            got.starts_with("HTTP/1.1 403") && got.contains("SBX_E2431"),
            "{req}: {got}"
        );
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the upstream got: {:?}",
        String::from_utf8_lossy(&seen.lock().unwrap())
    );
    // Without a body (or `content-length: 0`) a GET goes through.
    let req = format!(
        "GET http://up.test:{port}/simple/x HTTP/1.1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    let _ = exchange(p, req.as_bytes()).await;
    let got = String::from_utf8_lossy(&seen.lock().unwrap()).to_string();
    assert!(got.starts_with("GET /simple/x HTTP/1.1\r\n"), "{got}");
}

/// Each proxy capped its own connections only, so several sandboxes in one supervisor
/// (`serve`) together took all its descriptors. Proxies sharing a budget: past it, a new
/// connection to any of them gets 503 (`SBX_E2432`); a closed one frees its place.
#[tokio::test]
async fn the_process_cap_covers_all_proxies_together() {
    let (echo, _) = echo_upstream().await;
    let (ns, _) = name_server(&[("up.test", LOOP)]).await;
    let budget = sandboxio_egress::Budget::new(2);
    let allow = [format!("up.test:{}", echo.port())];
    let (a, _) = proxy_in(
        &allow,
        &["127.0.0.1"],
        ns,
        Default::default(),
        budget.clone(),
    )
    .await;
    let (b, _) = proxy_in(
        &allow,
        &["127.0.0.1"],
        ns,
        Default::default(),
        budget.clone(),
    )
    .await;
    let target = format!("up.test:{}", echo.port());
    let (t1, head) = tunnel(a, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_t2, head) = tunnel(b, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_t3, head) = tunnel(b, &target).await;
    assert!(
        head.starts_with("HTTP/1.1 503") && head.contains("SBX_E2432"),
        "{head}"
    );
    let got = exchange(a, b"GET http://up.test/ HTTP/1.1\r\n\r\n").await;
    assert!(
        got.starts_with("HTTP/1.1 503") && got.contains("SBX_E2432"),
        "{got}"
    );
    drop(t1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_t4, head) = tunnel(a, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// A plain HTTP request whose body was announced and never sent held its connection's
/// slot for as long as the client liked (the upstream waiting too). Past the idle time
/// without a byte of it, the request fails and the client gets its answer.
#[tokio::test]
async fn a_request_body_that_stops_coming_is_given_up_after_the_idle_time() {
    use sandboxio_egress::Limits;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An upstream that reads and never answers: only the proxy can end the exchange.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = silent.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    let (ns, _) = name_server(&[("up.test", LOOP)]).await;
    let limits = Limits {
        idle: Duration::from_secs(1),
        ..Limits::default()
    };
    let (p, _) = proxy_with(&[format!("up.test:{port}")], &["127.0.0.1"], ns, limits).await;
    let mut c = tokio::net::TcpStream::connect(p).await.unwrap();
    c.write_all(
        format!("POST http://up.test:{port}/upload HTTP/1.1\r\ncontent-length: 100\r\n\r\nx")
            .as_bytes(),
    )
    .await
    .unwrap();
    // The client sends nothing more and keeps the connection open.
    let mut got = Vec::new();
    let mut b = [0u8; 512];
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match c.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    got.extend_from_slice(&b[..n]);
                    if got.windows(4).any(|w| w == b"\r\n\r\n") {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(answered.is_ok(), "the stalled request was never given up");
    let head = String::from_utf8_lossy(&got);
    assert!(head.starts_with("HTTP/1.1 5"), "{head}");
}

/// An upstream that ignores a POST's body would read the body's bytes as a second request
/// on the same connection (`GET /admin`, never decided nor recorded). Each forwarded
/// request asks its upstream to close after answering, so a server that honours that (as
/// every HTTP/1.1 server must) reads nothing after it. The upstream here answers without
/// reading a body, closes only when asked, and keeps the request lines it read.
#[tokio::test]
async fn a_body_holding_a_second_request_is_never_read_as_one() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let lax = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = lax.local_addr().unwrap().port();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let keep = lines.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = lax.accept().await.unwrap();
            let keep = keep.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut b = [0u8; 1024];
                loop {
                    // One head at a time; its body (if any) is left unread, as a lax
                    // server does, and read as the next request.
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end);
                    keep.lock()
                        .unwrap()
                        .push(head.lines().next().unwrap_or_default().to_string());
                    let close = head.to_ascii_lowercase().contains("connection: close");
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                    if close {
                        return;
                    }
                }
            });
        }
    });
    let (ns, _) = name_server(&[("up.test", LOOP)]).await;
    let (p, _) = proxy(&[format!("up.test:{port}")], &["127.0.0.1"], ns).await;
    let smuggled = "GET /admin HTTP/1.1\r\nhost: up.test\r\n\r\n";
    let req = format!(
        "POST http://up.test:{port}/simple/x HTTP/1.1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{smuggled}",
        smuggled.len()
    );
    let got = exchange(p, req.as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        *lines.lock().unwrap(),
        ["POST /simple/x HTTP/1.1"],
        "the upstream read more than the one request"
    );
}
