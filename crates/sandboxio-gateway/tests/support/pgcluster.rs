//! A throwaway PostgreSQL cluster for tests: `initdb` in a temporary directory (as uid
//! 65534 when the tests run as root, since PostgreSQL refuses to run as root), listening
//! only on a Unix socket in that directory. One cluster per test process; a watchdog
//! stops it by pid (SIGINT, fast shutdown) and removes the directory once the test
//! process exits. When the binaries are missing, `shared()` says why and tests skip.
//!
//! Included by path from other crates' tests; keep it free of crate-specific imports.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Cluster {
    pub dir: PathBuf,
    pub pid: u32,
    pub port: u16,
    fsync: bool,
    /// When the server (last) started.
    started: Instant,
}

const USER: &str = "sbx";
const NOBODY: u32 = 65534;

fn bin_dir() -> Result<PathBuf, String> {
    if let Ok(d) = std::env::var("SBX_PG_BIN") {
        return Ok(PathBuf::from(d));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "PostgreSQL is not installed (no /usr/lib/postgresql; scripts/setup.d/postgres.sh installs it)".to_string())?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file()).then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b).ok_or_else(|| {
        "no PostgreSQL server binaries (initdb, postgres) under /usr/lib/postgresql".into()
    })
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// `cmd` run as the cluster's owner: uid 65534 under root, else ourselves.
fn as_owner(bin: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ])
        .arg(bin);
        c
    } else {
        Command::new(bin)
    }
}

impl Cluster {
    /// A cluster for tests: `fsync` off (nothing here must survive a power loss).
    fn start() -> Result<Cluster, String> {
        Self::start_with(false)
    }

    /// A cluster with `fsync` (and so durable commits) on, for benchmarks; its own, not
    /// the shared one.
    pub fn durable() -> Result<Cluster, String> {
        Self::start_with(true)
    }

    fn start_with(fsync: bool) -> Result<Cluster, String> {
        let bin = bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("sbx-pg-")
            .tempdir_in("/tmp")
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?
            .keep();
        if is_root() {
            std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY))
                .map_err(|e| format!("cannot hand {} to uid {NOBODY}: {e}", dir.display()))?;
        }
        let data = dir.join("data");
        let out = as_owner(&bin.join("initdb"))
            .args(["-D"])
            .arg(&data)
            .args([
                "-U",
                USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let c = Cluster {
            dir,
            pid: 0,
            port: 5432,
            fsync,
            started: Instant::now(),
        };
        c.serve()
    }

    /// Starts the server on the cluster's directory (again, after [`Cluster::stop`]), with a
    /// watchdog that stops it by pid when this test process is gone; waits until it answers.
    fn serve(mut self) -> Result<Cluster, String> {
        let bin = bin_dir()?;
        let (dir, data) = (self.dir.clone(), self.dir.join("data"));
        let log = |name: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(std::env::temp_dir().join(format!(
                    "{}-{name}.log",
                    dir.file_name().and_then(|n| n.to_str()).unwrap_or("sbx-pg")
                )))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null())
        };
        let child = as_owner(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(&dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-c",
                "listen_addresses=",
                "-c",
                "max_connections=300",
                "-c",
                if self.fsync { "fsync=on" } else { "fsync=off" },
            ])
            .stdin(Stdio::null())
            .stdout(log("out"))
            .stderr(log("err"))
            .spawn()
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        let pid = child.id();
        // The watchdog: when this test process is gone, stop the server by pid and clean up.
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; \
             tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null | grep -qF -- '{data}' && kill -INT {pid} 2>/dev/null; \
             for i in $(seq 1 40); do kill -0 {pid} 2>/dev/null || break; sleep 0.25; done; rm -rf '{dir}'",
            me = std::process::id(),
            dir = dir.display(),
            data = data.display()
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the cluster watchdog: {e}"))?;
        // The child handle is dropped on purpose: the watchdog owns the server's end.
        drop(child);
        self.pid = pid;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match postgres::Client::connect(&self.conninfo("postgres"), postgres::NoTls) {
                Ok(_) => {
                    // Answering: it started before now (what `wait_up_for` counts from).
                    self.started = Instant::now();
                    return Ok(self);
                }
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("the test cluster did not come up: {e}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// A cluster of its own (not the shared one), for tests that stop and restart it.
    pub fn own() -> Result<Cluster, String> {
        Self::start_with(false)
    }

    /// Stops the server at once (SIGQUIT: immediate shutdown, as a crash would) and waits
    /// for it to be gone.
    pub fn stop(&self) {
        let _ = Command::new("kill")
            .args(["-QUIT", &self.pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline
            && Path::new(&format!("/proc/{}", self.pid)).exists()
            && !std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the stopped server again on the same data.
    pub fn restart(self) -> Result<Cluster, String> {
        self.serve()
    }

    /// Waits until the server has been up for `d` (recovery believes a lease that ran out
    /// only once the database has been up for a lease).
    pub fn wait_up_for(&self, d: Duration) {
        std::thread::sleep(d.saturating_sub(self.started.elapsed()));
    }

    fn conninfo(&self, db: &str) -> String {
        format!(
            "host={} port={} user={USER} dbname={db}",
            self.dir.display(),
            self.port
        )
    }

    /// A URL for `[state] url` naming database `db`.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres:///{db}?host={}&port={}&user={USER}",
            self.dir.display(),
            self.port
        )
    }

    /// A new, empty database; its URL.
    pub fn database(&self) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let mut c = postgres::Client::connect(&self.conninfo("postgres"), postgres::NoTls)
            .expect("connect to the test cluster");
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create a test database");
        self.url(&name)
    }
}

/// The process's cluster, started on first use; `Err` says why there is none.
pub fn shared() -> Result<&'static Cluster, String> {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(Cluster::start)
        .as_ref()
        .map_err(Clone::clone)
}

/// A fresh database URL, or `None` after printing why PostgreSQL tests skip here.
pub fn fresh_url(test: &str) -> Option<String> {
    match shared() {
        Ok(c) => Some(c.database()),
        Err(why) => {
            eprintln!("SKIP {test} (PostgreSQL half): {why}");
            None
        }
    }
}
