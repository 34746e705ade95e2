//! Bad clients at scale: thousands of idle connections, and a client that never reads the
//! stream it asked for. The server's memory and descriptors stay bounded and it keeps
//! serving everyone else.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{gone_within, marker, started, Server};

/// Open descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap()
}

/// This process's soft limit on open files.
fn nofile() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

#[test]
fn ten_thousand_idle_connections_stay_bounded_and_others_are_served() {
    const BOUND: usize = 512;
    let s = Server::start(&[
        "--max-connections",
        &BOUND.to_string(),
        "--header-timeout",
        "2s",
    ]);
    let key = s.key("acme", "all");
    let addr = s.base.trim_start_matches("http://").to_string();
    let want = 10_000usize.min(nofile().saturating_sub(200));
    let base_fds = fds(s.pid());
    let rss0 = status_kib(s.pid(), "VmRSS");
    let mut idle = Vec::with_capacity(want);
    for _ in 0..want {
        match TcpStream::connect(&addr) {
            Ok(c) => idle.push(c),
            Err(e) => {
                println!("stopped opening connections at {}: {e}", idle.len());
                break;
            }
        }
    }
    println!(
        "idle connections opened: {} (aimed at {want}; the test's fd limit is {})",
        idle.len(),
        nofile()
    );
    assert!(
        idle.len() >= BOUND * 2,
        "too few connections to test the bound"
    );
    std::thread::sleep(Duration::from_millis(500));
    // The server holds at most the bound (plus its own descriptors).
    let held = fds(s.pid()).saturating_sub(base_fds);
    println!("server descriptors above its baseline with the flood: {held}");
    assert!(held <= BOUND + 16, "the server holds {held} descriptors");
    // Idle connections are cut at the header timeout; a new client is then served, while
    // the flood is still open on our side.
    let t0 = Instant::now();
    let mut served = false;
    while t0.elapsed() < Duration::from_secs(30) {
        if let Ok(r) = crate::harness::client()
            .get(s.url("/v1/sandboxes"))
            .bearer_auth(&key)
            .timeout(Duration::from_secs(2))
            .send()
        {
            if r.status() == 200 {
                served = true;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        served,
        "no request was served while the idle connections stayed open"
    );
    let rss1 = status_kib(s.pid(), "VmHWM");
    println!("server VmRSS before {rss0} KiB, VmHWM after {rss1} KiB");
    assert!(rss1 < rss0 + 256 * 1024, "server memory grew unbounded");
    drop(idle);
    let r = s.get(&key, "/v1/sandboxes");
    assert_eq!(r.status(), 200);
}

#[test]
fn a_client_that_never_reads_its_stream_holds_bounded_memory_and_others_go_on() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let r = s.post(
        &key,
        "/v1/sandboxes",
        &json!({"tier": "process", "limits": {"stdout_cap": "32MiB"}}),
    );
    assert_eq!(r.status(), 201);
    let id = r.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let m = marker("never-read");
    // 1 GiB of output asked for as a stream, by a client that reads nothing.
    let body =
        json!({"argv": ["sh", "-c", format!("head -c 1073741824 /dev/zero | tr '\\0' x; : {m}")]})
            .to_string();
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut slow = TcpStream::connect(&addr).unwrap();
    write!(
        slow,
        "POST /v1/sandboxes/{id}/exec HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\naccept: application/x-ndjson\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert!(started(&m), "the command did not start");
    let rss0 = status_kib(s.pid(), "VmRSS");
    // While it is stuck, everyone else is served.
    for i in 0..5 {
        let v: Value = s
            .post(
                &key,
                &format!("/v1/sandboxes/{id}/exec"),
                &json!({"argv": ["echo", format!("other-{i}")]}),
            )
            .json()
            .unwrap();
        assert_eq!(v["result"]["stdout"], format!("other-{i}\n"), "{v}");
        std::thread::sleep(Duration::from_millis(400));
    }
    assert_eq!(s.get(&key, "/healthz").status(), 200);
    let hwm = status_kib(s.pid(), "VmHWM");
    println!("server VmRSS {rss0} KiB when the stream stalled, VmHWM {hwm} KiB after");
    // At most the stream's output cap held, however much the program writes.
    assert!(
        hwm < rss0 + 3 * 32 * 1024,
        "server memory grew by {} KiB with a stalled 1 GiB stream",
        hwm.saturating_sub(rss0)
    );
    // Going away cancels it; nothing is left running.
    let mut sink = [0u8; 4096];
    let _ = slow.read(&mut sink);
    drop(slow);
    assert!(
        gone_within(&m, 40).is_empty(),
        "the stalled command outlived its client"
    );
}

/// Connections that send their headers a line at a time, or announce a body they never
/// send, hold every place: a new client is still served (a waiting one gives its place),
/// not after the header or request timeout; a connection whose request is being served
/// keeps its place.
#[test]
fn slow_headers_and_stalled_bodies_give_their_place_to_a_new_client() {
    use std::io::Write as _;
    const BOUND: usize = 8;
    let s = Server::start(&[
        "--max-connections",
        &BOUND.to_string(),
        "--header-timeout",
        "120s",
    ]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let addr = s.base.trim_start_matches("http://").to_string();
    // One place busy with a long command.
    let busy = {
        let (c, url, key) = (
            crate::harness::client(),
            s.url(&format!("/v1/sandboxes/{id}/exec")),
            key.clone(),
        );
        std::thread::spawn(move || {
            c.post(url)
                .bearer_auth(key)
                .json(&serde_json::json!({"argv": ["sleep", "12"], "timeout": "30s"}))
                .timeout(Duration::from_secs(60))
                .send()
                .map(|r| r.status().as_u16())
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // The other places, held one way then the other: headers a line at a time, or a body
    // announced and never sent (to a route that reads the body before it knows who asks).
    for body in [false, true] {
        let mut slow: Vec<TcpStream> = (0..BOUND * 2)
            .filter_map(|_| TcpStream::connect(&addr).ok())
            .collect();
        for c in &mut slow {
            let _ = if body {
                c.write_all(b"POST /dashboard/signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            } else {
                c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            };
        }
        std::thread::sleep(Duration::from_millis(300));
        if body {
            // Past the time a body may stall before its connection counts as waiting.
            std::thread::sleep(Duration::from_millis(2500));
        } else {
            for c in &mut slow {
                let _ = c.write_all(b"X-a: b\r\n");
            }
        }
        let t0 = Instant::now();
        let r = crate::harness::client()
            .get(s.url("/v1/sandboxes"))
            .bearer_auth(&key)
            .timeout(Duration::from_secs(20))
            .send()
            .unwrap();
        assert_eq!(r.status(), 200);
        println!(
            "served in {:?} with every place held (stalled bodies: {body})",
            t0.elapsed()
        );
        drop(slow);
    }
    // The long command's connection was not the one to go.
    assert_eq!(busy.join().unwrap().unwrap(), 200);
}
