//! One call to a context: the gateway's [`Executor`] for a `run_code` operation that its
//! kernel carries out. The code sent is the request's own (as resolved and fingerprinted by
//! the chain); output is streamed as events while the cell runs; a cancel or the call's
//! timeout interrupts the cell, and a kernel that does not stop within a grace is killed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxio_core::{
    Enforcement, ExecEvent, ExecRequest, ExecResult, ExitStatus, OutputStream, Usage,
};
use sandboxio_gateway::executor::StreamIo;
use sandboxio_gateway::executor::{Executor, Unrunnable};
use sandboxio_gateway::CancelToken;
use serde_json::{json, Value};

use super::kernel::{KMsg, Kernel};

/// After an interrupt, how long the cell has to stop before the kernel is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

pub struct Call {
    pub kernel: Arc<Kernel>,
    pub context_id: String,
    pub sandbox_id: String,
    pub tier: sandboxio_core::IsolationTier,
}

fn gone(why: String) -> Unrunnable {
    Unrunnable {
        code: super::CONTEXT_GONE,
        message: why,
    }
}

/// A call's output, kept and streamed up to the call's own caps (`stdout_cap`,
/// `stderr_cap` of its request, as for an exec); what passes them is counted, not kept.
struct Collected {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    caps: [usize; 2],
    /// Bytes written to each stream, kept or not.
    totals: [u64; 2],
    events: Option<tokio::sync::mpsc::Sender<ExecEvent>>,
    started: Instant,
}

impl Collected {
    fn elapsed_us(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    async fn out(&mut self, stream: OutputStream, mut data: Vec<u8>) {
        if data.is_empty() {
            return;
        }
        let (i, buf) = match stream {
            OutputStream::Stdout => (0, &mut self.stdout),
            OutputStream::Stderr => (1, &mut self.stderr),
        };
        self.totals[i] += data.len() as u64;
        data.truncate(self.caps[i].saturating_sub(buf.len()));
        if data.is_empty() {
            return;
        }
        buf.extend_from_slice(&data);
        if let Some(tx) = &self.events {
            let ev = ExecEvent::Output {
                stream,
                data,
                elapsed_us: self.elapsed_us(),
            };
            if tx.send(ev).await.is_err() {
                self.events = None;
            }
        }
    }
}

#[async_trait::async_trait]
impl Executor for Call {
    async fn run(
        &self,
        req: &ExecRequest,
        io: StreamIo,
        cancel: CancelToken,
    ) -> Result<(ExecResult, Option<Value>), Unrunnable> {
        let code = req
            .files
            .values()
            .next()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .unwrap_or_default();
        let k = &self.kernel;
        // One call at a time per context: the next waits here.
        let mut rx = k.out.lock().await;
        if !k.alive() {
            return Err(gone(
                "the code context's kernel has ended; restart the context".into(),
            ));
        }
        // Whatever an earlier, abandoned call left behind is not this call's.
        while let Ok(m) = rx.try_recv() {
            if let KMsg::Gone(p) = m {
                k.mark_dead();
                return Err(gone(p.detail));
            }
        }
        let id = k.next_id();
        if !k.send(&json!({"op": "exec", "id": id, "code": code})).await {
            k.mark_dead();
            return Err(gone("the code context's kernel no longer reads".into()));
        }
        let cap = |b: sandboxio_core::ByteSize| usize::try_from(b.bytes()).unwrap_or(usize::MAX);
        let mut c = Collected {
            stdout: Vec::new(),
            stderr: Vec::new(),
            caps: [cap(req.limits.stdout_cap), cap(req.limits.stderr_cap)],
            totals: [0, 0],
            events: io.events,
            started: Instant::now(),
        };
        let deadline = tokio::time::sleep(req.limits.timeout);
        tokio::pin!(deadline);
        let mut stopping: Option<tokio::time::Instant> = None;
        let mut timed_out = false;
        let mut cancelled: Option<String> = None;
        let done: Option<Value> = loop {
            let grace = async {
                match stopping {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                m = rx.recv() => match m {
                    Some(KMsg::Stdout(b)) => c.out(OutputStream::Stdout, b).await,
                    Some(KMsg::Stderr(b)) => c.out(OutputStream::Stderr, b).await,
                    Some(KMsg::Frame(v)) => match v["t"].as_str() {
                        Some("stdout") => c.out(OutputStream::Stdout, text(&v)).await,
                        Some("stderr") => c.out(OutputStream::Stderr, text(&v)).await,
                        Some("done") if v["id"].as_i64() == Some(id) => break Some(v),
                        _ => {}
                    },
                    Some(KMsg::Gone(p)) => {
                        k.mark_dead();
                        return Err(gone(p.detail));
                    }
                    Some(KMsg::Asked(_)) | None => {
                        k.mark_dead();
                        return Err(gone("the code context's kernel has ended".into()));
                    }
                },
                why = cancel.cancelled(), if stopping.is_none() => {
                    cancelled = Some(why);
                    k.send(&json!({"op": "interrupt"})).await;
                    stopping = Some(tokio::time::Instant::now() + INTERRUPT_GRACE);
                }
                _ = &mut deadline, if stopping.is_none() => {
                    timed_out = true;
                    k.send(&json!({"op": "interrupt"})).await;
                    stopping = Some(tokio::time::Instant::now() + INTERRUPT_GRACE);
                }
                _ = grace => {
                    k.kill("a cell did not stop when interrupted");
                    break None;
                }
            }
        };
        let (exit, structured, cpu_us) = match &done {
            Some(v) => {
                let failed = !v["error"].is_null();
                let exit = ExitStatus::Code(i32::from(failed));
                let s = json!({
                    "context_id": self.context_id,
                    "value": bounded_text(&v["value"], VALUE_LIMIT),
                    "rich": bounded_rich(&v["rich"]),
                    "error": bounded_error(&v["error"]),
                });
                (exit, Some(s), v["cpu_us"].as_u64())
            }
            None => (
                ExitStatus::Signal(9),
                Some(
                    json!({"context_id": self.context_id, "value": null, "rich": [],
                    "error": {"ename": "KernelKilled", "evalue": "the cell did not stop when interrupted; the context was ended", "traceback": []}}),
                ),
                None,
            ),
        };
        if let Some(tx) = &c.events {
            let _ = tx
                .send(ExecEvent::Exit {
                    exit,
                    elapsed_us: c.elapsed_us(),
                })
                .await;
        }
        let took = c.started.elapsed();
        let duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        let duration_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let result = ExecResult {
            sandbox_id: self.sandbox_id.clone(),
            exit,
            stdout_bytes: c.totals[0],
            stderr_bytes: c.totals[1],
            stdout_truncated: c.totals[0] > c.stdout.len() as u64,
            stderr_truncated: c.totals[1] > c.stderr.len() as u64,
            stdout: c.stdout,
            stderr: c.stderr,
            timed_out,
            oom_killed: false,
            cancelled,
            duration_ms,
            duration_us,
            usage: Usage {
                cpu_time_ms: cpu_us.map(|u| u / 1000),
                peak_memory_bytes: None,
            },
            enforcement: Enforcement {
                tier: Some(self.tier),
                gaps: vec![format!(
                    "run by the kernel of code context {}, started under this tier",
                    self.context_id
                )],
                ..Enforcement::default()
            },
            output_dir: None,
            workspace: None,
            meter: None,
            network_denials: 0,
            denied_hosts: Vec::new(),
            output_incomplete: None,
            copy_out_error: None,
        };
        Ok((result, structured))
    }
}

/// The most a call's answer carries, whatever its kernel wrote (the kernel runs in the
/// cell's own process, so its limits are the cell's to change): the value's text, rich
/// results in all and in number, a traceback's lines and each line.
const VALUE_LIMIT: usize = 64 << 10;
const RICH_LIMIT: usize = 8 << 20;
const RICH_ITEMS: usize = 32;
const TRACEBACK_LINES: usize = 500;
const LINE_LIMIT: usize = 8 << 10;

/// A string cut to `max` bytes (at a character boundary); anything but a string is null.
fn bounded_text(v: &Value, max: usize) -> Value {
    match v.as_str() {
        Some(s) if s.len() > max => {
            let mut end = max;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            Value::String(s[..end].to_string())
        }
        Some(s) => Value::String(s.to_string()),
        None => Value::Null,
    }
}

/// Rich results as `{mime, data}` strings, at most [`RICH_ITEMS`] and [`RICH_LIMIT`] bytes
/// in all; one past either is named, not sent.
fn bounded_rich(v: &Value) -> Value {
    let mut out = Vec::new();
    let mut size = 0usize;
    for r in v.as_array().map(Vec::as_slice).unwrap_or_default() {
        let (Some(mime), Some(data)) = (r["mime"].as_str(), r["data"].as_str()) else {
            continue;
        };
        if out.len() >= RICH_ITEMS || size + data.len() > RICH_LIMIT {
            out.push(json!({"mime": "text/plain", "data": format!(
                "({} of {} bytes left out: a call's rich results are at most {RICH_ITEMS} and {RICH_LIMIT} bytes)",
                mime.chars().take(64).collect::<String>(), data.len()
            )}));
            break;
        }
        size += data.len();
        out.push(json!({"mime": mime.chars().take(128).collect::<String>(), "data": data}));
    }
    Value::Array(out)
}

/// An error as `{ename, evalue, traceback}`, each bounded; null when there is none.
fn bounded_error(v: &Value) -> Value {
    if v.is_null() {
        return Value::Null;
    }
    let traceback: Vec<Value> = match &v["traceback"] {
        Value::Array(a) => a
            .iter()
            .take(TRACEBACK_LINES)
            .map(|l| bounded_text(l, LINE_LIMIT))
            .collect(),
        other => vec![bounded_text(other, VALUE_LIMIT)],
    };
    json!({
        "ename": bounded_text(&v["ename"], LINE_LIMIT),
        "evalue": bounded_text(&v["evalue"], VALUE_LIMIT),
        "traceback": traceback,
    })
}

fn text(v: &Value) -> Vec<u8> {
    v["d"].as_str().unwrap_or("").as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_bounded_whatever_the_kernel_wrote() {
        let big = "x".repeat(RICH_LIMIT + 1);
        let rich = json!([{"mime": "image/png", "data": "AAAA"}, {"mime": "image/png", "data": big}, {"m": 0}]);
        let r = bounded_rich(&rich);
        let items = r.as_array().unwrap();
        assert_eq!(items.len(), 2, "{r}");
        assert_eq!(items[0]["data"], "AAAA");
        assert!(items[1]["data"].as_str().unwrap().contains("left out"));
        let many = Value::Array(vec![json!({"mime": "text/plain", "data": "a"}); 100_000]);
        assert_eq!(
            bounded_rich(&many).as_array().unwrap().len(),
            RICH_ITEMS + 1
        );
        assert_eq!(
            bounded_text(&json!("é".repeat(VALUE_LIMIT)), VALUE_LIMIT)
                .as_str()
                .unwrap()
                .len(),
            VALUE_LIMIT
        );
        assert_eq!(bounded_text(&json!({"a": 1}), 10), Value::Null);
        let e =
            bounded_error(&json!({"ename": "E", "evalue": "v", "traceback": vec!["l"; 10_000]}));
        assert_eq!(e["traceback"].as_array().unwrap().len(), TRACEBACK_LINES);
        assert_eq!(bounded_error(&Value::Null), Value::Null);
    }
}
