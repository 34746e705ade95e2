//! A hostile client against the E2B-compatible API (and the native calls it shares code
//! with): a template's command limit, label bounds and reserved names, revocation of an
//! open stream, multipart uploads, `connect` of a paused sandbox, `/health` without a key.

use serde_json::{json, Value};

use crate::e2b::{e2b_sandbox, e2b_server};

/// `connect` with a bad `timeout` is refused before it resumes anything.
#[test]
fn connect_with_a_bad_timeout_leaves_a_paused_sandbox_paused() {
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let post = |path: &str, body: &Value| {
        s.client
            .post(s.url(path))
            .header("X-API-Key", &key)
            .json(body)
            .send()
            .unwrap()
    };
    let r = post(&format!("/sandboxes/{}/pause", sbx.0), &json!({}));
    assert_eq!(r.status(), 204);
    for bad in [json!(-1), json!(0), json!(10_000_000)] {
        let r = post(
            &format!("/sandboxes/{}/connect", sbx.0),
            &json!({ "timeout": bad }),
        );
        assert_eq!(r.status(), 400, "{bad}");
        let v: Value = r.json().unwrap();
        assert_eq!(v["sandboxio_code"], "SBX_E2508", "{v}");
        let v: Value = s
            .client
            .get(s.url(&format!("/sandboxes/{}", sbx.0)))
            .header("X-API-Key", &key)
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(v["state"], "paused", "{bad}: {v}");
    }
}

/// Without a token, `/health` answers the same for a sandbox that exists and one
/// that does not.
#[test]
fn health_without_a_token_does_not_tell_whether_a_sandbox_exists() {
    let s = e2b_server("");
    let key = s.key("acme", "exec,run_code,files,read");
    let sbx = e2b_sandbox(&s, &key);
    let health = |id: &str, token: Option<&str>| {
        let mut r = s.client.get(s.url("/health")).header("E2b-Sandbox-Id", id);
        if let Some(t) = token {
            r = r.header("X-Access-Token", t);
        }
        let r = r.send().unwrap();
        let st = r.status().as_u16();
        let v: Value = r.json().unwrap_or(Value::Null);
        (st, v["sandboxio_code"].clone())
    };
    let unknown = "0123456789abcdef0123456789abcdef";
    let existing = health(&sbx.0, None);
    assert_eq!(existing.0, 401);
    assert_eq!(health(unknown, None), existing);
    assert_eq!(health(unknown, Some("sbxe_forged")), existing);
    assert_eq!(health(&sbx.0, Some("sbxe_forged")), existing);
    // The holder of the sandbox's token still learns that it is gone (E2B's `is_running`).
    assert_eq!(health(&sbx.0, Some(&sbx.1)).0, 204);
    let r = s
        .client
        .delete(s.url(&format!("/sandboxes/{}", sbx.0)))
        .header("X-API-Key", &key)
        .send()
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(health(&sbx.0, Some(&sbx.1)).0, 502);
}
