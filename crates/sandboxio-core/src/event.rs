//! What a running program does, in order, as it happens: output chunks and its exit.
//!
//! A streaming run yields [`ExecEvent`]s while the program runs; the final `ExecResult` is
//! still returned at the end and holds the same bytes. On the wire an event is one JSON
//! object: `{"type":"stdout","data":"hi\n","elapsed_us":1200}`; bytes that are not UTF-8
//! are base64 with `"encoding":"base64"` (see [`crate::wire`]).

use serde::{Deserialize, Serialize};

use crate::exec::ExitStatus;
use crate::wire::{self, ByteEncoding};

/// Which output stream a chunk came from. Under a pseudo-terminal both streams are the
/// terminal, and every chunk is `Stdout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// The window size of a pseudo-terminal, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

impl Default for TtySize {
    fn default() -> Self {
        TtySize { rows: 24, cols: 80 }
    }
}

/// One event of a running program. `elapsed_us` is the time since the run started
/// (monotonic clock), when the supervisor read the chunk or saw the exit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "EventWire", try_from = "EventWire")]
pub enum ExecEvent {
    /// Bytes the program wrote, in the order they were read.
    Output {
        stream: OutputStream,
        data: Vec<u8>,
        elapsed_us: u64,
    },
    /// The whole process tree is gone; no output follows.
    Exit { exit: ExitStatus, elapsed_us: u64 },
}

impl ExecEvent {
    pub fn elapsed_us(&self) -> u64 {
        match self {
            ExecEvent::Output { elapsed_us, .. } | ExecEvent::Exit { elapsed_us, .. } => {
                *elapsed_us
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum EventWire {
    Stdout {
        data: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encoding: Option<ByteEncoding>,
        elapsed_us: u64,
    },
    Stderr {
        data: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encoding: Option<ByteEncoding>,
        elapsed_us: u64,
    },
    Exit {
        exit: ExitStatus,
        elapsed_us: u64,
    },
}

impl From<ExecEvent> for EventWire {
    fn from(e: ExecEvent) -> Self {
        match e {
            ExecEvent::Output {
                stream,
                data,
                elapsed_us,
            } => {
                let (data, encoding) = wire::encode(&data);
                match stream {
                    OutputStream::Stdout => EventWire::Stdout {
                        data,
                        encoding,
                        elapsed_us,
                    },
                    OutputStream::Stderr => EventWire::Stderr {
                        data,
                        encoding,
                        elapsed_us,
                    },
                }
            }
            ExecEvent::Exit { exit, elapsed_us } => EventWire::Exit { exit, elapsed_us },
        }
    }
}

impl TryFrom<EventWire> for ExecEvent {
    type Error = String;
    fn try_from(w: EventWire) -> Result<Self, String> {
        Ok(match w {
            EventWire::Stdout {
                data,
                encoding,
                elapsed_us,
            } => ExecEvent::Output {
                stream: OutputStream::Stdout,
                data: wire::decode(data, encoding)?,
                elapsed_us,
            },
            EventWire::Stderr {
                data,
                encoding,
                elapsed_us,
            } => ExecEvent::Output {
                stream: OutputStream::Stderr,
                data: wire::decode(data, encoding)?,
                elapsed_us,
            },
            EventWire::Exit { exit, elapsed_us } => ExecEvent::Exit { exit, elapsed_us },
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_round_trip_through_json_byte_exact() {
        for data in [b"hi\n".to_vec(), vec![0x1f, 0x8b, 0, 0xff], Vec::new()] {
            let e = ExecEvent::Output {
                stream: OutputStream::Stderr,
                data: data.clone(),
                elapsed_us: 7,
            };
            let j = serde_json::to_string(&e).unwrap();
            assert_eq!(
                j.contains("base64"),
                std::str::from_utf8(&data).is_err(),
                "{j}"
            );
            assert_eq!(serde_json::from_str::<ExecEvent>(&j).unwrap(), e);
        }
        let x = ExecEvent::Exit {
            exit: ExitStatus::Code(3),
            elapsed_us: 9,
        };
        let j = serde_json::to_string(&x).unwrap();
        assert_eq!(j, r#"{"type":"exit","exit":{"code":3},"elapsed_us":9}"#);
        assert_eq!(serde_json::from_str::<ExecEvent>(&j).unwrap(), x);
    }
}
