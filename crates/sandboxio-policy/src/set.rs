//! A loaded set of rules from one or more files, and the evaluator.

use std::path::Path;

use sandboxio_core::{Decision, Layer, Operation, OperationArgs, RuleRef, Verdict};
use serde::Serialize;

use crate::compile::{compile_source, Compiled, Examples, MAX_POLICY_FILE_BYTES};
use crate::context::Context;
use crate::error::{PolicyError, PolicyWarning};
use crate::rule::{kind_index, Facts, PathIndex, Rule};

/// The built-in default policy (`policies/default.toml`).
pub const DEFAULT_POLICY: &str = include_str!("../../../policies/default.toml");
/// The file name the built-in default policy reports in rule references.
pub const DEFAULT_POLICY_NAME: &str = "builtin:default.toml";

/// One policy file's name (used in errors and rule references) and contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySource {
    pub name: String,
    pub bytes: Vec<u8>,
}

impl PolicySource {
    pub fn new(name: impl Into<String>, bytes: impl Into<Vec<u8>>) -> PolicySource {
        PolicySource {
            name: name.into(),
            bytes: bytes.into(),
        }
    }

    /// Reads a file: a regular file (a FIFO, a device or a directory is refused without
    /// blocking), never read past the size cap.
    pub fn read(path: &Path) -> Result<PolicySource, PolicyError> {
        use sandboxio_core::fileread::{read_regular, ReadLimitError};
        let name = path.display().to_string();
        let bytes = read_regular(path, MAX_POLICY_FILE_BYTES).map_err(|e| match e {
            ReadLimitError::Io(source) => PolicyError::Read {
                file: name.clone(),
                source,
            },
            ReadLimitError::TooLarge { limit } => PolicyError::FileTooLarge {
                file: name.clone(),
                limit,
            },
        })?;
        Ok(PolicySource { name, bytes })
    }
}

/// Compiled rules from every file, indexed by operation kind.
///
/// Composition: all rules of all files are evaluated together. Deny beats ask beats allow
/// whatever file a rule comes from and in whatever order files are given, so a later file
/// can add restrictions but can never weaken an earlier `deny` or `ask`.
#[derive(Debug, Clone)]
pub struct PolicySet {
    rules: Vec<Rule>,
    /// Per kind: rule indices, deny rules first, then ask, then allow; file order within.
    index: [Vec<u32>; 9],
    /// Per kind: all path globs of that kind's rules in one index, built at the first
    /// decision of that kind with a path (a process deciding only execs builds none).
    path_index: [std::sync::OnceLock<Option<PathIndex>>; 9],
    files: Vec<String>,
    warnings: Vec<PolicyWarning>,
}

/// The outcome of validating policy files (for `sandboxio policy check`).
#[derive(Debug, Default)]
pub struct CheckReport {
    pub files: Vec<String>,
    /// Rules that compiled (including those of files with errors).
    pub rules: usize,
    pub errors: Vec<PolicyError>,
    pub warnings: Vec<PolicyWarning>,
}

impl CheckReport {
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// A rule that matched, for explanations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatchedRule {
    pub rule: RuleRef,
    pub effect: Verdict,
    pub reason: String,
    /// Whether this rule is one of those that decided.
    pub decided: bool,
}

/// A decision together with every rule that matched (for `sandboxio policy explain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub decision: Decision,
    pub matched: Vec<MatchedRule>,
    /// How many rules apply to the operation's kind and were looked at.
    pub considered: usize,
}

fn compile_all(sources: &[PolicySource]) -> (Vec<Compiled>, Vec<PolicyError>, Vec<PolicyWarning>) {
    let mut rules: Vec<Compiled> = Vec::new();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    if sources.is_empty() {
        errors.push(PolicyError::NoFiles);
    }
    for src in sources {
        let mut out = compile_source(&src.name, &src.bytes, Examples::for_source(&src.bytes));
        errors.append(&mut out.errors);
        warnings.append(&mut out.warnings);
        // Across files: duplicate ids are errors (rule references must be unambiguous);
        // identical conditions with different effects are warnings, because adding a
        // stricter rule in a later file is how files compose.
        let mut kept = Vec::new();
        for c in out.rules {
            if let Some(prev) = rules.iter().find(|p| p.rule.id == c.rule.id) {
                errors.push(PolicyError::DuplicateRuleId {
                    at: c.at.clone(),
                    rule: c.rule.id.clone(),
                    first: prev.at.clone(),
                });
                continue;
            }
            if let Some(prev) = rules
                .iter()
                .find(|p| p.key == c.key && p.rule.effect != c.rule.effect)
            {
                warnings.push(PolicyWarning {
                    at: c.at.clone(),
                    rule: Some(c.rule.id.clone()),
                    message: format!(
                        "same conditions as rule `{}` ({}) with effect `{}`; `{}` wins",
                        prev.rule.id,
                        prev.at,
                        prev.rule.effect,
                        prev.rule.effect.max(c.rule.effect)
                    ),
                });
            }
            kept.push(c);
        }
        rules.extend(kept);
    }
    (rules, errors, warnings)
}

impl PolicySet {
    /// Loads and composes several sources. The first error found is returned; use
    /// [`check`] to see them all.
    pub fn from_sources(sources: &[PolicySource]) -> Result<PolicySet, PolicyError> {
        let (compiled, errors, warnings) = compile_all(sources);
        if let Some(e) = errors.into_iter().next() {
            return Err(e);
        }
        Ok(PolicySet::build(
            compiled.into_iter().map(|c| c.rule).collect(),
            sources.iter().map(|s| s.name.clone()).collect(),
            warnings,
        ))
    }

    /// Loads one policy from text.
    pub fn from_str(name: &str, text: &str) -> Result<PolicySet, PolicyError> {
        PolicySet::from_sources(&[PolicySource::new(name, text.as_bytes())])
    }

    /// Reads and composes policy files, in order.
    pub fn load_files<P: AsRef<Path>>(paths: &[P]) -> Result<PolicySet, PolicyError> {
        let sources = paths
            .iter()
            .map(|p| PolicySource::read(p.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        PolicySet::from_sources(&sources)
    }

    /// The built-in default policy (see `policies/default.toml`).
    pub fn builtin_default() -> Result<PolicySet, PolicyError> {
        PolicySet::from_str(DEFAULT_POLICY_NAME, DEFAULT_POLICY)
    }

    /// A set with no rules: every operation is denied.
    pub fn deny_all() -> PolicySet {
        PolicySet::build(Vec::new(), Vec::new(), Vec::new())
    }

    fn build(mut rules: Vec<Rule>, files: Vec<String>, warnings: Vec<PolicyWarning>) -> PolicySet {
        for (i, r) in rules.iter_mut().enumerate() {
            r.index = i;
        }
        let mut index: [Vec<u32>; 9] = Default::default();
        for (i, r) in rules.iter().enumerate() {
            for k in r.kinds.kinds() {
                if let Ok(i) = u32::try_from(i) {
                    index[kind_index(k)].push(i);
                }
            }
        }
        for list in index.iter_mut() {
            // Stable: file order is kept within one effect.
            list.sort_by_key(|i| {
                std::cmp::Reverse(
                    rules
                        .get(*i as usize)
                        .map(|r| r.effect)
                        .unwrap_or(Verdict::Deny),
                )
            });
        }
        PolicySet {
            rules,
            index,
            path_index: std::array::from_fn(|_| std::sync::OnceLock::new()),
            files,
            warnings,
        }
    }

    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }
    pub fn files(&self) -> &[String] {
        &self.files
    }
    pub fn warnings(&self) -> &[PolicyWarning] {
        &self.warnings
    }
    /// References to every rule, in file order.
    pub fn rules(&self) -> Vec<RuleRef> {
        self.rules.iter().map(Rule::rule_ref).collect()
    }

    fn facts<'a>(&self, op: &'a Operation, ctx: &Context<'_>) -> Facts<'a> {
        let mut facts = Facts::new(op, ctx);
        if facts.paths.is_empty() {
            return facts;
        }
        let k = kind_index(facts.kind);
        let built = self.path_index.get(k).map(|ix| {
            ix.get_or_init(|| {
                PathIndex::build(&self.rules, self.index.get(k).map_or(&[][..], |v| v))
            })
        });
        if let Some(Some(ix)) = built {
            facts.hits = Some(facts.paths.iter().map(|p| ix.hits(p)).collect());
        }
        facts
    }

    /// Decides `op`. Never fails: a malformed operation or any internal problem is a deny.
    pub fn evaluate(&self, op: &Operation, ctx: &Context<'_>) -> Decision {
        if let Err(e) = op.validate() {
            return Decision::deny(Layer::Policy, format!("policy cannot decide: {e}"));
        }
        let facts = self.facts(op, ctx);
        let mut best: Option<Verdict> = None;
        let mut deciding: Vec<&Rule> = Vec::new();
        for &i in &self.index[kind_index(facts.kind)] {
            let Some(rule) = self.rules.get(i as usize) else {
                return Decision::deny(Layer::Policy, "policy index is inconsistent; denying");
            };
            if let Some(b) = best {
                if rule.effect < b {
                    break;
                }
            }
            if rule.matches(&facts) {
                best = Some(rule.effect);
                deciding.push(rule);
            }
        }
        decision_from(best, &deciding, op)
    }

    /// Decides `op` and lists every rule that matched, deciding or not.
    pub fn explain(&self, op: &Operation, ctx: &Context<'_>) -> Explanation {
        let decision = self.evaluate(op, ctx);
        if op.validate().is_err() {
            return Explanation {
                decision,
                matched: Vec::new(),
                considered: 0,
            };
        }
        let facts = self.facts(op, ctx);
        let list = &self.index[kind_index(facts.kind)];
        let mut matched: Vec<(usize, MatchedRule)> = list
            .iter()
            .filter_map(|&i| self.rules.get(i as usize).map(|r| (i as usize, r)))
            .filter(|(_, r)| r.matches(&facts))
            .map(|(i, r)| {
                (
                    i,
                    MatchedRule {
                        rule: r.rule_ref(),
                        effect: r.effect,
                        reason: r.reason.clone(),
                        decided: decision.rules.iter().any(|d| d.id == r.id),
                    },
                )
            })
            .collect();
        matched.sort_by_key(|(i, _)| *i);
        Explanation {
            decision,
            matched: matched.into_iter().map(|(_, m)| m).collect(),
            considered: list.len(),
        }
    }
}

fn decision_from(best: Option<Verdict>, deciding: &[&Rule], op: &Operation) -> Decision {
    let Some(verdict) = best else {
        return Decision::deny(
            Layer::Policy,
            format!("no policy rule allows {}", describe(op)),
        );
    };
    let mut reasons: Vec<&str> = Vec::new();
    for r in deciding {
        if !reasons.contains(&r.reason.as_str()) {
            reasons.push(&r.reason);
        }
    }
    Decision {
        verdict,
        layer: Layer::Policy,
        rules: deciding.iter().map(|r| r.rule_ref()).collect(),
        reason: reasons.join("; "),
        retry_after_ms: None,
    }
}

/// A short description of an operation for a reason text (no code, no full argv).
fn describe(op: &Operation) -> String {
    let kind = op.kind();
    match &op.args {
        OperationArgs::Exec { argv } => format!(
            "`{kind}` of `{}`",
            argv.first().map(String::as_str).unwrap_or("")
        ),
        OperationArgs::RunCode { language, .. } => format!(
            "`{kind}` ({}) in tier `{}`",
            language.as_str(),
            op.tier.map(|t| t.as_str()).unwrap_or("default")
        ),
        OperationArgs::FileRead { path }
        | OperationArgs::FileWrite { path, .. }
        | OperationArgs::FileDelete { path } => {
            format!("`{kind}` of `{}`", crate::path::normalize(path).as_str())
        }
        OperationArgs::NetConnect { host, port } => format!("`{kind}` to `{host}:{port}`"),
        OperationArgs::ToolCall { tool, .. } => format!("`{kind}` of tool `{tool}`"),
        OperationArgs::Browse { url, .. } => {
            let shown: String = url.chars().take(120).collect();
            format!("`{kind}` of `{shown}`")
        }
        OperationArgs::Admin { action } => format!("`{kind}` action `{}`", action.name()),
    }
}

/// Validates policy sources and reports every error and warning found.
pub fn check(sources: &[PolicySource]) -> CheckReport {
    let (compiled, errors, warnings) = compile_all(sources);
    CheckReport {
        files: sources.iter().map(|s| s.name.clone()).collect(),
        rules: compiled.len(),
        errors,
        warnings,
    }
}

/// Reads the files and validates them; unreadable files are reported as errors.
pub fn check_files<P: AsRef<Path>>(paths: &[P]) -> CheckReport {
    let mut sources = Vec::new();
    let mut read_errors = Vec::new();
    for p in paths {
        match PolicySource::read(p.as_ref()) {
            Ok(s) => sources.push(s),
            Err(e) => read_errors.push(e),
        }
    }
    let mut report = if sources.is_empty() && !read_errors.is_empty() {
        CheckReport::default()
    } else {
        check(&sources)
    };
    report.files = paths
        .iter()
        .map(|p| p.as_ref().display().to_string())
        .collect();
    read_errors.append(&mut report.errors);
    report.errors = read_errors;
    report
}

/// Evaluates `op` under `set`. Never fails open.
pub fn evaluate(set: &PolicySet, op: &Operation, ctx: &Context<'_>) -> Decision {
    set.evaluate(op, ctx)
}

/// Decides and lists every matching rule.
pub fn explain(set: &PolicySet, op: &Operation, ctx: &Context<'_>) -> Explanation {
    set.explain(op, ctx)
}
