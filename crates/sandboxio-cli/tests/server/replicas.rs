//! Three `sandboxio serve` replicas (separate processes, each with its own port, state
//! directory, audit trail and key) on one PostgreSQL store, a throwaway cluster: one budget
//! ceiling holds across them under 24 concurrent clients, an idempotency key runs once
//! across them, a kill switch engaged on replica A stops a sandbox running on replica B,
//! an approval given on A releases the request waiting on B, and a replica SIGKILLed
//! mid-run has its work marked interrupted by the survivors after its lease while they
//! keep serving. Skips (saying why) without PostgreSQL.
//!
//! Delays are measured and printed (`MEASURED ...`); only generous bounds are asserted.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{marker, started, Server};

const REPLICAS: usize = 3;
const CLIENTS_PER_REPLICA: usize = 8;
const REQUESTS_PER_CLIENT: usize = 8;
/// The lease in the replicas' config: the shortest accepted, so the dead-replica test is short.
const LEASE: Duration = Duration::from_secs(2);

/// Every exec costs exactly the per-call price (no CPU or memory price), so its
/// reservation and its charge are 0.01, and exactly 100 fit under a 1.00 ceiling.
fn config(url: &str, ceiling: &str) -> String {
    format!(
        r#"[state]
url = "{url}"
lease = "{}s"

[budget]
per_tenant = "{ceiling}"

[budget.rate_card]
cpu_second = "0"
gib_second = "0"
per_call = "0.01"
"#,
        LEASE.as_secs()
    )
}

fn write_config<'a>(url: &'a str, ceiling: &'a str) -> impl Fn(&std::path::Path) + 'a {
    move |dir| std::fs::write(dir.join("config.toml"), config(url, ceiling)).unwrap()
}

fn replicas(url: &str) -> Vec<Server> {
    (0..REPLICAS)
        .map(|_| Server::start_with(&[], write_config(url, "1.00")))
        .collect()
}

fn db(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}

fn scalar(
    c: &mut postgres::Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> String {
    let row = c.query_one(sql, params).unwrap();
    row.get::<_, Option<String>>(0).unwrap_or_default()
}

fn exec(s: &Server, key: &str, sandbox: &str, body: &Value) -> (u16, Value) {
    let r = s.post(key, &format!("/v1/sandboxes/{sandbox}/exec"), body);
    (r.status().as_u16(), r.json::<Value>().unwrap())
}

/// Minimum, median and maximum, for the `MEASURED` lines.
fn spread(mut v: Vec<Duration>) -> String {
    v.sort();
    format!(
        "min {:?}, median {:?}, max {:?} over {} run(s)",
        v[0],
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    )
}

#[test]
fn three_replicas_with_eight_clients_each_never_pass_one_ceiling() {
    let Some(url) = crate::pgcluster::fresh_url(module_path!()) else {
        return;
    };
    let servers = replicas(&url);
    // One key, made on replica A, works on every replica: credentials are shared.
    let key = servers[0].key("acme", "all");
    let sandboxes: Vec<String> = servers.iter().map(|s| s.sandbox(&key)).collect();
    let mut outcomes: Vec<(u16, Value)> = Vec::new();
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..REPLICAS * CLIENTS_PER_REPLICA)
            .map(|c| {
                let (s, id, key) = (&servers[c % REPLICAS], &sandboxes[c % REPLICAS], &key);
                sc.spawn(move || {
                    (0..REQUESTS_PER_CLIENT)
                        .map(|_| exec(s, key, id, &json!({"argv": ["true"]})))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            outcomes.extend(h.join().unwrap());
        }
    });
    let ok: Vec<&Value> = outcomes
        .iter()
        .filter(|(st, v)| *st == 200 && v["record"]["status"] == "ok")
        .map(|(_, v)| v)
        .collect();
    let denied = outcomes
        .iter()
        .filter(|(_, v)| v["code"] == "SBX_E1553")
        .count();
    for (st, v) in &outcomes {
        assert!(
            (*st == 200 && v["record"]["status"] == "ok") || v["code"] == "SBX_E1553",
            "neither ran nor was refused by the budget: {st} {v}"
        );
    }
    assert_eq!(
        ok.len() + denied,
        REPLICAS * CLIENTS_PER_REPLICA * REQUESTS_PER_CLIENT
    );
    assert_eq!(
        ok.len(),
        100,
        "exactly what fits under the ceiling ran ({denied} refused)"
    );
    // Every replica ran some: the load really was spread.
    for (i, s) in servers.iter().enumerate() {
        let ran = s
            .audit()
            .iter()
            .filter(|e| e["event"] == "exec" && e["status"] == "ok")
            .count();
        assert!(ran > 0, "replica {i} ran nothing");
    }
    // Every success is recorded once, in the trail of the replica that ran it, and once
    // in the shared ledger; the ledger adds up to the ceiling, nothing is left reserved.
    let answered: BTreeSet<String> = ok
        .iter()
        .map(|v| v["record"]["operation_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(answered.len(), 100, "every answer names its own operation");
    let mut in_trails = BTreeSet::new();
    for s in &servers {
        for e in s.audit() {
            if e["event"] == "exec" && e["status"] == "ok" {
                assert!(
                    in_trails.insert(e["operation_id"].as_str().unwrap().to_string()),
                    "recorded twice: {e}"
                );
            }
        }
    }
    assert_eq!(in_trails, answered);
    let mut c = db(&url);
    let in_ledger: Vec<String> = c
        .query("SELECT operation_id FROM ledger", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(in_ledger.len(), 100, "one ledger line per success");
    assert_eq!(in_ledger.into_iter().collect::<BTreeSet<_>>(), answered);
    assert_eq!(
        scalar(&mut c, "SELECT SUM(amount::numeric)::text FROM ledger", &[]),
        "1.00"
    );
    assert_eq!(
        scalar(&mut c, "SELECT COUNT(*)::text FROM reservations", &[]),
        "0"
    );
    assert_eq!(
        scalar(
            &mut c,
            "SELECT COUNT(*)::text FROM journal WHERE status IS NULL",
            &[]
        ),
        "0"
    );
}

#[test]
fn a_replica_that_lost_its_lease_says_so_on_its_health_endpoints() {
    let Some(url) = crate::pgcluster::fresh_url(module_path!()) else {
        return;
    };
    let (a, b) = (
        Server::start_with(&[], write_config(&url, "1.00")),
        Server::start_with(&[], write_config(&url, "1.00")),
    );
    let key = a.key("acme", "all");
    for s in [&a, &b] {
        for path in ["/healthz", "/readyz"] {
            assert_eq!(s.get(&key, path).status(), 200, "{path} before");
        }
    }
    // Another replica found B's lease expired and took its work (as after a stall longer
    // than the lease): B's next renewal finds it lost.
    let mut pg = db(&url);
    let owner = format!("{}:%", b.pid());
    let n = pg
        .execute(
            "UPDATE replicas SET lost_ms = 1 WHERE owner LIKE $1",
            &[&owner],
        )
        .unwrap();
    assert_eq!(n, 1, "B's replica row");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let h = b.get(&key, "/healthz");
        if h.status() == 503 {
            let body: Value = h.json().unwrap();
            assert!(
                body["status"].as_str().unwrap().contains("SBX_E1542"),
                "{body}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "B never reported its lost lease");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(b.get(&key, "/readyz").status(), 503);
    let sbx = b.post(&key, "/v1/sandboxes", &json!({"tier": "process"}));
    let refused = sbx.status() != 201 || {
        let id = sbx.json::<Value>().unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        exec(&b, &key, &id, &json!({"argv": ["true"]})).0 != 200
    };
    assert!(refused, "a lost replica admitted an exec");
    // A, untouched, stays healthy, ready and serving.
    assert_eq!(a.get(&key, "/healthz").status(), 200);
    assert_eq!(a.get(&key, "/readyz").status(), 200);
    let id = a.sandbox(&key);
    assert_eq!(exec(&a, &key, &id, &json!({"argv": ["true"]})).0, 200);
}

#[test]
fn an_idempotency_key_runs_once_across_replicas() {
    let Some(url) = crate::pgcluster::fresh_url(module_path!()) else {
        return;
    };
    let servers = replicas(&url);
    let key = servers[0].key("acme", "all");
    let sandboxes: Vec<String> = servers.iter().map(|s| s.sandbox(&key)).collect();
    // 24 clients on three replicas send the same key at once; the command takes a moment,
    // so some arrive while it runs.
    let body = json!({"argv": ["sleep", "0.3"], "idempotency_key": "once-everywhere"});
    let mut outcomes: Vec<(u16, Value)> = Vec::new();
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..REPLICAS * CLIENTS_PER_REPLICA)
            .map(|c| {
                let (s, id, key, body) = (
                    &servers[c % REPLICAS],
                    &sandboxes[c % REPLICAS],
                    &key,
                    &body,
                );
                sc.spawn(move || exec(s, key, id, body))
            })
            .collect();
        for h in handles {
            outcomes.push(h.join().unwrap());
        }
    });
    let ran: Vec<&Value> = outcomes
        .iter()
        .filter(|(st, v)| *st == 200 && v["record"]["status"] == "ok")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(ran.len(), 1, "the key ran exactly once: {outcomes:?}");
    let first = ran[0]["record"]["operation_id"].as_str().unwrap();
    for (st, v) in &outcomes {
        let replay = *st == 200 && v["record"]["status"] == "replayed";
        // Still running (SBX_E1506), or the same key on another sandbox: another request
        // (SBX_E1505). Either way nothing ran.
        let refused = *st == 409 && matches!(v["code"].as_str(), Some("SBX_E1506" | "SBX_E1505"));
        let original = *st == 200 && v["record"]["operation_id"] == first;
        assert!(replay || refused || original, "{st} {v}");
    }
    let mut c = db(&url);
    assert_eq!(
        scalar(&mut c, "SELECT COUNT(*)::text FROM ledger", &[]),
        "1",
        "charged once"
    );
    let runs = servers
        .iter()
        .flat_map(|s| s.audit())
        .filter(|e| e["event"] == "exec" && e["status"] == "ok")
        .count();
    assert_eq!(runs, 1, "one run in all the trails");
}

#[test]
fn a_kill_switch_engaged_on_one_replica_stops_a_sandbox_on_another() {
    let Some(url) = crate::pgcluster::fresh_url(module_path!()) else {
        return;
    };
    let servers = replicas(&url);
    let key = servers[0].key("acme", "all");
    let a = &servers[0];
    let mut took = Vec::new();
    for round in 0..5 {
        // The sandbox runs on B or C in turn; A engages the switch.
        let b = &servers[1 + round % 2];
        let on_b = b.sandbox(&key);
        let mark = marker("replica-kill");
        let (sent, answered, status, v) = std::thread::scope(|sc| {
            let running = sc.spawn(|| {
                let body = json!({"argv": ["sh", "-c", format!("sleep 30; echo {mark}")]});
                let (st, v) = exec(b, &key, &on_b, &body);
                (Instant::now(), st, v)
            });
            assert!(
                started(&mark),
                "the sandbox on the other replica never started"
            );
            let sent = Instant::now();
            let r = a.post(&key, "/v1/kill", &json!({"reason": "replica test"}));
            assert_eq!(r.status(), 200, "{}", r.text().unwrap());
            let (answered, st, v) = running.join().unwrap();
            (sent, answered, st, v)
        });
        let d = answered.duration_since(sent);
        assert!(
            d < Duration::from_secs(10),
            "stopped only after {d:?} ({status} {v})"
        );
        assert!(
            v.to_string().contains("kill switch"),
            "the run was ended by the kill switch: {status} {v}"
        );
        assert!(
            crate::harness::gone_within(&mark, 10).is_empty(),
            "the sandboxed process is gone"
        );
        took.push(d);
        // Every replica refuses while it is engaged; A's resume releases all of them.
        for s in &servers {
            let id = s.sandbox(&key);
            let (st, v) = exec(s, &key, &id, &json!({"argv": ["true"]}));
            assert_eq!((st, v["code"].as_str()), (503, Some("SBX_E1551")), "{v}");
        }
        assert_eq!(a.delete(&key, "/v1/kill").status(), 200);
        let c = &servers[2];
        let id = c.sandbox(&key);
        let (st, v) = exec(c, &key, &id, &json!({"argv": ["true"]}));
        assert_eq!(st, 200, "resumed everywhere: {v}");
    }
    eprintln!(
        "MEASURED kill switch on replica A to the sandbox on another replica answered as \
         stopped: {}",
        spread(took)
    );
}

#[test]
fn an_approval_on_one_replica_releases_the_request_waiting_on_another() {
    let Some(url) = crate::pgcluster::fresh_url(module_path!()) else {
        return;
    };
    let servers = replicas(&url);
    let key = servers[0].key("acme", "exec,read,files");
    let person = servers[0].key("acme", "approve");
    let (a, b, c) = (&servers[0], &servers[1], &servers[2]);
    let on_b = b.sandbox(&key);
    let ask = |rationale: &str| {
        let (st, v) = exec(
            b,
            &key,
            &on_b,
            &json!({"argv": ["touch", "flag"], "rationale": rationale}),
        );
        assert_eq!(st, 202, "{v}");
        v["approval_id"].as_str().unwrap().to_string()
    };
    let mut took = Vec::new();
    for round in 0..3 {
        // An ask on B, approved on A: B's waiter is released and the command runs on B.
        let apr = ask(&format!("round {round}"));
        let (approved, answered, v) = std::thread::scope(|sc| {
            let waiting = sc.spawn(|| {
                let r = b.get(&key, &format!("/v1/approvals/{apr}/outcome?timeout=30"));
                assert_eq!(r.status(), 200);
                (Instant::now(), r.json::<Value>().unwrap())
            });
            // The waiter is parked on B before the decision is made on A.
            std::thread::sleep(Duration::from_millis(300));
            let t = Instant::now();
            let r = a.post(
                &person,
                &format!("/v1/approvals/{apr}/approve"),
                &json!({"reason": "fine"}),
            );
            assert_eq!(r.status(), 200, "{}", r.text().unwrap());
            let (answered, v) = waiting.join().unwrap();
            (t, answered, v)
        });
        assert_eq!(v["record"]["status"], "ok", "{v}");
        assert_eq!(v["record"]["approval_id"], apr.as_str());
        took.push(answered.duration_since(approved));
    }
    eprintln!(
        "MEASURED approval on replica A to the outcome on replica B: {}",
        spread(took)
    );
    // A denial on C ends B's wait as a denial; the command never ran.
    let apr = ask("to be denied");
    let r = c.post(
        &person,
        &format!("/v1/approvals/{apr}/deny"),
        &json!({"reason": "no"}),
    );
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let r = b.get(&key, &format!("/v1/approvals/{apr}/outcome?timeout=30"));
    let v: Value = r.json().unwrap();
    assert_eq!(v["code"], "SBX_E1554", "{v}");
    let ran = b
        .audit()
        .iter()
        .filter(|e| e["event"] == "exec" && e["status"] == "ok")
        .count();
    assert_eq!(ran, 3, "only the approved asks ran");
}

/// The wrapper that gives the victim a pid namespace of its own when we may create one:
/// the survivors then cannot tell from its pid that it is gone (as for a replica on
/// another host) and only its lease expiring lets them recover its work.
fn own_pid_namespace() -> Vec<&'static str> {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    let unshare = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if root && unshare {
        vec!["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    } else {
        eprintln!(
            "NOTE {}: the victim shares our pid namespace (not root, or no unshare), so \
             the survivors may recover its work as soon as they see its process gone, \
             before its lease expires",
            module_path!()
        );
        Vec::new()
    }
}

#[test]
fn a_replica_killed_mid_run_is_written_off_after_its_lease_while_the_others_serve() {
    let Some(url) = crate::pgcluster::fresh_url(module_path!()) else {
        return;
    };
    let survivors: Vec<Server> = (0..REPLICAS - 1)
        .map(|_| Server::start_with(&[], write_config(&url, "1000")))
        .collect();
    let wrapper = own_pid_namespace();
    let victim = Server::start_wrapped(&wrapper, &[], write_config(&url, "1000"));
    let key = survivors[0].key("acme", "all");
    let boxes: Vec<String> = survivors.iter().map(|s| s.sandbox(&key)).collect();
    let v_box = victim.sandbox(&key);
    let mut pg = db(&url);

    let mark = marker("replica-victim");
    let stop = AtomicBool::new(false);
    let served = std::thread::scope(|sc| {
        // The victim runs a long command when it dies; its client loses the connection.
        let lost = sc.spawn(|| {
            victim
                .client
                .post(victim.url(&format!("/v1/sandboxes/{v_box}/exec")))
                .bearer_auth(&key)
                .json(&json!({"argv": ["sh", "-c", format!("sleep 30; echo {mark}")]}))
                .send()
                .is_err()
        });
        assert!(started(&mark), "the victim's sandbox never started");
        let pattern = format!("%{mark}%");
        let open = scalar(
            &mut pg,
            "SELECT MIN(operation_id) FROM journal WHERE status IS NULL AND intent LIKE $1",
            &[&pattern],
        );
        assert!(!open.is_empty(), "the victim's run has an open intent");
        assert_eq!(
            scalar(
                &mut pg,
                "SELECT COUNT(*)::text FROM reservations WHERE operation_id = $1",
                &[&open]
            ),
            "1",
            "the victim's run holds a reservation"
        );
        // Clients of the survivors keep working before, during and after the outage.
        let load: Vec<_> = survivors
            .iter()
            .zip(&boxes)
            .flat_map(|(s, id)| [(s, id), (s, id)])
            .map(|(s, id)| {
                let (key, stop) = (&key, &stop);
                sc.spawn(move || {
                    let mut n = 0u32;
                    while !stop.load(Ordering::SeqCst) {
                        let (st, v) = exec(s, key, id, &json!({"argv": ["true"]}));
                        assert_eq!(st, 200, "a survivor stopped serving: {v}");
                        assert_eq!(v["record"]["status"], "ok", "{v}");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let died = Instant::now();
        let st = std::process::Command::new("kill")
            .args(["-KILL", &victim.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        assert!(
            lost.join().unwrap(),
            "the dead replica's client lost its connection"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = scalar(
                &mut pg,
                "SELECT status FROM journal WHERE operation_id = $1",
                &[&open],
            );
            if status == "interrupted" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the dead replica's run was never recovered (status {status:?})"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let recovered = died.elapsed();
        // A little more service after the recovery, then the clients stop.
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::SeqCst);
        let served: u32 = load.into_iter().map(|h| h.join().unwrap()).sum();
        eprintln!(
            "MEASURED a replica SIGKILLed mid-run (lease {LEASE:?}): its run marked \
             interrupted {recovered:?} later; the survivors answered {served} requests \
             meanwhile, all of them 200"
        );
        if !wrapper.is_empty() {
            // Written off only once its lease had run out (the survivors cannot see a
            // process in another pid namespace), by the database's and this host's clock.
            assert_eq!(
                scalar(
                    &mut pg,
                    "SELECT (j.ended_ms >= r.lease_until_ms)::text FROM journal j
                     JOIN replicas r ON r.id = j.replica WHERE j.operation_id = $1",
                    &[&open]
                ),
                "true",
                "recovered before the dead replica's lease expired"
            );
        }
        // Its reservation is released, and exactly one survivor recorded the interruption.
        assert_eq!(
            scalar(
                &mut pg,
                "SELECT COUNT(*)::text FROM reservations WHERE operation_id = $1",
                &[&open]
            ),
            "0"
        );
        let recorded = survivors
            .iter()
            .flat_map(|s| s.audit())
            .filter(|e| e["operation_id"] == open.as_str() && e["status"] == "interrupted")
            .count();
        assert_eq!(recorded, 1, "one survivor recorded the interrupted run");
        served
    });
    assert!(served > 0);
    // The dead replica is marked lost; the survivors' leases are current.
    assert_eq!(
        scalar(
            &mut pg,
            "SELECT COUNT(*)::text FROM replicas WHERE lost_ms IS NOT NULL",
            &[]
        ),
        "1"
    );
    assert_eq!(
        scalar(
            &mut pg,
            "SELECT COUNT(*)::text FROM replicas WHERE lost_ms IS NULL
               AND lease_until_ms > (extract(epoch from clock_timestamp()) * 1000)::bigint",
            &[]
        ),
        "2"
    );
    if !wrapper.is_empty() {
        assert!(
            crate::harness::gone_within(&mark, 10).is_empty(),
            "the victim's sandboxed process died with its pid namespace"
        );
    }
}

/// `sandboxio audit verify --config <shared store> --key ... [--all] TRAIL...`.
fn verify_trails(
    cfg: &std::path::Path,
    keys: &[std::path::PathBuf],
    all: bool,
    trails: &[std::path::PathBuf],
) -> (i32, Value) {
    let mut c = std::process::Command::new(crate::harness::BIN);
    c.args(["audit", "verify", "--json", "--config"]).arg(cfg);
    for k in keys {
        c.arg("--key").arg(k);
    }
    if all {
        c.arg("--all");
    }
    let out = c.args(trails).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

/// The trail without its last record (and whatever follows it).
fn cut_last_record(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let last = lines
        .iter()
        .rposition(|l| l.starts_with("{\"seq\":"))
        .unwrap();
    lines[..last].iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn each_replicas_trail_is_verified_against_its_head_in_the_shared_store() {
    let Some(url) = crate::pgcluster::fresh_url(module_path!()) else {
        return;
    };
    let mut servers = replicas(&url);
    let key = servers[0].key("acme", "all");
    for (i, s) in servers.iter().enumerate() {
        let id = s.sandbox(&key);
        for _ in 0..=i {
            let (st, v) = exec(s, &key, &id, &json!({"argv": ["true"]}));
            assert_eq!(st, 200, "{v}");
        }
    }
    for s in &mut servers {
        assert!(s.terminate().success());
    }
    let cfg = servers[0].dir.path().join("config.toml");
    let keys: Vec<_> = servers
        .iter()
        .map(|s| s.state().join("audit.pub"))
        .collect();
    let trails: Vec<_> = servers
        .iter()
        .map(|s| s.state().join("audit.jsonl"))
        .collect();

    // Each trail verifies on its own and against its own head, found by its path, and
    // every head the store keeps is held by one of them.
    let (code, v) = verify_trails(&cfg, &keys, true, &trails);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true);
    assert_eq!(v["trails"].as_array().unwrap().len(), 3);
    for t in v["trails"].as_array().unwrap() {
        assert_eq!(t["anchor"]["matched"], "path", "{t}");
        assert_eq!(t["anchor"]["head_signature"], true, "{t}");
        assert!(t["anchor"]["node"].is_string(), "{t}");
    }
    assert_eq!(v["unheld_heads"], json!([]));

    // A trail left out: fine without --all, caught with it.
    let (code, _) = verify_trails(&cfg, &keys, false, &trails[..2]);
    assert_eq!(code, 0);
    let (code, v) = verify_trails(&cfg, &keys, true, &trails[..2]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["unheld_heads"].as_array().unwrap().len(), 1, "{v}");

    // B cut by its last record: it still chains on its own, but its head catches it.
    let b_full = std::fs::read_to_string(&trails[1]).unwrap();
    std::fs::write(&trails[1], cut_last_record(&b_full)).unwrap();
    let (code, v) = verify_trails(&cfg, &keys, true, &trails);
    assert_eq!(code, 1, "{v}");
    let t = &v["trails"].as_array().unwrap();
    assert_eq!(
        (t[0]["ok"].clone(), t[2]["ok"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(t[1]["ok"], false);
    assert_eq!(t[1]["anchor"]["check"]["kind"], "behind", "{}", t[1]);
    std::fs::write(&trails[1], &b_full).unwrap();

    // C swapped for a copy of A: A's chain is intact, but C's head is not in it.
    let c_full = std::fs::read_to_string(&trails[2]).unwrap();
    std::fs::copy(&trails[0], &trails[2]).unwrap();
    let (code, v) = verify_trails(&cfg, &keys, true, &trails);
    assert_eq!(code, 1, "{v}");
    let t = &v["trails"].as_array().unwrap();
    assert_eq!(t[2]["ok"], false, "{}", t[2]);
    assert_ne!(t[2]["anchor"]["check"]["kind"], "extends", "{}", t[2]);
    std::fs::write(&trails[2], &c_full).unwrap();

    // Trails gathered in another place are matched to their heads by content; a cut copy
    // matches none and fails.
    let gathered = tempfile::tempdir().unwrap();
    let copies: Vec<_> = trails
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let to = gathered.path().join(format!("replica-{i}.jsonl"));
            std::fs::copy(t, &to).unwrap();
            to
        })
        .collect();
    let (code, v) = verify_trails(&cfg, &keys, true, &copies);
    assert_eq!(code, 0, "{v}");
    for t in v["trails"].as_array().unwrap() {
        assert_eq!(t["anchor"]["matched"], "content", "{t}");
    }
    std::fs::write(&copies[2], cut_last_record(&c_full)).unwrap();
    let (code, v) = verify_trails(&cfg, &keys, false, &copies);
    assert_eq!(code, 1, "{v}");
    let t = &v["trails"].as_array().unwrap()[2];
    assert_eq!(t["ok"], false, "{t}");
    assert!(t["anchor"]["head"].is_null(), "{t}");
}
