//! Changes a store announces to every process sharing it, so that waiters wake at once
//! instead of at their next poll. Polling stays the fallback: a missed announcement only
//! delays a waiter to its next poll, it never changes a decision.

/// One announced change. Receivers re-read the state; the announcement itself is a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChange {
    /// The kill switch was engaged.
    Kill,
    /// The kill switch was released.
    Resume,
    /// An approval was decided (or ended): its id.
    Approval(String),
}

impl StoreChange {
    /// The payload on the wire (`NOTIFY sandboxio, '<payload>'`).
    pub fn payload(&self) -> String {
        match self {
            StoreChange::Kill => "kill".into(),
            StoreChange::Resume => "resume".into(),
            StoreChange::Approval(id) => format!("approval:{id}"),
        }
    }

    pub fn parse(payload: &str) -> Option<StoreChange> {
        match payload {
            "kill" => Some(StoreChange::Kill),
            "resume" => Some(StoreChange::Resume),
            p => p
                .strip_prefix("approval:")
                .filter(|id| !id.is_empty())
                .map(|id| StoreChange::Approval(id.to_string())),
        }
    }
}

/// Waits for the next announced change or `poll`, whichever comes first. Without
/// announcements (or once their sender is gone) it just sleeps `poll`.
pub async fn wait_for_change(
    changes: &mut Option<tokio::sync::broadcast::Receiver<StoreChange>>,
    poll: std::time::Duration,
) {
    use tokio::sync::broadcast::error::RecvError;
    let Some(rx) = changes.as_mut() else {
        tokio::time::sleep(poll).await;
        return;
    };
    tokio::select! {
        _ = tokio::time::sleep(poll) => {}
        r = rx.recv() => {
            if matches!(r, Err(RecvError::Closed)) {
                *changes = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_garbage_is_ignored() {
        for c in [
            StoreChange::Kill,
            StoreChange::Resume,
            StoreChange::Approval("apr_1".into()),
        ] {
            assert_eq!(StoreChange::parse(&c.payload()), Some(c));
        }
        assert_eq!(StoreChange::parse("approval:"), None);
        assert_eq!(StoreChange::parse("reboot"), None);
    }
}
