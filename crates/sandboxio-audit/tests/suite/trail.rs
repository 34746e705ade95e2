//! The file trail: rotation, reopening, crash recovery, tail/query/follow, the queue sink.

use std::sync::Arc;

use sandboxio_audit::sink::FileSinkOptions;
use sandboxio_audit::{
    query, tail, trail_files, verify, AuditEvent, AuditKey, AuditSink, FileSink, Follower,
    FsyncPolicy, Query, QueueSink,
};
use sandboxio_core::Verdict;

use super::common::{capture_logs, exec_record, CollectSink};

fn ev(i: u64) -> AuditEvent {
    let mut r = exec_record(&format!("op-{i}"));
    r.tenant_id = Some(
        if i.is_multiple_of(2) {
            "acme"
        } else {
            "globex"
        }
        .into(),
    );
    if i.is_multiple_of(3) {
        r.verdict = Verdict::Deny;
        r.status = sandboxio_core::OperationStatus::Denied;
    }
    r.ts += chrono::Duration::seconds(i as i64);
    AuditEvent::from_record(&r, false)
}

fn opts(path: &std::path::Path) -> FileSinkOptions {
    FileSinkOptions::new(path)
        .fsync(FsyncPolicy::Never)
        .checkpoint_every(5)
        .rotate_bytes(Some(4000))
}

#[tokio::test]
async fn rotated_trail_verifies_and_chains_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    let sink = FileSink::open(opts(&path), key.clone()).unwrap();
    for i in 0..40 {
        sink.emit(&ev(i)).await.unwrap();
    }
    sink.close().await.unwrap();
    let files = trail_files(&path).unwrap();
    assert!(files.len() >= 3, "rotated into {files:?}");
    let rep = verify(&files, Some(&key.verifying_key()));
    assert!(rep.ok && rep.sealed, "{rep:?}");
    assert_eq!(rep.records, 40);
    // Deleting a whole middle file is a gap at the first record of the next file.
    let rep = verify(&[&files[0], &files[2]], Some(&key.verifying_key()));
    assert!(!rep.ok);
    assert_eq!(rep.first_bad.unwrap().file, files[2]);
    // A later file verifies alone, anchored on its opening checkpoint.
    let rep = verify(&files[1..], Some(&key.verifying_key()));
    assert!(rep.ok && rep.starts_at > 0, "{rep:?}");
    // Dropping the newest files is truncation.
    let rep = verify(&files[..1], Some(&key.verifying_key()));
    assert_eq!(
        rep.first_bad.unwrap().kind,
        sandboxio_audit::Tamper::Truncated
    );
}

/// A process killed inside a rotation, after the full file was renamed and before the new
/// one had its opening checkpoint (no file yet, or an empty one): the next opener takes the
/// chain up from the renamed file's closing checkpoint, and the trail verifies whole. It
/// began a new chain from genesis, which `verify` reported as a checkpoint mismatch.
#[tokio::test]
async fn a_rotation_cut_short_is_continued_by_the_next_opener() {
    for leave in ["no file", "an empty file"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let key = Arc::new(AuditKey::generate());
        let sink = FileSink::open(opts(&path), key.clone()).unwrap();
        let mut n = 0;
        // Up to the first rotation: the new file then holds only its opening checkpoint.
        while trail_files(&path).unwrap().len() < 2 {
            sink.emit(&ev(n)).await.unwrap();
            n += 1;
            assert!(n < 1000, "never rotated");
        }
        // Killed there: no close, and the new file as the kill left it.
        std::mem::forget(sink);
        if leave == "no file" {
            std::fs::remove_file(&path).unwrap();
        } else {
            std::fs::write(&path, b"").unwrap();
        }
        let sink = FileSink::open(opts(&path).rotate_bytes(None), key.clone()).unwrap();
        assert_eq!(sink.tree_size(), n, "{leave}: the chain is taken up");
        for i in 0..3 {
            sink.emit(&ev(n + i)).await.unwrap();
        }
        sink.close().await.unwrap();
        let files = trail_files(&path).unwrap();
        let rep = verify(&files, Some(&key.verifying_key()));
        assert!(rep.ok && rep.sealed, "{leave}: {rep:?}");
        assert_eq!(rep.records, n + 3, "{leave}");
    }
}

#[tokio::test]
async fn reopening_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    for round in 0..3u64 {
        let sink = FileSink::open(opts(&path).rotate_bytes(None), key.clone()).unwrap();
        assert_eq!(sink.tree_size(), round * 3);
        for i in 0..3 {
            sink.emit(&ev(round * 3 + i)).await.unwrap();
        }
        sink.close().await.unwrap();
    }
    let rep = verify(&[&path], Some(&key.verifying_key()));
    assert!(rep.ok && rep.records == 9, "{rep:?}");
}

#[tokio::test]
async fn reopening_after_a_crash_moves_a_torn_line_aside_records_it_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    {
        let sink = FileSink::open(opts(&path).rotate_bytes(None), key.clone()).unwrap();
        for i in 0..3 {
            sink.emit(&ev(i)).await.unwrap();
        }
        sink.close().await.unwrap();
    }
    // Simulate a crash: no closing checkpoint, and half a line.
    let mut s = std::fs::read_to_string(&path).unwrap();
    let last = s.trim_end().rfind('\n').unwrap();
    s.truncate(last + 1);
    s.push_str("{\"seq\":3,\"prev_hash\":\"00");
    std::fs::write(&path, s).unwrap();
    assert!(!verify(&[&path], Some(&key.verifying_key())).ok);

    let (logs, _g) = capture_logs();
    let sink = FileSink::open(opts(&path).rotate_bytes(None), key.clone()).unwrap();
    assert!(logs.text().contains("moved it aside"), "{}", logs.text());
    // The three records, then the record saying what was moved aside.
    assert_eq!(sink.tree_size(), 4);
    sink.emit(&ev(3)).await.unwrap();
    sink.close().await.unwrap();
    let rep = verify(&[&path], Some(&key.verifying_key()));
    assert!(rep.ok && rep.records == 5, "{rep:?}");
    let events = sandboxio_audit::read_events(&[&path]).unwrap();
    assert_eq!(events[3].event.event, sandboxio_audit::REPAIR_EVENT);
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".torn-"))
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        b"{\"seq\":3,\"prev_hash\":\"00"
    );
}

#[tokio::test]
async fn garbage_before_the_last_line_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    {
        let sink = FileSink::open(opts(&path).rotate_bytes(None), key.clone()).unwrap();
        for i in 0..3 {
            sink.emit(&ev(i)).await.unwrap();
        }
        // No close: the records are the last lines.
        std::mem::forget(sink);
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    lines[n - 2] = "garbage in the middle";
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let e = FileSink::open(opts(&path).rotate_bytes(None), key).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1603");
}

#[tokio::test]
async fn the_signed_head_names_the_last_record_and_catches_a_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    let sink = FileSink::open(opts(&path).rotate_bytes(None), key.clone()).unwrap();
    for i in 0..5 {
        sink.emit(&ev(i)).await.unwrap();
    }
    let head = sink.head().unwrap();
    assert_eq!(head.size, 5);
    assert!(head.verify_signature(&[key.verifying_key()]));
    assert!(!head.verify_signature(&[AuditKey::generate().verifying_key()]));
    sink.close().await.unwrap();
    let files = sandboxio_audit::trail_files(&path).unwrap();
    assert!(sandboxio_audit::check_head(&files, &head).ok());
    // Cut the last record (and what follows it): the head is no longer held.
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let keep = lines
        .iter()
        .rposition(|l| l.starts_with("{\"seq\":"))
        .unwrap();
    std::fs::write(&path, lines[..keep].join("\n") + "\n").unwrap();
    let check = sandboxio_audit::check_head(&files, &head);
    assert!(
        matches!(
            check,
            sandboxio_audit::HeadCheck::Behind {
                trail_size: 4,
                head_size: 5
            }
        ),
        "{check:?}"
    );
    // A different trail of the same length: diverges.
    std::fs::remove_file(&path).unwrap();
    let other = FileSink::open(opts(&path).rotate_bytes(None), key.clone()).unwrap();
    for i in 10..15 {
        other.emit(&ev(i)).await.unwrap();
    }
    other.close().await.unwrap();
    let check = sandboxio_audit::check_head(&files, &head);
    assert_eq!(check, sandboxio_audit::HeadCheck::Diverges { seq: 4 });
}

#[tokio::test]
async fn trail_files_are_created_private_and_loose_ones_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    drop(FileSink::open(opts(&path), key.clone()).unwrap());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(FileSink::open(opts(&path), key).unwrap());
    assert_eq!(mode(&path), 0o600);
}

#[tokio::test]
async fn opening_a_trail_signed_by_another_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    drop(FileSink::open(opts(&path), Arc::new(AuditKey::generate())).unwrap());
    let e = FileSink::open(opts(&path), Arc::new(AuditKey::generate())).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1604");
}

#[tokio::test]
async fn key_file_is_generated_then_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let kp = dir.path().join("audit.key");
    let a = AuditKey::load_or_generate(&kp).unwrap();
    let b = AuditKey::load_or_generate(&kp).unwrap();
    assert_eq!(a.verifying_key(), b.verifying_key());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kp).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let pubfile = dir.path().join("audit.pub");
    std::fs::write(&pubfile, a.export_public("sandboxio-audit")).unwrap();
    assert_eq!(
        sandboxio_audit::load_public_key(&pubfile).unwrap(),
        a.verifying_key()
    );
    std::fs::write(&kp, "not a key").unwrap();
    let e = AuditKey::load_or_generate(&kp).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1605");
}

#[tokio::test]
async fn tail_query_and_follow_span_rotated_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    let sink = FileSink::open(opts(&path), key).unwrap();
    for i in 0..30 {
        sink.emit(&ev(i)).await.unwrap();
    }
    let files = trail_files(&path).unwrap();
    assert!(files.len() >= 2);
    let last = tail(&files, 5).unwrap();
    let ids: Vec<u64> = last.iter().map(|e| e.seq).collect();
    assert_eq!(ids, vec![25, 26, 27, 28, 29]);
    assert_eq!(last[4].event.operation_id, "op-29");

    let base = ev(0).ts;
    let q = Query {
        since: Some(base + chrono::Duration::seconds(10)),
        until: Some(base + chrono::Duration::seconds(20)),
        tenant: Some("acme".into()),
        decision: Some(Verdict::Deny),
        event: Some("exec".into()),
    };
    let got: Vec<u64> = query(&files, &q).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(got, vec![12, 18]);

    // Follow: new records, across a rotation.
    let mut f = Follower::from_end(&path).unwrap();
    assert!(f.poll().unwrap().is_empty());
    for i in 30..60 {
        sink.emit(&ev(i)).await.unwrap();
    }
    let mut seen = f.poll().unwrap();
    seen.extend(f.poll().unwrap());
    let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (30..60).collect::<Vec<_>>());
}

#[tokio::test]
async fn queue_overflow_drops_the_oldest_with_a_warning() {
    let (logs, _g) = capture_logs();
    let inner = Arc::new(CollectSink::default());
    let q = QueueSink::new(inner.clone(), 3);
    for i in 0..5 {
        q.emit(&ev(i)).await.unwrap();
    }
    assert_eq!(q.dropped(), 2);
    assert_eq!(q.len(), 3);
    assert!(logs.text().contains("dropped the oldest event"));
    assert!(logs.text().contains("op-0") && logs.text().contains("op-1"));
    assert_eq!(q.drain_available().await, 3);
    let got: Vec<String> = inner
        .all()
        .iter()
        .map(|l| serde_json::from_str::<AuditEvent>(l).unwrap().operation_id)
        .collect();
    assert_eq!(got, vec!["op-2", "op-3", "op-4"]);
}

#[tokio::test]
async fn queue_drain_runs_in_the_hosts_task_until_closed() {
    let inner = Arc::new(CollectSink::default());
    let q = Arc::new(QueueSink::new(inner.clone(), 100));
    let drainer = {
        let q = q.clone();
        tokio::spawn(async move { q.drain().await })
    };
    for i in 0..10 {
        q.emit(&ev(i)).await.unwrap();
    }
    q.close().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), drainer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(inner.all().len(), 10);
    assert!(
        q.emit(&ev(11)).await.is_err(),
        "closed queue refuses events"
    );
}

/// Another process holding the trail's lock (a CLI command writing its record while the
/// server runs) blocks the file sink's write, on the sink's writer thread; the tasks of
/// the async worker that awaits it keep running. The runtime has a single worker, so a
/// write done inline on it would stall every task until the lock is released.
#[test]
fn a_trail_lock_held_elsewhere_does_not_stall_the_async_workers() {
    use std::sync::mpsc;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let sink = Arc::new(FileSink::open(opts(&path), Arc::new(AuditKey::generate())).unwrap());
    let mut lock_name = path.clone().into_os_string();
    lock_name.push(".lock");
    let held = std::fs::OpenOptions::new()
        .append(true)
        .open(&lock_name)
        .unwrap();
    held.lock().unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (started_tx, started) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let writer = sink.clone();
    rt.spawn(async move {
        started_tx.send(()).unwrap();
        let r = writer.emit(&ev(1)).await;
        done_tx.send(r.is_ok()).unwrap();
    });
    started.recv_timeout(Duration::from_secs(30)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(done.try_recv().is_err(), "the write waits for the lock");
    let (pong_tx, pong) = mpsc::channel();
    rt.spawn(async move { pong_tx.send(()).unwrap() });
    let answered = pong.recv_timeout(Duration::from_secs(10));
    // Released before asserting, so that a failure cannot leave the worker blocked.
    held.unlock().unwrap();
    assert!(
        answered.is_ok(),
        "another task ran while the write waited for the lock"
    );
    assert!(done.recv_timeout(Duration::from_secs(30)).unwrap());
    rt.shutdown_timeout(Duration::from_secs(5));
    assert_eq!(
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter(|l| l.contains("op-1"))
            .count(),
        1
    );
}

/// Records written on the caller's thread (`record_blocking`, the gateway's closing call)
/// and through the writer thread (`emit`) interleave in one chain: the trail verifies,
/// with every record once and in the order written.
#[test]
fn blocking_and_threaded_writes_keep_one_chain() {
    use sandboxio_audit::{AuditConfig, Auditor, Redactor};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    let sink = Arc::new(
        FileSink::open(
            FileSinkOptions::new(&path).fsync(FsyncPolicy::Always),
            key.clone(),
        )
        .unwrap(),
    );
    let auditor = Auditor::new(
        AuditConfig::default().with_sinks(vec![sink.clone() as Arc<dyn AuditSink>]),
        Arc::new(Redactor::builder().build().unwrap()),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    for i in 0..6u64 {
        let rec = exec_record(&format!("op-{i}"));
        if i % 2 == 0 {
            // On this plain thread, as on the blocking pool: no runtime needed by a file sink.
            let out = auditor
                .record_blocking(rec, &opentelemetry::Context::current())
                .unwrap();
            assert!(out.failures.is_empty(), "{:?}", out.failures);
        } else {
            rt.block_on(auditor.record(rec)).unwrap();
        }
    }
    sink.close_sync().unwrap();
    let rep = verify(&trail_files(&path).unwrap(), Some(&key.verifying_key()));
    assert!(rep.ok, "{rep:?}");
    assert_eq!(rep.records, 6);
    let ids: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            v.get("operation_id")?.as_str().map(str::to_string)
        })
        .collect();
    assert_eq!(ids, (0..6).map(|i| format!("op-{i}")).collect::<Vec<_>>());
}

/// Another process holding the trail's lock past the timeout: the blocking write gives up
/// (timed out, nothing written), like the awaited write's timeout; once the lock is free
/// the next record is written and the trail still verifies.
#[test]
fn a_blocking_write_gives_up_at_the_timeout_while_the_lock_is_held_elsewhere() {
    use sandboxio_audit::BlockingEmit;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    let sink = FileSink::open(opts(&path), key.clone()).unwrap();
    let mut lock_name = path.clone().into_os_string();
    lock_name.push(".lock");
    let held = std::fs::OpenOptions::new()
        .append(true)
        .open(&lock_name)
        .unwrap();
    held.lock().unwrap();
    let r = sink.emit_blocking(&ev(1), Duration::from_millis(100));
    held.unlock().unwrap();
    assert!(matches!(r, BlockingEmit::TimedOut), "{r:?}");
    let before = std::fs::read_to_string(&path).unwrap();
    assert!(
        !before.contains("\"op-1\""),
        "nothing written while timed out"
    );
    let r = sink.emit_blocking(&ev(2), Duration::from_millis(100));
    assert!(matches!(r, BlockingEmit::Done(Ok(()))), "{r:?}");
    sink.close_sync().unwrap();
    let rep = verify(&trail_files(&path).unwrap(), Some(&key.verifying_key()));
    assert!(rep.ok, "{rep:?}");
    assert_eq!(rep.records, 1);
}

/// A sink written only on its callers' threads has no writer thread (it starts with the
/// first record handed to it): closed either way, synchronously or awaited, the trail
/// still ends with its closing checkpoint and verifies, and a later record is refused as
/// closed, not lost silently.
#[test]
fn a_sink_never_handed_a_record_closes_on_the_closing_thread() {
    use sandboxio_audit::{AuditError, BlockingEmit};
    use std::time::Duration;

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for awaited in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let key = Arc::new(AuditKey::generate());
        let sink = FileSink::open(opts(&path), key.clone()).unwrap();
        let r = sink.emit_blocking(&ev(1), Duration::from_secs(5));
        assert!(matches!(r, BlockingEmit::Done(Ok(()))), "{r:?}");
        if awaited {
            rt.block_on(AuditSink::close(&sink)).unwrap();
        } else {
            sink.close_sync().unwrap();
        }
        let closing = checkpoint_lines(&path);
        assert!(
            closing.last().is_some_and(|l| l.contains("\"close\"")),
            "awaited={awaited}: {closing:?}"
        );
        let late = rt.block_on(sink.emit(&ev(2)));
        assert!(
            matches!(late, Err(AuditError::SinkClosed { .. })),
            "awaited={awaited}: {late:?}"
        );
        // Closing again changes nothing.
        sink.close_sync().unwrap();
        let rep = verify(&trail_files(&path).unwrap(), Some(&key.verifying_key()));
        assert!(rep.ok, "awaited={awaited}: {rep:?}");
        assert_eq!(rep.records, 1, "awaited={awaited}");
    }
}

fn checkpoint_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("{\"checkpoint\""))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_cleanly_closed_trail_is_continued_without_signing_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    let always = |p: &std::path::Path| FileSinkOptions::new(p).fsync(FsyncPolicy::Always);
    // Three one-shot writers in a row, one record each (the CLI's pattern).
    for i in 0..3 {
        let sink = FileSink::open(always(&path), key.clone()).unwrap();
        sink.emit(&ev(i)).await.unwrap();
        sink.close().await.unwrap();
    }
    let cps = checkpoint_lines(&path);
    // The first open (a new file), then one closing checkpoint per writer: no `open`
    // checkpoint after a clean close.
    assert_eq!(cps.len(), 4, "{cps:#?}");
    assert_eq!(
        cps.iter()
            .filter(|c| c.contains("\"reason\":\"open\""))
            .count(),
        1,
        "{cps:#?}"
    );
    let rep = verify(&trail_files(&path).unwrap(), Some(&key.verifying_key()));
    assert!(rep.ok && rep.sealed, "{rep:?}");
    assert_eq!(rep.records, 3);
    // A trail whose last line is a record (a writer that stopped without closing) gets
    // an `open` checkpoint again.
    let sink = FileSink::open(always(&path), key.clone()).unwrap();
    sink.emit(&ev(3)).await.unwrap();
    drop(sink);
    let before = checkpoint_lines(&path).len();
    let text = std::fs::read_to_string(&path).unwrap();
    if text.lines().last().unwrap().starts_with("{\"checkpoint\"") {
        // Dropping closed it; cut the closing line to play a crash.
        let cut = text.trim_end().rfind('\n').unwrap() + 1;
        std::fs::write(&path, &text[..cut]).unwrap();
    }
    let sink = FileSink::open(always(&path), key.clone()).unwrap();
    sink.close().await.unwrap();
    let cps = checkpoint_lines(&path);
    assert!(cps.len() >= before, "{cps:#?}");
    assert!(
        cps[cps.len() - 2].contains("\"reason\":\"open\""),
        "no open checkpoint after a record: {cps:#?}"
    );
    let rep = verify(&trail_files(&path).unwrap(), Some(&key.verifying_key()));
    assert!(rep.ok && rep.sealed, "{rep:?}");
    assert_eq!(rep.records, 4);
}

#[tokio::test]
async fn a_long_trail_is_continued_from_its_tail_and_still_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = Arc::new(AuditKey::generate());
    let o = |p: &std::path::Path| {
        FileSinkOptions::new(p)
            .fsync(FsyncPolicy::Never)
            .checkpoint_every(50)
            .rotate_bytes(None)
    };
    let sink = FileSink::open(o(&path), key.clone()).unwrap();
    for i in 0..600 {
        sink.emit(&ev(i)).await.unwrap();
    }
    sink.close().await.unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() > 4 * 64 * 1024);
    // Reopened from the tail: the chain continues where it ended.
    let sink = FileSink::open(o(&path), key.clone()).unwrap();
    for i in 600..610 {
        sink.emit(&ev(i)).await.unwrap();
    }
    sink.close().await.unwrap();
    let rep = verify(&trail_files(&path).unwrap(), Some(&key.verifying_key()));
    assert!(rep.ok && rep.sealed, "{rep:?}");
    assert_eq!(rep.records, 610);
    // A record after the last checkpoint that was changed is still refused at open (not
    // the last line, which would be taken for a torn write and moved aside).
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let last_record = lines
        .iter()
        .rposition(|l| l.starts_with("{\"seq\""))
        .unwrap();
    let mut changed: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    assert!(
        changed[last_record - 4].contains("op-605"),
        "{}",
        changed[last_record - 4]
    );
    changed[last_record - 4] = changed[last_record - 4].replace("op-605", "op-666");
    // Keep the closing checkpoint off so the changed record follows the last checkpoint.
    changed.truncate(last_record + 1);
    std::fs::write(&path, changed.join("\n") + "\n").unwrap();
    let err = FileSink::open(o(&path), key.clone()).err();
    assert!(
        err.is_some(),
        "a changed record after the last checkpoint was accepted"
    );
}
