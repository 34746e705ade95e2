//! The heads and breaks of every node's trails, read in one read-only transaction on a
//! connection of its own: an auditor's read registers no replica and takes no lease.

use std::time::Duration;

use r2d2::ManageConnection;
use sandboxio_config::StateUrl;

use super::conn::{col, off_thread, Manager, Tx};
use super::rows::{decode_head, node_heads};
use crate::error::GatewayError;
use crate::store::values::from_ms;
use crate::store::{AnchorBreak, KeptBreak, KeptHead, StoreResult, TrailAnchors};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn read_anchors(url: &StateUrl) -> StoreResult<TrailAnchors> {
    let redacted = url.redacted();
    let mut config: postgres::Config =
        url.expose()
            .parse()
            .map_err(|e: postgres::Error| GatewayError::StateUrl {
                url: redacted.clone(),
                why: e.to_string(),
            })?;
    config.connect_timeout(CONNECT_TIMEOUT);
    config.application_name("sandboxio audit verify");
    off_thread(|| {
        let mut conn =
            Manager { config }
                .connect()
                .map_err(|e| GatewayError::PostgresUnavailable {
                    url: redacted.clone(),
                    why: e.to_string(),
                })?;
        let mut tx = Tx::begin(&mut conn, "reading trail heads")?;
        tx.batch("SET TRANSACTION READ ONLY")?;
        let present = tx
            .opt("SELECT to_regclass('trail_heads') IS NOT NULL", &[])?
            .map(|r| col::<bool>(&r, 0, "trail_heads", "exists"))
            .transpose()?
            .unwrap_or(false);
        if !present {
            return Err(GatewayError::PostgresUnavailable {
                url: redacted.clone(),
                why: "the database holds no sandboxio state (no `trail_heads` table)".into(),
            });
        }
        let heads = node_heads(&mut tx, None)?
            .into_iter()
            .map(|(node, head)| KeptHead {
                node: Some(node),
                head,
            })
            .collect();
        let rows = tx.rows(
            "SELECT node, trail, at_ms, head, found FROM trail_breaks ORDER BY at_ms",
            &[],
        )?;
        let mut breaks = Vec::with_capacity(rows.len());
        for r in &rows {
            let head: String = col(r, 3, "trail_breaks", "head")?;
            breaks.push(KeptBreak {
                node: Some(col(r, 0, "trail_breaks", "node")?),
                brk: AnchorBreak {
                    trail: col(r, 1, "trail_breaks", "trail")?,
                    at: from_ms(col(r, 2, "trail_breaks", "at_ms")?),
                    head: decode_head("trail_breaks", &head)?,
                    found: col(r, 4, "trail_breaks", "found")?,
                },
            });
        }
        Ok(TrailAnchors { heads, breaks })
    })
}
