//! Our own terminal during `run --tty`: its window size, and raw keys while the program
//! runs (the mechanics live in `sandboxio_gateway::layers::sandbox::terminal`).

use std::os::fd::AsFd as _;

use sandboxio_core::TtySize;
use sandboxio_gateway::layers::sandbox::terminal::RawInput;

/// The size of the terminal on our stdout, else on our stdin.
pub fn window_size() -> Option<TtySize> {
    sandboxio_gateway::layers::sandbox::terminal::window_size(std::io::stdout().as_fd()).or_else(
        || sandboxio_gateway::layers::sandbox::terminal::window_size(std::io::stdin().as_fd()),
    )
}

/// Our terminal's new sizes as it is resized (`SIGWINCH`), for the program's terminal;
/// `None` when we have no terminal or cannot listen for the signal. The listening task
/// ends when the receiver goes (the run ended).
pub fn resizes() -> Option<tokio::sync::mpsc::Receiver<TtySize>> {
    window_size()?;
    let mut winch =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok()?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        while winch.recv().await.is_some() {
            let Some(size) = window_size() else { continue };
            if tx.send(size).await.is_err() {
                return;
            }
        }
    });
    Some(rx)
}

/// Our stdin in raw input mode until the guard drops; `None` when it is not a terminal.
pub fn raw_input() -> Option<RawInput> {
    RawInput::enable(std::io::stdin().as_fd())
}
