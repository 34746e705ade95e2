//! Reading a kernel's standard output: frames (`MARK` + JSON + newline) among the raw output
//! of the cell (a subprocess, `os.write`). A chunk may end inside a mark or a frame; what
//! could still become one is held back until the next chunk.

use serde_json::Value;

/// The mark before every frame: `\x1eSBXK` + the kernel's nonce + a space.
pub fn mark(nonce: &str) -> Vec<u8> {
    format!("\u{1e}SBXK{nonce} ").into_bytes()
}

#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Output of the cell that is not a frame.
    Raw(Vec<u8>),
    Frame(Value),
}

/// Largest frame held while waiting for its newline: a call's rich results are at most
/// 8 MiB (the kernels bound them, and the call again: `call.rs`), a few times over in JSON.
const MAX_FRAME: usize = 24 << 20;
/// The most JSON values a frame may hold. A frame is written by the kernel, in the same
/// process as the cell's code, so the server does not trust its shape: millions of tiny
/// values in one frame would take gigabytes once parsed. Real frames hold a few (a
/// traceback: one a line).
const MAX_VALUES: usize = 20_000;

/// Whether `json` holds more than [`MAX_VALUES`] values (counting the starts of objects
/// and arrays and the separators between items, outside strings), without parsing it.
fn too_many_values(json: &[u8]) -> bool {
    let (mut n, mut in_str, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' | b',' => {
                n += 1;
                if n > MAX_VALUES {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

pub struct Parser {
    mark: Vec<u8>,
    buf: Vec<u8>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Parser {
    pub fn new(mark: Vec<u8>) -> Parser {
        Parser {
            mark,
            buf: Vec::new(),
        }
    }

    /// Takes in a chunk; returns the pieces it completed, in order.
    pub fn push(&mut self, data: &[u8]) -> Vec<Piece> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        loop {
            match find(&self.buf, &self.mark) {
                Some(i) => {
                    if i > 0 {
                        out.push(Piece::Raw(self.buf[..i].to_vec()));
                    }
                    let body = i + self.mark.len();
                    match self.buf[body..].iter().position(|b| *b == b'\n') {
                        Some(j) => {
                            let line = &self.buf[body..body + j];
                            // Counted before it is parsed: the parse is what would cost.
                            let parsed = if too_many_values(line) {
                                None
                            } else {
                                serde_json::from_slice::<Value>(line).ok()
                            };
                            match parsed {
                                Some(v) => out.push(Piece::Frame(v)),
                                None => out.push(Piece::Raw(line.to_vec())),
                            }
                            self.buf.drain(..=body + j);
                        }
                        None => {
                            self.buf.drain(..i);
                            if self.buf.len() > MAX_FRAME {
                                // Not a frame after all: let it out as output.
                                out.push(Piece::Raw(std::mem::take(&mut self.buf)));
                            }
                            return out;
                        }
                    }
                }
                None => {
                    // Hold back a tail that could be the start of a mark.
                    let keep = (1..self.mark.len().min(self.buf.len() + 1))
                        .rev()
                        .find(|k| self.buf.ends_with(&self.mark[..*k]))
                        .unwrap_or(0);
                    let cut = self.buf.len() - keep;
                    if cut > 0 {
                        out.push(Piece::Raw(self.buf[..cut].to_vec()));
                        self.buf.drain(..cut);
                    }
                    return out;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn all(p: &mut Parser, chunks: &[&[u8]]) -> Vec<Piece> {
        chunks.iter().flat_map(|c| p.push(c)).collect()
    }

    #[test]
    fn frames_and_raw_output_are_told_apart_across_any_split() {
        let m = mark("n1");
        let mut whole = b"raw1".to_vec();
        whole.extend(&m);
        whole.extend(b"{\"t\":\"done\",\"id\":1}\nraw2\x1e");
        // Every split point gives the same pieces (raw text may come in more chunks).
        for cut in 0..whole.len() {
            let mut p = Parser::new(m.clone());
            let got = all(&mut p, &[&whole[..cut], &whole[cut..]]);
            let frames: Vec<&Value> = got
                .iter()
                .filter_map(|x| match x {
                    Piece::Frame(v) => Some(v),
                    _ => None,
                })
                .collect();
            assert_eq!(frames, vec![&json!({"t": "done", "id": 1})], "cut {cut}");
            let raw: Vec<u8> = got
                .iter()
                .filter_map(|x| match x {
                    Piece::Raw(b) => Some(b.clone()),
                    _ => None,
                })
                .flatten()
                .collect();
            // The trailing \x1e could start a mark: still held.
            assert_eq!(raw, b"raw1raw2", "cut {cut}");
        }
    }

    #[test]
    fn another_nonce_is_raw_output() {
        let mut p = Parser::new(mark("right"));
        let mut forged = mark("wrong");
        forged.extend(b"{\"t\":\"done\"}\n");
        let got = p.push(&forged);
        assert!(got.iter().all(|x| matches!(x, Piece::Raw(_))), "{got:?}");
    }

    #[test]
    fn a_frame_of_too_many_values_is_not_parsed_and_strings_do_not_count() {
        let mark = mark("n1");
        let mut p = Parser::new(mark.clone());
        let items = vec!["{\"m\":0}"; MAX_VALUES + 1].join(",");
        let mut big = mark.clone();
        big.extend_from_slice(format!("{{\"t\":\"done\",\"rich\":[{items}]}}\n").as_bytes());
        assert!(matches!(&p.push(&big)[..], [Piece::Raw(_)]));
        // Commas, brackets and escaped quotes inside a string are text, not values.
        let text = "a,[{\\\",".repeat(MAX_VALUES);
        let mut line = mark.clone();
        line.extend_from_slice(format!("{{\"t\":\"stdout\",\"d\":\"{text}\"}}\n").as_bytes());
        match &p.push(&line)[..] {
            [Piece::Frame(v)] => assert!(v["d"].as_str().unwrap().starts_with("a,[{\","), "{v}"),
            other => panic!("{other:?}"),
        }
    }
}
