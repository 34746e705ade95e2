//! Sandboxed output on the operator's terminal: control bytes shown, never obeyed.
//!
//! A program's output written raw to a terminal can drive it: OSC 52 writes the clipboard,
//! OSC 0/2 set the window title, CSI cursor moves and `\r` overwrite earlier lines (a
//! forged "ok", an erased truncation notice), some terminals answer queries into their own
//! input. When sandboxio writes output to a terminal, every control byte other than newline
//! and tab is shown escaped: C0 bytes and DEL as `\x1b`, C1 controls (U+0080..U+009F, an
//! 8-bit CSI is U+009B) as `\u{9b}`, and bytes that are not UTF-8 as `\xff`. Printable text,
//! UTF-8 included, passes unchanged. To a pipe or a file the program's bytes are written raw.
//!
//! The CLI's own text for people (status lines, errors, listings) is escaped the same way
//! wherever it goes, a terminal or not ([`text`], applied by `crate::out` to every line it
//! prints): it quotes what callers chose (a rationale, a reason, argv, a tenant), and a log
//! or a `| less` shows the text as well as a terminal would. A single field of such text
//! inside a line goes through [`field`], which escapes newline and tab too, so it cannot
//! start a line of its own. JSON output stays JSON (`crate::out::compact`).

use std::borrow::Cow;

/// Escapes one stream chunk by chunk; a UTF-8 character split across two chunks is kept
/// whole (at most three bytes are carried to the next chunk).
#[derive(Debug, Default)]
pub struct Escaper {
    carry: Vec<u8>,
    /// `\r\n` becomes `\n` (output of a pseudo-terminal); a lone `\r` is escaped.
    pub fold_crlf: bool,
}

impl Escaper {
    pub fn new() -> Self {
        Self::default()
    }

    /// The terminal-safe form of `chunk` (after whatever was carried).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut input = std::mem::take(&mut self.carry);
        input.extend_from_slice(chunk);
        // Hold back an incomplete UTF-8 sequence at the very end (and a `\r` that may
        // start a `\r\n`).
        let mut keep = incomplete_tail(&input);
        if self.fold_crlf && keep == 0 && input.last() == Some(&b'\r') {
            keep = 1;
        }
        self.carry = input.split_off(input.len() - keep);
        if self.fold_crlf {
            escape(&fold(&input))
        } else {
            escape(&input)
        }
    }

    /// Whatever is still carried, escaped (the stream ended mid-character).
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.carry);
        escape(&rest)
    }
}

/// `\r\n` as `\n`.
fn fold(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'\r' && input.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(input[i]);
        i += 1;
    }
    out
}

/// The terminal-safe form of a complete byte string (newline and tab kept).
pub fn escape(input: &[u8]) -> Vec<u8> {
    escape_with(input, true)
}

/// Text for people, a whole line or several: control characters shown escaped, newline
/// and tab kept.
pub fn text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| needs_escape(c, true)) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(String::from_utf8_lossy(&escape_with(s.as_bytes(), true)).into_owned())
}

/// One field of caller-controlled text inside a line (a reason, a rationale, a tenant, an
/// argument): every control character shown escaped, newline and tab included.
pub fn field(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| needs_escape(c, false)) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(String::from_utf8_lossy(&escape_with(s.as_bytes(), false)).into_owned())
}

fn needs_escape(c: char, keep_layout: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_layout,
        _ => c.is_control(),
    }
}

fn escape_with(input: &[u8], keep_layout: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    for chunk in input.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' | '\t' if keep_layout => out.push(c as u8),
                '\0'..='\x1f' | '\x7f' => {
                    out.extend_from_slice(format!("\\x{:02x}", c as u32).as_bytes())
                }
                '\u{80}'..='\u{9f}' => {
                    out.extend_from_slice(format!("\\u{{{:x}}}", c as u32).as_bytes())
                }
                _ => {
                    let mut b = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                }
            }
        }
        for b in chunk.invalid() {
            out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        }
    }
    out
}

/// Length of a UTF-8 sequence that is started but not finished at the end of `b`.
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let byte = b[b.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead byte
        }
        let need = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_sequences_are_shown_not_obeyed() {
        let attacks: &[(&[u8], &str)] = &[
            (b"\x1b]52;c;aGk=\x07", "\\x1b]52;c;aGk=\\x07"),
            (b"\x1b]0;title\x1b\\", "\\x1b]0;title\\x1b\\"),
            (b"ok\r\x1b[2Kforged\x1b[1A", "ok\\x0d\\x1b[2Kforged\\x1b[1A"),
            ("\u{9b}31m".as_bytes(), "\\u{9b}31m"),
            (b"a\x00b\x7f\xff", "a\\x00b\\x7f\\xff"),
            ("h\u{e9}llo\tw\n".as_bytes(), "h\u{e9}llo\tw\n"),
        ];
        for (input, want) in attacks {
            assert_eq!(String::from_utf8(escape(input)).unwrap(), *want);
        }
    }

    #[test]
    fn a_field_cannot_start_a_line_and_text_keeps_its_layout() {
        let hostile = "please\x1b]0;PWNED\x07\x1b[2J\n\u{9b}1A\tok\r";
        assert_eq!(
            field(hostile),
            "please\\x1b]0;PWNED\\x07\\x1b[2J\\x0a\\u{9b}1A\\x09ok\\x0d"
        );
        assert_eq!(
            text(hostile),
            "please\\x1b]0;PWNED\\x07\\x1b[2J\n\\u{9b}1A\tok\\x0d"
        );
        for out in [field(hostile), text(hostile)] {
            assert!(!out.contains(['\x1b', '\x07', '\r', '\u{9b}']), "{out:?}");
        }
        // Plain text is borrowed as it is.
        assert!(matches!(field("h\u{e9}llo w\u{f6}rld"), Cow::Borrowed(_)));
        assert!(matches!(text("two\nlines\t"), Cow::Borrowed(_)));
    }

    #[test]
    fn pseudo_terminal_line_ends_fold_even_across_chunks_and_a_lone_cr_is_shown() {
        let mut e = Escaper::new();
        e.fold_crlf = true;
        let mut out = e.push(b"a\r\nb\r");
        out.extend(e.push(b"\nc\rd\x1b[2A"));
        out.extend(e.finish());
        assert_eq!(String::from_utf8(out).unwrap(), "a\nb\nc\\x0dd\\x1b[2A");
    }

    #[test]
    fn characters_split_across_chunks_stay_whole() {
        let text = "é€😀\u{9b}".as_bytes();
        let whole = escape(text);
        for cut in 0..=text.len() {
            let mut e = Escaper::new();
            let mut out = e.push(&text[..cut]);
            out.extend(e.push(&text[cut..]));
            out.extend(e.finish());
            assert_eq!(out, whole, "cut at {cut}");
        }
    }
}
