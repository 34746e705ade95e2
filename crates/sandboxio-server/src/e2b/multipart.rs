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

fn filename(headers: &str) -> Option<String> {
    headers.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("content-disposition") {
            return None;
        }
        value.split(';').find_map(|p| {
            let (k, v) = p.split_once('=')?;
            (k.trim() == "filename").then(|| v.trim().trim_matches('"').to_string())
        })
    })
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
            filename: filename(&headers),
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
    fn malformed_bodies_are_refused() {
        assert!(parse(b"no boundary here", "b1").is_err());
        assert!(parse(b"--b1\r\nX: y\r\n\r\nunterminated", "b1").is_err());
        assert!(parse(b"--b1garbage", "b1").is_err());
        assert!(boundary("application/json").is_none());
        assert!(boundary("multipart/form-data").is_none());
    }
}
