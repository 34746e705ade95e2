//! `sandboxio state recover --from-trail`: the operator's answer to a lost or damaged
//! state database (SBX_E1532 / SBX_E1533). Verifies the trail, moves the damaged database
//! aside, rebuilds spend and idempotency keys from the trail, leaves the kill switch
//! engaged until `sandboxio resume`, and records the recovery in the trail.

use anyhow::Result;
use chrono::Utc;
use sandboxio_core::{ErrorCode as _, Layer, OperationRecord, OperationStatus, Verdict};
use sandboxio_gateway::layers::audit::Tamper;
use sandboxio_gateway::store::{rebuild_from_trail, SyncMode};
use sandboxio_gateway::GatewayError;

use crate::args::Common;
use crate::exit;
use crate::out::{errln, outln};
use crate::setup;

/// The event of the record a recovery writes.
const RECOVERED_EVENT: &str = "state.recovered";

pub async fn recover(common: &Common, from_trail: bool) -> Result<i32> {
    let loaded = setup::load(common)?;
    let files = loaded.state_files();
    if !from_trail {
        return Err(GatewayError::RecoverRefused {
            why: "say where to recover from (`--from-trail`)".into(),
        }
        .into());
    }
    // Only a lost or damaged database is rebuilt: a working one keeps what the trail lacks.
    match files.open_store(SyncMode::Full) {
        // It opens, but may have lost committed work the trail records (SBX_E1533 from
        // `store::lost_work`): then it is rebuilt like a damaged one.
        Ok(store) => {
            let lost = setup::lost_work(&loaded, &store)?;
            if lost.is_none() {
                return Err(GatewayError::RecoverRefused {
                    why: format!(
                        "the state database `{}` opens and is not damaged; nothing to recover",
                        files.db.display()
                    ),
                }
                .into());
            }
        }
        Err(GatewayError::StateLost { .. } | GatewayError::StateCorrupt { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    // The recovery is recorded in the trail, so its key must be there (or rotated first).
    sandboxio_gateway::layers::audit::AuditKey::load_for_trail(
        &loaded.state_dir.join("audit.key"),
        &files.trail,
    )?;
    let pubfile = loaded.state_dir.join("audit.pub");
    let keys = if pubfile.exists() {
        sandboxio_gateway::layers::audit::load_public_keys(&pubfile)?
    } else {
        Vec::new()
    };
    let paths = sandboxio_gateway::layers::audit::trail_files(&files.trail)?;
    let rep = sandboxio_gateway::layers::audit::verify_keys(&paths, &keys);
    // A trail cut short by a crash (no closing checkpoint) is still a trail to rebuild from.
    if let Some(bad) = rep
        .first_bad
        .as_ref()
        .filter(|b| b.kind != Tamper::Truncated)
    {
        return Err(GatewayError::RecoverRefused {
            why: format!(
                "the audit trail does not verify ({:?} in `{}` at line {}: {}); it cannot be trusted to rebuild spend and keys",
                bad.kind,
                bad.file.display(),
                bad.line,
                bad.why
            ),
        }
        .into());
    }
    let entries = sandboxio_gateway::layers::audit::read_events(&paths)?;
    let cfg = setup::gateway_config(&loaded, None)?;
    let by = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    let rebuilt = rebuild_from_trail(&files, &entries, cfg.idempotency_retention, &by, Utc::now())?;

    let runtime = loaded.runtime(common, None)?;
    let gateway = runtime.gateway();
    let mut rec = OperationRecord::new(new_id(), RECOVERED_EVENT);
    rec.backend = "state".into();
    rec.status = OperationStatus::Ok;
    rec.verdict = Verdict::Allow;
    rec.layer = Layer::Journal;
    rec.approver = Some(by.clone());
    rec.path = rebuilt.moved_to.as_ref().map(|p| p.display().to_string());
    rec.reason = format!(
        "state database rebuilt from the audit trail by {by}: {} record(s) read, {} ledger line(s) ({} spent), {} idempotency key(s); the kill switch is engaged until `sandboxio resume`",
        rebuilt.records, rebuilt.ledger_lines, rebuilt.spend, rebuilt.keys
    );
    let recorded = gateway.record_admin(rec).await;
    if common.json {
        outln!("{}", crate::out::pretty(&rebuilt)?)?;
    } else {
        match &rebuilt.moved_to {
            Some(p) => outln!("moved the damaged database to {}", p.display())?,
            None => outln!("the state database was missing")?,
        }
        outln!(
            "rebuilt from {} trail record(s): {} ledger line(s), {} spent, {} idempotency key(s)",
            rebuilt.records,
            rebuilt.ledger_lines,
            rebuilt.spend,
            rebuilt.keys
        )?;
        outln!(
            "kill switch engaged: {}",
            crate::output::escape::field(&rebuilt.kill_reason)
        )?;
    }
    if let Err(e) = recorded {
        errln!(
            "error[{}]: the recovery could not be recorded in the audit trail: {e}",
            e.code()
        );
        return Ok(exit::FAILURE);
    }
    Ok(exit::OK)
}

fn new_id() -> String {
    let mut b = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}
