//! How `run` and `run-code` write the program's output: live, in the order it was read,
//! raw to a pipe or a file, escaped on a terminal (see [`escape`]).

pub mod escape;

use std::io::IsTerminal as _;

use sandboxio_core::{ExecEvent, OutputStream};
use tokio::sync::mpsc;

use escape::Escaper;

/// What reaches one of our own output fds.
enum Filter {
    /// A pipe or a file: the bytes as they are.
    Raw,
    /// A terminal: control bytes shown escaped.
    Escape(Escaper),
}

impl Filter {
    fn for_terminal(is_terminal: bool) -> Filter {
        if is_terminal {
            Filter::Escape(Escaper::new())
        } else {
            Filter::Raw
        }
    }

    fn apply(&mut self, data: &[u8]) -> Vec<u8> {
        match self {
            Filter::Raw => data.to_vec(),
            Filter::Escape(e) => e.push(data),
        }
    }

    fn fold_crlf(&mut self) {
        if let Filter::Escape(e) = self {
            e.fold_crlf = true;
        }
    }

    fn finish(&mut self) -> Vec<u8> {
        match self {
            Filter::Raw => Vec::new(),
            Filter::Escape(e) => e.finish(),
        }
    }
}

/// Writes a program's stdout to our stdout and its stderr to our stderr.
pub struct Printer {
    out: Filter,
    err: Filter,
    /// The run's exit event arrived: everything it wrote has been printed.
    pub saw_exit: bool,
}

impl Default for Printer {
    fn default() -> Self {
        Self::new()
    }
}

impl Printer {
    pub fn new() -> Self {
        Printer {
            out: Filter::for_terminal(std::io::stdout().is_terminal()),
            err: Filter::for_terminal(std::io::stderr().is_terminal()),
            saw_exit: false,
        }
    }

    /// Terminal output of a pseudo-terminal: `\r\n` printed as a newline.
    pub fn fold_crlf(&mut self) {
        self.out.fold_crlf();
        self.err.fold_crlf();
    }

    /// Prints one chunk now. A reader that went away ends that stream quietly (see
    /// `crate::out`); the run goes on and its status is still reported.
    pub fn write(&mut self, stream: OutputStream, data: &[u8]) {
        match stream {
            OutputStream::Stdout => {
                let _ = crate::out::stdout_bytes(&self.out.apply(data));
            }
            OutputStream::Stderr => crate::out::stderr_bytes(&self.err.apply(data)),
        }
    }

    /// Prints what the filters still hold (a character cut at the end of the output).
    pub fn finish(&mut self) {
        let _ = crate::out::stdout_bytes(&self.out.finish());
        crate::out::stderr_bytes(&self.err.finish());
    }
}

/// Prints events until the channel closes; returns the printer (did the exit arrive?).
/// `tty`: the program ran under a pseudo-terminal, whose line ends are `\r\n`; on our
/// terminal they are printed as newlines (a lone `\r` is still shown escaped).
pub async fn print_events(mut rx: mpsc::Receiver<ExecEvent>, tty: bool) -> Printer {
    let mut p = Printer::new();
    if tty {
        p.fold_crlf();
    }
    while let Some(ev) = rx.recv().await {
        match ev {
            ExecEvent::Output { stream, data, .. } => p.write(stream, &data),
            ExecEvent::Exit { .. } => p.saw_exit = true,
        }
    }
    p.finish();
    p
}
