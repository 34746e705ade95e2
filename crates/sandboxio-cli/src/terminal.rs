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

/// Our stdin in raw input mode until the guard drops; `None` when it is not a terminal.
pub fn raw_input() -> Option<RawInput> {
    RawInput::enable(std::io::stdin().as_fd())
}
