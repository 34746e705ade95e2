//! What every handler shares.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::admission::Admission;
use crate::backend::Backend;
use crate::dashboard::SignIns;
use crate::metrics::Telemetry;
use crate::options::ServeOptions;
use crate::refusals::Refusals;
use crate::revocation::{Revocations, Revoked};
use crate::sessions::Sessions;
use crate::starts::Starts;

#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<Backend>,
    pub sessions: Arc<Sessions>,
    pub opts: Arc<ServeOptions>,
    /// Requests in progress: who holds the places (`crate::admission`).
    pub admission: Arc<Admission>,
    /// Refusals recorded, at a bounded rate (`crate::refusals`).
    pub refusals: Arc<Refusals>,
    /// Execs starting (`opts.max_starting` places, first come first served).
    pub starts: Arc<Starts>,
    /// Set at shutdown: `/readyz` answers 503 and new requests are refused.
    pub draining: Arc<AtomicBool>,
    /// What `/metrics` and the dashboard show; the gateway's metrics tap.
    pub telemetry: Arc<Telemetry>,
    /// The dashboard's signed-in browsers.
    pub signins: Arc<SignIns>,
    /// Credentials of streams and commands that outlive their request's check
    /// (`crate::revocation`).
    pub revocations: Arc<Revocations>,
}

impl AppState {
    pub fn new(backend: Arc<Backend>, opts: ServeOptions) -> AppState {
        let mut sessions =
            Sessions::new(opts.workspace_root.clone(), opts.max_sandboxes_per_tenant)
                .with_tenant_max(
                    opts.tenant_quotas
                        .iter()
                        .map(|(t, q)| (t.clone(), q.max_sandboxes))
                        .collect(),
                );
        if let Some(dir) = &opts.sessions_dir {
            sessions = sessions.with_manifests(dir.clone(), opts.secrets_key.clone());
        }
        let sessions = Arc::new(sessions);
        AppState {
            backend,
            sessions,
            admission: Arc::new(Admission::new(&opts)),
            refusals: Arc::new(Refusals::default()),
            starts: Arc::new(Starts::with_hold(opts.max_starting, opts.start_hold)),
            opts: Arc::new(opts),
            draining: Arc::new(AtomicBool::new(false)),
            telemetry: Arc::new(Telemetry::new()),
            signins: Arc::new(SignIns::default()),
            revocations: Arc::new(Revocations::default()),
        }
    }

    /// A watch on credential `id`: woken once it is revoked or expires.
    pub fn watch_credential(&self, id: &str) -> Revoked {
        self.revocations.watch(self.backend.store(), id)
    }

    /// The state with `telemetry`, the tap the gateway was built with (see
    /// `RuntimeOptions::metrics_tap`); without it `/metrics` shows no operations.
    pub fn with_telemetry(mut self, telemetry: Arc<Telemetry>) -> AppState {
        self.telemetry = telemetry;
        self
    }
}
