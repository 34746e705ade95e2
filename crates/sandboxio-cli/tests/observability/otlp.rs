//! A real OTLP/HTTP receiver for the tests: a tiny HTTP/1.1 server on 127.0.0.1 that
//! accepts `POST /v1/traces` and `POST /v1/metrics` (protobuf), answers 200 with an empty
//! protobuf body, and keeps every request body. Keep-alive and chunked bodies are handled
//! (the exporter's HTTP client reuses connections). It stops when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// One request received: its path and raw body.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub body: Vec<u8>,
}

pub struct Receiver {
    pub addr: String,
    got: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s) = (got.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            // Bounded: the test drops the receiver (stop) long before this deadline.
            let deadline = Instant::now() + Duration::from_secs(600);
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let g = g.clone();
                        std::thread::spawn(move || serve(conn, &g));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Receiver {
            addr,
            got,
            stop,
            accept: Some(accept),
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Every span of every `/v1/traces` request.
    pub fn spans(&self) -> Vec<Span> {
        let mut out = Vec::new();
        for r in self.received().iter().filter(|r| r.path == "/v1/traces") {
            let req = ExportTraceServiceRequest::decode(&r.body[..])
                .expect("a /v1/traces body that is not an ExportTraceServiceRequest");
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    out.extend(ss.spans);
                }
            }
        }
        out
    }

    /// `service.name` values of the resources that sent spans.
    pub fn service_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in self.received().iter().filter(|r| r.path == "/v1/traces") {
            let req = ExportTraceServiceRequest::decode(&r.body[..]).unwrap();
            for rs in req.resource_spans {
                for kv in rs.resource.map(|r| r.attributes).unwrap_or_default() {
                    if kv.key == "service.name" {
                        out.push(any_str(kv.value.as_ref()));
                    }
                }
            }
        }
        out
    }

    /// Names of every metric of every `/v1/metrics` request.
    pub fn metric_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in self.received().iter().filter(|r| r.path == "/v1/metrics") {
            let req = ExportMetricsServiceRequest::decode(&r.body[..])
                .expect("a /v1/metrics body that is not an ExportMetricsServiceRequest");
            for rm in req.resource_metrics {
                for sm in rm.scope_metrics {
                    out.extend(sm.metrics.into_iter().map(|m| m.name));
                }
            }
        }
        out
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// The string form of an attribute value (strings as is, others via Debug).
pub fn any_str(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The value of a span attribute, as a string.
pub fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| any_str(kv.value.as_ref()))
}

fn serve(conn: TcpStream, got: &Mutex<Vec<Received>>) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut len = 0usize;
        let mut chunked = false;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                if k == "content-length" {
                    len = v.parse().unwrap_or(0);
                } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                if r.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                    .unwrap_or(0);
                let mut chunk = vec![0u8; n + 2]; // data + CRLF
                if r.read_exact(&mut chunk).is_err() {
                    return;
                }
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            body.resize(len, 0);
            if r.read_exact(&mut body).is_err() {
                return;
            }
        }
        let ok = method == "POST" && (path == "/v1/traces" || path == "/v1/metrics");
        if ok {
            got.lock().unwrap().push(Received { path, body });
        }
        let status = if ok { "200 OK" } else { "404 Not Found" };
        let resp = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
        );
        if w.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}
