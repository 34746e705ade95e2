//! A record redacted by a known redactor, so the auditor does not redact it a second time
//! and counts the redactions that were made, not the none a second pass would find.

use std::sync::Arc;

use sandboxio_core::OperationRecord;

use crate::redact::Redactor;

/// An [`OperationRecord`] after one pass of a [`Redactor`]: only [`RedactedRecord::new`]
/// makes one, so holding it means the pass was made.
#[derive(Debug, Clone)]
pub struct RedactedRecord {
    record: OperationRecord,
    redactions: usize,
    by: Arc<Redactor>,
}

impl RedactedRecord {
    /// Redacts `record` with `by`, counting the redactions.
    pub fn new(by: &Arc<Redactor>, record: OperationRecord) -> Self {
        let (record, redactions) = by.redact_record_counted(record);
        RedactedRecord {
            record,
            redactions,
            by: by.clone(),
        }
    }

    /// The redacted record.
    pub fn record(&self) -> &OperationRecord {
        &self.record
    }

    /// How many values the pass replaced.
    pub fn redactions(&self) -> usize {
        self.redactions
    }

    /// The record as `auditor` must write it, and the redactions counted for it: when the
    /// pass was `auditor`'s own redactor, as it is; otherwise (a request's redactor with
    /// secrets of its own) `auditor`'s redactor runs over it too, and the counts add.
    pub(crate) fn for_auditor(self, auditor: &Arc<Redactor>) -> (OperationRecord, usize) {
        if Arc::ptr_eq(&self.by, auditor) {
            (self.record, self.redactions)
        } else {
            let (record, more) = auditor.redact_record_counted(self.record);
            (record, self.redactions + more)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::Secret;

    fn record(text: &str) -> OperationRecord {
        let mut r = OperationRecord::new("op-1", "exec");
        r.argv = Some(vec!["echo".into(), text.into()]);
        r.reason = format!("quoted {text}");
        r
    }

    fn redactor(secrets: &[&str]) -> Arc<Redactor> {
        let s: Vec<Secret> = secrets.iter().map(|v| Secret::new(*v)).collect();
        Arc::new(
            Redactor::builder()
                .hmac_key([7; 32])
                .secrets(s.iter())
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn the_same_redactor_is_not_run_twice_and_its_count_is_kept() {
        let r = redactor(&["canary-4c1e9a7b2d30"]);
        let red = RedactedRecord::new(&r, record("canary-4c1e9a7b2d30"));
        assert_eq!(red.redactions(), 2, "argv and reason");
        let (rec, n) = red.for_auditor(&r);
        assert_eq!(n, 2);
        let text = serde_json::to_string(&rec).unwrap();
        assert!(!text.contains("canary-4c1e9a7b2d30"), "{text}");
    }

    #[test]
    fn another_redactor_runs_over_it_and_the_counts_add() {
        // The request's redactor did not know the auditor's secret: the auditor's pass
        // still removes it.
        let request = redactor(&["own-9e8d7c6b5a41"]);
        let auditor = redactor(&["base-1a2b3c4d5e6f"]);
        let red = RedactedRecord::new(&request, record("own-9e8d7c6b5a41 and base-1a2b3c4d5e6f"));
        assert_eq!(red.redactions(), 2);
        let (rec, n) = red.for_auditor(&auditor);
        assert_eq!(n, 4);
        let text = serde_json::to_string(&rec).unwrap();
        assert!(!text.contains("own-9e8d7c6b5a41"), "{text}");
        assert!(!text.contains("base-1a2b3c4d5e6f"), "{text}");
    }
}
