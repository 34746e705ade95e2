//! Terminals, for real: the CLI is started on a pseudo-terminal that this test drives
//! (Python's `pty` module on the host plays the operator's terminal emulator).
//!
//! - `run --tty`: the program sees a terminal (isatty), the operator's window size, its
//!   output arrives while it runs, a Python REPL answers `1+1` with `2`, Ctrl-C interrupts
//!   the program (not sandboxio), and escape sequences it prints are shown, not obeyed.
//! - `run` without `--tty` on a terminal: OSC and CSI sequences from the program arrive
//!   escaped.
//! - `run --tty`: a resize of the operator's window reaches the program's terminal; input
//!   from a pipe or from nothing ends (end of file reaches the program).

use std::process::Command;

use crate::common::*;

/// Host-side driver: runs argv on a fresh pty of 33 rows x 101 columns and follows a
/// script of (send, expect) steps; prints one JSON object with the transcript, the steps
/// that were met and the exit status.
const DRIVER: &str = r#"
import os, pty, sys, time, select, fcntl, termios, struct, json
argv = json.loads(sys.argv[1])
steps = json.loads(sys.argv[2])
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack('HHHH', 33, 101, 0, 0))
    os.execv(argv[0], argv)
buf = b''
def read_until(needle, timeout):
    global buf
    end = time.time() + timeout
    while needle.encode() not in buf:
        left = end - time.time()
        if left <= 0:
            return False
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return False
        if not chunk:
            return False
        buf += chunk
    return True
met = []
for send, expect, pause in steps:
    if send.startswith('\x00winch:'):
        # The operator resizes the window: the kernel signals the CLI (SIGWINCH).
        _, rows, cols = send.split(':')
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', int(rows), int(cols), 0, 0))
    elif send:
        os.write(fd, send.encode())
    if pause:
        time.sleep(pause)
    if expect and not read_until(expect, 30):
        break
    met.append(expect)
# drain until exit
end = time.time() + 30
status = None
while time.time() < end:
    p, st = os.waitpid(pid, os.WNOHANG)
    if p:
        status = os.waitstatus_to_exitcode(st)
        break
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            buf += os.read(fd, 65536)
        except OSError:
            pass
if status is None:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(json.dumps({'met': met, 'status': status, 'out': buf.decode('utf-8', 'replace')}))
"#;

struct Session {
    met: Vec<String>,
    status: Option<i64>,
    out: String,
}

fn drive(argv: &[String], steps: &[(&str, &str, f64)]) -> Session {
    let steps: Vec<serde_json::Value> = steps
        .iter()
        .map(|(s, e, p)| serde_json::json!([s, e, p]))
        .collect();
    let o = Command::new("/usr/bin/python3")
        .args([
            "-c",
            DRIVER,
            &serde_json::to_string(argv).unwrap(),
            &serde_json::to_string(&steps).unwrap(),
        ])
        .output()
        .expect("run the pty driver");
    assert!(
        o.status.success(),
        "driver failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    Session {
        met: v["met"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap_or("").to_string())
            .collect(),
        status: v["status"].as_i64(),
        out: v["out"].as_str().unwrap_or("").to_string(),
    }
}

/// The CLI's command line for `w.run(extra, argv)`, as strings for the driver, run by
/// `uid` (see [`runners`]).
fn cli_argv(w: &World, uid: Option<u32>, extra: &[&str], argv: &[&str]) -> Vec<String> {
    let c = w.run(extra, argv);
    w.as_user(uid)
        .into_iter()
        .chain(std::iter::once(
            c.get_program().to_string_lossy().into_owned(),
        ))
        .chain(c.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect()
}

/// A world for `uid` (handed over to it when not this test's own user).
fn world_for(tag: &str, uid: Option<u32>) -> World {
    let w = World::new(&format!(
        "{tag}-{}",
        uid.map_or("self".into(), |u| u.to_string())
    ));
    if let Some(u) = uid {
        w.hand_over(u);
    }
    w
}

fn have_python() -> bool {
    if std::path::Path::new("/usr/bin/python3").exists() {
        return true;
    }
    eprintln!("skipped: /usr/bin/python3 is needed to drive a pseudo-terminal");
    false
}

#[test]
fn a_python_repl_under_tty_sees_a_terminal_answers_and_takes_ctrl_c() {
    if !have_python() {
        return;
    }
    for uid in runners() {
        repl_under_tty(uid);
    }
}

fn repl_under_tty(uid: Option<u32>) {
    let who = format!(
        "as {}",
        uid.map_or("this test's user".into(), |u| format!("uid {u}"))
    );
    let w = world_for("tty", uid);
    let argv = cli_argv(
        &w,
        uid,
        &["--tty", "--timeout", "60s"],
        &["/usr/bin/python3", "-i", "-q"],
    );
    let s = drive(
        &argv,
        &[
            ("", ">>> ", 0.0),
            (
                "import os; print('ISATTY', os.isatty(0), os.isatty(1), os.isatty(2))\n",
                "ISATTY True True True",
                0.0,
            ),
            (
                "print('SIZE', *os.get_terminal_size(0))\n",
                "SIZE 101 33",
                0.0,
            ),
            ("1+1\n", "\n2", 0.0),
            // A loop that only Ctrl-C ends; the first line arrives while it runs.
            (
                "import time\nprint('LOOP' + 'ING', flush=True)\nwhile True: time.sleep(0.05)\n\n",
                "LOOPING",
                0.0,
            ),
            ("\x03", "KeyboardInterrupt", 0.5),
            ("print('STILL', 'HERE')\n", "STILL HERE", 0.0),
            // An OSC 52 clipboard write and a cursor move from the program: shown escaped.
            (
                "print('\\x1b]52;c;SGVsbG8=\\x07' + 'Z', '\\x1b[2A' + 'Q')\n",
                "SGVsbG8=\\x07Z",
                0.0,
            ),
            ("exit()\n", "", 0.0),
        ],
    );
    let steps = s.met.len();
    assert!(
        steps == 9,
        "{who}: only {steps} of 9 steps were met (last expected after {:?})\n--- transcript \
         ---\n{}",
        s.met.last(),
        s.out
    );
    assert!(
        !s.out.contains("\x1b]52"),
        "a raw OSC 52 sequence reached the operator's terminal:\n{}",
        s.out
    );
    assert!(
        !s.out.contains("\x1b[2A"),
        "a raw cursor move reached the terminal"
    );
    assert!(
        s.out.contains("\\x1b[2AQ"),
        "the cursor move is not shown escaped:\n{}",
        s.out
    );
    assert_eq!(
        s.status,
        Some(0),
        "{who}: sandboxio did not exit 0\n{}",
        s.out
    );
    assert_ran_as(&w, uid);
}

/// The record says the sandbox ran for a non-root user where one was asked for (a
/// non-root helper names the invoking uid in its gaps).
fn assert_ran_as(w: &World, uid: Option<u32>) {
    let Some(u) = uid else { return };
    let trail = std::fs::read_to_string(w.state().join("audit.jsonl")).unwrap();
    assert!(
        trail.contains(&format!("host uid {u}")),
        "the record does not show a run by uid {u}:\n{trail}"
    );
}

#[test]
fn escape_sequences_are_shown_escaped_on_a_terminal_without_tty() {
    if !have_python() {
        return;
    }
    for uid in runners() {
        escaped_without_tty(uid);
    }
}

fn escaped_without_tty(uid: Option<u32>) {
    let w = world_for("noterm", uid);
    let argv = cli_argv(
        &w,
        uid,
        &[],
        &[
            "/usr/bin/printf",
            "A\\033]52;c;SGVsbG8=\\007B\\033[2J\\033]0;title\\007C\\233D\\rE\\n",
        ],
    );
    let s = drive(&argv, &[("", "E", 0.0)]);
    assert_eq!(s.met.len(), 1, "no output\n{}", s.out);
    assert!(
        !s.out.contains('\x1b'),
        "a raw ESC reached the terminal: {:?}",
        s.out
    );
    for shown in [
        "\\x1b]52;c;SGVsbG8=\\x07B",
        "\\x1b[2J",
        "\\x1b]0;title\\x07C",
        "\\x0dE",
    ] {
        assert!(s.out.contains(shown), "`{shown}` not shown in {:?}", s.out);
    }
    assert_eq!(s.status, Some(0), "{}", s.out);
    assert_ran_as(&w, uid);
}

/// The operator resizes the window while a `--tty` program runs: the program's terminal
/// takes the new size. As root and as a non-root user.
#[test]
fn a_window_resize_reaches_the_programs_terminal() {
    if !have_python() {
        return;
    }
    for uid in runners() {
        let w = world_for("tty-winch", uid);
        let argv = cli_argv(
            &w,
            uid,
            &["--tty", "--timeout", "60s"],
            &[
                "/bin/sh",
                "-c",
                "stty size; echo READY; read line; stty size",
            ],
        );
        let s = drive(
            &argv,
            &[
                ("", "READY", 0.0),
                ("\x00winch:50:120", "", 0.5),
                ("go\n", "50 120", 0.0),
            ],
        );
        assert!(s.out.contains("33 101"), "{uid:?}: {}", s.out);
        assert_eq!(
            s.met.len(),
            3,
            "{uid:?}: the new size did not arrive:\n{}",
            s.out
        );
        assert_eq!(s.status, Some(0), "{uid:?}: {}", s.out);
        assert_ran_as(&w, uid);
    }
}

/// `--tty` with input from a pipe or from nothing: end of input reaches the program,
/// also after a last line without its newline. As root and as a non-root user.
#[test]
fn piped_or_absent_input_under_tty_ends() {
    use std::io::Write as _;
    for uid in runners() {
        let w = world_for("tty-eof", uid);
        for (input, want) in [(Some("abc"), "3"), (Some("ab\ncd"), "5"), (None, "0")] {
            let argv = cli_argv(&w, uid, &["--tty", "--timeout", "30s"], &["wc", "-c"]);
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..])
                .env_remove("SBX_STATE_DIR")
                .stdin(match input {
                    Some(_) => std::process::Stdio::piped(),
                    None => std::process::Stdio::null(),
                })
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = c.spawn().unwrap();
            if let Some(text) = input {
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(text.as_bytes())
                    .unwrap();
            }
            let o = child.wait_with_output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{uid:?} {input:?}: {out} {}",
                String::from_utf8_lossy(&o.stderr)
            );
            // The terminal echoes the input before the count.
            assert!(
                out.trim_end().ends_with(want),
                "{uid:?} {input:?}: wanted {want} at the end of {out:?}"
            );
        }
        assert_ran_as(&w, uid);
    }
}
