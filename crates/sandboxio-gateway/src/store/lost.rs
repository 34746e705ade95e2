//! The other direction of the trail's anchor: a store that has lost committed work.
//!
//! Every operation the chain admits is journalled (durably) before it runs, and its record
//! is written after; the trail's signed head is stored with each operation's outcome. So
//! the records after a trail's stored head that show an admitted operation (a reservation
//! made, not a replay) all name operations the journal holds. One it lacks means the
//! store went back in time: SQLite cut a damaged write-ahead log short, or an older copy
//! of the database was put in place. Its spend, keys and approvals are then not known.

use std::path::{Path, PathBuf};

use sandboxio_audit::{check_head, records_from, trail_files, SignedHead};

use super::{Store, StoreResult};

/// What the store lacks: how many admitted operations, and the first of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostWork {
    pub count: usize,
    pub first: String,
}

/// Of the records `head`'s trail holds after `head`, the admitted operations `store`'s
/// journal lacks. `None` when it lacks none, or when the trail does not extend the head
/// (cut, replaced or unreadable: the anchor's own check reports that).
pub fn lost_work(store: &dyn Store, head: &SignedHead) -> StoreResult<Option<LostWork>> {
    let files = trail_files(Path::new(&head.trail)).unwrap_or_default();
    if files.is_empty() || !check_head(&files, head).ok() {
        return Ok(None);
    }
    lost_after(store, head, &files)
}

/// [`lost_work`] for a trail (`files`, oldest first) already found to extend `head`.
pub fn lost_after(
    store: &dyn Store,
    head: &SignedHead,
    files: &[PathBuf],
) -> StoreResult<Option<LostWork>> {
    let Ok(after) = records_from(files, head.size) else {
        return Ok(None);
    };
    let admitted: Vec<String> = after
        .into_iter()
        .filter(|e| e.cost_reserved.is_some() && !e.replayed)
        .map(|e| e.operation_id)
        .collect();
    if admitted.is_empty() {
        return Ok(None);
    }
    let known = store.journal_has(&admitted)?;
    let lost: Vec<&String> = admitted.iter().filter(|id| !known.contains(id)).collect();
    Ok(lost.first().map(|first| LostWork {
        count: lost.len(),
        first: (*first).clone(),
    }))
}
