//! A server process per test, API keys made with `sandboxio keys create`, a blocking client.

#![allow(dead_code)] // each test module uses a subset

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::blocking::{Client, Response};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_sandboxio");

/// Allows commands and code in the process tier (fast, and no user namespaces needed),
/// asks a person before `touch`, and allows files inside the workspace.
pub const POLICY: &str = r#"[settings]
name = "server-tests"
description = "process tier; touch needs approval; files stay in the workspace"

[[rule]]
id = "run-in-process"
effect = "allow"
kind = ["exec", "run_code"]
tier = "process"
network = "none"
reason = "tests run commands in the process tier"

[[rule]]
id = "touch-needs-approval"
effect = "ask"
kind = "exec"
argv_prefix = ["touch"]
reason = "creating files from the shell needs a person's approval"

[[rule]]
id = "files-in-workspace"
effect = "allow"
kind = ["file_read", "file_write", "file_delete"]
in_workspace = true
reason = "files inside the workspace are allowed"
"#;

pub struct Server {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    wrapper: Vec<String>,
    extra: Vec<String>,
    /// `http://127.0.0.1:PORT` (or `http://localhost` over the Unix socket).
    pub base: String,
    pub client: Client,
}

pub fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        Self::start_with(extra, |_| {})
    }

    /// Starts `sandboxio serve --listen 127.0.0.1:0` (unless `extra` says otherwise) and
    /// waits for its "serving" line.
    pub fn start_with(extra: &[&str], prepare: impl FnOnce(&Path)) -> Server {
        Self::start_wrapped(&[], extra, prepare)
    }

    /// As [`Server::start_with`], with the server run by `wrapper` (a command and its
    /// arguments, e.g. `unshare ...`; empty: none). The pid is the wrapper's.
    pub fn start_wrapped(wrapper: &[&str], extra: &[&str], prepare: impl FnOnce(&Path)) -> Server {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("sbx-serve-")
            .tempdir()
            .unwrap();
        // Workspaces under the test's own directory (passable, not listable, by the
        // unprivileged id programs may run as), so that nothing outlives the test.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            format!(
                "[sandbox]\nwork_root = \"{}\"\n",
                dir.path().join("work").display()
            ),
        )
        .unwrap();
        prepare(dir.path());
        let mut s = Server {
            dir,
            child: None,
            wrapper: wrapper.iter().map(|x| x.to_string()).collect(),
            extra: extra.iter().map(|x| x.to_string()).collect(),
            base: String::new(),
            client: client(),
        };
        s.spawn();
        s
    }

    /// Starts the server process on this directory (again, after [`Server::stop`]).
    pub fn spawn(&mut self) {
        let dir = &self.dir;
        let extra = &self.extra;
        let mut cmd = match self.wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.arg("serve")
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--policy")
            .arg(dir.path().join("policy.toml"))
            .arg("--config")
            .arg(dir.path().join("config.toml"));
        if !extra.iter().any(|x| x == "--socket") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(extra)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("SBX_STATE_DIR")
            // Sandbox env values are sealed under the secrets key: one of the test's own,
            // outside its state directory (never the host's default key file).
            .env_remove("SBX_SECRETS_KEY")
            .env("SBX_SECRETS_KEY_FILE", dir.path().join("secrets.key"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line).unwrap();
        assert!(
            line.starts_with("sandboxio serving"),
            "server did not start: {line:?}"
        );
        let addr = line.split_whitespace().last().unwrap().to_string();
        let base = if addr.starts_with("unix:") {
            "http://localhost".to_string()
        } else {
            let scheme = line.split_whitespace().nth(2).unwrap();
            format!("{scheme}://{addr}")
        };
        self.child = Some(child);
        self.base = base;
    }

    /// Stops the server with `signal` (`TERM` or `KILL`), waits for it, and starts it again
    /// on the same state directory and workspaces.
    pub fn restart(&mut self, signal: &str) {
        self.stop(signal);
        self.spawn();
    }

    /// Stops the server with `signal` and waits for it to exit.
    pub fn stop(&mut self, signal: &str) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        child.wait().unwrap()
    }

    /// The host directory of sandbox `id`'s workspace.
    pub fn workspace(&self, id: &str) -> PathBuf {
        let work = self.dir.path().join("work");
        for e in std::fs::read_dir(&work).unwrap().flatten() {
            let p = e.path().join(id);
            if e.file_name().to_string_lossy().starts_with("sbx-serve-") && p.is_dir() {
                return p;
            }
        }
        panic!("no workspace for sandbox {id} under {}", work.display());
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// `sandboxio <args> --state-dir <its state> --config <its config>`: an operator's
    /// command against this server's state, from another process.
    pub fn operator(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(args)
            .arg("--state-dir")
            .arg(self.state())
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .output()
            .unwrap()
    }

    /// [`Server::operator`] that must succeed: its standard output.
    pub fn operator_ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.operator(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `sandboxio keys create`: the token printed once.
    pub fn key(&self, tenant: &str, scopes: &str) -> String {
        let out = self.operator_ok(&["keys", "create", "--tenant", tenant, "--scopes", scopes]);
        String::from_utf8(out).unwrap().trim().to_string()
    }

    /// Revokes API key `key` (`sandboxio keys revoke`, another process, as an operator does).
    pub fn revoke(&self, key: &str) {
        let id = key.split('_').nth(1).unwrap();
        self.operator_ok(&["keys", "revoke", id]);
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, key: &str, path: &str) -> Response {
        self.client
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .unwrap()
    }

    pub fn delete(&self, key: &str, path: &str) -> Response {
        self.client
            .delete(self.url(path))
            .bearer_auth(key)
            .send()
            .unwrap()
    }

    pub fn post(&self, key: &str, path: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .bearer_auth(key)
            .json(body)
            .send()
            .unwrap()
    }

    pub fn put_bytes(&self, key: &str, path: &str, body: Vec<u8>) -> Response {
        self.client
            .put(self.url(path))
            .bearer_auth(key)
            .body(body)
            .send()
            .unwrap()
    }

    /// Creates a process-tier sandbox and returns its id.
    pub fn sandbox(&self, key: &str) -> String {
        let r = self.post(
            key,
            "/v1/sandboxes",
            &serde_json::json!({"tier": "process"}),
        );
        assert_eq!(r.status(), 201, "{}", r.text().unwrap());
        r.json::<Value>().unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The audit trail's events.
    pub fn audit(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.state().join("audit.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    /// Waits (at most 60 s) for a server already sent SIGTERM to exit.
    pub fn terminate_wait(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        for _ in 0..1200 {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        panic!("the server did not exit within 60 s of SIGTERM");
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            for _ in 0..200 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A problem answer's `code`, checking its content type.
pub fn problem(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body: Value = r.json().unwrap();
    assert_eq!(ct, "application/problem+json", "{body}");
    assert!(
        body["code"].as_str().unwrap().starts_with("SBX_E"),
        "{body}"
    );
    (status, body)
}

/// Command lines of live processes that contain `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) {
                found.push(cmd);
            }
        }
    }
    found
}

/// Waits (at most `secs`) until no live process contains `marker`; what is left.
pub fn gone_within(marker: &str, secs: u64) -> Vec<String> {
    for _ in 0..(secs * 20) {
        if processes_with(marker).is_empty() {
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    processes_with(marker)
}

/// Waits (at most 60 s) until a live process contains `marker`.
pub fn started(marker: &str) -> bool {
    // A loaded CI host can take seconds to start a sandbox; a passing run returns as soon
    // as the process shows.
    for _ in 0..1200 {
        if !processes_with(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A marker no other test uses.
pub fn marker(what: &str) -> String {
    format!("{what}-{}-{}", std::process::id(), rand::random::<u32>())
}
