//! Per-tenant quotas from `[server]` in the config: concurrent sandboxes, background
//! processes, JSON and upload body sizes; a tenant with its own `[server.tenants.<name>]`
//! gets its own. Each refusal is a coded problem and changes nothing.

use serde_json::{json, Value};

use crate::harness::{problem, Server};

const QUOTAS: &str = r#"
[server]
max_sandboxes = 2
max_background = 1
json_limit = "2KiB"
upload_limit = "1KiB"

[server.tenants.big]
max_sandboxes = 3
max_background = 2
json_limit = "64KiB"
"#;

fn config(dir: &std::path::Path) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("config.toml"))
        .unwrap();
    f.write_all(QUOTAS.as_bytes()).unwrap();
}

fn bg(s: &Server, key: &str, id: &str) -> reqwest::blocking::Response {
    s.post(
        key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["sleep", "30"], "background": true}),
    )
}

#[test]
fn each_tenant_gets_its_quotas_from_config() {
    let s = Server::start_with(&[], config);
    let small = s.key("acme", "all");
    let big = s.key("big", "all");

    // Sandboxes: 2 for everyone, 3 for `big`.
    let a: Vec<String> = (0..2).map(|_| s.sandbox(&small)).collect();
    let (st, p) = problem(s.post(&small, "/v1/sandboxes", &json!({"tier": "process"})));
    assert_eq!((st, p["code"].as_str().unwrap()), (429, "SBX_E1811"), "{p}");
    let b: Vec<String> = (0..3).map(|_| s.sandbox(&big)).collect();
    let (st, _) = problem(s.post(&big, "/v1/sandboxes", &json!({"tier": "process"})));
    assert_eq!(st, 429);
    let listed: Value = s.get(&small, "/v1/sandboxes").json().unwrap();
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 2);

    // JSON bodies: 2 KiB for everyone, 64 KiB for `big`.
    let body = json!({"argv": ["true"], "env": {"PAD": "x".repeat(4096)}});
    let (st, p) = problem(s.post(&small, &format!("/v1/sandboxes/{}/exec", a[0]), &body));
    assert_eq!((st, p["code"].as_str().unwrap()), (413, "SBX_E1807"), "{p}");
    let r = s.post(&big, &format!("/v1/sandboxes/{}/exec", b[0]), &body);
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());

    // Uploads: 1 KiB for everyone (and for `big`, which did not set its own).
    let blob = vec![b'z'; 2048];
    let (st, _) = problem(s.put_bytes(
        &small,
        &format!("/v1/sandboxes/{}/files?path=f", a[0]),
        blob.clone(),
    ));
    assert_eq!(st, 413);
    let (st, _) = problem(s.put_bytes(&big, &format!("/v1/sandboxes/{}/files?path=f", b[0]), blob));
    assert_eq!(st, 413);
    assert_eq!(
        s.get(&small, &format!("/v1/sandboxes/{}/files?path=f", a[0]))
            .status(),
        404,
        "a refused upload wrote nothing"
    );

    // Background processes: 1 at once for everyone (over all its sandboxes), 2 for `big`.
    let r = bg(&s, &small, &a[0]);
    assert_eq!(r.status(), 201);
    let first = r.json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (st, p) = problem(bg(&s, &small, &a[1]));
    assert_eq!((st, p["code"].as_str().unwrap()), (429, "SBX_E1852"), "{p}");
    assert_eq!(bg(&s, &big, &b[0]).status(), 201);
    assert_eq!(bg(&s, &big, &b[1]).status(), 201);
    assert_eq!(problem(bg(&s, &big, &b[2])).0, 429);
    // Once the first ends, another may start.
    let r = s.delete(&small, &format!("/v1/sandboxes/{}/processes/{first}", a[0]));
    assert!(r.status().is_success(), "{}", r.status());
    let mut started = false;
    for _ in 0..50 {
        let r = bg(&s, &small, &a[1]);
        if r.status() == 201 {
            started = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(started, "the quota did not free up when the process ended");
}

const LIMITS: &str = r#"
[limits]
memory = "128MiB"
file_size = "1MiB"
output_size = "3MiB"
timeout = "20s"

[limits.max]
memory = "256MiB"
"#;

fn limits_config(dir: &std::path::Path) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("config.toml"))
        .unwrap();
    f.write_all(LIMITS.as_bytes()).unwrap();
}

#[test]
fn a_sandbox_gets_the_configured_limits_under_their_ceilings() {
    let s = Server::start_with(&[], limits_config);
    let key = s.key("acme", "exec,files,read");
    const MIB: u64 = 1 << 20;

    // Nothing asked: `[limits]`, as `sandboxio run` has them, and what its view shows is
    // what every command is held to.
    let id = s.sandbox(&key);
    let v: Value = s.get(&key, &format!("/v1/sandboxes/{id}")).json().unwrap();
    let l = &v["limits"];
    assert_eq!(l["memory"], 128 * MIB, "{v}");
    assert_eq!(l["file_size"], MIB, "{v}");
    assert_eq!(l["output_size"], 3 * MIB, "{v}");
    assert_eq!(l["timeout"], 20_000, "{v}");
    let r = s.post(
        &key,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["sh", "-c", "head -c 2000000 /dev/zero > big; wc -c < big"]}),
    );
    assert_eq!(r.status(), 200);
    let out: Value = r.json().unwrap();
    assert_eq!(
        out["result"]["stdout"].as_str().unwrap().trim(),
        "1048576",
        "{out}"
    );

    // Asked within the ceiling: kept.
    let r = s.post(
        &key,
        "/v1/sandboxes",
        &json!({"tier": "process", "limits": {"memory": "200MiB"}}),
    );
    assert_eq!(r.status(), 201);
    let v: Value = r.json().unwrap();
    assert_eq!(v["limits"]["memory"], 200 * MIB, "{v}");
    assert_eq!(v["limits"]["file_size"], MIB, "{v}");

    // Above a ceiling, a zero, too few processes: 422 at create, nothing made.
    for limits in [
        json!({"memory": "512MiB"}),
        json!({"memory": "0"}),
        json!({"pids": 0}),
        json!({"cpu_quota_millis": 0}),
        json!({"stdout_cap": "0"}),
        json!({"pids": 1}),
    ] {
        let (st, p) = problem(s.post(
            &key,
            "/v1/sandboxes",
            &json!({"tier": "process", "limits": limits}),
        ));
        assert_eq!(
            (st, p["code"].as_str().unwrap()),
            (422, "SBX_E1810"),
            "{limits}: {p}"
        );
        assert!(p["detail"].as_str().unwrap().contains("limits"), "{p}");
    }
    let listed: Value = s.get(&key, "/v1/sandboxes").json().unwrap();
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 2, "{listed}");
}
