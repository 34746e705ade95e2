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
