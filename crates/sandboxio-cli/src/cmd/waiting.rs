//! While a run waits for a person: the approval id and the exact commands that decide it,
//! on standard error, as soon as the gateway creates the pending approval.

use std::path::PathBuf;

use sandboxio_gateway::store::Approval;
use tokio::sync::mpsc;

use crate::out::errln;
use crate::output::escape::field;

/// Where the decision is to be written: the state this run uses, named the way it was
/// named (its configuration file, which may name a shared store, and its state directory).
pub struct Place {
    pub config: Option<PathBuf>,
    pub state_dir: PathBuf,
}

impl Place {
    /// The options that reach this state from any directory.
    fn options(&self) -> String {
        let config = self
            .config
            .as_ref()
            .map(|c| {
                let abs = crate::paths::absolute(c).unwrap_or_else(|_| c.clone());
                format!(" --config {}", shell_quote(&abs.display().to_string()))
            })
            .unwrap_or_default();
        format!(
            "{config} --state-dir {}",
            shell_quote(&self.state_dir.display().to_string())
        )
    }
}

/// A sender for `Submission::approval_pending` and the task that prints what it receives.
pub fn announce(place: Place) -> (mpsc::UnboundedSender<Approval>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Approval>();
    let task = tokio::spawn(async move {
        while let Some(a) = rx.recv().await {
            if crate::out::json() {
                // One JSON line for programs reading stderr (logs are JSON lines too).
                let v = serde_json::json!({
                    "approval_pending": {
                        "id": a.id,
                        "expires_at": a.expires_at,
                        "reason": a.reason,
                        "approve": approve_command(&a, &place),
                    }
                });
                if let Ok(line) = crate::out::compact(&v) {
                    errln!("{line}");
                }
                continue;
            }
            for line in lines(&a, &place) {
                errln!("{line}");
            }
        }
    });
    (tx, task)
}

/// The exact command that approves `a`.
fn approve_command(a: &Approval, place: &Place) -> String {
    format!("sandboxio approvals approve {}{}", a.id, place.options())
}

/// The lines printed for one pending approval.
pub fn lines(a: &Approval, place: &Place) -> Vec<String> {
    vec![
        format!(
            "sandboxio: waiting for approval {} until {} ({})",
            field(&a.id),
            a.expires_at.format("%Y-%m-%dT%H:%M:%SZ"),
            field(&a.reason)
        ),
        format!("sandboxio: approve with: {}", approve_command(a, place)),
        format!(
            "sandboxio: deny with:    sandboxio approvals deny {}{} --reason '...'",
            a.id,
            place.options()
        ),
    ]
}

/// `s` quoted for a POSIX shell when it holds anything but plain path characters.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:,@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn paths_with_spaces_or_quotes_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("/var/lib/sandboxio"), "/var/lib/sandboxio");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("/tmp/it's"), r"'/tmp/it'\''s'");
    }
}
