//! Keys, scopes, tenants and capability tokens.

use serde_json::{json, Value};

use crate::harness::{problem, Server};

#[test]
fn no_or_bad_credentials_are_401_with_a_code() {
    let s = Server::start(&[]);
    let r = s.client.get(s.url("/v1/sandboxes")).send().unwrap();
    let (st, p) = problem(r);
    assert_eq!((st, p["code"].as_str().unwrap()), (401, "SBX_E1801"));
    let fake = format!("sbxk_{}_{}", "0".repeat(16), "1".repeat(64));
    for bad in ["nonsense", fake.as_str()] {
        let (st, p) = problem(s.get(bad, "/v1/sandboxes"));
        assert_eq!((st, p["code"].as_str().unwrap()), (401, "SBX_E1802"));
    }
}

#[test]
fn a_key_without_the_scope_gets_403_and_a_record() {
    let s = Server::start(&[]);
    let admin = s.key("acme", "all");
    let reader = s.key("acme", "read");
    let id = s.sandbox(&admin);
    let (st, p) = problem(s.post(
        &reader,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["true"]}),
    ));
    assert_eq!(st, 403);
    assert_eq!(p["code"], "SBX_E1803");
    assert!(p["detail"].as_str().unwrap().contains("`exec`"));
    let forbidden: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|e| e.to_string().contains("http.forbidden"))
        .collect();
    assert_eq!(forbidden.len(), 1, "one record of the refusal");
    assert!(forbidden[0].to_string().contains("acme"));
    // The reader may still look.
    assert_eq!(s.get(&reader, &format!("/v1/sandboxes/{id}")).status(), 200);
}

#[test]
fn another_tenants_sandbox_is_404_everywhere() {
    let s = Server::start(&[]);
    let a = s.key("acme", "all");
    let b = s.key("globex", "all");
    let id = s.sandbox(&a);
    let paths = [
        format!("/v1/sandboxes/{id}"),
        format!("/v1/sandboxes/{id}/files?path=x"),
        format!("/v1/sandboxes/{id}/files/list"),
    ];
    for p in &paths {
        let (st, body) = problem(s.get(&b, p));
        assert_eq!(
            (st, body["code"].as_str().unwrap()),
            (404, "SBX_E1804"),
            "{p}"
        );
    }
    let (st, _) = problem(s.post(
        &b,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["true"]}),
    ));
    assert_eq!(st, 404);
    let (st, _) = problem(s.delete(&b, &format!("/v1/sandboxes/{id}")));
    assert_eq!(st, 404);
    let listed: Value = s.get(&b, "/v1/sandboxes").json().unwrap();
    assert!(listed["sandboxes"].as_array().unwrap().is_empty());
    // Still there for its owner.
    assert_eq!(s.get(&a, &format!("/v1/sandboxes/{id}")).status(), 200);
}

fn mint(s: &Server, key: &str, id: &str, body: Value) -> (String, String) {
    let r = s.post(key, &format!("/v1/sandboxes/{id}/tokens"), &body);
    assert_eq!(r.status(), 201, "{}", r.text().unwrap());
    let v: Value = r.json().unwrap();
    (
        v["id"].as_str().unwrap().to_string(),
        v["token"].as_str().unwrap().to_string(),
    )
}

#[test]
fn a_capability_token_is_confined_to_its_sandbox_directory_scopes_and_lifetime() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let a = s.sandbox(&key);
    let b = s.sandbox(&key);
    assert_eq!(
        s.put_bytes(
            &key,
            &format!("/v1/sandboxes/{a}/files?path=pub/x.txt"),
            b"x".to_vec()
        )
        .status(),
        200
    );
    assert_eq!(
        s.put_bytes(
            &key,
            &format!("/v1/sandboxes/{a}/files?path=secret.txt"),
            b"s".to_vec()
        )
        .status(),
        200
    );
    let (tid, tok) = mint(
        &s,
        &key,
        &a,
        json!({"scopes": ["files"], "dir": "pub", "ttl": "10m"}),
    );

    // Its own sandbox and directory: yes.
    let r = s.get(&tok, &format!("/v1/sandboxes/{a}/files?path=pub/x.txt"));
    assert_eq!(r.status(), 200);
    // Outside its directory, another sandbox, another scope: no.
    assert_eq!(
        s.get(&tok, &format!("/v1/sandboxes/{a}/files?path=secret.txt"))
            .status(),
        404
    );
    assert_eq!(
        s.get(&tok, &format!("/v1/sandboxes/{b}/files?path=pub/x.txt"))
            .status(),
        404
    );
    assert_eq!(s.get(&tok, &format!("/v1/sandboxes/{b}")).status(), 404);
    let (st, _) = problem(s.post(
        &tok,
        &format!("/v1/sandboxes/{a}/exec"),
        &json!({"argv": ["true"]}),
    ));
    assert_eq!(st, 403);
    // It cannot mint, nor create sandboxes.
    assert_eq!(
        s.post(
            &tok,
            &format!("/v1/sandboxes/{a}/tokens"),
            &json!({"scopes": ["files"], "ttl": "1m"})
        )
        .status(),
        403
    );
    assert_eq!(s.post(&tok, "/v1/sandboxes", &json!({})).status(), 403);
    // A token with more scopes than the key, or exec with a directory: refused.
    let reader = s.key("acme", "read,files");
    assert_eq!(
        s.post(
            &reader,
            &format!("/v1/sandboxes/{a}/tokens"),
            &json!({"scopes": ["exec"], "ttl": "1m"})
        )
        .status(),
        403
    );
    assert_eq!(
        s.post(
            &key,
            &format!("/v1/sandboxes/{a}/tokens"),
            &json!({"scopes": ["exec"], "dir": "pub", "ttl": "1m"})
        )
        .status(),
        422
    );

    // Revoked: unauthenticated from then on.
    assert_eq!(s.delete(&key, &format!("/v1/tokens/{tid}")).status(), 204);
    let (st, p) = problem(s.get(&tok, &format!("/v1/sandboxes/{a}/files?path=pub/x.txt")));
    assert_eq!((st, p["code"].as_str().unwrap()), (401, "SBX_E1802"));

    // Expired: the same.
    let (_, short) = mint(&s, &key, &a, json!({"scopes": ["files"], "ttl": "1s"}));
    assert_eq!(
        s.get(&short, &format!("/v1/sandboxes/{a}/files/list"))
            .status(),
        200
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        s.get(&short, &format!("/v1/sandboxes/{a}/files/list"))
            .status(),
        401
    );
}

#[test]
fn a_revoked_key_and_its_tokens_stop_working() {
    let s = Server::start(&[]);
    let key = s.key("acme", "all");
    let id = s.sandbox(&key);
    let (_, tok) = mint(&s, &key, &id, json!({"scopes": ["files"], "ttl": "10m"}));
    let list = s.operator(&["keys", "list", "--json"]);
    let keys: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert!(!String::from_utf8_lossy(&list.stdout).contains(key.rsplit('_').next().unwrap()));
    let kid = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "api_key")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = s.operator(&["keys", "revoke", &kid]);
    assert!(out.status.success());
    assert_eq!(s.get(&key, "/v1/sandboxes").status(), 401);
    assert_eq!(
        s.get(&tok, &format!("/v1/sandboxes/{id}/files/list"))
            .status(),
        401
    );
    // Creating and revoking are operator actions: each has a record naming the key, its
    // tenant and the actor, and no record holds the secret.
    let trail = s.audit();
    let admin = |action: &str| -> Vec<&Value> {
        trail
            .iter()
            .filter(|e| e["event"] == "admin" && e["tool_name"] == action)
            .collect()
    };
    let created = admin("key_create");
    assert!(created
        .iter()
        .any(|e| e["tenant_id"] == "acme" && e["reason"].as_str().unwrap().contains(&kid)));
    let revoked = admin("key_revoke");
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert_eq!(revoked[0]["tenant_id"], "acme");
    assert!(revoked[0]["reason"].as_str().unwrap().contains("cli:"));
    let secret = key.rsplit('_').next().unwrap();
    assert!(trail.iter().all(|e| !e.to_string().contains(secret)));
    // An unknown key: a clear code, and nothing changes.
    let out = s.operator(&["keys", "revoke", "key_0000000000000000"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("SBX_E1522"));
}

#[test]
fn the_audit_query_shows_a_tenant_only_its_own_events() {
    let s = Server::start(&[]);
    let a = s.key("acme", "all");
    let b = s.key("globex", "all");
    let id = s.sandbox(&a);
    let r = s.post(
        &a,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["true"]}),
    );
    assert_eq!(r.status(), 200);
    let mine: Value = s.get(&a, "/v1/audit?event=exec").json().unwrap();
    let events = mine["events"].as_array().unwrap();
    assert!(!events.is_empty(), "{mine}");
    assert!(events.iter().all(|e| e["tenant_id"] == "acme"));
    let theirs: Value = s.get(&b, "/v1/audit").json().unwrap();
    assert!(
        theirs["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["tenant_id"] == "globex"),
        "{theirs}"
    );
    assert!(
        !theirs.to_string().contains(&id),
        "another tenant's sandbox leaked"
    );
    let (st, _) = problem(s.get(&b, "/v1/audit?decision=maybe"));
    assert_eq!(st, 422);
}

#[test]
fn a_token_acts_on_the_whole_sandbox_only_with_a_scope_that_reaches_all_of_it() {
    let s = Server::start(&[]);
    let key = s.key("acme", "exec,run_code,files,read");
    let id = s.sandbox(&key);
    assert_eq!(
        s.put_bytes(
            &key,
            &format!("/v1/sandboxes/{id}/files?path=important/data.csv"),
            b"keep me".to_vec()
        )
        .status(),
        200
    );
    // Files only (with a directory, or without): it may not end, stop or prolong the
    // sandbox. Each refusal is 403 and recorded.
    let (_, confined) = mint(
        &s,
        &key,
        &id,
        json!({"scopes": ["files"], "dir": "pub", "ttl": "1h"}),
    );
    let (_, files) = mint(&s, &key, &id, json!({"scopes": ["files"], "ttl": "1h"}));
    for tok in [&confined, &files] {
        for (path, body) in [
            ("extend", Some(json!({"by": "10m"}))),
            ("pause", None),
            ("resume", None),
        ] {
            let r = s
                .client
                .post(s.url(&format!("/v1/sandboxes/{id}/{path}")))
                .bearer_auth(tok)
                .json(&body.unwrap_or(json!({})))
                .send()
                .unwrap();
            let (st, p) = problem(r);
            assert_eq!(
                (st, p["code"].as_str().unwrap()),
                (403, "SBX_E1803"),
                "{path}"
            );
        }
        let (st, p) = problem(s.delete(tok, &format!("/v1/sandboxes/{id}")));
        assert_eq!((st, p["code"].as_str().unwrap()), (403, "SBX_E1803"), "{p}");
    }
    let r = s.get(
        &key,
        &format!("/v1/sandboxes/{id}/files?path=important/data.csv"),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().unwrap(), "keep me");
    let v: Value = s.get(&key, &format!("/v1/sandboxes/{id}")).json().unwrap();
    assert_eq!(v["state"], "running");
    assert!(s.audit().iter().any(|e| e["event"] == "http.forbidden"
        && e["reason"].as_str().unwrap().contains("whole sandbox")));

    // A token that already reaches the whole sandbox (exec) may; a files-only key may too
    // (it creates sandboxes).
    let (_, exec) = mint(&s, &key, &id, json!({"scopes": ["exec"], "ttl": "1h"}));
    for path in ["pause", "resume"] {
        let r = s.post(&exec, &format!("/v1/sandboxes/{id}/{path}"), &json!({}));
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = s.post(
        &exec,
        &format!("/v1/sandboxes/{id}/extend"),
        &json!({"by": "10m"}),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(
        s.delete(&exec, &format!("/v1/sandboxes/{id}")).status(),
        204
    );
    let files_key = s.key("acme", "files");
    let other = s.sandbox(&files_key);
    assert_eq!(
        s.delete(&files_key, &format!("/v1/sandboxes/{other}"))
            .status(),
        204
    );
}
