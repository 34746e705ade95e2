//! The `multipart/form-data` upload envd takes at `POST /files` (the SDK's default for
//! `str` and `bytes` data): one part per file, named by its `filename`. Parsed from a body
//! already read under the upload limit; anything malformed is refused, never guessed at.

use super::error::E2bError;

/// One uploaded file: the path the SDK named it by, and its bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Part {
    pub filename: Option<String>,
    pub data: Vec<u8>,
}

fn bad(why: &str) -> E2bError {
    E2bError::BadRequest {
        why: format!("the multipart body is malformed: {why}"),
    }
}

/// The boundary of a `multipart/form-data; boundary=...` content type.
pub fn boundary(content_type: &str) -> Option<String> {
    let (mime, params) = content_type.split_once(';')?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
            .filter(|b| !b.is_empty() && b.len() <= 200)
    })
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    (from..=hay.len() - needle.len()).find(|&i| &hay[i..i + needle.len()] == needle)
}

/// The parameters of a header value after its first item (`form-data; name="f";
/// filename="a;b.txt"`): a quoted value is read whole (`;` and `=` inside it are its own,
/// `\x` is `x`), as Go's `mime.ParseMediaType` (which envd uses) reads it.
fn params(value: &str) -> Result<Vec<(String, String)>, E2bError> {
    let mut out = Vec::new();
    let mut chars = value.chars().peekable();
    // The disposition type.
    for c in chars.by_ref() {
        if c == ';' {
            break;
        }
    }
    loop {
        while chars
            .peek()
            .is_some_and(|c| c.is_ascii_whitespace() || *c == ';')
        {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c == ';' {
                break;
            }
            name.push(c);
            chars.next();
        }
        let name = name.trim().to_ascii_lowercase();
        if chars.next() != Some('=') {
            return Err(bad(&format!("parameter `{name}` has no value")));
        }
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        let mut v = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => match chars.next() {
                        Some(e) => v.push(e),
                        None => break,
                    },
                    c => v.push(c),
                }
            }
            if !closed {
                return Err(bad(&format!("parameter `{name}` has an unclosed quote")));
            }
            while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
                chars.next();
            }
            if chars.peek().is_some_and(|c| *c != ';') {
                return Err(bad(&format!("text after the quoted `{name}`")));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ';' {
                    break;
                }
                v.push(c);
                chars.next();
            }
            v = v.trim().to_string();
        }
        out.push((name, v));
    }
}

/// The `filename` of a part's headers; two `Content-Disposition` headers or two
/// `filename`s are refused (which one is meant is not guessed).
fn filename(headers: &str) -> Result<Option<String>, E2bError> {
    let mut found = None;
    let mut dispositions = 0;
    for l in headers.split("\r\n") {
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("content-disposition") {
            continue;
        }
        dispositions += 1;
        if dispositions > 1 {
            return Err(bad("a part has two `Content-Disposition` headers"));
        }
        for (k, v) in params(value)? {
            if k == "filename" {
                if found.is_some() {
                    return Err(bad("a part names two files (`filename` twice)"));
                }
                found = Some(v);
            }
        }
    }
    Ok(found)
}

/// The parts of `body`.
pub fn parse(body: &[u8], boundary: &str) -> Result<Vec<Part>, E2bError> {
    let delim = format!("--{boundary}");
    let delim = delim.as_bytes();
    let mut pos = find(body, delim, 0).ok_or_else(|| bad("no boundary"))?;
    let mut parts = Vec::new();
    loop {
        pos += delim.len();
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        if !body[pos..].starts_with(b"\r\n") {
            return Err(bad("a boundary is not followed by a line end"));
        }
        pos += 2;
        let head_end = find(body, b"\r\n\r\n", pos).ok_or_else(|| bad("a part has no headers"))?;
        let headers = String::from_utf8_lossy(&body[pos..head_end]).into_owned();
        let data_start = head_end + 4;
        let mut next_delim = Vec::with_capacity(delim.len() + 2);
        next_delim.extend_from_slice(b"\r\n");
        next_delim.extend_from_slice(delim);
        let data_end =
            find(body, &next_delim, data_start).ok_or_else(|| bad("a part does not end"))?;
        parts.push(Part {
            filename: filename(&headers)?,
            data: body[data_start..data_end].to_vec(),
        });
        if parts.len() > 1000 {
            return Err(bad("more than 1000 parts"));
        }
        pos = data_end + 2;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_sdks_upload_parses_into_its_files() {
        let body = b"--b1\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b1\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b\"\r\n\r\n\r\n--b1--\r\n";
        let b = boundary("multipart/form-data; boundary=b1").unwrap();
        let parts = parse(body, &b).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].filename.as_deref(), Some("/home/user/a.txt"));
        assert_eq!(parts[0].data, b"hello");
        assert_eq!(parts[1].data, b"");
    }

    #[test]
    fn a_quoted_filename_is_read_whole() {
        let one = |cd: &str| {
            let body = format!("--b1\r\nContent-Disposition: {cd}\r\n\r\nx\r\n--b1--\r\n");
            parse(body.as_bytes(), "b1").map(|mut p| p.remove(0).filename)
        };
        let name = |cd: &str| one(cd).unwrap();
        assert_eq!(
            name("form-data; name=\"file\"; filename=\"a;b=c.txt\"").as_deref(),
            Some("a;b=c.txt")
        );
        assert_eq!(
            name("form-data; filename=\"d\\\\e \\\"q\\\".txt\"").as_deref(),
            Some("d\\e \"q\".txt")
        );
        assert_eq!(
            name("form-data; filename=plain.txt").as_deref(),
            Some("plain.txt")
        );
        assert_eq!(name("form-data; name=\"file\"").as_deref(), None);
        assert!(one("form-data; filename=\"a\"; filename=\"b\"").is_err());
        assert!(one("form-data; filename=\"unclosed").is_err());
        assert!(one("form-data; filename=\"a\"b").is_err());
    }

    #[test]
    fn malformed_bodies_are_refused() {
        assert!(parse(b"no boundary here", "b1").is_err());
        assert!(parse(b"--b1\r\nX: y\r\n\r\nunterminated", "b1").is_err());
        assert!(parse(b"--b1garbage", "b1").is_err());
        assert!(boundary("application/json").is_none());
        assert!(boundary("multipart/form-data").is_none());
    }
}
