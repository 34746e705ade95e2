//! Progress notifications for long runs: when the client sent a progress token, each
//! chunk of output (already redacted by the gateway) becomes a `notifications/progress`
//! whose `progress` is the bytes seen so far and whose message is the chunk's text.

use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandboxio_core::ExecEvent;
use tokio::sync::mpsc;

/// Longest message sent with one notification.
const MESSAGE_CAP: usize = 1024;

/// When the request carries a progress token: the sender for the run's output events and
/// the task that turns them into notifications (it ends when the run does).
pub fn attach(
    cx: &RequestContext<RoleServer>,
) -> Option<(mpsc::Sender<ExecEvent>, tokio::task::JoinHandle<()>)> {
    let token = cx.meta.get_progress_token()?;
    let (tx, mut rx) = mpsc::channel::<ExecEvent>(64);
    let peer = cx.peer.clone();
    let task = tokio::spawn(async move {
        let mut seen: u64 = 0;
        while let Some(ev) = rx.recv().await {
            let param = match ev {
                ExecEvent::Output { data, stream, .. } => {
                    seen += data.len() as u64;
                    let mut text = String::from_utf8_lossy(&data).into_owned();
                    if text.len() > MESSAGE_CAP {
                        let mut end = MESSAGE_CAP;
                        while !text.is_char_boundary(end) {
                            end -= 1;
                        }
                        text.truncate(end);
                    }
                    let which = match stream {
                        sandboxio_core::OutputStream::Stdout => "stdout",
                        sandboxio_core::OutputStream::Stderr => "stderr",
                    };
                    ProgressNotificationParam::new(token.clone(), seen as f64)
                        .with_message(format!("{which}: {text}"))
                }
                ExecEvent::Exit { exit, .. } => {
                    seen += 1;
                    ProgressNotificationParam::new(token.clone(), seen as f64)
                        .with_message(format!("exited: {exit:?}"))
                }
            };
            // A client that stopped listening does not stop the run.
            let _ = peer.notify_progress(param).await;
        }
    });
    Some((tx, task))
}
