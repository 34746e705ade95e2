//! Compiled rules: validated matchers, precompiled globs, and the matching logic.

use chrono::{DateTime, Datelike, Timelike, Utc};
use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use sandboxio_core::{
    IsolationTier, Language, Money, Operation, OperationArgs, OperationKind, RuleRef, Verdict,
};

use crate::context::{Context, NetAccess};
use crate::path::{normalize, relative_to_root, NormalPath};

/// A set of operation kinds as a bit mask (bit i = `OperationKind::ALL[i]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KindSet(pub u16);

impl KindSet {
    pub const ALL: KindSet = KindSet(0b1111_1111);
    pub const FILES: KindSet = KindSet(0b001_1100);
    pub fn of(k: OperationKind) -> KindSet {
        KindSet(1 << kind_index(k))
    }
    pub fn contains(self, k: OperationKind) -> bool {
        self.0 & (1 << kind_index(k)) != 0
    }
    pub fn intersect(self, o: KindSet) -> KindSet {
        KindSet(self.0 & o.0)
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn kinds(self) -> impl Iterator<Item = OperationKind> {
        OperationKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }
}

pub(crate) fn kind_index(k: OperationKind) -> usize {
    match k {
        OperationKind::Exec => 0,
        OperationKind::RunCode => 1,
        OperationKind::FileRead => 2,
        OperationKind::FileWrite => 3,
        OperationKind::FileDelete => 4,
        OperationKind::NetConnect => 5,
        OperationKind::ToolCall => 6,
        OperationKind::Browse => 7,
        OperationKind::Admin => 8,
    }
}

/// A name pattern: a literal compared directly, or a glob.
#[derive(Debug, Clone)]
pub(crate) enum NamePattern {
    Literal(String),
    Glob(GlobMatcher),
}

impl NamePattern {
    fn matches(&self, s: &str) -> bool {
        match self {
            NamePattern::Literal(l) => l == s,
            NamePattern::Glob(g) => g.is_match(s),
        }
    }
}

/// The longest glob a policy may hold, in bytes. A glob compiles to a regex, and a long
/// enough one passes the regex engine's size limit, where `globset`'s matcher panics (about
/// 200,000 `?` did; 100,000 did not): refused at load instead, with a margin of 25x, and far
/// above any real pattern. Every matcher built later (at first use) is of such globs.
pub(crate) const MAX_GLOB_BYTES: usize = 4096;

/// Refuses a glob longer than [`MAX_GLOB_BYTES`].
pub(crate) fn glob_size(p: &str) -> Result<(), String> {
    if p.len() > MAX_GLOB_BYTES {
        return Err(format!(
            "the pattern is {} bytes long, more than {MAX_GLOB_BYTES}",
            p.len()
        ));
    }
    Ok(())
}

pub(crate) fn has_glob_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', ']', '{', '}'])
}

pub(crate) fn name_pattern(p: &str) -> Result<NamePattern, String> {
    if has_glob_meta(p) {
        glob_size(p)?;
        GlobBuilder::new(p)
            .literal_separator(false)
            .build()
            .map(|g| NamePattern::Glob(g.compile_matcher()))
            .map_err(|e| e.kind().to_string())
    } else {
        Ok(NamePattern::Literal(p.to_string()))
    }
}

/// A host pattern: `example.com` (exact), `*.example.com` (any subdomain, not the apex)
/// or `*` (any host). Hosts compare case-insensitively without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    Any,
    Exact(String),
    Suffix(String),
}

impl HostPattern {
    pub fn parse(p: &str) -> Result<HostPattern, String> {
        let p = p.trim_end_matches('.').to_ascii_lowercase();
        if p == "*" {
            return Ok(HostPattern::Any);
        }
        let (suffix, rest) = match p.strip_prefix("*.") {
            Some(r) => (true, r.to_string()),
            None => (false, p.clone()),
        };
        if rest.is_empty() {
            return Err("empty host".into());
        }
        if !rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'))
        {
            return Err(
                "a host is letters, digits, `.`, `-`, `_` or `:`; `*` only as a leading `*.`"
                    .into(),
            );
        }
        if rest.starts_with('.') || rest.contains("..") {
            return Err("empty label in host".into());
        }
        Ok(if suffix {
            HostPattern::Suffix(format!(".{rest}"))
        } else {
            HostPattern::Exact(rest)
        })
    }
    fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Exact(h) => h == host,
            HostPattern::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_str()),
        }
    }
}

/// A UTC time-of-day window in minutes since midnight, `[start, end)`, wrapping midnight
/// when `start > end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeWindow {
    pub start: u32,
    pub end: u32,
}

impl TimeWindow {
    pub fn parse(s: &str) -> Result<TimeWindow, String> {
        let (a, b) = s
            .split_once('-')
            .ok_or("expected `HH:MM-HH:MM` (UTC), such as `09:00-17:00`")?;
        let start = parse_hhmm(a.trim())?;
        let end = parse_hhmm(b.trim())?;
        if start == end {
            return Err("start and end are equal; omit `time` to match all day".into());
        }
        Ok(TimeWindow { start, end })
    }
    fn contains(&self, minute: u32) -> bool {
        if self.start < self.end {
            minute >= self.start && minute < self.end
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

fn parse_hhmm(s: &str) -> Result<u32, String> {
    let (h, m) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}` is not HH:MM"))?;
    if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(format!("`{s}` is not HH:MM"));
    }
    let h: u32 = h.parse().map_err(|_| format!("`{s}` is not HH:MM"))?;
    let m: u32 = m.parse().map_err(|_| format!("`{s}` is not HH:MM"))?;
    if h == 24 && m == 0 {
        return Ok(24 * 60);
    }
    if h > 23 || m > 59 {
        return Err(format!("`{s}` is not a time of day"));
    }
    Ok(h * 60 + m)
}

pub(crate) fn parse_weekday(s: &str) -> Result<u8, String> {
    let i = match s.to_ascii_lowercase().as_str() {
        "mon" | "monday" => 0,
        "tue" | "tuesday" => 1,
        "wed" | "wednesday" => 2,
        "thu" | "thursday" => 3,
        "fri" | "friday" => 4,
        "sat" | "saturday" => 5,
        "sun" | "sunday" => 6,
        _ => {
            return Err(format!(
                "unknown weekday `{s}` (expected mon, tue, ..., sun)"
            ))
        }
    };
    Ok(1 << i)
}

/// Path globs of one matcher: the globs themselves (for the set-wide prefilter) and one
/// matcher of them all (for evaluating one rule alone: mounts, a kind without a path
/// index, examples), built at its first use: a process that never asks this matcher (a
/// one-shot CLI run of another kind) does not pay for compiling it.
#[derive(Debug, Clone)]
pub(crate) struct PathGlobs {
    pub globs: Vec<globset::Glob>,
    matcher: std::sync::OnceLock<GlobsMatcher>,
}

#[derive(Debug, Clone)]
enum GlobsMatcher {
    Set(GlobSet),
    /// Each glob alone: the same answers as a set, for the case where building the set
    /// fails (its combined automaton past a size limit). Each glob is at most
    /// [`MAX_GLOB_BYTES`] long, which compiles alone far under the limit.
    Each(Vec<globset::GlobMatcher>),
}

impl PathGlobs {
    /// Whether any of the globs matches `path` (already normalised).
    pub fn is_match(&self, path: &str) -> bool {
        let m = self.matcher.get_or_init(|| {
            let mut b = GlobSetBuilder::new();
            for g in &self.globs {
                b.add(g.clone());
            }
            match b.build() {
                Ok(set) => GlobsMatcher::Set(set),
                Err(_) => GlobsMatcher::Each(
                    self.globs
                        .iter()
                        .map(globset::Glob::compile_matcher)
                        .collect(),
                ),
            }
        });
        match m {
            GlobsMatcher::Set(set) => set.is_match(path),
            GlobsMatcher::Each(each) => each.iter().any(|g| g.is_match(path)),
        }
    }
}

/// Which rules' `path` / `path_not` globs match one form of the operation's path,
/// computed once per evaluation by a [`PathIndex`] (bit i = rule i).
#[derive(Debug, Clone, Default)]
pub(crate) struct PathHits {
    pub path: Vec<u64>,
    pub path_not: Vec<u64>,
}

fn bit(v: &[u64], i: usize) -> bool {
    v.get(i / 64)
        .map(|w| w & (1u64 << (i % 64)) != 0)
        .unwrap_or(false)
}

fn set_bit(v: &mut [u64], i: usize) {
    if let Some(w) = v.get_mut(i / 64) {
        *w |= 1u64 << (i % 64);
    }
}

/// Every path glob of every rule of one kind, bucketed by its literal prefix (the text
/// before the first glob metacharacter). A glob can only match a path that starts with
/// its prefix, so a decision tests only the globs whose prefix the path starts with,
/// instead of one match per rule.
#[derive(Debug, Clone)]
pub(crate) struct PathIndex {
    buckets: std::collections::HashMap<String, Vec<(GlobMatcher, usize, bool)>>,
    /// Distinct prefix lengths, ascending.
    lengths: Vec<usize>,
    rules: usize,
}

fn literal_prefix(glob: &str) -> &str {
    let end = glob.find(['*', '?', '[', '{', '\\']).unwrap_or(glob.len());
    &glob[..end]
}

impl PathIndex {
    pub fn build(rules: &[Rule], members: &[u32]) -> Option<PathIndex> {
        let mut buckets: std::collections::HashMap<String, Vec<(GlobMatcher, usize, bool)>> =
            std::collections::HashMap::new();
        for &i in members {
            let i = i as usize;
            let Some(r) = rules.get(i) else { continue };
            for (globs, neg) in [(&r.path, false), (&r.path_not, true)] {
                if let Some(g) = globs {
                    for glob in &g.globs {
                        buckets
                            .entry(literal_prefix(glob.glob()).to_string())
                            .or_default()
                            .push((glob.compile_matcher(), i, neg));
                    }
                }
            }
        }
        if buckets.is_empty() {
            return None;
        }
        let mut lengths: Vec<usize> = buckets.keys().map(String::len).collect();
        lengths.sort_unstable();
        lengths.dedup();
        Some(PathIndex {
            buckets,
            lengths,
            rules: rules.len(),
        })
    }

    pub fn hits(&self, p: &NormalPath) -> PathHits {
        let words = self.rules.div_ceil(64);
        let mut h = PathHits {
            path: vec![0; words],
            path_not: vec![0; words],
        };
        let text = p.as_str();
        for &len in &self.lengths {
            if len > text.len() {
                break;
            }
            if !text.is_char_boundary(len) {
                continue;
            }
            let Some(list) = self.buckets.get(&text[..len]) else {
                continue;
            };
            for (m, rule, neg) in list {
                if m.is_match(text) {
                    if *neg {
                        set_bit(&mut h.path_not, *rule);
                    } else {
                        set_bit(&mut h.path, *rule);
                    }
                }
            }
        }
        h
    }
}

/// One compiled rule. Absent matchers (`None`) do not constrain.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// Position in its `PolicySet` (set when the set is built).
    pub index: usize,
    pub id: String,
    pub effect: Verdict,
    pub reason: String,
    pub file: String,
    pub line: u32,
    pub kinds: KindSet,
    pub tool: Option<Vec<NamePattern>>,
    pub tenant: Option<Vec<NamePattern>>,
    pub agent: Option<Vec<NamePattern>>,
    pub argv_exact: Option<Vec<String>>,
    pub argv_prefix: Option<Vec<String>>,
    /// Element-wise globs; a final `**` element matches any remaining arguments.
    pub argv_glob: Option<(Vec<GlobMatcher>, bool)>,
    pub language: Option<Vec<Language>>,
    pub path: Option<PathGlobs>,
    pub path_not: Option<PathGlobs>,
    pub in_workspace: Option<bool>,
    pub host: Option<Vec<HostPattern>>,
    pub port: Option<Vec<(u16, u16)>>,
    pub tier: Option<Vec<IsolationTier>>,
    pub network: Option<Vec<NetAccess>>,
    pub memory_above: Option<sandboxio_core::ByteSize>,
    pub timeout_above: Option<std::time::Duration>,
    pub pids_above: Option<u32>,
    pub cpu_millis_above: Option<u32>,
    pub env_names: Option<Vec<GlobMatcher>>,
    /// Host paths of the request's mounts (any mount / any read-write mount).
    pub mount: Option<PathGlobs>,
    pub mount_rw: Option<PathGlobs>,
    /// Conditions on a `tool_call`'s arguments, all of which must hold.
    pub args: Option<Vec<crate::args::ArgCond>>,
    pub cost_above: Option<Money>,
    pub cost_at_most: Option<Money>,
    pub time: Option<TimeWindow>,
    pub weekdays: Option<u8>,
}

/// The facts about one operation that rules look at, computed once per evaluation.
pub(crate) struct Facts<'a> {
    pub kind: OperationKind,
    pub tool: &'a str,
    pub tenant: &'a str,
    pub agent: Option<&'a str>,
    pub argv: Option<&'a [String]>,
    pub language: Option<Language>,
    /// Lexical form, then (if given) the resolved form.
    pub paths: Vec<NormalPath>,
    /// Prefilter results per path form, when a set-wide index computed them.
    pub hits: Option<Vec<PathHits>>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub tier: IsolationTier,
    pub network: NetAccess,
    /// The resolved limits and env names of an exec or run_code request.
    pub limits: Option<&'a sandboxio_core::Limits>,
    pub env_names: Vec<&'a str>,
    /// Host path (normalised) of each mount, and whether it is read-write.
    pub mounts: Vec<(NormalPath, bool)>,
    /// A `tool_call`'s arguments.
    pub arguments: Option<&'a serde_json::Value>,
    pub cost: Option<Money>,
    pub minute: u32,
    pub weekday: u8,
}

impl<'a> Facts<'a> {
    pub fn new(op: &'a Operation, ctx: &Context<'_>) -> Facts<'a> {
        let mut paths = Vec::new();
        if let Some(p) = op.args.path() {
            paths.push(normalize(p));
            if let Some(r) = ctx.resolved_path {
                paths.push(relative_to_root(r, ctx.workspace_root));
            }
        }
        let (host, port) = match &op.args {
            OperationArgs::NetConnect { host, port } => (
                Some(host.trim_end_matches('.').to_ascii_lowercase()),
                Some(*port),
            ),
            _ => (None, None),
        };
        let language = match &op.args {
            OperationArgs::RunCode { language, .. } => Some(*language),
            _ => None,
        };
        Facts {
            kind: op.kind(),
            tool: op.args.tool_name(),
            tenant: &op.principal.tenant,
            agent: op.principal.agent.as_deref(),
            argv: op.args.argv(),
            language,
            paths,
            hits: None,
            host,
            port,
            tier: op.tier.unwrap_or(ctx.default_tier),
            // The request's own network, never a default, when it carries one.
            network: op
                .exec
                .as_ref()
                .map(|e| match e.network {
                    sandboxio_core::NetworkMode::None => NetAccess::None,
                    sandboxio_core::NetworkMode::Allowlist { .. } => NetAccess::Allowlist,
                    sandboxio_core::NetworkMode::Full => NetAccess::Full,
                })
                .unwrap_or(ctx.network),
            limits: op.exec.as_ref().map(|e| &e.limits),
            env_names: op
                .exec
                .as_ref()
                .map(|e| e.env.keys().map(String::as_str).collect())
                .unwrap_or_default(),
            // The input directory (bound read-only) and the output directory (written by
            // the copy-out) reach the host like mounts, and match mount rules like them.
            mounts: op
                .exec
                .iter()
                .flat_map(|e| {
                    e.mounts
                        .iter()
                        .map(|m| (m.host.as_path(), m.mode == sandboxio_core::MountMode::Rw))
                        .chain(e.input_dir.iter().map(|d| (d.as_path(), false)))
                        .chain(e.output_dir.iter().map(|d| (d.as_path(), true)))
                })
                .map(|(host, rw)| (normalize(&host.to_string_lossy()), rw))
                .collect(),
            arguments: match &op.args {
                OperationArgs::ToolCall { arguments, .. } => Some(arguments),
                _ => None,
            },
            cost: op.estimated_cost,
            minute: minute_of_day(&ctx.now),
            weekday: 1 << ctx.now.weekday().num_days_from_monday(),
        }
    }
}

fn minute_of_day(t: &DateTime<Utc>) -> u32 {
    t.hour() * 60 + t.minute()
}

fn any_name(ps: &[NamePattern], s: &str) -> bool {
    ps.iter().any(|p| p.matches(s))
}

impl Rule {
    pub fn rule_ref(&self) -> RuleRef {
        RuleRef {
            id: self.id.clone(),
            file: Some(self.file.clone()),
            line: Some(self.line),
        }
    }

    /// Whether unknown facts (no agent, no cost estimate) and disagreeing path forms count
    /// as a match. True for `ask` and `deny`: uncertainty resolves toward the stricter outcome.
    fn strict(&self) -> bool {
        self.effect != Verdict::Allow
    }

    /// Whether this rule matches. Cheap matchers first, globs last.
    pub fn matches(&self, f: &Facts<'_>) -> bool {
        let strict = self.strict();
        if !self.kinds.contains(f.kind) {
            return false;
        }
        if let Some(t) = &self.tenant {
            if !any_name(t, f.tenant) {
                return false;
            }
        }
        if let Some(a) = &self.agent {
            match f.agent {
                Some(agent) => {
                    if !any_name(a, agent) {
                        return false;
                    }
                }
                None => {
                    if !strict {
                        return false;
                    }
                }
            }
        }
        if let Some(t) = &self.tier {
            if !t.contains(&f.tier) {
                return false;
            }
        }
        if let Some(n) = &self.network {
            if !n.contains(&f.network) {
                return false;
            }
        }
        if self.memory_above.is_some()
            || self.timeout_above.is_some()
            || self.pids_above.is_some()
            || self.cpu_millis_above.is_some()
        {
            // Only requests that run something have limits; others never match.
            let Some(l) = f.limits else { return false };
            if let Some(m) = self.memory_above {
                if l.memory <= m {
                    return false;
                }
            }
            if let Some(t) = self.timeout_above {
                if l.timeout <= t {
                    return false;
                }
            }
            if let Some(p) = self.pids_above {
                if l.pids <= p {
                    return false;
                }
            }
            if let Some(c) = self.cpu_millis_above {
                if l.cpu_quota_millis <= c {
                    return false;
                }
            }
        }
        if let Some(globs) = &self.env_names {
            if !f
                .env_names
                .iter()
                .any(|n| globs.iter().any(|g| g.is_match(n)))
            {
                return false;
            }
        }
        if let Some(g) = &self.mount {
            if !f.mounts.iter().any(|(p, _)| g.is_match(p.as_str())) {
                return false;
            }
        }
        if let Some(g) = &self.mount_rw {
            if !f.mounts.iter().any(|(p, rw)| *rw && g.is_match(p.as_str())) {
                return false;
            }
        }
        if let Some(conds) = &self.args {
            let Some(a) = f.arguments else { return false };
            if !conds.iter().all(|c| c.holds(a, strict)) {
                return false;
            }
        }
        if self.cost_above.is_some() || self.cost_at_most.is_some() {
            match f.cost {
                Some(c) => {
                    if let Some(above) = self.cost_above {
                        if c <= above {
                            return false;
                        }
                    }
                    if let Some(most) = self.cost_at_most {
                        if c > most {
                            return false;
                        }
                    }
                }
                None => {
                    if !strict {
                        return false;
                    }
                }
            }
        }
        if let Some(w) = &self.time {
            if !w.contains(f.minute) {
                return false;
            }
        }
        if let Some(d) = self.weekdays {
            if d & f.weekday == 0 {
                return false;
            }
        }
        if let Some(l) = &self.language {
            match f.language {
                Some(lang) if l.contains(&lang) => {}
                _ => return false,
            }
        }
        if let Some(ps) = &self.port {
            match f.port {
                Some(p) if ps.iter().any(|(lo, hi)| p >= *lo && p <= *hi) => {}
                _ => return false,
            }
        }
        if let Some(hs) = &self.host {
            match &f.host {
                Some(h) if hs.iter().any(|p| p.matches(h)) => {}
                _ => return false,
            }
        }
        if self.argv_exact.is_some() || self.argv_prefix.is_some() || self.argv_glob.is_some() {
            let Some(argv) = f.argv else { return false };
            if let Some(e) = &self.argv_exact {
                if argv != e.as_slice() {
                    return false;
                }
            }
            if let Some(p) = &self.argv_prefix {
                if !argv.starts_with(p) {
                    return false;
                }
            }
            if let Some((globs, rest)) = &self.argv_glob {
                let ok_len = if *rest {
                    argv.len() >= globs.len()
                } else {
                    argv.len() == globs.len()
                };
                if !ok_len || !globs.iter().zip(argv).all(|(g, a)| g.is_match(a)) {
                    return false;
                }
            }
        }
        if let Some(t) = &self.tool {
            if !any_name(t, f.tool) {
                return false;
            }
        }
        if self.path.is_some() || self.path_not.is_some() || self.in_workspace.is_some() {
            if f.paths.is_empty() {
                return false;
            }
            let pred = |(i, p): (usize, &NormalPath)| {
                let hits = f.hits.as_ref().and_then(|h| h.get(i));
                self.path_matches(p, hits)
            };
            let ok = if strict {
                f.paths.iter().enumerate().any(pred)
            } else {
                f.paths.iter().enumerate().all(pred)
            };
            if !ok {
                return false;
            }
        }
        true
    }

    fn path_matches(&self, p: &NormalPath, hits: Option<&PathHits>) -> bool {
        if let Some(w) = self.in_workspace {
            if p.is_inside_workspace() != w {
                return false;
            }
        }
        if let Some(g) = &self.path {
            let m = match hits {
                Some(h) => bit(&h.path, self.index),
                None => g.is_match(p.as_str()),
            };
            if !m {
                return false;
            }
        }
        if let Some(g) = &self.path_not {
            let m = match hits {
                Some(h) => bit(&h.path_not, self.index),
                None => g.is_match(p.as_str()),
            };
            if m {
                return false;
            }
        }
        true
    }
}

/// Builds the glob set for path patterns: `*` stays within one component, `**` crosses
/// components. Patterns are normalised like paths.
pub(crate) fn path_globset(patterns: &[String]) -> Result<PathGlobs, (String, String)> {
    let mut globs = Vec::new();
    for p in patterns {
        let comps: Vec<&str> = p
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        let leading_dots = comps.iter().take_while(|c| **c == "..").count();
        if comps.iter().skip(leading_dots).any(|c| *c == "..") {
            return Err((p.clone(), "`..` may only lead a pattern".into()));
        }
        glob_size(p).map_err(|why| (p.clone(), why))?;
        let n = normalize(p);
        let g = GlobBuilder::new(n.as_str())
            .literal_separator(true)
            .build()
            .map_err(|e| (p.clone(), e.kind().to_string()))?;
        globs.push(g);
    }
    Ok(PathGlobs {
        globs,
        matcher: std::sync::OnceLock::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_whose_set_cannot_be_built_are_matched_one_by_one_with_the_same_answers() {
        // Sixty globs at the size cap pass the combined set's size limit (thirty do not):
        // the matcher falls back to each glob alone, and still answers.
        let long = "?".repeat(MAX_GLOB_BYTES - 8);
        let patterns: Vec<String> = (0..60).map(|i| format!("/{long}/x{i}")).collect();
        let globs = path_globset(&patterns).unwrap();
        let a = "a".repeat(long.len());
        assert!(globs.is_match(&format!("/{a}/x59")));
        assert!(globs.is_match(&format!("/{a}/x0")));
        assert!(!globs.is_match(&format!("/{a}/x60")));
        assert!(!globs.is_match(&format!("/{}/x1", "a".repeat(long.len() - 1))));
        // `?` stays within one component.
        assert!(!globs.is_match(&format!("/{}/b/x1", "a".repeat(long.len() - 2))));
        assert!(
            matches!(globs.matcher.get(), Some(GlobsMatcher::Each(each)) if each.len() == 60),
            "the set was built after all: the test no longer reaches the fallback"
        );
        // A few short globs build one set, with the same kind of answers.
        let short = path_globset(&["/a/**".to_string(), "/b/?".to_string()]).unwrap();
        assert!(short.is_match("/a/x/y") && short.is_match("/b/c") && !short.is_match("/b/cd"));
        assert!(matches!(short.matcher.get(), Some(GlobsMatcher::Set(_))));
    }
}
