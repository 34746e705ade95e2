//! What a browse answers: the page's text and title, the screenshot, and the hosts the
//! egress proxy refused. Carried in `Outcome::tool_output` (redacted like every answer);
//! the DOM itself is the result's standard output.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use sandboxio_core::fingerprint::sha256_hex;
use sandboxio_core::ExecResult;
use serde::{Deserialize, Serialize};

use super::plan::SCREENSHOT_FILE;
use super::text::page_text;

/// The PNG signature.
const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// A browse's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowseAnswer {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub text: String,
    /// The DOM was cut at the `stdout_cap` limit, so the text may be incomplete.
    #[serde(default)]
    pub truncated: bool,
    /// Present when a screenshot was asked for and the browser wrote a PNG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screenshot: Option<Screenshot>,
    pub network_denials: u64,
    #[serde(default)]
    pub denied_hosts: Vec<String>,
}

/// A PNG screenshot of the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Screenshot {
    /// The PNG, base64 (standard alphabet, padded).
    pub png_base64: String,
    pub bytes: u64,
    pub sha256: String,
}

impl Screenshot {
    /// The PNG's bytes.
    pub fn png(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.png_base64)
            .ok()
    }
}

impl BrowseAnswer {
    /// Reads a browse's answer from an outcome's `tool_output`.
    pub fn from_tool_output(v: &serde_json::Value) -> Option<BrowseAnswer> {
        serde_json::from_value(v.clone()).ok()
    }
}

/// The private directory that receives a browse's screenshot; removed when dropped.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A fresh 0700 directory under the system's temporary directory.
    pub fn new() -> std::io::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix("sandboxio-browse-")
            .tempdir()?;
        Ok(Scratch { dir })
    }
    /// The output directory to give the sandbox (it creates it, 0700).
    pub fn output_dir(&self) -> PathBuf {
        self.dir.path().join("output")
    }
}

/// Builds the answer from what the browser left: the DOM on stdout, the screenshot in
/// `output_dir` (read only when it is a PNG no larger than `max_png`).
pub fn build(url: &str, r: &ExecResult, output_dir: &Path, max_png: u64) -> BrowseAnswer {
    let dom = String::from_utf8_lossy(&r.stdout);
    let page = page_text(&dom);
    BrowseAnswer {
        url: url.to_string(),
        title: page.title,
        text: page.text,
        truncated: r.stdout_truncated,
        screenshot: read_png(&output_dir.join(SCREENSHOT_FILE), max_png),
        network_denials: r.network_denials,
        denied_hosts: r.denied_hosts.clone(),
    }
}

fn read_png(path: &Path, max: u64) -> Option<Screenshot> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > max {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    if !bytes.starts_with(PNG_MAGIC) {
        return None;
    }
    Some(Screenshot {
        png_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
        bytes: bytes.len() as u64,
        sha256: sha256_hex(&bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(stdout: &str) -> ExecResult {
        let mut r: ExecResult = serde_json::from_value(serde_json::json!({
            "sandbox_id": "s", "exit": {"code": 0}, "stdout": stdout, "stderr": "",
            "stdout_truncated": false, "stderr_truncated": false, "stdout_bytes": 0,
            "stderr_bytes": 0, "timed_out": false, "oom_killed": false, "duration_ms": 1,
            "usage": {}, "enforcement": {"network": "x"}
        }))
        .unwrap();
        r.network_denials = 2;
        r.denied_hosts = vec!["unlisted.test:80".into()];
        r
    }

    #[test]
    fn the_answer_has_the_text_the_png_and_the_denials() {
        let d = tempfile::tempdir().unwrap();
        let mut png = PNG_MAGIC.to_vec();
        png.extend_from_slice(b"rest");
        std::fs::write(d.path().join(SCREENSHOT_FILE), &png).unwrap();
        let a = build(
            "http://s.test/",
            &result("<title>T</title><p>hi</p>"),
            d.path(),
            1 << 20,
        );
        assert_eq!(a.title.as_deref(), Some("T"));
        assert_eq!(a.text, "hi");
        let s = a.screenshot.as_ref().unwrap();
        assert_eq!(s.png().unwrap(), png);
        assert_eq!(s.bytes, png.len() as u64);
        assert_eq!(a.denied_hosts, ["unlisted.test:80"]);
        let back = BrowseAnswer::from_tool_output(&serde_json::to_value(&a).unwrap()).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn a_file_that_is_not_a_png_or_too_large_is_not_answered() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(SCREENSHOT_FILE), b"not a png").unwrap();
        assert!(build("u", &result(""), d.path(), 1 << 20)
            .screenshot
            .is_none());
        let mut png = PNG_MAGIC.to_vec();
        png.extend_from_slice(&[0; 64]);
        std::fs::write(d.path().join(SCREENSHOT_FILE), &png).unwrap();
        assert!(build("u", &result(""), d.path(), 8).screenshot.is_none());
        std::fs::remove_file(d.path().join(SCREENSHOT_FILE)).unwrap();
        assert!(build("u", &result(""), d.path(), 1 << 20)
            .screenshot
            .is_none());
    }

    #[test]
    fn the_scratch_directory_is_removed_when_dropped() {
        let s = Scratch::new().unwrap();
        let dir = s.output_dir();
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("x"), b"y").unwrap();
        let parent = dir.parent().unwrap().to_path_buf();
        drop(s);
        assert!(!parent.exists());
    }
}
