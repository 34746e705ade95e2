//! From policy text to compiled rules: parse, validate every value, run the examples.

use std::collections::HashMap;

use chrono::{DateTime, TimeZone, Utc};
use sandboxio_core::{IsolationTier, Language, Money, Operation, OperationKind, Verdict};
use serde::Deserialize;
use toml::Spanned;

use crate::context::{Context, NetAccess};
use crate::error::{LineIndex, Location, PolicyError, PolicyWarning};
use crate::raw::{ExampleWrapper, FileRaw, RuleRaw, StrList};
use crate::rule::{
    name_pattern, parse_weekday, path_globset, Facts, HostPattern, KindSet, Rule, TimeWindow,
};

/// Policy files larger than this are refused (1 MiB).
pub const MAX_POLICY_FILE_BYTES: u64 = 1024 * 1024;

/// The time examples are evaluated at when they name none: Monday 2024-01-01 12:00 UTC.
pub const EXAMPLE_DEFAULT_TIME: &str = "2024-01-01T12:00:00Z";

/// A compiled rule plus what composition checks need.
pub(crate) struct Compiled {
    pub rule: Rule,
    pub at: Location,
    /// Canonical text of the rule's conditions, for contradiction checks.
    pub key: String,
}

pub(crate) struct FileOutcome {
    pub rules: Vec<Compiled>,
    pub errors: Vec<PolicyError>,
    pub warnings: Vec<PolicyWarning>,
}

/// Compiles one file, collecting every error it can find (a syntax error stops early).
/// Whether a file's examples and counterexamples are run while it compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Examples {
    Check,
    /// Not run: the text is the built-in default policy, whose examples this crate's tests
    /// run on these same bytes (`the_builtin_policy_passes_its_own_examples`), so running
    /// them again at every load (which also built every matcher they touch) proves
    /// nothing new.
    Trusted,
}

impl Examples {
    pub(crate) fn for_source(bytes: &[u8]) -> Examples {
        if bytes == crate::set::DEFAULT_POLICY.as_bytes() {
            Examples::Trusted
        } else {
            Examples::Check
        }
    }
}

pub(crate) fn compile_source(file: &str, bytes: &[u8], examples: Examples) -> FileOutcome {
    let mut out = FileOutcome {
        rules: Vec::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > MAX_POLICY_FILE_BYTES {
        out.errors.push(PolicyError::FileTooLarge {
            file: file.to_string(),
            limit: MAX_POLICY_FILE_BYTES,
        });
        return out;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let valid = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or("");
            out.errors.push(PolicyError::NotUtf8 {
                at: Location::at(file, valid, valid.len()),
            });
            return out;
        }
    };
    // Parsed once: the typed rules (with their spans) and the plain tables (for the
    // canonical keys) are both read from the one document.
    let doc = match toml_edit::ImDocument::parse(text) {
        Ok(d) => d,
        Err(e) => {
            out.errors.push(toml_error(file, text, &e.into()));
            return out;
        }
    };
    // The rule tables as plain values (for their canonical keys), read from the document
    // in place: a copy of the document and a second deserialisation of it were a third of
    // a denied run's instructions.
    let rule_tables = rule_values(&doc);
    let raw = match FileRaw::deserialize(toml_edit::de::Deserializer::from(doc)) {
        Ok(r) => r,
        Err(e) => {
            out.errors.push(toml_error(file, text, &e));
            return out;
        }
    };
    if raw.rule.is_empty() {
        out.warnings.push(PolicyWarning {
            at: Location::at(file, text, 0),
            rule: None,
            message: "file has no rules".into(),
        });
    }
    let lines = LineIndex::new(file, text);
    let mut ids: HashMap<String, Location> = HashMap::new();
    for (i, spanned) in raw.rule.iter().enumerate() {
        let at = lines.at(spanned.span().start);
        let r = spanned.get_ref();
        let id = r.id.get_ref().clone();
        if let Some(first) = ids.get(&id) {
            out.errors.push(PolicyError::DuplicateRuleId {
                at: at.clone(),
                rule: id.clone(),
                first: first.clone(),
            });
            continue;
        }
        ids.insert(id.clone(), at.clone());
        let key = rule_tables.get(i).map(canonical_key).unwrap_or_default();
        match compile_rule(&lines, at.clone(), r, examples, &mut out.warnings) {
            Ok(rule) => out.rules.push(Compiled { rule, at, key }),
            Err(e) => out.errors.push(e),
        }
    }
    // Contradictions within one file are errors; identical duplicates are warnings.
    for (i, a) in out.rules.iter().enumerate() {
        for b in out.rules.iter().take(i) {
            if a.key != b.key {
                continue;
            }
            if a.rule.effect != b.rule.effect {
                out.errors.push(PolicyError::ContradictoryRules {
                    at: a.at.clone(),
                    rule: a.rule.id.clone(),
                    effect: a.rule.effect,
                    other: b.rule.id.clone(),
                    other_at: Box::new(b.at.clone()),
                    other_effect: b.rule.effect,
                });
            } else {
                out.warnings.push(PolicyWarning {
                    at: a.at.clone(),
                    rule: Some(a.rule.id.clone()),
                    message: format!("same conditions and effect as rule `{}`", b.rule.id),
                });
            }
        }
    }
    out
}

fn toml_error(file: &str, text: &str, e: &toml_edit::de::Error) -> PolicyError {
    let at = Location::at(file, text, e.span().map(|s| s.start).unwrap_or(0));
    let msg = e.message().trim().trim_end_matches('.').to_string();
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        if let Some(end) = rest.find('`') {
            return PolicyError::UnknownKey {
                at,
                key: rest[..end].to_string(),
            };
        }
    }
    PolicyError::Syntax { at, message: msg }
}

/// The `rule` entries of a parsed file as plain TOML values (what deserialising the whole
/// document into a `toml::Table` and taking `rule` gives), without copying the document.
fn rule_values(doc: &toml_edit::ImDocument<&str>) -> Vec<toml::Value> {
    match doc.as_table().get("rule").and_then(item_value) {
        Some(toml::Value::Array(a)) => a,
        _ => Vec::new(),
    }
}

fn item_value(i: &toml_edit::Item) -> Option<toml::Value> {
    match i {
        toml_edit::Item::None => None,
        toml_edit::Item::Value(v) => Some(plain_value(v)),
        toml_edit::Item::Table(t) => Some(table_value(t.iter())),
        toml_edit::Item::ArrayOfTables(a) => Some(toml::Value::Array(
            a.iter().map(|t| table_value(t.iter())).collect(),
        )),
    }
}

fn table_value<'a>(entries: impl Iterator<Item = (&'a str, &'a toml_edit::Item)>) -> toml::Value {
    toml::Value::Table(
        entries
            .filter_map(|(k, i)| item_value(i).map(|v| (k.to_string(), v)))
            .collect(),
    )
}

fn plain_value(v: &toml_edit::Value) -> toml::Value {
    use toml_edit::Value as V;
    match v {
        V::String(s) => toml::Value::String(s.value().clone()),
        V::Integer(i) => toml::Value::Integer(*i.value()),
        V::Float(f) => toml::Value::Float(*f.value()),
        V::Boolean(b) => toml::Value::Boolean(*b.value()),
        V::Datetime(d) => {
            let text = d.value().to_string();
            text.parse()
                .map(toml::Value::Datetime)
                .unwrap_or(toml::Value::String(text))
        }
        V::Array(a) => toml::Value::Array(a.iter().map(plain_value).collect()),
        V::InlineTable(t) => toml::Value::Table(
            t.iter()
                .map(|(k, v)| (k.to_string(), plain_value(v)))
                .collect(),
        ),
    }
}

/// Sorted, effect-free text of a rule's conditions.
fn canonical_key(v: &toml::Value) -> String {
    fn canon(v: &toml::Value) -> toml::Value {
        match v {
            toml::Value::Array(a) => {
                let mut items: Vec<toml::Value> = a.iter().map(canon).collect();
                items.sort_by_cached_key(|x| x.to_string());
                items.dedup();
                toml::Value::Array(items)
            }
            toml::Value::Table(t) => {
                toml::Value::Table(t.iter().map(|(k, v)| (k.clone(), canon(v))).collect())
            }
            other => other.clone(),
        }
    }
    // `kind = "exec"` and `kind = ["exec"]` mean the same.
    fn top(v: &toml::Value) -> toml::Value {
        match v {
            toml::Value::Array(_) | toml::Value::Table(_) => canon(v),
            other => toml::Value::Array(vec![other.clone()]),
        }
    }
    let toml::Value::Table(t) = v else {
        return String::new();
    };
    let mut parts: Vec<String> = t
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "id" | "effect" | "reason" | "examples" | "counterexamples"
            )
        })
        .map(|(k, v)| format!("{k}={}", top(v)))
        .collect();
    parts.sort();
    parts.join(";")
}

struct Ctx<'a> {
    lines: &'a LineIndex<'a>,
    rule: String,
}

impl Ctx<'_> {
    fn loc<T>(&self, s: &Spanned<T>) -> Location {
        self.lines.at(s.span().start)
    }
    fn invalid<T>(&self, s: &Spanned<T>, key: &str, why: impl Into<String>) -> PolicyError {
        PolicyError::InvalidValue {
            at: self.loc(s),
            rule: self.rule.clone(),
            key: key.to_string(),
            why: why.into(),
        }
    }
    fn nonempty<'b>(
        &self,
        s: &'b Spanned<StrList>,
        key: &str,
    ) -> Result<&'b [String], PolicyError> {
        let v = &s.get_ref().0;
        if v.is_empty() {
            return Err(PolicyError::Suspicious {
                at: self.loc(s),
                rule: self.rule.clone(),
                why: format!("`{key}` is an empty list; remove it or name at least one value"),
            });
        }
        Ok(v)
    }
    fn money(&self, s: &Spanned<String>) -> Result<Money, PolicyError> {
        let err = |why: String| PolicyError::InvalidMoney {
            at: self.loc(s),
            rule: self.rule.clone(),
            input: s.get_ref().clone(),
            why,
        };
        let m: Money = s.get_ref().parse().map_err(|e| err(format!("{e}")))?;
        if m.is_negative() {
            return Err(err("must not be negative".into()));
        }
        Ok(m)
    }
    fn names(
        &self,
        s: &Option<Spanned<StrList>>,
        key: &str,
    ) -> Result<Option<Vec<crate::rule::NamePattern>>, PolicyError> {
        let Some(s) = s else { return Ok(None) };
        let mut out = Vec::new();
        for p in self.nonempty(s, key)? {
            out.push(name_pattern(p).map_err(|why| PolicyError::InvalidGlob {
                at: self.loc(s),
                rule: self.rule.clone(),
                pattern: p.clone(),
                why,
            })?);
        }
        Ok(Some(out))
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

fn compile_rule(
    lines: &LineIndex<'_>,
    at: Location,
    r: &RuleRaw,
    examples: Examples,
    warnings: &mut Vec<PolicyWarning>,
) -> Result<Rule, PolicyError> {
    let c = Ctx {
        lines,
        rule: r.id.get_ref().clone(),
    };
    if !valid_id(r.id.get_ref()) {
        return Err(c.invalid(
            &r.id,
            "id",
            "an id is 1 to 128 letters, digits, `-`, `_`, `.` or `:`",
        ));
    }
    let effect = match r.effect.get_ref().as_str() {
        "allow" => Verdict::Allow,
        "ask" => Verdict::Ask,
        "deny" => Verdict::Deny,
        other => {
            return Err(PolicyError::UnknownEffect {
                at: c.loc(&r.effect),
                rule: c.rule.clone(),
                effect: other.to_string(),
            })
        }
    };
    if r.reason.get_ref().trim().is_empty() {
        return Err(c.invalid(
            &r.reason,
            "reason",
            "the reason is shown to the agent; it must not be empty",
        ));
    }

    // Operation kinds: declared, then narrowed by the matchers present.
    let declared = match &r.kind {
        None => None,
        Some(k) => {
            let mut set = KindSet(0);
            for name in c.nonempty(k, "kind")? {
                let kind: OperationKind = name.parse().map_err(|_| {
                    c.invalid(
                        k,
                        "kind",
                        format!(
                            "unknown operation kind `{name}` (expected exec, run_code, file_read, file_write, file_delete, net_connect, tool_call or browse)"
                        ),
                    )
                })?;
                set = KindSet(set.0 | KindSet::of(kind).0);
            }
            Some(set)
        }
    };
    let mut kinds = declared.unwrap_or(KindSet::ALL);
    let mut narrow = |key: &str, present: bool, allowed: KindSet, loc: Location| {
        if !present {
            return Ok(());
        }
        if let Some(d) = declared {
            if let Some(bad) = d.kinds().find(|k| !allowed.contains(*k)) {
                return Err(PolicyError::InapplicableMatcher {
                    at: loc,
                    rule: c.rule.clone(),
                    key: key.to_string(),
                    kind: bad.to_string(),
                });
            }
        }
        kinds = kinds.intersect(allowed);
        Ok(())
    };
    let exec = KindSet::of(OperationKind::Exec);
    let net = KindSet::of(OperationKind::NetConnect);
    let run = KindSet::of(OperationKind::RunCode);
    macro_rules! narrow_opt {
        ($field:expr, $key:expr, $set:expr) => {
            if let Some(s) = &$field {
                narrow($key, true, $set, c.loc(s))?;
            }
        };
    }
    narrow_opt!(r.argv_exact, "argv_exact", exec);
    narrow_opt!(r.argv_prefix, "argv_prefix", exec);
    narrow_opt!(r.argv_glob, "argv_glob", exec);
    narrow_opt!(r.language, "language", run);
    narrow_opt!(r.path, "path", KindSet::FILES);
    narrow_opt!(r.path_not, "path_not", KindSet::FILES);
    narrow_opt!(r.in_workspace, "in_workspace", KindSet::FILES);
    narrow_opt!(r.host, "host", net);
    narrow_opt!(r.port, "port", net);
    narrow_opt!(r.args, "args", KindSet::of(OperationKind::ToolCall));
    if kinds.is_empty() {
        return Err(PolicyError::Suspicious {
            at: at.clone(),
            rule: c.rule.clone(),
            why: "its conditions belong to different operation kinds, so it can never match".into(),
        });
    }

    let argv_exact = r.argv_exact.as_ref().map(|s| s.get_ref().clone());
    let argv_prefix = match &r.argv_prefix {
        Some(s) if s.get_ref().is_empty() => {
            return Err(PolicyError::Suspicious {
                at: c.loc(s),
                rule: c.rule.clone(),
                why: "`argv_prefix` is empty and would match every command".into(),
            })
        }
        Some(s) => Some(s.get_ref().clone()),
        None => None,
    };
    let argv_glob = match &r.argv_glob {
        None => None,
        Some(s) => {
            let mut v = s.get_ref().clone();
            let rest = v.last().map(|l| l == "**").unwrap_or(false);
            if rest {
                v.pop();
            }
            if v.is_empty() && rest {
                return Err(PolicyError::Suspicious {
                    at: c.loc(s),
                    rule: c.rule.clone(),
                    why: "`argv_glob = [\"**\"]` matches every command".into(),
                });
            }
            let mut gs = Vec::new();
            for p in &v {
                let bad = |why: String| PolicyError::InvalidGlob {
                    at: c.loc(s),
                    rule: c.rule.clone(),
                    pattern: p.clone(),
                    why,
                };
                crate::rule::glob_size(p).map_err(bad)?;
                let g = globset::GlobBuilder::new(p)
                    .literal_separator(false)
                    .build()
                    .map_err(|e| bad(e.kind().to_string()))?;
                gs.push(g.compile_matcher());
            }
            Some((gs, rest))
        }
    };
    let language = match &r.language {
        None => None,
        Some(s) => {
            let mut out = Vec::new();
            for l in c.nonempty(s, "language")? {
                let lang: Language = l
                    .parse()
                    .map_err(|e| c.invalid(s, "language", format!("{e}")))?;
                out.push(lang);
            }
            Some(out)
        }
    };
    let globs = |s: &Option<Spanned<StrList>>, key: &str| -> Result<_, PolicyError> {
        let Some(s) = s else { return Ok(None) };
        let pats = c.nonempty(s, key)?;
        path_globset(pats)
            .map(Some)
            .map_err(|(pattern, why)| PolicyError::InvalidGlob {
                at: c.loc(s),
                rule: c.rule.clone(),
                pattern,
                why,
            })
    };
    let path = globs(&r.path, "path")?;
    let path_not = globs(&r.path_not, "path_not")?;
    let mount = globs(&r.mount, "mount")?;
    let mount_rw = globs(&r.mount_rw, "mount_rw")?;
    let host = match &r.host {
        None => None,
        Some(s) => {
            let mut out = Vec::new();
            for h in c.nonempty(s, "host")? {
                out.push(
                    HostPattern::parse(h).map_err(|why| PolicyError::InvalidGlob {
                        at: c.loc(s),
                        rule: c.rule.clone(),
                        pattern: h.clone(),
                        why,
                    })?,
                );
            }
            Some(out)
        }
    };
    let port = match &r.port {
        None => None,
        Some(s) => Some(parse_ports(s.get_ref()).map_err(|why| c.invalid(s, "port", why))?),
    };
    let tier = match &r.tier {
        None => None,
        Some(s) => {
            let mut out = Vec::new();
            for t in c.nonempty(s, "tier")? {
                let tier: IsolationTier = t
                    .parse()
                    .map_err(|e| c.invalid(s, "tier", format!("{e}")))?;
                out.push(tier);
            }
            Some(out)
        }
    };
    let network = match &r.network {
        None => None,
        Some(s) => {
            let mut out = Vec::new();
            for n in c.nonempty(s, "network")? {
                out.push(
                    n.parse::<NetAccess>()
                        .map_err(|e| c.invalid(s, "network", e))?,
                );
            }
            Some(out)
        }
    };
    let memory_above = match &r.memory_above {
        None => None,
        Some(s) => Some(
            s.get_ref()
                .parse::<sandboxio_core::ByteSize>()
                .map_err(|e| c.invalid(s, "memory_above", e.to_string()))?,
        ),
    };
    let timeout_above = match &r.timeout_above {
        None => None,
        Some(s) => Some(
            s.get_ref()
                .parse::<sandboxio_core::HumanDuration>()
                .map_err(|e| c.invalid(s, "timeout_above", e.to_string()))?
                .0,
        ),
    };
    let env_names = match &r.env {
        None => None,
        Some(s) => {
            let mut out = Vec::new();
            for n in c.nonempty(s, "env")? {
                crate::rule::glob_size(n).map_err(|why| c.invalid(s, "env", why))?;
                out.push(
                    globset::Glob::new(n)
                        .map_err(|e| c.invalid(s, "env", e.kind().to_string()))?
                        .compile_matcher(),
                );
            }
            Some(out)
        }
    };
    let args = match &r.args {
        None => None,
        Some(s) if s.get_ref().is_empty() => return Err(c.invalid(s, "args", "empty list")),
        Some(s) => Some(
            s.get_ref()
                .iter()
                .map(crate::args::ArgCond::compile)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|why| c.invalid(s, "args", why))?,
        ),
    };
    let cost_above = r.cost_above.as_ref().map(|s| c.money(s)).transpose()?;
    let cost_at_most = r.cost_at_most.as_ref().map(|s| c.money(s)).transpose()?;
    if let (Some(a), Some(m), Some(s)) = (cost_above, cost_at_most, &r.cost_at_most) {
        if a >= m {
            return Err(PolicyError::Suspicious {
                at: c.loc(s),
                rule: c.rule.clone(),
                why: format!(
                    "`cost_above = {a}` and `cost_at_most = {m}` leave no cost that matches"
                ),
            });
        }
    }
    let time =
        match &r.time {
            None => None,
            Some(s) => Some(TimeWindow::parse(s.get_ref()).map_err(|why| {
                PolicyError::InvalidTimeWindow {
                    at: c.loc(s),
                    rule: c.rule.clone(),
                    input: s.get_ref().clone(),
                    why,
                }
            })?),
        };
    let weekdays = match &r.weekdays {
        None => None,
        Some(s) => {
            let mut mask = 0u8;
            for d in c.nonempty(s, "weekdays")? {
                mask |= parse_weekday(d).map_err(|why| PolicyError::InvalidTimeWindow {
                    at: c.loc(s),
                    rule: c.rule.clone(),
                    input: d.clone(),
                    why,
                })?;
            }
            Some(mask)
        }
    };

    let rule = Rule {
        index: 0,
        id: c.rule.clone(),
        effect,
        reason: r.reason.get_ref().trim().to_string(),
        file: at.file.clone(),
        line: at.line,
        kinds,
        tool: c.names(&r.tool, "tool")?,
        tenant: c.names(&r.tenant, "tenant")?,
        agent: c.names(&r.agent, "agent")?,
        argv_exact,
        argv_prefix,
        argv_glob,
        language,
        path,
        path_not,
        in_workspace: r.in_workspace.as_ref().map(|s| *s.get_ref()),
        host,
        port,
        tier,
        network,
        memory_above,
        timeout_above,
        pids_above: r.pids_above.as_ref().map(|s| *s.get_ref()),
        cpu_millis_above: r.cpu_millis_above.as_ref().map(|s| *s.get_ref()),
        env_names,
        mount,
        mount_rw,
        args,
        cost_above,
        cost_at_most,
        time,
        weekdays,
    };

    let unconstrained = r.kind.is_none() && kinds == KindSet::ALL && no_conditions(r);
    if unconstrained {
        if effect == Verdict::Allow {
            return Err(PolicyError::Suspicious {
                at,
                rule: c.rule.clone(),
                why: "it has no conditions and would allow every operation; name the kinds it allows with `kind`".into(),
            });
        }
        warnings.push(PolicyWarning {
            at: at.clone(),
            rule: Some(c.rule.clone()),
            message: format!("has no conditions: it applies `{effect}` to every operation"),
        });
    }

    if examples == Examples::Trusted {
        return Ok(rule);
    }
    for (i, ex) in r.examples.iter().enumerate() {
        if !run_example(&c, &rule, ex, i + 1)? {
            return Err(PolicyError::ExampleNotMatched {
                at: c.loc(ex),
                rule: c.rule.clone(),
                index: i + 1,
            });
        }
    }
    for (i, ex) in r.counterexamples.iter().enumerate() {
        if run_example(&c, &rule, ex, i + 1)? {
            return Err(PolicyError::CounterexampleMatched {
                at: c.loc(ex),
                rule: c.rule.clone(),
                index: i + 1,
            });
        }
    }
    Ok(rule)
}

fn no_conditions(r: &RuleRaw) -> bool {
    r.tool.is_none()
        && r.tenant.is_none()
        && r.agent.is_none()
        && r.tier.is_none()
        && r.network.is_none()
        && r.memory_above.is_none()
        && r.timeout_above.is_none()
        && r.pids_above.is_none()
        && r.cpu_millis_above.is_none()
        && r.env.is_none()
        && r.mount.is_none()
        && r.mount_rw.is_none()
        && r.args.is_none()
        && r.cost_above.is_none()
        && r.cost_at_most.is_none()
        && r.time.is_none()
        && r.weekdays.is_none()
}

fn parse_ports(v: &toml::Value) -> Result<Vec<(u16, u16)>, String> {
    fn one(v: &toml::Value) -> Result<(u16, u16), String> {
        let port = |n: i64| u16::try_from(n).map_err(|_| format!("port `{n}` is not in 0..=65535"));
        match v {
            toml::Value::Integer(n) => {
                let p = port(*n)?;
                Ok((p, p))
            }
            toml::Value::String(s) => {
                let (a, b) = s.split_once('-').unwrap_or((s, s));
                let a: u16 = a
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{s}` is not a port range such as `8000-8100`"))?;
                let b: u16 = b
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{s}` is not a port range such as `8000-8100`"))?;
                if a > b {
                    return Err(format!("port range `{s}` is empty"));
                }
                Ok((a, b))
            }
            _ => Err("expected a port number or a range string such as `8000-8100`".into()),
        }
    }
    match v {
        toml::Value::Array(a) if a.is_empty() => Err("empty port list".into()),
        toml::Value::Array(a) => a.iter().map(one).collect(),
        other => Ok(vec![one(other)?]),
    }
}

/// Parses an example and reports whether `rule` matches it.
fn run_example(
    c: &Ctx<'_>,
    rule: &Rule,
    ex: &Spanned<toml::Value>,
    index: usize,
) -> Result<bool, PolicyError> {
    let bad = |why: String| PolicyError::InvalidExample {
        at: c.loc(ex),
        rule: c.rule.clone(),
        index,
        why,
    };
    let value = ex.get_ref().clone();
    let is_wrapper = matches!(&value, toml::Value::Table(t) if t.contains_key("op"));
    let (op_value, wrapper) = if is_wrapper {
        let w: ExampleWrapper = value
            .try_into()
            .map_err(|e: toml::de::Error| bad(e.message().to_string()))?;
        (w.op.clone(), Some(w))
    } else {
        (value, None)
    };
    let op: Operation = op_value
        .try_into()
        .map_err(|e: toml::de::Error| bad(e.message().to_string()))?;
    op.validate().map_err(|e| bad(e.to_string()))?;
    let default_time: DateTime<Utc> = DateTime::parse_from_rfc3339(EXAMPLE_DEFAULT_TIME)
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_else(|_| Utc.timestamp_opt(0, 0).single().unwrap_or_default());
    let mut ctx = Context::new(default_time);
    if let Some(w) = &wrapper {
        if let Some(at) = &w.at {
            ctx.now = DateTime::parse_from_rfc3339(at)
                .map_err(|_| bad(format!("`at = \"{at}\"` is not an RFC 3339 time")))?
                .with_timezone(&Utc);
        }
        ctx.resolved_path = w.resolved_path.as_deref();
        ctx.workspace_root = w.workspace_root.as_deref();
        if let Some(n) = &w.network {
            ctx.network = n.parse().map_err(bad)?;
        }
        if let Some(t) = &w.tier_default {
            ctx.default_tier = t.parse().map_err(|e| bad(format!("{e}")))?;
        }
    }
    Ok(rule.matches(&Facts::new(&op, &ctx)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::set::{DEFAULT_POLICY, DEFAULT_POLICY_NAME};

    /// The rule tables read from the document in place are what a deserialisation of the
    /// whole document into a `toml::Table` gives (the way they were read before), for every
    /// shipped policy and for values of every TOML kind.
    #[test]
    fn rule_values_read_in_place_match_a_whole_deserialisation() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies");
        let mut texts = vec![DEFAULT_POLICY.to_string()];
        for sub in ["", "/examples"] {
            for e in std::fs::read_dir(format!("{dir}{sub}")).unwrap().flatten() {
                if e.path().extension().is_some_and(|x| x == "toml") {
                    texts.push(std::fs::read_to_string(e.path()).unwrap());
                }
            }
        }
        assert!(texts.len() >= 4, "{}", texts.len());
        texts.push(
            r#"
[settings]
name = "kinds"
[[rule]]
id = "a"
effect = "allow"
kind = ["exec", "run_code"]
argv = [["a", "b"], ["c"]]
when = { after = 1979-05-27T07:32:00Z, n = 3, f = 1.5, on = true, t = { x = "y" } }
[rule.nested]
deep = [1, 2]
[[rule]]
id = "b"
effect = "deny"
kind = "exec"
"#
            .to_string(),
        );
        for text in &texts {
            let doc = toml_edit::ImDocument::parse(text.as_str()).unwrap();
            let mut whole =
                toml::Table::deserialize(toml_edit::de::Deserializer::from(doc.clone())).unwrap();
            let want = match whole.remove("rule") {
                Some(toml::Value::Array(a)) => a,
                _ => Vec::new(),
            };
            assert!(!want.is_empty(), "{text}");
            assert_eq!(rule_values(&doc), want, "{text}");
            let keys = |v: &[toml::Value]| v.iter().map(canonical_key).collect::<Vec<_>>();
            assert_eq!(keys(&rule_values(&doc)), keys(&want));
        }
    }

    #[test]
    fn the_builtin_policy_passes_its_own_examples() {
        // What a load of the built-in text trusts instead of running them.
        assert_eq!(
            Examples::for_source(DEFAULT_POLICY.as_bytes()),
            Examples::Trusted
        );
        let out = compile_source(
            DEFAULT_POLICY_NAME,
            DEFAULT_POLICY.as_bytes(),
            Examples::Check,
        );
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert!(out.rules.len() >= 8);
        assert!(DEFAULT_POLICY.matches("examples = [").count() >= 8);
    }

    #[test]
    fn an_overlong_glob_in_any_matcher_is_refused_at_load_without_a_panic() {
        // 200,000 `?` compile past the regex engine's size limit: `globset` panicked on it
        // (an `argv_glob` took `policy check` down), and a path glob would have panicked
        // at its first use once matchers were built lazily.
        for n in [crate::rule::MAX_GLOB_BYTES + 1, 200_000] {
            let q = "?".repeat(n);
            for (kind, matcher) in [
                ("file_read", format!("path = [\"/{q}\"]")),
                ("exec", format!("mount = [\"/{q}\"]")),
                ("exec", format!("mount_rw = [\"/{q}\"]")),
                ("exec", format!("argv_glob = [\"{q}\"]")),
                ("exec", format!("env = [\"{q}\"]")),
                ("tool_call", format!("tool = [\"{q}\"]")),
                (
                    "tool_call",
                    format!("args = [{{ pointer = \"/p\", glob = \"{q}\" }}]"),
                ),
            ] {
                let text = format!(
                    "[[rule]]\nid = \"long\"\neffect = \"deny\"\nkind = \"{kind}\"\n{matcher}\nreason = \"r\"\n"
                );
                let got =
                    std::panic::catch_unwind(|| crate::PolicySet::from_str("long.toml", &text));
                let Ok(result) = got else {
                    panic!("{n} bytes in `{}` panicked", &matcher[..12]);
                };
                let e = result
                    .err()
                    .unwrap_or_else(|| panic!("{n} bytes in `{}` loaded", &matcher[..12]));
                assert!(e.to_string().contains("4096"), "{e}");
            }
        }
        // At the cap, a glob still loads and decides.
        let q = "?".repeat(crate::rule::MAX_GLOB_BYTES - 1);
        let text = format!(
            "[[rule]]\nid = \"cap\"\neffect = \"deny\"\nkind = \"file_read\"\npath = [\"/{q}\"]\nreason = \"r\"\n"
        );
        assert!(crate::PolicySet::from_str("cap.toml", &text).is_ok());
    }

    #[test]
    fn a_changed_copy_of_the_builtin_policy_runs_its_examples() {
        // One byte of difference and the examples run again: here one no longer holds.
        let broken =
            DEFAULT_POLICY.replacen("path = \"data/input.csv\"", "path = \"../input.csv\"", 1);
        assert_ne!(broken, DEFAULT_POLICY);
        assert_eq!(Examples::for_source(broken.as_bytes()), Examples::Check);
        let e = crate::PolicySet::from_str("copy.toml", &broken).unwrap_err();
        assert!(
            matches!(e, PolicyError::ExampleNotMatched { ref rule, .. } if rule == "files-in-workspace"),
            "{e}"
        );
    }
}
