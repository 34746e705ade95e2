//! `sandboxio secrets` against the real binary: the value goes in on standard input only,
//! is sealed at rest under a key kept outside the state directory, and is found in clear
//! in no file (state, trail, key directory) and in no output; a wrong key and a damaged
//! store are refused with their codes and change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::Engine;

const BIN: &str = env!("CARGO_BIN_EXE_sandboxio");

struct Env {
    dir: tempfile::TempDir,
    canary: String,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::Builder::new()
            .prefix("sbx-secrets-")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("config.toml"), "").unwrap();
        let canary = format!("canary-{}", rand_hex());
        Env { dir, canary }
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    fn key_file(&self) -> PathBuf {
        self.dir.path().join("keys/secrets.key")
    }
    fn run(&self, args: &[&str], stdin: &[u8], key_env: Option<(&str, String)>) -> Output {
        let mut c = Command::new(BIN);
        c.arg("secrets")
            .args(args)
            .arg("--state-dir")
            .arg(self.state())
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .env_remove("SBX_SECRETS_KEY")
            .env("SBX_SECRETS_KEY_FILE", self.key_file())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some((k, v)) = key_env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        for stream in [&out.stdout, &out.stderr] {
            assert!(
                !String::from_utf8_lossy(stream).contains(&self.canary),
                "the value was printed"
            );
        }
        out
    }
    fn trail(&self) -> String {
        std::fs::read_to_string(self.state().join("audit.jsonl")).unwrap_or_default()
    }
}

fn rand_hex() -> String {
    let mut b = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    hex(&b)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn code(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    err.split("error[")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .unwrap_or("")
        .to_string()
}

/// Every file under `dir`, read as bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = vec![];
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn set_list_rm_and_the_value_is_in_no_file_and_no_output() {
    let env = Env::new();
    let value = format!("{}\n", env.canary);
    let out = env.run(
        &["set", "API_TOKEN", "--host", "api.example.com"],
        value.as_bytes(),
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = env.run(
        &["set", "OTHER", "--host", "*.example.org"],
        b"other-value",
        None,
    );
    assert!(out.status.success());

    // the key is its own 0600 file, outside the state directory
    let key = env.key_file();
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!key.starts_with(env.state()));
    let store = env.state().join("secrets.json");
    assert_eq!(
        std::fs::metadata(&store).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let out = env.run(&["list"], b"", None);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        listed.contains("API_TOKEN  hosts=api.example.com"),
        "{listed}"
    );
    assert!(listed.contains("OTHER  hosts=*.example.org"), "{listed}");

    // canary search: clear, base64 and hex forms, in every file we wrote
    let forms = [
        env.canary.as_bytes().to_vec(),
        base64::engine::general_purpose::STANDARD
            .encode(&env.canary)
            .into_bytes(),
        hex(env.canary.as_bytes()).into_bytes(),
    ];
    let all: Vec<_> = files(env.dir.path());
    assert!(all.iter().any(|(p, _)| p.ends_with("audit.jsonl")));
    for (p, bytes) in &all {
        for f in &forms {
            assert!(!contains(bytes, f), "secret found in {}", p.display());
        }
    }

    let out = env.run(&["rm", "API_TOKEN"], b"", None);
    assert!(out.status.success());
    let listed = String::from_utf8_lossy(&env.run(&["list"], b"", None).stdout).to_string();
    assert!(
        !listed.contains("API_TOKEN") && listed.contains("OTHER"),
        "{listed}"
    );

    // each change is a recorded operator action with the name and hosts
    let trail = env.trail();
    let set = trail
        .lines()
        .filter(|l| l.contains("\"tool_name\":\"secret_set\""))
        .count();
    assert_eq!(set, 2, "{trail}");
    assert!(trail.contains("secret `API_TOKEN` set by"));
    assert!(trail.contains("\"tool_name\":\"secret_remove\""));
    // removing what is not there is a coded error and leaves no record
    let out = env.run(&["rm", "API_TOKEN"], b"", None);
    assert_eq!(code(&out), "SBX_E2428");
    assert_eq!(
        env.trail().matches("secret_remove").count(),
        trail.matches("secret_remove").count()
    );
}

#[test]
fn a_wrong_key_is_refused_and_changes_nothing() {
    let env = Env::new();
    let out = env.run(
        &["set", "A", "--host", "a.example"],
        env.canary.as_bytes(),
        None,
    );
    assert!(out.status.success());
    let store = env.state().join("secrets.json");
    let before = std::fs::read(&store).unwrap();
    let trail_before = env
        .trail()
        .lines()
        .filter(|l| l.contains("secret_"))
        .count();
    let wrong = Some(("SBX_SECRETS_KEY", "ab".repeat(32)));
    let out = env.run(&["set", "B", "--host", "b.example"], b"x", wrong.clone());
    assert_eq!(
        code(&out),
        "SBX_E2426",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = env.run(&["rm", "A"], b"", wrong);
    assert_eq!(code(&out), "SBX_E2426");
    assert_eq!(std::fs::read(&store).unwrap(), before);
    assert_eq!(
        env.trail()
            .lines()
            .filter(|l| l.contains("secret_"))
            .count(),
        trail_before
    );
    // a malformed key, a key file others can read, a key file inside the state directory
    let out = env.run(
        &["set", "B", "--host", "b.example"],
        b"x",
        Some(("SBX_SECRETS_KEY", "nothex".into())),
    );
    assert_eq!(code(&out), "SBX_E2423");
    std::fs::set_permissions(env.key_file(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = env.run(&["set", "B", "--host", "b.example"], b"x", None);
    assert_eq!(code(&out), "SBX_E2425");
    let inside = env.state().join("secrets.key").display().to_string();
    let out = env.run(
        &["set", "B", "--host", "b.example"],
        b"x",
        Some(("SBX_SECRETS_KEY_FILE", inside)),
    );
    assert_eq!(code(&out), "SBX_E2423");
    assert!(!env.state().join("secrets.key").exists());
    assert_eq!(std::fs::read(&store).unwrap(), before);
}

#[test]
fn a_damaged_store_is_refused_never_reset() {
    let env = Env::new();
    let out = env.run(
        &["set", "A", "--host", "a.example"],
        env.canary.as_bytes(),
        None,
    );
    assert!(out.status.success());
    let store = env.state().join("secrets.json");
    let good = std::fs::read_to_string(&store).unwrap();
    let cut = good[..good.len() / 2].to_string();
    for damaged in [
        cut,
        "garbage".to_string(),
        good.replace("a.example", "evil.example"),
    ] {
        std::fs::write(&store, &damaged).unwrap();
        let mut codes = vec![
            code(&env.run(&["set", "B", "--host", "b.example"], b"x", None)),
            code(&env.run(&["rm", "A"], b"", None)),
        ];
        // a value rebound to another host still parses (listing needs no key); it is
        // caught by every command that opens the store with the key
        if !damaged.contains("evil.example") {
            codes.push(code(&env.run(&["list"], b"", None)));
        }
        assert!(
            codes.iter().all(|c| c == "SBX_E2427"),
            "{codes:?} for {damaged:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&store).unwrap(),
            damaged,
            "the store was rewritten"
        );
    }
}

#[test]
fn the_value_never_comes_from_the_command_line() {
    let env = Env::new();
    let out = env.run(&["set", "A", "--host", "a.example", "the-value"], b"", None);
    assert!(!out.status.success());
    assert!(!env.state().join("secrets.json").exists());
    let out = env.run(&["set", "A", "--host", "a.example"], b"", None);
    assert_eq!(code(&out), "SBX_E2421", "an empty value is refused");
    let out = env.run(&["set", "A", "--host", "*"], b"v", None);
    assert_eq!(
        code(&out),
        "SBX_E2422",
        "a secret bound to every host is refused"
    );
    assert!(!env.state().join("secrets.json").exists());
}
