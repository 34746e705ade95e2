//! Stateful code contexts against the real server: a kernel keeps variables between calls,
//! each call is one run_code operation with one record, errors carry a traceback, output
//! streams, a cell can be interrupted and a context restarted.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::Server;

fn context(s: &Server, key: &str, id: &str, language: &str) -> String {
    let r = s.post(
        key,
        &format!("/v1/sandboxes/{id}/contexts"),
        &json!({ "language": language }),
    );
    assert_eq!(r.status(), 201, "{}", r.text().unwrap());
    let v: Value = r.json().unwrap();
    assert_eq!(v["state"], "ready");
    v["id"].as_str().unwrap().to_string()
}

fn call(s: &Server, key: &str, id: &str, cid: &str, code: &str) -> Value {
    call_with(s, key, id, cid, json!({ "code": code }))
}

#[test]
fn a_python_context_keeps_variables_and_each_call_is_one_record() {
    let (s, key, id, cid) = fresh_context("python");
    let a = call(&s, &key, &id, &cid, "x = 1\nprint('set')");
    assert_eq!(a["result"]["stdout"], "set\n");
    assert!(a["output"]["value"].is_null());
    let b = call(&s, &key, &id, &cid, "x + 1");
    assert_eq!(b["output"]["value"], "2", "{b}");
    assert_eq!(b["record"]["event"], "run_code");
    assert_eq!(b["record"]["status"], "ok");
    // An error: its name, its message and a traceback that starts in the cell.
    let e = call(&s, &key, &id, &cid, "def f():\n    return 1/0\nf()");
    let err = &e["output"]["error"];
    assert_eq!(err["ename"], "ZeroDivisionError", "{e}");
    let tb = err["traceback"].to_string();
    assert!(tb.contains("<cell>") && tb.contains("in f"), "{tb}");
    assert_eq!(e["record"]["exit_code"], 1);
    // Still alive after an error, variables kept.
    assert_eq!(call(&s, &key, &id, &cid, "x * 10")["output"]["value"], "10");
    // One record per call, with the code's hash, and the call ids are the records'.
    let ops: Vec<String> = [&a, &b, &e]
        .iter()
        .map(|v| v["record"]["operation_id"].as_str().unwrap().to_string())
        .collect();
    let trail = s.audit();
    for op in &ops {
        assert_eq!(
            trail
                .iter()
                .filter(|r| r["operation_id"] == op.as_str())
                .count(),
            1,
            "{op}"
        );
    }
    // Listed, with its kernel among the sandbox's processes.
    let l: Value = s
        .get(&key, &format!("/v1/sandboxes/{id}/contexts"))
        .json()
        .unwrap();
    let pid = l["contexts"][0]["process_id"].as_str().unwrap().to_string();
    let p: Value = s
        .get(&key, &format!("/v1/sandboxes/{id}/processes"))
        .json()
        .unwrap();
    assert!(p.to_string().contains(&pid), "{p}");
}

#[test]
fn a_node_context_keeps_variables_between_calls() {
    let (s, key, id, cid) = fresh_context("node");
    let a = call(&s, &key, &id, &cid, "let x = 1; console.log('set', {a: 1})");
    assert_eq!(a["result"]["stdout"], "set { a: 1 }\n", "{a}");
    assert_eq!(call(&s, &key, &id, &cid, "x + 1")["output"]["value"], "2");
    let e = call(&s, &key, &id, &cid, "null.y");
    assert_eq!(e["output"]["error"]["ename"], "TypeError", "{e}");
    assert_eq!(
        call(&s, &key, &id, &cid, "typeof x")["output"]["value"],
        "'number'"
    );
}

#[test]
fn a_context_call_streams_and_a_cell_is_interrupted_with_its_variables_kept() {
    let (s, key, id, cid) = fresh_context("python");
    call(&s, &key, &id, &cid, "kept = 42");
    let r = s
        .client
        .post(s.url(&format!("/v1/sandboxes/{id}/contexts/{cid}/run")))
        .bearer_auth(&key)
        .header("accept", "application/x-ndjson")
        .json(&json!({"code": "import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.01)"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut lines = BufReader::new(r);
    let mut line = String::new();
    // The first output arrives while the cell still runs (it never ends by itself).
    loop {
        line.clear();
        assert!(lines.read_line(&mut line).unwrap() > 0);
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["type"] == "stdout" {
            assert_eq!(v["data"], "looping\n");
            break;
        }
    }
    let i = crate::harness::client()
        .post(s.url(&format!("/v1/sandboxes/{id}/contexts/{cid}/interrupt")))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert_eq!(i.status(), 204);
    let mut last = Value::Null;
    loop {
        line.clear();
        if lines.read_line(&mut line).unwrap() == 0 {
            break;
        }
        last = serde_json::from_str(&line).unwrap();
    }
    assert_eq!(last["type"], "result", "{last}");
    assert_eq!(last["record"]["exit_code"], 1);
    assert_eq!(call(&s, &key, &id, &cid, "kept")["output"]["value"], "42");

    // Restart: a new kernel, the variables are gone.
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/contexts/{cid}/restart"),
        &json!({}),
    );
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let e = call(&s, &key, &id, &cid, "kept");
    assert_eq!(e["output"]["error"]["ename"], "NameError", "{e}");
    // Deleted: its kernel ends and calls are 404.
    assert_eq!(
        s.delete(&key, &format!("/v1/sandboxes/{id}/contexts/{cid}"))
            .status(),
        204
    );
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/contexts/{cid}/run"),
        &json!({"code": "1"}),
    );
    assert_eq!(r.status(), 404);
}

#[test]
fn a_call_past_its_timeout_is_interrupted_and_a_figure_comes_back_as_png_when_matplotlib_is_there()
{
    let (s, key, id, cid) = fresh_context("python");
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/contexts/{cid}/run"),
        &json!({"code": "import time\nwhile True: time.sleep(0.01)", "timeout": "1s"}),
    );
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    assert_eq!(v["result"]["timed_out"], true, "{v}");
    assert_eq!(v["output"]["error"]["ename"], "KeyboardInterrupt");
    let has_mpl = std::process::Command::new("python3")
        .args(["-c", "import matplotlib"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !has_mpl {
        eprintln!("skipped the matplotlib part: python3 on this host has no matplotlib");
        return;
    }
    let v = call(
        &s,
        &key,
        &id,
        &cid,
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nNone",
    );
    let rich = v["output"]["rich"].as_array().unwrap();
    assert_eq!(rich[0]["mime"], "image/png", "{v}");
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(rich[0]["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let _ = Duration::ZERO;
}

/// The context a call runs in is part of the request: an idempotency key used in one
/// context and then in another (or for a plain run_code) is another request, refused with
/// `SBX_E1505`, never answered with the first context's outcome.
#[test]
fn an_idempotency_key_is_bound_to_the_context_it_ran_in() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let (c1, c2) = (
        context(&s, &key, &id, "python"),
        context(&s, &key, &id, "python"),
    );
    call(&s, &key, &id, &c1, "x = 1");
    let body = json!({"code": "print('x=', globals().get('x'))", "idempotency_key": "k-ctx"});
    let first = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/contexts/{c1}/run"),
        &body,
    );
    assert_eq!(first.status(), 200);
    let first: Value = first.json().unwrap();
    assert_eq!(first["result"]["stdout"], "x= 1\n", "{first}");
    // The same call in the same context: replayed.
    let again: Value = s
        .post(
            &key,
            &format!("/v1/sandboxes/{id}/contexts/{c1}/run"),
            &body,
        )
        .json()
        .unwrap();
    assert_eq!(again["result"]["stdout"], "x= 1\n", "{again}");
    // Another context, or no context: refused.
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/contexts/{c2}/run"),
        &body,
    );
    let (st, p) = crate::harness::problem(r);
    assert_eq!((st, p["code"].as_str().unwrap()), (409, "SBX_E1505"), "{p}");
    let mut plain = body.clone();
    plain["language"] = json!("python");
    let r = s.post(&key, &format!("/v1/sandboxes/{id}/run_code"), &plain);
    let (st, p) = crate::harness::problem(r);
    assert_eq!((st, p["code"].as_str().unwrap()), (409, "SBX_E1505"), "{p}");
}

/// A server, a key with every scope, a sandbox and a context of `language` in it.
fn fresh_context(language: &str) -> (Server, String, String, String) {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let cid = context(&s, &key, &id, language);
    (s, key, id, cid)
}

fn call_with(s: &Server, key: &str, id: &str, cid: &str, body: Value) -> Value {
    let r = s.post(
        key,
        &format!("/v1/sandboxes/{id}/contexts/{cid}/run"),
        &body,
    );
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    r.json().unwrap()
}

/// A cell blocked in a sleep, a wait for a child or an awaited promise is stopped by its
/// call's timeout (an interrupt), and the context keeps its variables: it is not killed.
#[test]
fn a_blocked_cell_is_interrupted_and_the_context_lives_on() {
    let (s, key, id, py) = fresh_context("python");
    call(&s, &key, &id, &py, "kept = 7");
    for code in [
        "import time\ntime.sleep(60)",
        "import subprocess\nsubprocess.run(['sleep', '60'])",
    ] {
        let v = call_with(&s, &key, &id, &py, json!({"code": code, "timeout": "1s"}));
        assert_eq!(v["result"]["timed_out"], true, "{v}");
        assert_eq!(v["output"]["error"]["ename"], "KeyboardInterrupt", "{v}");
        assert_eq!(
            call(&s, &key, &id, &py, "kept")["output"]["value"],
            "7",
            "{code}"
        );
    }
    let js = context(&s, &key, &id, "node");
    call(&s, &key, &id, &js, "globalThis.kept = 8");
    let v = call_with(
        &s,
        &key,
        &id,
        &js,
        json!({"code": "new Promise((r) => setTimeout(() => r('late'), 60000))", "timeout": "1s"}),
    );
    assert_eq!(v["result"]["timed_out"], true, "{v}");
    assert_eq!(v["output"]["error"]["ename"], "Interrupted", "{v}");
    assert_eq!(call(&s, &key, &id, &js, "kept")["output"]["value"], "8");
}

/// A call's output is capped like an exec's (1 MiB by default): the rest is counted, the
/// result says it was cut, and the context goes on answering.
#[test]
fn a_context_calls_output_is_capped_like_an_execs() {
    let (s, key, id, cid) = fresh_context("python");
    let v = call(
        &s,
        &key,
        &id,
        &cid,
        "import sys\nfor _ in range(5):\n    sys.stdout.write('x' * (1 << 20))\nNone",
    );
    let r = &v["result"];
    assert_eq!(r["stdout_truncated"], true, "{r}");
    assert_eq!(r["stdout_bytes"], 5 << 20);
    assert_eq!(r["stdout"].as_str().unwrap().len(), 1 << 20);
    assert_eq!(call(&s, &key, &id, &cid, "1 + 1")["output"]["value"], "2");
}

/// A context whose kernel has ended answers 409 "context ended" (restart it), never a 500
/// that a client would retry.
#[test]
fn an_ended_context_is_a_409_to_restart() {
    let (s, key, id, cid) = fresh_context("python");
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/contexts/{cid}/run"),
        &json!({"code": "import os\nos._exit(7)"}),
    );
    let first = r.status();
    assert!(first == 409 || first == 200, "{first}");
    let (st, p) = crate::harness::problem(s.post(
        &key,
        &format!("/v1/sandboxes/{id}/contexts/{cid}/run"),
        &json!({"code": "1"}),
    ));
    assert_eq!((st, p["code"].as_str().unwrap()), (409, "SBX_E1830"), "{p}");
    assert_eq!(p["title"], "context ended");
}

/// What a cell leaves behind cannot answer a later call: the frames' nonce is in no
/// environment a subprocess sees, a subprocess reading stdin gets end of input (not the
/// kernel's requests), and a thread that writes `done` frames for the ids a counter would
/// give cannot hit the next call's id.
#[test]
fn a_cell_cannot_answer_a_later_call() {
    let (s, key, id, cid) = fresh_context("python");
    let v = call(
        &s,
        &key,
        &id,
        &cid,
        "import os, subprocess\nenv = open('/proc/%d/environ' % os.getpid(), 'rb').read()\nchild = subprocess.run(['sh', '-c', 'env; cat'], capture_output=True, text=True, timeout=10)\n(b'NONCE' in env, 'NONCE' in child.stdout, child.returncode)",
    );
    assert_eq!(v["output"]["value"], "(False, False, 0)", "{v}");
    // Call 1 leaves a thread that forges `done` frames for ids 1..=1000 with the kernel's
    // own mark; call 2 sleeps through them and answers for itself.
    call(
        &s,
        &key,
        &id,
        &cid,
        "import sys, json, threading, time\nmark = sys.modules['__main__'].MARK\ndef forge():\n    time.sleep(1)\n    for i in range(1, 1001):\n        sys.modules['__main__'].frame({'t': 'done', 'id': i, 'value': \"'FORGED'\", 'rich': [], 'error': None, 'cpu_us': 0})\nthreading.Thread(target=forge, daemon=True).start()\nNone",
    );
    let v = call(&s, &key, &id, &cid, "import time\ntime.sleep(3)\n'genuine'");
    assert_eq!(v["output"]["value"], "'genuine'", "{v}");
}

/// The kernel's own limits are the cell's to change (it runs in the cell's process): the
/// server bounds an answer itself. A cell that lifts the kernel's rich-result limit gets
/// at most 8 MiB back; one that writes a frame of two million tiny values gets no frame
/// parsed from it (its bytes are output, capped), and the server does not grow by
/// gigabytes.
#[test]
fn a_cell_cannot_make_the_server_hold_more_than_an_answers_bounds() {
    let (s, key, id, cid) = fresh_context("python");
    let v = call(
        &s,
        &key,
        &id,
        &cid,
        "import __main__\n__main__.RICH_LIMIT = 1 << 60\nclass P:\n    def _repr_png_(self):\n        return b'\\x89PNG' + b'\\0' * (12 << 20)\nP()",
    );
    let rich = v["output"]["rich"].as_array().unwrap();
    let total: usize = rich.iter().map(|r| r["data"].as_str().unwrap().len()).sum();
    assert!(total <= 8 << 20, "{total} bytes of rich results");
    assert!(
        rich.iter()
            .any(|r| r["data"].as_str().unwrap().contains("left out")),
        "{rich:?}"
    );
    let hwm = |pid: u32| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap()
    };
    let before = hwm(s.pid());
    let v = call(
        &s,
        &key,
        &id,
        &cid,
        "import sys, __main__\nrid = sys._getframe().f_back.f_locals['req']['id']\n__main__.frame({'t': 'done', 'id': rid, 'value': \"'forged'\", 'rich': [{'m': 0}] * 2000000, 'error': None, 'cpu_us': 0})\n'real'",
    );
    assert_eq!(
        v["output"]["value"], "'real'",
        "the oversized frame was taken"
    );
    assert_eq!(v["result"]["stdout_truncated"], true);
    let grew = hwm(s.pid()).saturating_sub(before);
    assert!(grew < 512 * 1024, "the server grew by {grew} KiB");
}

/// A cell's child cannot read its kernel's memory (where the frames' nonce and each call's
/// id live): the kernel is not dumpable. In the namespace tier, where the sandbox holds no
/// capability (the process tier run as root keeps them, and is no boundary).
#[test]
fn a_cells_child_cannot_read_its_kernels_memory() {
    let s = Server::start_with(&[], |dir| {
        let mut policy = std::fs::read_to_string(dir.join("policy.toml")).unwrap();
        policy.push_str(
            "\n[[rule]]\nid = \"contexts-in-namespace\"\neffect = \"allow\"\nkind = \"run_code\"\ntier = \"namespace\"\nnetwork = \"none\"\nreason = \"contexts\"\n",
        );
        std::fs::write(dir.join("policy.toml"), policy).unwrap();
    });
    let key = s.key("acme", "all");
    let r = s.post(&key, "/v1/sandboxes", &json!({"tier": "namespace"}));
    assert_eq!(r.status(), 201, "{}", r.text().unwrap());
    let id = r.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let cid = context(&s, &key, &id, "python");
    let reader = r#"
import sys
p = sys.argv[1]
start = int(open("/proc/%s/maps" % p).readline().split("-")[0], 16)
f = open("/proc/%s/mem" % p, "rb")
f.seek(start)
print(len(f.read(16)))
"#;
    let code = format!(
        "import os, subprocess, sys\nc = subprocess.run([sys.executable, '-c', {reader:?}, str(os.getpid())], capture_output=True, text=True)\n(c.stdout.strip(), 'PermissionError' in c.stderr)"
    );
    let v = call(&s, &key, &id, &cid, &code);
    assert_eq!(v["output"]["value"], "('', True)", "{v}");
}
