//! Names that come from a sandbox (file names it created), shown in text: messages, records,
//! a terminal. Printable UTF-8 passes unchanged; control characters (newline and tab too),
//! C1 controls, the backslash and bytes that are not UTF-8 are escaped (`\x1b`, `\u{9b}`,
//! `\\`, `\xff`), so a name can neither drive a terminal nor break a line of a record, and
//! two different names never show the same.

/// The escaped form of a name's bytes.
pub fn name(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\0'..='\x1f' | '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
                '\u{80}'..='\u{9f}' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                _ => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// [`name`] of a path's bytes.
pub fn path(p: &std::path::Path) -> String {
    name(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes_and_invalid_utf8_are_escaped_and_text_is_kept() {
        assert_eq!(name(b"report.txt"), "report.txt");
        assert_eq!(name("café".as_bytes()), "café");
        assert_eq!(name(b"a\nb\tc"), "a\\x0ab\\x09c");
        assert_eq!(name(b"\x1b]52;c;aGk=\x07"), "\\x1b]52;c;aGk=\\x07");
        assert_eq!(name("\u{9b}2J".as_bytes()), "\\u{9b}2J");
        assert_eq!(name(b"bad\xff\xfe"), "bad\\xff\\xfe");
        // A name that spells an escape differs from the byte it spells.
        assert_ne!(name(b"\\x0a"), name(b"\n"));
        assert!(name(b"\x1b\n\r\x07\xff")
            .bytes()
            .all(|b| b >= 0x20 && b != 0x7f));
    }
}
