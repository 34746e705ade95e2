//! Files beyond upload and read: mkdir, and a download far larger than any body limit,
//! streamed by the server from the file the gateway opened (its memory does not grow with
//! the file).

use std::io::Read;

use serde_json::{json, Value};

use crate::harness::{problem, Server};

/// The byte at offset `i` of the big file (not a repeating short pattern).
fn pattern(i: u64) -> u8 {
    ((i.wrapping_mul(31) ^ (i >> 12).wrapping_mul(7)) % 251) as u8
}

/// The server's peak resident memory so far (VmHWM), in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn mkdir_creates_parents_inside_the_workspace_only() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let url = |p: &str| format!("/v1/sandboxes/{id}/files/mkdir?path={p}");
    let r = s
        .client
        .post(s.url(&url("a/b/c")))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let st: Value = s
        .get(&key, &format!("/v1/sandboxes/{id}/files/stat?path=a/b/c"))
        .json()
        .unwrap();
    assert_eq!(st["is_dir"], true, "{st}");
    assert!(s.workspace(&id).join("a/b/c").is_dir());
    // Again: nothing to do, still fine.
    let r = s
        .client
        .post(s.url(&url("a/b/c")))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    // Out of the workspace, or over a file: refused with a code, nothing made.
    let r = s
        .client
        .post(s.url(&url("../escape")))
        .bearer_auth(&key)
        .send()
        .unwrap();
    let (st, p) = problem(r);
    assert!(st == 403 || st == 422, "{st} {p}");
    assert!(!s.workspace(&id).join("../escape").exists());
    std::fs::write(s.workspace(&id).join("file"), b"x").unwrap();
    let r = s
        .client
        .post(s.url(&url("file")))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert!(problem(r).0 >= 400);
    let r = s
        .client
        .post(s.url(&url(".")))
        .bearer_auth(&key)
        .send()
        .unwrap();
    assert_eq!(problem(r).0, 422);
    // Each mkdir is a file_write through the chain, with its record.
    let n = s
        .audit()
        .iter()
        .filter(|e| e.to_string().contains("a/b/c/"))
        .count();
    assert!(n >= 2, "mkdir records: {n}");
}

#[test]
fn a_download_larger_than_the_body_limit_is_streamed_without_buffering() {
    const SIZE: u64 = 96 << 20;
    let s = Server::start(&["--upload-limit", "1MiB"]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    // An upload of 2 MiB is over the limit ...
    let (st, _) = problem(s.put_bytes(
        &key,
        &format!("/v1/sandboxes/{id}/files?path=small"),
        vec![0u8; 2 << 20],
    ));
    assert_eq!(st, 413);
    // ... while a program's 96 MiB output file downloads whole.
    let data: Vec<u8> = (0..SIZE).map(pattern).collect();
    std::fs::write(s.workspace(&id).join("big.bin"), &data).unwrap();
    drop(data);
    let before = peak_kib(s.pid());
    let mut r = s.get(&key, &format!("/v1/sandboxes/{id}/files?path=big.bin"));
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-length"].to_str().unwrap(),
        SIZE.to_string()
    );
    let op = r.headers()["sandboxio-operation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0u64;
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        for (k, b) in buf[..n].iter().enumerate() {
            assert_eq!(*b, pattern(at + k as u64), "byte {}", at + k as u64);
        }
        at += n as u64;
    }
    assert_eq!(at, SIZE);
    let after = peak_kib(s.pid());
    let grew = after.saturating_sub(before);
    println!("server peak RSS {before} KiB before, {after} KiB after a {SIZE}-byte download");
    assert!(
        grew < (SIZE >> 10) / 4,
        "the server's peak memory grew by {grew} KiB for a {} KiB file",
        SIZE >> 10
    );
    // One record, with the size sent.
    let rec: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|e| e.to_string().contains(&op))
        .collect();
    assert!(
        rec.iter()
            .any(|e| e.to_string().contains(&SIZE.to_string())),
        "{rec:?}"
    );
}

/// A replay answers like the run it replays: an exec whose output named an entry the
/// workspace already has answered 409 `SBX_E1474` (it ran; its output was not copied), and
/// the same request with the same key answers 409 `SBX_E1474` again, marked replayed, not
/// 200 (nothing runs the second time).
#[test]
fn a_replayed_copy_out_conflict_answers_like_the_original() {
    // The namespace tier copies its output out (the process tier writes in place).
    let s = crate::harness::Server::start_with(&[], |dir| {
        let mut policy = std::fs::read_to_string(dir.join("policy.toml")).unwrap();
        policy.push_str(
            "\n[[rule]]\nid = \"run-in-namespace\"\neffect = \"allow\"\nkind = \"exec\"\ntier = \"namespace\"\nreason = \"copy-out\"\n",
        );
        std::fs::write(dir.join("policy.toml"), policy).unwrap();
    });
    let key = s.key("acme", "all");
    let r = s.post(
        &key,
        "/v1/sandboxes",
        &serde_json::json!({"tier": "namespace"}),
    );
    assert_eq!(r.status(), 201, "{}", r.text().unwrap());
    let id = r.json::<serde_json::Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s.put_bytes(
        &key,
        &format!("/v1/sandboxes/{id}/files?path=count"),
        b"kept".to_vec(),
    );
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let body = serde_json::json!({
        "argv": ["sh", "-c", "echo x > \"$SANDBOX_OUTPUT/count\"; echo out"],
        "idempotency_key": "copy-1",
    });
    let path = format!("/v1/sandboxes/{id}/exec");
    let (st, first) = crate::harness::problem(s.post(&key, &path, &body));
    assert_eq!(
        (st, first["code"].as_str().unwrap()),
        (409, "SBX_E1474"),
        "{first}"
    );
    let (st, again) = crate::harness::problem(s.post(&key, &path, &body));
    assert_eq!(
        (st, again["code"].as_str().unwrap()),
        (409, "SBX_E1474"),
        "{again}"
    );
    assert_eq!(again["record"]["replayed"], true, "{again}");
    let runs = s
        .audit()
        .into_iter()
        .filter(|e| e["event"] == "exec" && e["replayed"] == false)
        .count();
    assert_eq!(runs, 1, "one run, one replay");
}

/// A capability token confined to a directory reaches only that directory, also when a
/// program in the sandbox left a link in it that leads elsewhere in the workspace (or a
/// link standing in for the directory itself): reads, writes, deletes and listings through
/// it are refused with the escape's code, and nothing outside the directory changes. A
/// directory token gets no E2B access token, so the E2B file routes stay out of its reach.
#[test]
fn a_directory_token_cannot_leave_its_directory_through_a_link() {
    let s = crate::e2b::e2b_server("");
    let key = s.key("acme", "exec,files");
    let id = s.sandbox(&key);
    let put = |tok: &str, path: &str, body: &[u8]| {
        s.put_bytes(
            tok,
            &format!("/v1/sandboxes/{id}/files?path={path}"),
            body.to_vec(),
        )
    };
    assert_eq!(put(&key, "priv/secret", b"private").status(), 200);
    assert_eq!(put(&key, "sub/own.txt", b"mine").status(), 200);
    // A program leaves two relative links in the workspace: one inside `sub` leading to
    // `priv`, and `alias` standing for `priv`.
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["sh", "-c",
            "ln -s ../priv \"$SANDBOX_OUTPUT/sub/lnk\" && ln -s priv \"$SANDBOX_OUTPUT/alias\""]}),
    );
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let ws = s.workspace(&id);
    assert!(
        ws.join("sub/lnk").symlink_metadata().unwrap().is_symlink(),
        "the link must be in the workspace for this test to mean anything"
    );
    let mint = |dir: &str| {
        let r = s.post(
            &key,
            &format!("/v1/sandboxes/{id}/tokens"),
            &json!({"scopes": ["files"], "dir": dir, "ttl": "10m"}),
        );
        assert_eq!(r.status(), 201);
        r.json::<Value>().unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let tok = mint("sub");
    // What is really inside the directory still works.
    let r = s.get(&tok, &format!("/v1/sandboxes/{id}/files?path=sub/own.txt"));
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().unwrap(), "mine");
    let r = s.get(&tok, &format!("/v1/sandboxes/{id}/files/list?path=sub"));
    assert_eq!(r.status(), 200);
    assert_eq!(put(&tok, "sub/new/f.txt", b"ok").status(), 200);

    let escaped = |r: reqwest::blocking::Response, what: &str| {
        let (st, p) = problem(r);
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (403, "SBX_E1481"),
            "{what}: {p}"
        );
    };
    escaped(
        s.get(
            &tok,
            &format!("/v1/sandboxes/{id}/files?path=sub/lnk/secret"),
        ),
        "read",
    );
    escaped(
        s.get(
            &tok,
            &format!("/v1/sandboxes/{id}/files/stat?path=sub/lnk/secret"),
        ),
        "stat",
    );
    escaped(
        s.get(&tok, &format!("/v1/sandboxes/{id}/files/list?path=sub/lnk")),
        "list",
    );
    escaped(put(&tok, "sub/lnk/planted", b"written"), "write");
    escaped(
        s.post(
            &tok,
            &format!("/v1/sandboxes/{id}/files/mkdir?path=sub/lnk/d"),
            &json!({}),
        ),
        "mkdir",
    );
    escaped(
        s.delete(
            &tok,
            &format!("/v1/sandboxes/{id}/files?path=sub/lnk/secret"),
        ),
        "delete",
    );
    // A token whose directory is itself a link is refused the same way.
    let alias = mint("alias");
    escaped(
        s.get(
            &alias,
            &format!("/v1/sandboxes/{id}/files?path=alias/secret"),
        ),
        "read through a linked directory",
    );
    escaped(
        put(&alias, "alias/planted", b"written"),
        "write through a linked directory",
    );

    // Nothing outside `sub` was read, written or removed.
    assert_eq!(std::fs::read(ws.join("priv/secret")).unwrap(), b"private");
    assert!(!ws.join("priv/planted").exists());
    assert!(!ws.join("priv/d").exists());
    // Each refusal is a file operation's record, denied by the sandbox layer.
    let denied = s
        .audit()
        .iter()
        .filter(|e| e["error_code"] == "SBX_E1481")
        .count();
    assert!(denied >= 8, "records of the refusals: {denied}");

    // The E2B file routes need an access token, which a directory token cannot get.
    let r = s
        .client
        .post(s.url(&format!("/sandboxes/{id}/connect")))
        .header("X-API-Key", &tok)
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 403, "connect with a directory token");
}
