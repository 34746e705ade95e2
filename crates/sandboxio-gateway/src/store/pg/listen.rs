//! LISTEN/NOTIFY: a thread holds one connection listening on `sandboxio_changes` and hands
//! each announcement to the process's receivers ([`crate::store::Store::changes`]). When
//! the connection drops it reconnects after a second; meanwhile waiters fall back to
//! polling, so a lost announcement only costs a poll interval.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fallible_iterator::FallibleIterator;
use postgres::NoTls;
use tokio::sync::broadcast;

use crate::store::StoreChange;

/// The channel every replica listens on.
pub(super) const CHANNEL: &str = "sandboxio_changes";

pub(crate) struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    pub(crate) fn start(
        config: postgres::Config,
        out: broadcast::Sender<StoreChange>,
    ) -> std::io::Result<Listener> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sbx-pg-listen".into())
            .spawn(move || {
                while !flag.load(Ordering::SeqCst) {
                    if let Err(e) = listen(&config, &out, &flag) {
                        tracing::warn!(
                            "listening for store changes failed (polling meanwhile): {e}"
                        );
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            })?;
        Ok(Listener {
            stop,
            thread: Some(thread),
        })
    }
}

fn listen(
    config: &postgres::Config,
    out: &broadcast::Sender<StoreChange>,
    stop: &AtomicBool,
) -> Result<(), postgres::Error> {
    let mut client = config.connect(NoTls)?;
    client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
    while !stop.load(Ordering::SeqCst) {
        let mut n = client.notifications();
        let mut it = n.timeout_iter(Duration::from_millis(200));
        while let Some(note) = it.next()? {
            if let Some(c) = StoreChange::parse(note.payload()) {
                // No receiver is fine: nobody waits right now.
                let _ = out.send(c);
            }
        }
        drop(it);
        drop(n);
        if client.is_closed() {
            return Ok(());
        }
    }
    Ok(())
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
