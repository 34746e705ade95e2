//! A run held at its release (`StreamIo::release`): prepared, then waiting for the
//! caller's go-ahead. Withdrawn (`false`, the sender dropped, or cancelled) nothing of the
//! request runs, the call answers `SBX_E1444`, and nothing of the run is left behind when
//! it returns; released, it runs as any other, and the wait is not counted as its time.

use std::path::Path;
use std::time::Duration;

use sandboxio_core::{ErrorCode, ExitStatus};
use sandboxio_sandbox::{run_streaming, CancelToken, SandboxConfig, StreamIo};
use tokio::sync::oneshot;

use super::drain::tiers;
use super::sh;

/// What the test's runs leave in their own work root.
fn leftovers(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn with_root(c: &SandboxConfig, root: &Path) -> SandboxConfig {
    SandboxConfig {
        work_root: Some(root.to_path_buf()),
        ..c.clone()
    }
}

enum Withdraw {
    No,
    Dropped,
    Cancelled,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_run_never_starts_and_leaves_nothing_behind() {
    for (tier, c) in tiers() {
        for how in [Withdraw::No, Withdraw::Dropped, Withdraw::Cancelled] {
            let root = tempfile::tempdir().unwrap();
            let marks = tempfile::tempdir().unwrap();
            let mark = marks.path().join("ran");
            // The process tier sees the host's files: the payload would leave the mark.
            let mut req = sh(&format!("echo ran > {}", mark.display()));
            // Kept workspaces too: a withdrawn run has nothing to keep.
            req.keep_workspace = true;
            let cfg = with_root(&c, root.path());
            let (tx, rx) = oneshot::channel();
            let cancel = CancelToken::new();
            let io = StreamIo {
                release: Some(rx),
                ..StreamIo::default()
            };
            let run = tokio::spawn({
                let (req, cfg, cancel) = (req.clone(), cfg.clone(), cancel.clone());
                async move { run_streaming(&req, tier, &cfg, Some(cancel), io).await }
            });
            // Long enough for the helper to be up and waiting for its plan.
            tokio::time::sleep(Duration::from_millis(300)).await;
            // Cancelled: the sender stays alive, so only the cancellation ends the wait.
            let mut held = None;
            match how {
                Withdraw::No => {
                    let _ = tx.send(false);
                }
                Withdraw::Dropped => drop(tx),
                Withdraw::Cancelled => {
                    cancel.cancel("test");
                    held = Some(tx);
                }
            }
            let err = run
                .await
                .unwrap()
                .expect_err("a withdrawn run has no result");
            drop(held);
            assert_eq!(err.code(), "SBX_E1444", "{tier}: {err}");
            assert_eq!(leftovers(root.path()), Vec::<String>::new(), "{tier}");
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!mark.exists(), "{tier}: the withdrawn payload ran");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_run_runs_and_its_wait_is_not_its_time() {
    const HELD: Duration = Duration::from_secs(3);
    for (tier, c) in tiers() {
        let root = tempfile::tempdir().unwrap();
        let cfg = with_root(&c, root.path());
        let req = sh("echo hello");
        let (tx, rx) = oneshot::channel();
        let io = StreamIo {
            release: Some(rx),
            ..StreamIo::default()
        };
        let run = tokio::spawn({
            let (req, cfg) = (req.clone(), cfg.clone());
            async move { run_streaming(&req, tier, &cfg, None, io).await }
        });
        tokio::time::sleep(HELD).await;
        tx.send(true).unwrap();
        let r = run.await.unwrap().unwrap();
        assert_eq!(r.exit, ExitStatus::Code(0), "{tier}: {r:?}");
        assert_eq!(r.stdout_lossy(), "hello\n", "{tier}");
        // The run's own time leaves out the three seconds it was held (a `sh -c echo`
        // taking that long would be a failure of its own).
        assert!(
            Duration::from_micros(r.duration_us) < HELD,
            "{tier}: duration {} us counts the wait",
            r.duration_us
        );
        assert_eq!(leftovers(root.path()), Vec::<String>::new(), "{tier}");
    }
}
