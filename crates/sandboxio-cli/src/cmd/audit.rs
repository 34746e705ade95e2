//! `sandboxio audit verify|tail|query`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use sandboxio_core::Verdict;
use sandboxio_gateway::layers::audit::{Query, TrailEntry};

use crate::args::{AuditCmd, Common};
use crate::exit;
use crate::out::{errln, outln};
use crate::output::escape::field;
use crate::setup;

pub async fn audit(cmd: AuditCmd) -> Result<i32> {
    match cmd {
        AuditCmd::Verify {
            json,
            key,
            state_dir,
            config,
            all,
            no_head,
            files,
        } => {
            let store = super::verify::StoreArg::from_args(state_dir, config, no_head);
            super::verify::verify(json, &key, &store, all, &files)
        }
        AuditCmd::RotateKey { common } => super::rotate_key::rotate_key(&common).await,
        AuditCmd::Tail {
            common,
            lines,
            follow,
            file,
        } => tail(&common, lines, follow, file).await,
        AuditCmd::Query {
            common,
            since,
            until,
            tenant,
            event,
            decision,
            file,
        } => {
            let q = Query {
                since: since.as_deref().map(super::state::parse_time).transpose()?,
                until: until.as_deref().map(super::state::parse_time).transpose()?,
                tenant,
                event,
                decision: decision.as_deref().map(str::parse::<Verdict>).transpose()?,
            };
            query(&common, &q, file)
        }
    }
}

fn trail(common: &Common, file: Option<PathBuf>) -> Result<Vec<PathBuf>> {
    let base = match file {
        Some(f) => f,
        None => setup::load(common)?.audit_file(),
    };
    Ok(sandboxio_gateway::layers::audit::trail_files(&base)?)
}

fn print(entries: &[TrailEntry], json: bool) -> Result<()> {
    for e in entries {
        if json {
            outln!("{}", crate::out::compact(&e.event)?)?;
        } else {
            let ev = &e.event;
            outln!(
                "{} #{} {:10} {:5} {:10} tenant={} layer={} {}",
                ev.ts.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                e.seq,
                field(&ev.event),
                ev.decision.as_str(),
                ev.status.as_str(),
                field(ev.tenant_id.as_deref().unwrap_or("-")),
                ev.layer,
                field(&ev.reason)
            )?;
        }
    }
    Ok(())
}

async fn tail(common: &Common, n: usize, follow: bool, file: Option<PathBuf>) -> Result<i32> {
    let base = match &file {
        Some(f) => f.clone(),
        None => setup::load(common)?.audit_file(),
    };
    let paths = trail(common, file)?;
    print(
        &sandboxio_gateway::layers::audit::tail(&paths, n)?,
        common.json,
    )?;
    if follow {
        let mut f = sandboxio_gateway::layers::audit::Follower::from_end(base)?;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = tokio::signal::ctrl_c() => return Ok(exit::OK),
            }
            print(&f.poll()?, common.json)?;
            // The reader went away (`| head`): nothing more to follow for.
            if crate::out::stdout_closed() {
                return Ok(exit::OK);
            }
        }
    }
    Ok(exit::OK)
}

fn query(common: &Common, q: &Query, file: Option<PathBuf>) -> Result<i32> {
    let paths = trail(common, file)?;
    let entries = sandboxio_gateway::layers::audit::query(&paths, q)?;
    print(&entries, common.json)?;
    if !common.json {
        errln!("{} event(s)", entries.len());
    }
    Ok(exit::OK)
}
