//! The other direction of the trail's anchor: a store that has lost committed work.
//!
//! Every operation the chain admits is journalled (durably) before it runs, and its record
//! is written after; the trail's signed head is stored with each operation's outcome. So
//! the records after a trail's stored head that show an admitted operation (a reservation
//! made, not a replay) all name operations the journal holds. One it lacks means the
//! store went back in time: SQLite cut a damaged write-ahead log short, or an older copy
//! of the database was put in place. Its spend, keys and approvals are then not known.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use sandboxio_audit::{check_head, records_from, trail_files, SignedHead};

use super::{Store, StoreResult};

/// What the store lacks: how many admitted operations, and the first of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostWork {
    pub count: usize,
    pub first: String,
}

/// Of the records `head`'s trail holds after `head`, the admitted operations `store`'s
/// journal lacks, among those recorded since `not_before`. `None` when it lacks none, or
/// when the trail does not extend the head (cut, replaced or unreadable: the anchor's own
/// check reports that).
///
/// `not_before`: the journal keeps a settled operation for its retention only (a replica
/// down for longer finds its last operations, settled by the others, pruned): records older
/// than that prove nothing and are not checked ([`not_before`]).
pub fn lost_work(
    store: &dyn Store,
    head: &SignedHead,
    not_before: DateTime<Utc>,
) -> StoreResult<Option<LostWork>> {
    let files = trail_files(Path::new(&head.trail)).unwrap_or_default();
    if files.is_empty() || !check_head(&files, head).ok() {
        return Ok(None);
    }
    lost_after(store, head, &files, not_before)
}

/// The oldest record [`lost_work`] checks, for a journal kept `retention`: an hour inside
/// it, for clocks that differ between replicas.
pub fn not_before(now: DateTime<Utc>, retention: std::time::Duration) -> DateTime<Utc> {
    let kept = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
    now.checked_sub_signed(kept)
        .and_then(|t| t.checked_add_signed(chrono::Duration::hours(1)))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// [`lost_work`] for a trail (`files`, oldest first) already found to extend `head`.
pub fn lost_after(
    store: &dyn Store,
    head: &SignedHead,
    files: &[PathBuf],
    not_before: DateTime<Utc>,
) -> StoreResult<Option<LostWork>> {
    let Ok(after) = records_from(files, head.size) else {
        return Ok(None);
    };
    let admitted: Vec<String> = after
        .into_iter()
        .filter(|e| e.cost_reserved.is_some() && !e.replayed && e.ts >= not_before)
        .map(|e| e.operation_id)
        .collect();
    if admitted.is_empty() {
        return Ok(None);
    }
    let known: std::collections::HashSet<String> =
        store.journal_has(&admitted)?.into_iter().collect();
    let lost: Vec<&String> = admitted.iter().filter(|id| !known.contains(*id)).collect();
    Ok(lost.first().map(|first| LostWork {
        count: lost.len(),
        first: (*first).clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_older_than_the_journal_keeps_are_not_checked() {
        let now = DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let week = std::time::Duration::from_secs(7 * 24 * 3600);
        assert_eq!(
            not_before(now, week).to_rfc3339(),
            "2026-11-29T11:00:00+00:00"
        );
        // A retention too long to subtract checks everything.
        assert_eq!(
            not_before(now, std::time::Duration::MAX),
            DateTime::<Utc>::MIN_UTC
        );
    }
}
