//! Property tests: deny monotonicity, order independence, agreement with a reference
//! evaluator, and parsers that never panic.

use proptest::prelude::*;
use sandboxio_core::{
    Language, Money, Operation, OperationArgs, OperationKind, Principal, Verdict,
};
use sandboxio_policy::path::normalize;
use sandboxio_policy::{check, PolicySet, PolicySource};

use super::common::ctx;

const TOOLS: [&str; 3] = ["search", "exec", "deploy"];
const TENANTS: [&str; 2] = ["acme", "globex"];
const AGENTS: [&str; 2] = ["bot", "intern"];
const PATTERNS: [&str; 4] = ["src/**", "*.txt", "/etc/**", "secret"];
const PATHS: [&str; 9] = [
    "src/a.txt",
    "src/../secret",
    "../x.txt",
    "/etc/passwd",
    "a.txt",
    "./src//b",
    "secret",
    "src/x/../../a.txt",
    "/etc/../tmp/x",
];
const FILE_KINDS: [OperationKind; 3] = [
    OperationKind::FileRead,
    OperationKind::FileWrite,
    OperationKind::FileDelete,
];

#[derive(Debug, Clone)]
struct GRule {
    effect: Verdict,
    kinds: Option<Vec<OperationKind>>,
    tool: Option<usize>,
    tenant: Option<usize>,
    agent: Option<usize>,
    path: Option<usize>,
    in_workspace: Option<bool>,
    cost_above: Option<i64>,
}

fn effect() -> impl Strategy<Value = Verdict> {
    prop_oneof![
        Just(Verdict::Allow),
        Just(Verdict::Ask),
        Just(Verdict::Deny)
    ]
}

fn grule() -> impl Strategy<Value = GRule> {
    (
        effect(),
        any::<bool>(),
        proptest::collection::vec(0usize..8, 1..3),
        proptest::option::of(0usize..TOOLS.len()),
        proptest::option::of(0usize..TENANTS.len()),
        proptest::option::of(0usize..AGENTS.len()),
        proptest::option::of(0usize..PATTERNS.len()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(0i64..300),
    )
        .prop_map(
            |(effect, with_kind, ks, tool, tenant, agent, path, in_ws, cost)| {
                let files = path.is_some() || in_ws.is_some();
                let pool: &[OperationKind] = if files {
                    &FILE_KINDS
                } else {
                    &OperationKind::ALL
                };
                let mut kinds: Vec<OperationKind> =
                    ks.iter().map(|i| pool[i % pool.len()]).collect();
                kinds.sort();
                kinds.dedup();
                // Allow rules always name kinds (an unconditioned allow is refused at load).
                let kinds = if with_kind || effect == Verdict::Allow {
                    Some(kinds)
                } else {
                    None
                };
                GRule {
                    effect,
                    kinds,
                    tool,
                    tenant,
                    agent,
                    path,
                    in_workspace: in_ws,
                    cost_above: cost,
                }
            },
        )
}

fn render(id: usize, r: &GRule) -> String {
    let mut s = format!(
        "[[rule]]\nid = \"r{id}\"\neffect = \"{}\"\nreason = \"reason {id}\"\n",
        r.effect
    );
    if let Some(k) = &r.kinds {
        let ks: Vec<String> = k.iter().map(|k| format!("\"{k}\"")).collect();
        s += &format!("kind = [{}]\n", ks.join(", "));
    }
    if let Some(t) = r.tool {
        s += &format!("tool = \"{}\"\n", TOOLS[t]);
    }
    if let Some(t) = r.tenant {
        s += &format!("tenant = \"{}\"\n", TENANTS[t]);
    }
    if let Some(a) = r.agent {
        s += &format!("agent = \"{}\"\n", AGENTS[a]);
    }
    if let Some(p) = r.path {
        s += &format!("path = \"{}\"\n", PATTERNS[p]);
    }
    if let Some(w) = r.in_workspace {
        s += &format!("in_workspace = {w}\n");
    }
    if let Some(c) = r.cost_above {
        s += &format!("cost_above = \"{}\"\n", Money::from_minor(c, 2).unwrap());
    }
    s
}

/// One file per rule, so identical conditions with different effects are allowed
/// (they are warnings across files).
fn load(rules: &[(usize, GRule)]) -> PolicySet {
    let sources: Vec<PolicySource> = rules
        .iter()
        .map(|(id, r)| PolicySource::new(format!("f{id}.toml"), render(*id, r)))
        .collect();
    if sources.is_empty() {
        return PolicySet::deny_all();
    }
    PolicySet::from_sources(&sources).unwrap_or_else(|e| panic!("{e}\n{rules:?}"))
}

#[derive(Debug, Clone)]
struct GOp {
    kind: usize,
    tool: usize,
    tenant: usize,
    agent: Option<usize>,
    path: usize,
    cost: Option<i64>,
}

fn gop() -> impl Strategy<Value = GOp> {
    (
        0usize..8,
        0usize..TOOLS.len(),
        0usize..TENANTS.len(),
        proptest::option::of(0usize..AGENTS.len()),
        0usize..PATHS.len(),
        proptest::option::of(0i64..300),
    )
        .prop_map(|(kind, tool, tenant, agent, path, cost)| GOp {
            kind,
            tool,
            tenant,
            agent,
            path,
            cost,
        })
}

fn build(g: &GOp) -> Operation {
    let path = PATHS[g.path].to_string();
    let args = match OperationKind::ALL[g.kind] {
        OperationKind::Exec => OperationArgs::Exec {
            argv: vec!["x".into()],
        },
        OperationKind::RunCode => OperationArgs::RunCode {
            language: Language::Python,
            code: "1".into(),
        },
        OperationKind::FileRead => OperationArgs::FileRead { path },
        OperationKind::FileWrite => OperationArgs::FileWrite {
            path,
            size: 0,
            content_sha256: None,
        },
        OperationKind::FileDelete => OperationArgs::FileDelete { path },
        OperationKind::NetConnect => OperationArgs::NetConnect {
            host: "h.example".into(),
            port: 1,
        },
        OperationKind::ToolCall => OperationArgs::ToolCall {
            tool: TOOLS[g.tool].into(),
            arguments: serde_json::Value::Null,
        },
        OperationKind::Browse => OperationArgs::Browse {
            url: "https://h.example/".into(),
            screenshot: false,
        },
        OperationKind::Admin => OperationArgs::Admin {
            action: sandboxio_core::AdminAction::Resume,
        },
    };
    let mut op = Operation::new(
        Principal {
            tenant: TENANTS[g.tenant].into(),
            session: None,
            agent: g.agent.map(|a| AGENTS[a].to_string()),
        },
        args,
    );
    op.estimated_cost = g.cost.map(|c| Money::from_minor(c, 2).unwrap());
    op
}

// ---- The reference evaluator: small, slow, obviously correct. ----

fn ref_normalize(p: &str) -> String {
    let abs = p.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for c in p.split('/') {
        if c.is_empty() || c == "." {
            continue;
        }
        if c == ".." {
            if out.last().is_some_and(|l| *l != "..") {
                out.pop();
            } else if !abs {
                out.push("..");
            }
            continue;
        }
        out.push(c);
    }
    if abs {
        format!("/{}", out.join("/"))
    } else if out.is_empty() {
        ".".into()
    } else {
        out.join("/")
    }
}

fn ref_pattern(p: usize, path: &str) -> bool {
    match PATTERNS[p] {
        "src/**" => path.starts_with("src/"),
        "*.txt" => !path.contains('/') && path.ends_with(".txt") && path.len() > 4,
        "/etc/**" => path.starts_with("/etc/"),
        "secret" => path == "secret",
        _ => unreachable!(),
    }
}

fn ref_matches(r: &GRule, g: &GOp) -> bool {
    let strict = r.effect != Verdict::Allow;
    let kind = OperationKind::ALL[g.kind];
    let is_file = FILE_KINDS.contains(&kind);
    if let Some(k) = &r.kinds {
        if !k.contains(&kind) {
            return false;
        }
    }
    // Tool names: tool calls use their tool, other kinds their kind name.
    let tool_name = if kind == OperationKind::ToolCall {
        TOOLS[g.tool]
    } else {
        kind.as_str()
    };
    if r.tool.is_some_and(|t| TOOLS[t] != tool_name) {
        return false;
    }
    if r.tenant.is_some_and(|t| t != g.tenant) {
        return false;
    }
    if let Some(a) = r.agent {
        match g.agent {
            Some(b) if a != b => return false,
            None if !strict => return false,
            _ => {}
        }
    }
    if let Some(c) = r.cost_above {
        match g.cost {
            Some(v) if v <= c => return false,
            None if !strict => return false,
            _ => {}
        }
    }
    if r.path.is_some() || r.in_workspace.is_some() {
        if !is_file {
            return false;
        }
        let n = ref_normalize(PATHS[g.path]);
        if r.path.is_some_and(|p| !ref_pattern(p, &n)) {
            return false;
        }
        let inside = !n.starts_with('/') && !n.starts_with("..");
        if r.in_workspace.is_some_and(|w| w != inside) {
            return false;
        }
    }
    true
}

fn reference(rules: &[(usize, GRule)], g: &GOp) -> (Verdict, Vec<String>) {
    let matched: Vec<&(usize, GRule)> = rules.iter().filter(|(_, r)| ref_matches(r, g)).collect();
    let Some(best) = matched.iter().map(|(_, r)| r.effect).max() else {
        return (Verdict::Deny, Vec::new());
    };
    let mut ids: Vec<String> = matched
        .iter()
        .filter(|(_, r)| r.effect == best)
        .map(|(i, _)| format!("r{i}"))
        .collect();
    ids.sort();
    (best, ids)
}

fn real(set: &PolicySet, g: &GOp) -> (Verdict, Vec<String>) {
    let d = set.evaluate(&build(g), &ctx());
    let mut ids: Vec<String> = d.rules.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    (d.verdict, ids)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn real_evaluator_agrees_with_reference(
        rules in proptest::collection::vec(grule(), 0..12),
        ops in proptest::collection::vec(gop(), 1..20),
    ) {
        let rules: Vec<(usize, GRule)> = rules.into_iter().enumerate().collect();
        let set = load(&rules);
        for g in &ops {
            prop_assert_eq!(real(&set, g), reference(&rules, g), "op {:?}", g);
        }
    }

    #[test]
    fn adding_a_deny_rule_never_produces_allow(
        rules in proptest::collection::vec(grule(), 0..10),
        extra in grule(),
        ops in proptest::collection::vec(gop(), 1..20),
    ) {
        let rules: Vec<(usize, GRule)> = rules.into_iter().enumerate().collect();
        let before = load(&rules);
        let mut more = rules.clone();
        more.push((rules.len(), GRule { effect: Verdict::Deny, ..extra }));
        let after = load(&more);
        for g in &ops {
            let (b, _) = real(&before, g);
            let (a, _) = real(&after, g);
            prop_assert!(a >= b, "deny rule weakened {:?} from {:?} to {:?}", g, b, a);
            prop_assert!(a != Verdict::Allow || b == Verdict::Allow);
        }
    }

    #[test]
    fn rule_order_does_not_matter(
        rules in proptest::collection::vec(grule(), 1..12),
        seed in any::<u64>(),
        ops in proptest::collection::vec(gop(), 1..20),
    ) {
        let rules: Vec<(usize, GRule)> = rules.into_iter().enumerate().collect();
        let mut shuffled = rules.clone();
        // Deterministic Fisher-Yates from the seed.
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let a = load(&rules);
        let b = load(&shuffled);
        for g in &ops {
            prop_assert_eq!(real(&a, g), real(&b, g));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_loader(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = PolicySet::from_sources(&[PolicySource::new("fuzz.toml", bytes.clone())]);
        let _ = check(&[PolicySource::new("fuzz.toml", bytes)]);
    }

    #[test]
    fn toml_shaped_noise_never_panics_the_loader(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("[[rule]]".to_string()),
                Just("[settings]".to_string()),
                "(id|effect|reason|kind|path|host|port|time|cost_above|weekdays|argv_glob|examples) = \"[a-z*\\[\\]/.:0-9-]{0,12}\"",
                "(port|in_workspace|kind|examples|counterexamples) = (\\[|\\{|true|1|-1)[a-z0-9\"=, {}\\]]{0,20}",
            ],
            0..16,
        )
    ) {
        let text = lines.join("\n");
        let _ = PolicySet::from_str("noise.toml", &text);
    }

    #[test]
    fn normalisation_is_idempotent_and_agrees_with_reference(
        parts in proptest::collection::vec(prop_oneof![Just(""), Just("."), Just(".."), Just("a"), Just("b")], 0..10),
        abs in any::<bool>(),
    ) {
        let p = format!("{}{}", if abs { "/" } else { "" }, parts.join("/"));
        let n = normalize(&p);
        prop_assert_eq!(n.as_str(), ref_normalize(&p));
        let again = normalize(n.as_str());
        prop_assert_eq!(again.as_str(), n.as_str());
        prop_assert!(!n.as_str().split('/').any(|c| c == "."  ) || n.as_str() == ".");
    }
}
