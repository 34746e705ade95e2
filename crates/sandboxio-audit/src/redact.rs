//! Redaction: applied once to the [`OperationRecord`], upstream of every sink.
//!
//! Three sources of secret values feed one [`Redactor`]:
//! - explicit secrets ([`Secret`]) and values the caller marks sensitive, matched by value
//!   wherever they appear, together with their encoded forms (base64 standard and URL-safe,
//!   padded and unpadded, and at each of the three byte alignments so a secret inside a longer
//!   base64 blob is caught; percent-encoded; JSON-escaped), with one Aho-Corasick automaton;
//! - credential-shaped environment values (cloud keys, service tokens, JWTs, private keys),
//!   and high-entropy values of variables whose name looks like a key, token, secret,
//!   password, credential or auth value; these become literal secrets too;
//! - credential shapes found anywhere in text (regular expressions), and high-entropy values
//!   assigned to key-like names inside text (`API_KEY=...`, `--token ...` is not covered).
//!
//! A redacted value becomes `[REDACTED:hmac8]`, where `hmac8` is the first 8 hex digits of
//! HMAC-SHA256 under a per-instance key, so auditors can correlate equal values without
//! learning them. The encoded forms of a secret get the placeholder of the secret itself.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use regex::Regex;
use sandboxio_core::OperationRecord;
use sha2::{Digest, Sha256};

use crate::error::AuditError;

/// Literal secrets shorter than this are refused: they would redact ordinary words.
pub const MIN_SECRET_LEN: usize = 4;
/// Default Shannon-entropy threshold (bits per character) for key-like variables.
pub const DEFAULT_ENTROPY_THRESHOLD: f64 = 3.0;
/// Default minimum length of a value judged by entropy.
pub const DEFAULT_MIN_ENTROPY_LEN: usize = 8;
/// Encoded fragments (base64 at an offset) shorter than this are not searched for.
const MIN_FRAGMENT_LEN: usize = 8;
/// The text that replaces a secret in `Debug` and `Display` output.
pub const REDACTED: &str = "[REDACTED]";

/// A secret value. Its `Debug` and `Display` print `[REDACTED]`, and it deliberately does
/// not implement `serde::Serialize` (a compile-time assertion below keeps it that way), so
/// it cannot end up in a serialised event by accident. Read it with [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret value. Callers must not log or serialise what this returns.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Compile-time proof that `Secret` is not `Serialize` (the "impls" trick: an inherent
/// associated const applies only when the bound holds; otherwise the trait's `false` does).
#[doc(hidden)]
pub mod not_serialize {
    use std::marker::PhantomData;

    pub trait Fallback {
        const IS_SERIALIZE: bool = false;
    }
    pub struct Probe<T: ?Sized>(PhantomData<T>);
    impl<T: ?Sized> Fallback for Probe<T> {}
    impl<T: ?Sized + serde::Serialize> Probe<T> {
        pub const IS_SERIALIZE: bool = true;
    }
    /// `Secret` must never become serialisable.
    const _: () = assert!(!Probe::<super::Secret>::IS_SERIALIZE);
    /// The probe itself works: a `String` is serialisable.
    const _: () = assert!(Probe::<String>::IS_SERIALIZE);
}

/// Builds a [`Redactor`].
#[derive(Default)]
pub struct RedactorBuilder {
    literals: Vec<String>,
    env: Vec<(String, String)>,
    entropy_threshold: Option<f64>,
    min_entropy_len: Option<usize>,
    key: Option<[u8; 32]>,
}

impl fmt::Debug for RedactorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedactorBuilder")
            .field("literals", &self.literals.len())
            .field("env", &self.env.len())
            .finish()
    }
}

impl RedactorBuilder {
    /// An explicit secret, redacted by value wherever it appears (and in encoded forms).
    pub fn secret(mut self, secret: &Secret) -> Self {
        self.literals.push(secret.expose().to_string());
        self
    }
    pub fn secrets<'a>(mut self, secrets: impl IntoIterator<Item = &'a Secret>) -> Self {
        self.literals
            .extend(secrets.into_iter().map(|s| s.expose().to_string()));
        self
    }
    /// A value the caller marks sensitive; treated exactly like a [`Secret`].
    pub fn sensitive(mut self, value: impl Into<String>) -> Self {
        self.literals.push(value.into());
        self
    }
    /// Environment variables (name, value). Credential-shaped values, and high-entropy
    /// values of key-like names, become literal secrets; the rest are ignored.
    pub fn env<K: AsRef<str>, V: AsRef<str>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.env.extend(
            vars.into_iter()
                .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string())),
        );
        self
    }
    pub fn entropy_threshold(mut self, bits_per_char: f64) -> Self {
        self.entropy_threshold = Some(bits_per_char);
        self
    }
    pub fn min_entropy_len(mut self, len: usize) -> Self {
        self.min_entropy_len = Some(len);
        self
    }
    /// The HMAC key for placeholders. Default: 32 random bytes per instance. Set it to keep
    /// placeholders comparable across restarts; keep it as secret as the values.
    pub fn hmac_key(mut self, key: [u8; 32]) -> Self {
        self.key = Some(key);
        self
    }

    pub fn build(self) -> Result<Redactor, AuditError> {
        let threshold = self.entropy_threshold.unwrap_or(DEFAULT_ENTROPY_THRESHOLD);
        let min_len = self.min_entropy_len.unwrap_or(DEFAULT_MIN_ENTROPY_LEN);
        let key = self.key.unwrap_or_else(|| {
            let mut k = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut k);
            k
        });
        let shapes = Shapes::get();
        let mut literals: Vec<String> = Vec::new();
        for lit in self.literals {
            if lit.chars().count() < MIN_SECRET_LEN {
                return Err(AuditError::SecretTooShort {
                    min: MIN_SECRET_LEN,
                });
            }
            literals.push(lit);
        }
        for (name, value) in self.env {
            let v = value.trim();
            if v.chars().count() < MIN_SECRET_LEN {
                continue;
            }
            // The entropy only for a key-like name (it was computed for every variable,
            // a hash map per value, at every start).
            let entropic = || v.chars().count() >= min_len && shannon_entropy(v) >= threshold;
            if shapes.is_credential(v)? || (shapes.is_sensitive_name(&name)? && entropic()) {
                literals.push(v.to_string());
            }
        }
        literals.sort();
        literals.dedup();

        let mut patterns: Vec<String> = Vec::new();
        let mut tags: Vec<String> = Vec::new();
        for lit in &literals {
            let tag = placeholder(&key, lit);
            for form in encoded_forms(lit) {
                patterns.push(form);
                tags.push(tag.clone());
            }
        }
        let literal_matcher = if patterns.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    // Built per request (its secrets) and used on that request's output
                    // only: a contiguous NFA builds in half the time of the DFA the
                    // builder picks for a few patterns, and searches as fast (6 secrets:
                    // 17 against 35 us to build, 4.2 ms a MB either way).
                    .kind(Some(AhoCorasickKind::ContiguousNFA))
                    .build(&patterns)
                    .map_err(|e| AuditError::Render {
                        why: format!("cannot build secret matcher: {e}"),
                    })?,
            )
        };
        let longest_literal = patterns.iter().map(String::len).max().unwrap_or(0);
        Ok(Redactor {
            longest_literal,
            literal_matcher,
            tags,
            secrets: literals.len(),
            key,
            entropy_threshold: threshold,
            min_entropy_len: min_len,
            total: AtomicU64::new(0),
            shapes,
        })
    }
}

/// Redacts secrets from strings and records. Cheap to share behind an `Arc`.
pub struct Redactor {
    literal_matcher: Option<AhoCorasick>,
    /// Length in bytes of the longest literal pattern.
    longest_literal: usize,
    /// Placeholder for each literal pattern, by pattern id.
    tags: Vec<String>,
    secrets: usize,
    key: [u8; 32],
    entropy_threshold: f64,
    min_entropy_len: usize,
    total: AtomicU64,
    shapes: &'static Shapes,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<Redactor secrets={} patterns={} redactions={}>",
            self.secrets,
            self.tags.len(),
            self.redactions_total()
        )
    }
}

impl Redactor {
    pub fn builder() -> RedactorBuilder {
        RedactorBuilder::default()
    }

    /// The placeholder this redactor writes for `value`: `[REDACTED:hmac8]`.
    pub fn placeholder_for(&self, value: &str) -> String {
        placeholder(&self.key, value)
    }

    /// Redactions applied by this instance so far (for the redactions metric).
    pub fn redactions_total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Redacts one string; borrows when nothing matched.
    pub fn redact_str<'a>(&self, s: &'a str) -> Cow<'a, str> {
        let (out, n) = self.redact_counted(s);
        if n > 0 {
            self.total.fetch_add(n as u64, Ordering::Relaxed);
        }
        out
    }

    /// Redacts every string field of the record (argv, code, reason, path, labels, rules,
    /// enforcement, identifiers).
    pub fn redact_record(&self, rec: OperationRecord) -> OperationRecord {
        self.redact_record_counted(rec).0
    }

    /// Like [`Redactor::redact_record`], also returning how many redactions were applied.
    pub fn redact_record_counted(&self, mut rec: OperationRecord) -> (OperationRecord, usize) {
        let mut n = 0usize;
        {
            let mut f = |s: &mut String| self.redact_in_place(s, &mut n);
            f(&mut rec.operation_id);
            f(&mut rec.event);
            f(&mut rec.tool_name);
            f(&mut rec.backend);
            f(&mut rec.reason);
            for s in [
                &mut rec.tenant_id,
                &mut rec.session_id,
                &mut rec.agent_id,
                &mut rec.sandbox_id,
                &mut rec.code_sha256,
                &mut rec.code,
                &mut rec.path,
                &mut rec.error_code,
                &mut rec.fingerprint,
                &mut rec.idempotency_key,
                &mut rec.approval_id,
                &mut rec.approver,
                &mut rec.trace_id,
                &mut rec.span_id,
                &mut rec.output_incomplete,
            ]
            .into_iter()
            .flatten()
            {
                f(s);
            }
            for a in rec.argv.iter_mut().flatten() {
                f(a);
            }
            for h in rec.denied_hosts.iter_mut() {
                f(h);
            }
            for m in rec.mounts.iter_mut().chain(rec.workdir.as_mut()) {
                f(m);
            }
            for r in &mut rec.rules {
                f(&mut r.id);
                if let Some(file) = r.file.as_mut() {
                    f(file);
                }
            }
            if let Some(e) = rec.enforcement.as_mut() {
                e.namespaces.iter_mut().for_each(&mut f);
                e.limits.iter_mut().for_each(&mut f);
                e.gaps.iter_mut().for_each(&mut f);
                f(&mut e.network);
                if let Some(c) = e.cgroup.as_mut() {
                    f(c);
                }
            }
            if let Some(v) = rec.arguments.as_mut() {
                redact_json_in_place(v, &mut f);
            }
            if !rec.labels.is_empty() {
                let labels = std::mem::take(&mut rec.labels);
                for (mut k, mut v) in labels {
                    f(&mut k);
                    f(&mut v);
                    rec.labels.insert(k, v);
                }
            }
        }
        if n > 0 {
            self.total.fetch_add(n as u64, Ordering::Relaxed);
        }
        (rec, n)
    }

    /// Redacts every string (keys included) of a JSON value, in place; returns how many
    /// matches were replaced.
    pub fn redact_json(&self, v: &mut serde_json::Value) -> usize {
        let mut n = 0usize;
        redact_json_in_place(v, &mut |s: &mut String| self.redact_in_place(s, &mut n));
        if n > 0 {
            self.total.fetch_add(n as u64, Ordering::Relaxed);
        }
        n
    }

    fn redact_in_place(&self, s: &mut String, n: &mut usize) {
        let (out, k) = self.redact_counted(s);
        if let Cow::Owned(o) = out {
            *s = o;
        }
        *n += k;
    }

    /// Redacts bytes (a program's output): the same matches as [`Redactor::redact_str`],
    /// and every byte outside a match, valid UTF-8 or not, is kept exactly. Borrows when
    /// nothing matched.
    pub fn redact_bytes<'a>(&self, b: &'a [u8]) -> Cow<'a, [u8]> {
        let (out, n) = self.redact_bytes_counted(b);
        if n > 0 {
            self.total.fetch_add(n as u64, Ordering::Relaxed);
        }
        out
    }

    /// The largest cut `<= want` such that no secret or credential shape found in `b`
    /// starts before the cut and ends after it, on a UTF-8 character boundary where `b`
    /// is UTF-8 there. Used to split a stream without splitting a secret.
    pub fn safe_cut(&self, b: &[u8], want: usize) -> usize {
        let mut cut = want.min(b.len());
        // Each pass can only move the cut to the left; stop when it stays put.
        loop {
            let before = cut;
            if let Some(ac) = &self.literal_matcher {
                for m in ac.find_iter(b) {
                    if m.start() < cut && cut < m.end() {
                        cut = m.start();
                    }
                }
            }
            for re in [self.shapes.credential_in(b), self.shapes.assignment_in(b)] {
                let re = match re {
                    Ok(Some(re)) => re,
                    Ok(None) => continue,
                    // A pattern that does not compile: no cut is known to be safe.
                    Err(_) => return 0,
                };
                for m in re.find_iter(b) {
                    if m.start() < cut && cut < m.end() {
                        cut = m.start();
                    }
                }
            }
            if cut == before {
                break;
            }
        }
        // Never split a UTF-8 character (at most three continuation bytes to step over).
        let mut steps = 0;
        while cut > 0 && cut < b.len() && (b[cut] & 0xC0) == 0x80 && steps < 3 {
            cut -= 1;
            steps += 1;
        }
        cut
    }

    /// The longest literal pattern (a secret in any of its encoded forms), in bytes.
    pub fn longest_literal(&self) -> usize {
        self.longest_literal
    }

    /// The work on text: the byte routine, whose matches on valid UTF-8 start and end on
    /// character boundaries and whose placeholders are ASCII, so the result is UTF-8.
    fn redact_counted<'a>(&self, s: &'a str) -> (Cow<'a, str>, usize) {
        let (out, n) = self.redact_bytes_counted(s.as_bytes());
        match out {
            Cow::Borrowed(_) => (Cow::Borrowed(s), n),
            Cow::Owned(v) => (
                Cow::Owned(
                    String::from_utf8(v)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                ),
                n,
            ),
        }
    }

    /// The work: literal secrets first, then credential shapes, then key-like assignments.
    fn redact_bytes_counted<'a>(&self, s: &'a [u8]) -> (Cow<'a, [u8]>, usize) {
        let mut count = 0usize;
        let mut cur: Cow<'a, [u8]> = Cow::Borrowed(s);
        if let Some(ac) = &self.literal_matcher {
            let mut out: Option<Vec<u8>> = None;
            let mut last = 0;
            for m in ac.find_iter(cur.as_ref()) {
                let o = out.get_or_insert_with(|| Vec::with_capacity(cur.len()));
                o.extend_from_slice(&cur[last..m.start()]);
                o.extend_from_slice(
                    self.tags
                        .get(m.pattern().as_usize())
                        .map_or(REDACTED, |t| t)
                        .as_bytes(),
                );
                last = m.end();
                count += 1;
            }
            if let Some(mut o) = out {
                o.extend_from_slice(&cur[last..]);
                cur = Cow::Owned(o);
            }
        }
        let shapes = self.shapes;
        // A pattern that does not compile (never with the shipped ones, which a test
        // compiles): the whole text is withheld rather than passed unchecked.
        let credential = match shapes.credential_in(&cur) {
            Ok(re) => re,
            Err(_) => return (Cow::Owned(REDACTED.as_bytes().to_vec()), count + 1),
        };
        if let Some(re) = credential.filter(|re| re.is_match(&cur)) {
            let mut o = Vec::with_capacity(cur.len());
            let mut last = 0;
            for m in re.find_iter(&cur) {
                o.extend_from_slice(&cur[last..m.start()]);
                let value = String::from_utf8_lossy(m.as_bytes());
                o.extend_from_slice(placeholder(&self.key, &value).as_bytes());
                last = m.end();
                count += 1;
            }
            o.extend_from_slice(&cur[last..]);
            cur = Cow::Owned(o);
        }
        let assignment = match shapes.assignment_in(&cur) {
            Ok(re) => re,
            Err(_) => return (Cow::Owned(REDACTED.as_bytes().to_vec()), count + 1),
        };
        if let Some(re) = assignment.filter(|re| re.is_match(&cur)) {
            let mut o = Vec::with_capacity(cur.len());
            let mut last = 0;
            let mut changed = false;
            for c in re.captures_iter(&cur) {
                let Some(v) = c.get(2) else { continue };
                if path_message(&cur, c.get(1)) {
                    continue;
                }
                let value = String::from_utf8_lossy(v.as_bytes());
                if value.starts_with("[REDACTED")
                    || value.chars().count() < self.min_entropy_len
                    || shannon_entropy(&value) < self.entropy_threshold
                {
                    continue;
                }
                o.extend_from_slice(&cur[last..v.start()]);
                o.extend_from_slice(placeholder(&self.key, &value).as_bytes());
                last = v.end();
                count += 1;
                changed = true;
            }
            if changed {
                o.extend_from_slice(&cur[last..]);
                cur = Cow::Owned(o);
            }
        }
        (cur, count)
    }
}

/// Whether an assignment's name (`name`: group 1 of [`ASSIGNMENT`], with its separator)
/// is the last component of a path followed by `:`, as in `ln: /etc/passwd: Operation not
/// permitted`: a file named in a message, not a variable.
fn path_message(text: &[u8], name: Option<regex::bytes::Match<'_>>) -> bool {
    let Some(n) = name else { return false };
    n.start() > 0 && text[n.start() - 1] == b'/' && !n.as_bytes().contains(&b'=')
}

/// `[REDACTED:hmac8]` for a value under a key.
fn placeholder(key: &[u8; 32], value: &str) -> String {
    let digest: Vec<u8> = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(value.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        // HMAC accepts any key length; this arm exists only to avoid a panic path.
        Err(_) => {
            let mut h = Sha256::new();
            h.update(key);
            h.update(value.as_bytes());
            h.finalize().to_vec()
        }
    };
    let hex8 = hex::encode(digest.get(..4).unwrap_or(&[]));
    format!("[REDACTED:{hex8}]")
}

/// Shannon entropy of the characters of `s`, in bits per character.
pub fn shannon_entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::<char, usize>::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_insert(0) += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Every form in which `secret` is searched for. The first is the secret itself.
pub fn encoded_forms(secret: &str) -> Vec<String> {
    let b = secret.as_bytes();
    let mut forms = vec![secret.to_string()];
    // JSON-escaped (as inside a JSON string), and doubly escaped (JSON inside JSON).
    if let Ok(j) = serde_json::to_string(secret) {
        let inner = j
            .get(1..j.len().saturating_sub(1))
            .unwrap_or("")
            .to_string();
        if let Ok(jj) = serde_json::to_string(&inner) {
            forms.push(
                jj.get(1..jj.len().saturating_sub(1))
                    .unwrap_or("")
                    .to_string(),
            );
        }
        forms.push(inner);
    }
    // Percent-encoded: upper- and lower-case hex, and form encoding (space as `+`).
    let upper = percent_encode(b, false);
    forms.push(upper.replace("%20", "+"));
    forms.push(percent_encode(b, true));
    forms.push(upper);
    // base64, both alphabets, padded and unpadded, whole.
    for engine in [&STANDARD, &URL_SAFE] {
        forms.push(engine.encode(b));
    }
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        forms.push(engine.encode(b));
        // The characters fully determined by the secret when it starts `o` bytes into a
        // larger base64-encoded blob.
        for o in 0..3usize {
            let mut buf = vec![0u8; o];
            buf.extend_from_slice(b);
            let enc = engine.encode(&buf);
            let start = (8 * o).div_ceil(6);
            let end = (8 * (o + b.len())) / 6;
            if let Some(stem) = enc.get(start..end) {
                if stem.len() >= MIN_FRAGMENT_LEN {
                    forms.push(stem.to_string());
                }
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    forms.retain(|f| !f.is_empty() && seen.insert(f.clone()));
    forms
}

fn percent_encode(b: &[u8], lower: bool) -> String {
    let mut s = String::with_capacity(b.len() * 3);
    for &c in b {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            s.push(c as char);
        } else if lower {
            s.push_str(&format!("%{c:02x}"));
        } else {
            s.push_str(&format!("%{c:02X}"));
        }
    }
    s
}

/// The regular expressions, each compiled on first use, behind literal prefilters.
///
/// Compiling them costs milliseconds (Unicode classes, bounded repetitions), which a
/// one-shot process would pay at every start for text that almost never holds a
/// credential. Every match of a pattern contains one of its prefilter's literals, so a
/// text without any of them cannot match and the pattern is neither compiled nor run:
/// the redaction is exactly the patterns', only cheaper. A test checks the prefilters
/// against the patterns.
#[derive(Default)]
struct Shapes {
    /// A whole value that looks like a credential.
    credential: std::sync::OnceLock<Result<Regex, String>>,
    /// Credential shapes inside free text (over bytes: output need not be UTF-8).
    credential_anywhere_bytes: std::sync::OnceLock<Result<regex::bytes::Regex, String>>,
    sensitive_name: std::sync::OnceLock<Result<Regex, String>>,
    not_sensitive_name: std::sync::OnceLock<Result<Regex, String>>,
    /// `NAME=value` / `"name": "value"` with a key-like name; group 2 is the value.
    assignment_bytes: std::sync::OnceLock<Result<regex::bytes::Regex, String>>,
    /// The literals every credential shape contains.
    credential_literals: std::sync::OnceLock<Option<AhoCorasick>>,
    /// The key-like words (any case), and the two non-ASCII letters that fold to ASCII
    /// ones under Unicode case-insensitivity (KELVIN SIGN to `k`, LONG S to `s`).
    keyword_literals: std::sync::OnceLock<Option<AhoCorasick>>,
}

/// Credential shapes. Each is specific enough to have few false positives in text.
pub const CREDENTIAL_PATTERNS: &[&str] = &[
    // A prefix distinctive enough not to need a word boundary is matched wherever it
    // starts and wherever it ends, so a credential glued to other text on either side
    // (`xghp_..._old`, a key id followed by its secret, a hex dump) is still found. AWS
    // access key ids.
    // A key id written right before its secret access key (40 characters of base64)
    // takes the secret with it.
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}(?:[A-Za-z0-9/+]{40})?",
    // GitHub tokens.
    r"gh[pousr]_[A-Za-z0-9]{30,255}",
    r"github_pat_[A-Za-z0-9_]{22,255}",
    // Slack tokens.
    r"xox[abposr]-[A-Za-z0-9-]{10,250}",
    // Stripe live keys.
    r"(?:sk|rk)_live_[0-9A-Za-z]{16,247}",
    // Google API keys.
    r"AIza[0-9A-Za-z_\-]{35}",
    // OpenAI / Anthropic style keys. `sk-` ends many words (`task-`, `disk-`): after a
    // lower-case letter it is not a key; after anything else (a boundary, a digit, an
    // upper-case letter or `_` of an identifier it was glued to) it is, and that one
    // character goes with it.
    r"(?:\b|[0-9A-Z_])sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}",
    // sandboxio's own credentials: API keys, capability tokens and E2B access tokens
    // (`sbxk_<id>_<secret>`, `sbxc_...`, `sbxe_...`), wherever they are written (a path, a
    // query string, a header echoed back).
    r"sbx[kce]_[A-Za-z0-9]{1,64}_[0-9A-Fa-f]{32,128}",
    // JSON Web Tokens.
    r"eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*",
    // PEM private key blocks (also when their newlines are JSON-escaped).
    r"-----BEGIN[A-Z ]{0,30} PRIVATE KEY-----(?s:.*?)-----END[A-Z ]{0,30} PRIVATE KEY-----",
];

/// Names of variables whose values are judged by entropy.
const SENSITIVE_NAME: &str = r"(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)";
const NOT_SENSITIVE_NAME: &str = r"(?i)^(KEYBOARD.*|.*AUTHOR.*)$";
/// `NAME=value` / `"name": "value"` with a key-like name; group 2 is the value. An HTTP
/// authorization scheme (`Authorization: Bearer <token>`, `Basic`, `Token`, `Digest`) is
/// part of the name: the value is what follows it. A name right after a `/` with a `:`
/// after it names a file in a message (`/etc/passwd: Operation not permitted`,
/// `.../secrets.key: No such file`), not a variable: [`path_message`] leaves it alone.
const ASSIGNMENT: &str = r#"(?i)([A-Za-z0-9_.-]*(?:key|token|secret|password|passwd|credential|auth)[A-Za-z0-9_.-]*["']?\s*[=:]\s*["']?(?:(?:bearer|basic|token|digest)\s+)?)([^\s"'&,;]+)"#;

/// Literals of which every match of [`CREDENTIAL_PATTERNS`] contains one.
const CREDENTIAL_LITERALS: &[&str] = &[
    "AKIA",
    "ASIA",
    "AGPA",
    "AIDA",
    "AROA",
    "ANPA",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxo-",
    "xoxs-",
    "xoxr-",
    "sk_live_",
    "rk_live_",
    "AIza",
    "sk-",
    "eyJ",
    "sbxk_",
    "sbxc_",
    "sbxe_",
    "-----BEGIN",
];

/// Words of which every match of [`SENSITIVE_NAME`] and [`ASSIGNMENT`] contains one, in
/// any ASCII case, or one of the non-ASCII letters that Unicode case folding maps to an
/// ASCII letter of these words.
const KEYWORD_LITERALS: &[&str] = &[
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "auth",
    "\u{212A}",
    "\u{17F}",
];

fn compiled<T>(
    cell: &'static std::sync::OnceLock<Result<T, String>>,
    make: impl FnOnce() -> Result<T, regex::Error>,
) -> Result<&'static T, AuditError> {
    cell.get_or_init(|| make().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| AuditError::Render {
            why: format!("redaction pattern does not compile: {e}"),
        })
}

fn literals(
    cell: &'static std::sync::OnceLock<Option<AhoCorasick>>,
    words: &[&str],
    any_case: bool,
) -> Option<&'static AhoCorasick> {
    cell.get_or_init(|| {
        AhoCorasick::builder()
            .ascii_case_insensitive(any_case)
            // Built once per process and run over a few short strings per record: the DFA
            // the builder picks for few patterns took a tenth of a denied run's
            // instructions to build; a contiguous NFA takes a third of that.
            .kind(Some(AhoCorasickKind::ContiguousNFA))
            .build(words)
            .ok()
    })
    .as_ref()
}

impl Shapes {
    fn get() -> &'static Shapes {
        static SHAPES: std::sync::OnceLock<Shapes> = std::sync::OnceLock::new();
        SHAPES.get_or_init(Shapes::default)
    }

    /// Whether `b` may hold a credential shape (`true` when the prefilter is unavailable).
    fn may_hold_credential(&'static self, b: &[u8]) -> bool {
        literals(&self.credential_literals, CREDENTIAL_LITERALS, false)
            .is_none_or(|ac| ac.is_match(b))
    }

    /// Whether `b` may hold a key-like word (`true` when the prefilter is unavailable).
    fn may_hold_keyword(&'static self, b: &[u8]) -> bool {
        literals(&self.keyword_literals, KEYWORD_LITERALS, true).is_none_or(|ac| ac.is_match(b))
    }

    /// Whether a whole value looks like a credential.
    fn is_credential(&'static self, v: &str) -> Result<bool, AuditError> {
        if !self.may_hold_credential(v.as_bytes()) {
            return Ok(false);
        }
        let re = compiled(&self.credential, || {
            Regex::new(&format!("^(?:{})$", CREDENTIAL_PATTERNS.join("|")))
        })?;
        Ok(re.is_match(v))
    }

    /// Whether a variable's name looks like it holds a key, token, secret... (and is not
    /// one of the known look-alikes such as `KEYBOARD_*` or `*AUTHOR*`).
    fn is_sensitive_name(&'static self, name: &str) -> Result<bool, AuditError> {
        if !self.may_hold_keyword(name.as_bytes()) {
            return Ok(false);
        }
        let yes = compiled(&self.sensitive_name, || Regex::new(SENSITIVE_NAME))?;
        if !yes.is_match(name) {
            return Ok(false);
        }
        let no = compiled(&self.not_sensitive_name, || Regex::new(NOT_SENSITIVE_NAME))?;
        Ok(!no.is_match(name))
    }

    /// The credential-shape pattern, when `b` may hold a match.
    fn credential_in(
        &'static self,
        b: &[u8],
    ) -> Result<Option<&'static regex::bytes::Regex>, AuditError> {
        if !self.may_hold_credential(b) {
            return Ok(None);
        }
        compiled(&self.credential_anywhere_bytes, || {
            regex::bytes::Regex::new(&CREDENTIAL_PATTERNS.join("|"))
        })
        .map(Some)
    }

    /// The key-like assignment pattern, when `b` may hold a match.
    fn assignment_in(
        &'static self,
        b: &[u8],
    ) -> Result<Option<&'static regex::bytes::Regex>, AuditError> {
        if !self.may_hold_keyword(b) {
            return Ok(None);
        }
        compiled(&self.assignment_bytes, || {
            regex::bytes::Regex::new(ASSIGNMENT)
        })
        .map(Some)
    }
}

/// Applies `f` to every string of a JSON value: leaves and object keys.
fn redact_json_in_place(v: &mut serde_json::Value, f: &mut impl FnMut(&mut String)) {
    match v {
        serde_json::Value::String(s) => f(s),
        serde_json::Value::Array(items) => {
            for i in items {
                redact_json_in_place(i, f);
            }
        }
        serde_json::Value::Object(map) => {
            let old = std::mem::take(map);
            for (mut k, mut item) in old {
                f(&mut k);
                redact_json_in_place(&mut item, f);
                map.insert(k, item);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn all_patterns_compile() {
        for p in CREDENTIAL_PATTERNS {
            Regex::new(p).unwrap();
        }
        Regex::new(SENSITIVE_NAME).unwrap();
    }

    #[test]
    fn redact_bytes_keeps_invalid_utf8_exactly() {
        let r = Redactor::builder()
            .secret(&Secret::new("hunter2-correct-horse"))
            .build()
            .unwrap();
        let mut input = vec![0x1f, 0x8b, 0x00, 0xff, 0xfe];
        input.extend_from_slice(b"hunter2-correct-horse");
        input.extend_from_slice(&[0xc3, 0x28, 0x00, b'\n']);
        let out = r.redact_bytes(&input).into_owned();
        assert!(out.starts_with(&[0x1f, 0x8b, 0x00, 0xff, 0xfe, b'[']));
        assert!(out.ends_with(&[b']', 0xc3, 0x28, 0x00, b'\n']));
        assert!(!out.windows(7).any(|w| w == b"hunter2"));
        let clean = [0u8, 0xff, 0x80, b'a', 0xc0];
        assert!(matches!(r.redact_bytes(&clean), Cow::Borrowed(_)));
    }

    /// Texts that match the patterns, or nearly do: the prefilters must let every match
    /// through (a match they skipped would be a credential left in a record).
    fn corpus() -> Vec<String> {
        let mut v: Vec<String> = [
            "AKIAABCDEFGHIJKLMNOP",
            "x ASIAABCDEFGHIJKLMNOP y",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_abcdefghijklmnopqrstuvwxyz_0123",
            "xoxb-1234567890-abcdef",
            "sk_live_abcdefghijklmnop1234",
            "rk_live_abcdefghijklmnop1234",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "sk-ant-abcdefghijklmnopqrstuvwxyz",
            "sk-proj-abcdefghijklmnopqrstuvwxyz",
            "eyJhbGciOiJI.eyJzdWIiOiIx.sig",
            "xghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "sbxk_0011223344556677_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
            "7ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "Xsk-live-abcdefghijklmnopqrstuvwxyz",
            "task-runner-configuration-file-name",
            "ln: /etc/passwd: Operation not permitted",
            "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----",
            "API_KEY=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "\"auth_token\": \"Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0\"",
            "PASSWORD: Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "my.Credential=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "passwd=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            // Unicode case folding: KELVIN SIGN for `k`, LONG S for `s`.
            "\u{212A}EY=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "ſecret=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "paſſword=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "tO\u{212A}en: Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "nothing to see here",
            "/bin/true",
            "no policy rule allows `exec` of `/bin/true`",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Every ASCII letter of the key-like words swapped for its case-folding twins.
        for w in [
            "key",
            "token",
            "secret",
            "password",
            "passwd",
            "credential",
            "auth",
        ] {
            v.push(format!("{}=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0", w.to_uppercase()));
            v.push(format!("X_{w}_Y=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0"));
        }
        v
    }

    #[test]
    fn prefilters_never_skip_a_match() {
        let any = regex::bytes::Regex::new(&CREDENTIAL_PATTERNS.join("|")).unwrap();
        let whole = Regex::new(&format!("^(?:{})$", CREDENTIAL_PATTERNS.join("|"))).unwrap();
        let assign = regex::bytes::Regex::new(ASSIGNMENT).unwrap();
        let name = Regex::new(SENSITIVE_NAME).unwrap();
        let shapes = Shapes::get();
        let mut matched = 0;
        for t in corpus() {
            let b = t.as_bytes();
            for (hit, pre, what) in [
                (any.is_match(b), shapes.may_hold_credential(b), "credential"),
                (
                    whole.is_match(&t),
                    shapes.may_hold_credential(b),
                    "whole value",
                ),
                (assign.is_match(b), shapes.may_hold_keyword(b), "assignment"),
                (name.is_match(&t), shapes.may_hold_keyword(b), "name"),
            ] {
                assert!(!hit || pre, "the {what} prefilter skipped a match in {t:?}");
                matched += usize::from(hit);
            }
        }
        // The corpus exercises the patterns (not only texts that match nothing).
        assert!(matched > 30, "only {matched} matches in the corpus");
    }

    #[test]
    fn folded_letters_in_a_key_name_are_still_redacted() {
        let r = Redactor::builder().build().unwrap();
        for t in [
            "ſecret=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "\u{212A}EY=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
        ] {
            let out = r.redact_str(t);
            assert!(
                !out.contains("Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0"),
                "{t} -> {out}"
            );
        }
        // And text with none of the literals is left as it is (borrowed, nothing compiled
        // on its account).
        assert!(matches!(
            r.redact_str("exit 0 after 3 ms"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn credentials_glued_to_other_text_are_redacted() {
        let r = Redactor::builder().build().unwrap();
        for t in [
            "xghp_Zq9abcdefghijklmnopqrstuvwxyz012346",
            "7ghp_Zq9abcdefghijklmnopqrstuvwxyz012347",
            "Xsk-live-Zq9abcdefghijklmnopqrstuvwxyz",
            "idAKIAABCDEFGHIJKLMNOP",
            "headerxoxb-1234567890-abcdefghij",
            "prefix=valueeyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.c2lnbmF0dXJl",
            // sandboxio's own credentials, in a path.
            "GET /v1/sandboxes/sbxk_f28d03e0d9dbfb72_1fbdb149bca72d00d31db86709012e5d52ecf13a7568408eaaaa68183b7d9f28",
            "?token=sbxe_cred1_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
            // Glued at the end too: a key id followed by its secret, a suffix.
            "AKIAABCDEFGHIJKLMNOPwJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "ghp_Zq9abcdefghijklmnopqrstuvwxyz012345_old",
            "sk_live_Zq9abcdefghijklmnopqrstuvwxyz_test",
        ] {
            let out = r.redact_str(t);
            assert!(out.contains("[REDACTED"), "{t} -> {out}");
            for secret in [
                "Zq9abcdefghijklmnopqrstuvwxyz",
                "ABCDEFGHIJKLMNOP",
                "eyJzdWIi",
                "K7MDENG/bPxRfiCY",
                "1fbdb149bca72d00d31db867",
                "00112233445566778899aabbccdd",
            ] {
                assert!(!out.contains(secret), "{t} -> {out}");
            }
        }
    }

    #[test]
    fn file_names_and_words_are_not_taken_for_secrets() {
        let r = Redactor::builder().build().unwrap();
        for t in [
            "ln: /etc/passwd: Operation not permitted",
            "cat: /tmp/run/secrets.key: No such file or directory",
            "the task-runner-configuration-file-name was read",
            "a disk-0123456789abcdefghijklmnop was found",
        ] {
            assert_eq!(r.redact_str(t), t, "changed");
        }
        // A variable is still one: after a space, a quote, a path or an escaped line
        // break, and after an HTTP authorization scheme.
        for t in [
            "export API_KEY=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "line\npasswd: Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            r#"{"msg":"boot\nAPI_KEY=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0"}"#,
            r"cfg\tDB_PASSWORD=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "https://example.com/docs/api_key=Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "{\"token\": \"Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0\"}",
            "Authorization: Bearer Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0",
            "authorization: basic Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0==",
        ] {
            assert!(
                !r.redact_str(t).contains("Zx8kQ2mVn4pL7rT1yW3sD6fG9hJ0"),
                "{t}"
            );
        }
    }

    #[test]
    fn secret_prints_redacted() {
        let s = Secret::new("hunter2hunter2");
        assert_eq!(format!("{s} {s:?}"), "[REDACTED] [REDACTED]");
    }

    #[test]
    fn offset_stems_catch_secret_inside_blob() {
        let secret = "correct-horse-battery";
        for pre in ["", "x", "xy", "xyz", "prefix-bytes"] {
            let blob = STANDARD.encode(format!("{pre}{secret}tail"));
            let r = Redactor::builder()
                .secret(&Secret::new(secret))
                .build()
                .unwrap();
            let out = r.redact_str(&blob);
            assert!(out.contains("[REDACTED:"), "{pre}: {out}");
        }
    }
}
