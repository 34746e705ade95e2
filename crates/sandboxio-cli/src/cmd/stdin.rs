//! What the program gets on standard input when `--stdin-file` is not given: our own stdin
//! when it is a pipe, a socket or a file, or nothing (a terminal, `/dev/null`, code read
//! from stdin).
//!
//! A regular file is read whole and becomes part of the request (its bytes are in the
//! fingerprint), up to `crate::files::MAX_INPUT_BYTES`. A pipe or socket is streamed while
//! the program runs: the request says `stdin_stream`, and the bytes are never held in full;
//! except with an idempotency key, which must bind the bytes (a replay answers only the same
//! input), and when the policy would ask a person (the approval must cover what the program
//! is fed): then a pipe is read whole too, up to the same bound.

use std::io::{IsTerminal as _, Read as _};
use std::os::unix::fs::FileTypeExt as _;

use anyhow::Result;
use tokio::sync::mpsc;

/// Chunk size of a streamed stdin.
const CHUNK: usize = 64 * 1024;

pub enum Stdin {
    None,
    Bytes(Vec<u8>),
    Stream,
}

/// Whether our stdin is a terminal.
pub fn is_terminal() -> bool {
    std::io::stdin().is_terminal()
}

/// Decides; `stdin_taken` when our stdin was already read (code from `-`); `bind` says
/// whether the bytes must be part of the request (an idempotency key, an approval): a pipe
/// is then read whole. It is asked only for a pipe or a socket.
pub fn choose(stdin_taken: bool, bind: impl FnOnce() -> bool) -> Result<Stdin> {
    let stdin = std::io::stdin();
    if stdin_taken || stdin.is_terminal() {
        return Ok(Stdin::None);
    }
    let Ok(meta) = std::fs::metadata("/dev/stdin") else {
        // No stdin at all (closed fd): nothing to pass.
        return Ok(Stdin::None);
    };
    let t = meta.file_type();
    if t.is_file() || ((t.is_fifo() || t.is_socket()) && bind()) {
        let bytes = crate::files::read_stream(
            "standard input",
            stdin.lock(),
            crate::files::MAX_INPUT_BYTES,
        )?;
        Ok(Stdin::Bytes(bytes))
    } else if t.is_fifo() || t.is_socket() {
        Ok(Stdin::Stream)
    } else {
        Ok(Stdin::None)
    }
}

/// Reads our stdin on a thread (a blocking read cannot be cancelled; the thread ends with
/// the process) and sends it in chunks; the channel closes at end of input.
pub fn stream() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    let spawned = std::thread::Builder::new()
        .name("sandboxio-stdin".into())
        .spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            let mut input = std::io::stdin().lock();
            loop {
                match input.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
    if spawned.is_err() {
        tracing::warn!("could not start the stdin reader; the program reads end of input");
    }
    rx
}
