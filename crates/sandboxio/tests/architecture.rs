#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Architecture rules as ordinary tests: the dependency graph between our crates, where
//! `unsafe` may appear, and the error-code table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Internal dependency edges (normal and build deps), from `cargo metadata`.
fn internal_edges() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut edges = BTreeMap::new();
    for p in v["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_string();
        let deps: BTreeSet<String> = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null() || d["kind"] == "build")
            .map(|d| d["name"].as_str().unwrap().to_string())
            .filter(|d| d.starts_with("sandboxio"))
            .collect();
        edges.insert(name, deps);
    }
    edges
}

#[test]
fn crate_layering_holds() {
    let edges = internal_edges();
    // What each crate may depend on (DESIGN.md section 3).
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("sandboxio-core", &[][..]),
        ("sandboxio-policy", &["sandboxio-core"][..]),
        ("sandboxio-budget", &["sandboxio-core"][..]),
        ("sandboxio-audit", &["sandboxio-core"][..]),
        ("sandboxio-sandbox", &["sandboxio-core"][..]),
        ("sandboxio-config", &["sandboxio-core"][..]),
        (
            "sandboxio-egress",
            &["sandboxio-core", "sandboxio-config"][..],
        ),
        (
            "sandboxio-gateway",
            &[
                "sandboxio-core",
                "sandboxio-config",
                "sandboxio-policy",
                "sandboxio-budget",
                "sandboxio-audit",
                "sandboxio-sandbox",
                "sandboxio-egress",
            ][..],
        ),
        // Front ends talk to the gateway (and its re-exports), never to the layers.
        (
            "sandboxio-server",
            &["sandboxio-core", "sandboxio-config", "sandboxio-gateway"][..],
        ),
        (
            "sandboxio-python",
            &["sandboxio-core", "sandboxio-config", "sandboxio-gateway"][..],
        ),
        // The binary hosts every front end (`serve`, `mcp`); what it uses of the layers
        // comes through the gateway (`sandboxio_gateway::layers`).
        (
            "sandboxio-cli",
            &[
                "sandboxio-core",
                "sandboxio-config",
                "sandboxio-gateway",
                "sandboxio-server",
                "sandboxio-mcp",
            ][..],
        ),
        // MCP mounts its HTTP transport in the server (credentials, layers).
        (
            "sandboxio-mcp",
            &[
                "sandboxio-core",
                "sandboxio-config",
                "sandboxio-gateway",
                "sandboxio-server",
            ][..],
        ),
    ]);
    assert!(
        edges.len() >= 9,
        "expected all workspace crates, got {:?}",
        edges.keys()
    );
    for (krate, deps) in &edges {
        if let Some(ok) = allowed.get(krate.as_str()) {
            for d in deps {
                assert!(
                    ok.contains(&d.as_str()),
                    "forbidden dependency edge: {krate} -> {d}"
                );
            }
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn unsafe_lives_only_in_the_sandbox_crate_and_is_documented() {
    let crates = workspace_root().join("crates");
    let mut files = Vec::new();
    rust_files(&crates, &mut files);
    rust_files(&workspace_root().join("python/src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let in_sandbox = f.starts_with(crates.join("sandboxio-sandbox"));
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            // Built from pieces so this file does not match its own search.
            let kw = concat!("un", "safe");
            let uses_the_keyword = [" {", " fn", " impl"]
                .iter()
                .any(|tail| code.contains(&format!("{kw}{tail}")));
            if !uses_the_keyword {
                continue;
            }
            assert!(
                in_sandbox,
                "`unsafe` outside the sandbox crate: {}:{}",
                f.display(),
                i + 1
            );
        }
    }
}

#[test]
fn every_error_code_is_documented_once_and_every_documented_code_exists() {
    let root = workspace_root();
    let table = std::fs::read_to_string(root.join("docs/ERRORS.md")).unwrap();
    let mut documented = BTreeMap::new();
    for line in table.lines() {
        if let Some(code) = line.strip_prefix("| ").and_then(|l| l.split(' ').next()) {
            if code.starts_with("SBX_E")
                && code.len() == 9
                && code[5..].bytes().all(|b| b.is_ascii_digit())
            {
                *documented.entry(code.to_string()).or_insert(0) += 1;
            }
        }
    }
    for (c, n) in &documented {
        assert_eq!(*n, 1, "{c} is listed {n} times in docs/ERRORS.md");
    }
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    // The Python package's native module defines its own range (SBX_E21xx).
    rust_files(&root.join("python/src"), &mut files);
    let mut used = BTreeSet::new();
    for f in &files {
        if f.components().any(|c| c.as_os_str() == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("\"SBX_E") {
            let code = &rest[i + 1..(i + 10).min(rest.len())];
            if code.len() == 9 && code[5..].bytes().all(|b| b.is_ascii_digit()) {
                used.insert(code.to_string());
            }
            rest = &rest[i + 1..];
        }
    }
    let missing: Vec<_> = used
        .iter()
        .filter(|c| !documented.contains_key(*c))
        .collect();
    assert!(
        missing.is_empty(),
        "codes used in source but not in docs/ERRORS.md: {missing:?}"
    );
    let stale: Vec<_> = documented.keys().filter(|c| !used.contains(*c)).collect();
    assert!(
        stale.is_empty(),
        "codes in docs/ERRORS.md that no source defines: {stale:?}"
    );
}
