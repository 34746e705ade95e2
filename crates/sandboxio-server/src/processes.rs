//! What runs in a sandbox now: every exec and run_code, streamed or not, and background
//! commands that outlive their request. Each has an id the API lists, reads and kills
//! (`/v1/sandboxes/{id}/processes`); a kill cancels the operation, whose whole process
//! tree is killed and whose record says it was cancelled.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use sandboxio_core::{ExecEvent, ExitStatus, OutputStream};
use sandboxio_gateway::CancelToken;
use serde_json::Value;
use tokio::sync::watch;

use crate::context::random_hex;

/// Finished background processes kept for their caller to read (oldest dropped first).
const KEEP_FINISHED: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProcState {
    Running,
    /// It ran and ended (whatever its exit status).
    Exited,
    /// Killed over the API, by its sandbox closing, or because its client went away.
    Cancelled,
    /// The chain stopped it or the sandbox could not run it (the outcome says why).
    Failed,
}

#[derive(Debug, Default)]
struct Progress {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<ExitStatus>,
    finished_at: Option<DateTime<Utc>>,
    operation_id: Option<String>,
    /// The answer the request would have had: `{record, result}` or a problem.
    outcome: Option<Value>,
}

pub struct Process {
    pub id: String,
    /// `exec`, `run_code` or `context`.
    pub kind: &'static str,
    /// The argv, or the language of the code.
    pub command: Vec<String>,
    pub background: bool,
    pub started_at: DateTime<Utc>,
    token: CancelToken,
    state: watch::Sender<ProcState>,
    progress: Mutex<Progress>,
}

impl Process {
    pub fn state(&self) -> ProcState {
        *self.state.borrow()
    }

    /// Cancels it (no effect once it ended).
    pub fn kill(&self, why: &str) {
        if self.state() == ProcState::Running {
            self.token.cancel(why.to_string());
        }
    }

    /// Cancels it with `why` when `cond` comes first; nothing once it ended (or is gone).
    pub fn cancel_when(
        &self,
        why: &'static str,
        cond: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let mut rx = self.state.subscribe();
        let token = self.token.clone();
        tokio::spawn(async move {
            let fired = tokio::select! {
                () = cond => true,
                _ = rx.wait_for(|s| *s != ProcState::Running) => false,
            };
            if fired && *rx.borrow() == ProcState::Running {
                token.cancel(why.to_string());
            }
        });
    }

    /// Keeps `data` of `stream` (as [`Process::take_event`]); where it starts in all of the
    /// stream kept so far.
    pub fn append(&self, stream: OutputStream, data: &[u8]) -> u64 {
        let Ok(mut p) = self.progress.lock() else {
            return 0;
        };
        let kept = match stream {
            OutputStream::Stdout => &mut p.stdout,
            OutputStream::Stderr => &mut p.stderr,
        };
        let at = kept.len() as u64;
        kept.extend_from_slice(data);
        at
    }

    /// What `stream` kept from byte `from` on, and where it ends.
    pub fn output_from(&self, stream: OutputStream, from: u64) -> (Vec<u8>, u64) {
        let Ok(p) = self.progress.lock() else {
            return (Vec::new(), from);
        };
        let kept = match stream {
            OutputStream::Stdout => &p.stdout,
            OutputStream::Stderr => &p.stderr,
        };
        let start = (from as usize).min(kept.len());
        (kept[start..].to_vec(), kept.len() as u64)
    }

    /// Keeps the output of a background process (the sandbox caps each stream).
    pub fn take_event(&self, ev: &ExecEvent) {
        if let Ok(mut p) = self.progress.lock() {
            match ev {
                ExecEvent::Output { stream, data, .. } => match stream {
                    OutputStream::Stdout => p.stdout.extend_from_slice(data),
                    OutputStream::Stderr => p.stderr.extend_from_slice(data),
                },
                ExecEvent::Exit { exit, .. } => p.exit = Some(*exit),
            }
        }
    }

    /// Marks it ended with the answer its request would have had.
    pub fn finish(&self, state: ProcState, operation_id: Option<String>, outcome: Value) {
        if let Ok(mut p) = self.progress.lock() {
            p.finished_at = Some(Utc::now());
            p.operation_id = operation_id;
            p.outcome = Some(outcome);
        }
        self.state.send_replace(state);
    }

    /// Marks it ended without an outcome (nobody is left to read one).
    pub fn end(&self, state: ProcState) {
        if let Ok(mut p) = self.progress.lock() {
            p.finished_at = Some(Utc::now());
        }
        self.state.send_replace(state);
    }

    /// Waits until it ended, at most `wait`.
    pub async fn wait(&self, wait: std::time::Duration) {
        let mut rx = self.state.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|s| *s != ProcState::Running)).await;
    }

    pub fn view(&self, with_output: bool) -> ProcessView {
        let p = self.progress.lock();
        let (stdout, stderr, exit, finished_at, operation_id, outcome) = match p {
            Ok(p) => (
                with_output.then(|| sandboxio_core::wire::encode(&p.stdout)),
                with_output.then(|| sandboxio_core::wire::encode(&p.stderr)),
                p.exit,
                p.finished_at,
                p.operation_id.clone(),
                p.outcome.clone(),
            ),
            Err(_) => (None, None, None, None, None, None),
        };
        let enc = |e: &Option<(String, Option<sandboxio_core::wire::ByteEncoding>)>| {
            e.as_ref()
                .and_then(|(_, enc)| enc.map(|_| "base64".to_string()))
        };
        ProcessView {
            id: self.id.clone(),
            kind: self.kind.to_string(),
            command: self.command.clone(),
            background: self.background,
            state: self.state(),
            started_at: self.started_at,
            finished_at,
            exit: exit.map(|e| serde_json::to_value(e).unwrap_or_default()),
            operation_id,
            stdout_encoding: enc(&stdout),
            stderr_encoding: enc(&stderr),
            stdout: stdout.map(|s| s.0),
            stderr: stderr.map(|s| s.0),
            outcome,
        }
    }
}

/// A process as the API shows it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ProcessView {
    pub id: String,
    pub kind: String,
    pub command: Vec<String>,
    pub background: bool,
    pub state: ProcState,
    pub started_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// `{"code": n}` or `{"signal": n}` once it exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub exit: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// Output so far (background processes): text, or base64 with the encoding set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_encoding: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_encoding: Option<String>,
    /// Once ended: `{record, result}` when it ran, else the problem that stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub outcome: Option<Value>,
}

/// One sandbox's processes.
#[derive(Default)]
pub struct Processes {
    map: Mutex<BTreeMap<String, Arc<Process>>>,
}

impl Processes {
    pub fn add(
        &self,
        kind: &'static str,
        command: Vec<String>,
        background: bool,
        token: CancelToken,
    ) -> Arc<Process> {
        let p = Arc::new(Process {
            id: format!("p_{}", random_hex(8)),
            kind,
            command,
            background,
            started_at: Utc::now(),
            token,
            state: watch::channel(ProcState::Running).0,
            progress: Mutex::new(Progress::default()),
        });
        if let Ok(mut m) = self.map.lock() {
            // Drop the oldest finished ones past the bound.
            let mut done: Vec<(DateTime<Utc>, String)> = m
                .values()
                .filter(|p| p.state() != ProcState::Running)
                .map(|p| (p.started_at, p.id.clone()))
                .collect();
            if done.len() >= KEEP_FINISHED {
                done.sort();
                for (_, id) in done.iter().take(done.len() + 1 - KEEP_FINISHED) {
                    m.remove(id);
                }
            }
            m.insert(p.id.clone(), p.clone());
        }
        p
    }

    pub fn get(&self, id: &str) -> Option<Arc<Process>> {
        self.map.lock().ok()?.get(id).cloned()
    }

    pub fn remove(&self, id: &str) -> Option<Arc<Process>> {
        self.map.lock().ok()?.remove(id)
    }

    /// Background processes (not code context kernels) running now.
    pub fn background_running(&self) -> usize {
        self.list()
            .iter()
            .filter(|p| p.background && p.kind != "context" && p.state() == ProcState::Running)
            .count()
    }

    pub fn list(&self) -> Vec<Arc<Process>> {
        let mut v: Vec<Arc<Process>> = self
            .map
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|p| p.started_at);
        v
    }

    /// Cancels every running process (pause).
    pub fn kill_all(&self, why: &str) -> usize {
        let all = self.list();
        let mut n = 0;
        for p in all {
            if p.state() == ProcState::Running {
                p.kill(why);
                n += 1;
            }
        }
        n
    }
}

/// Summary of what a process runs, for listings (never env or stdin).
pub fn command_of(args: &sandboxio_core::OperationArgs) -> Vec<String> {
    match args {
        sandboxio_core::OperationArgs::Exec { argv } => argv.clone(),
        sandboxio_core::OperationArgs::RunCode { language, .. } => {
            vec![serde_json::to_value(language)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn finished_processes_are_bounded_and_running_ones_kept() {
        let t = Processes::default();
        let running = t.add("exec", vec!["sleep".into()], true, CancelToken::new());
        for _ in 0..(KEEP_FINISHED + 10) {
            let p = t.add("exec", vec!["true".into()], true, CancelToken::new());
            p.finish(ProcState::Exited, None, Value::Null);
        }
        let all = t.list();
        assert!(all.len() <= KEEP_FINISHED + 1, "{}", all.len());
        assert!(t.get(&running.id).is_some());
    }

    #[test]
    fn kill_cancels_only_a_running_process() {
        let t = Processes::default();
        let tok = CancelToken::new();
        let p = t.add("exec", vec!["sleep".into()], true, tok.clone());
        p.kill("asked");
        assert!(tok.is_cancelled());
        let tok2 = CancelToken::new();
        let q = t.add("exec", vec!["true".into()], true, tok2.clone());
        q.finish(ProcState::Exited, None, Value::Null);
        q.kill("late");
        assert!(!tok2.is_cancelled());
    }
}
