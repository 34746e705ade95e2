//! The library crates never print and never install a subscriber, provider or exporter:
//! only the binary (`sandboxio-cli`) does. A source scan, so a new `println!` in a library
//! fails here rather than in someone's terminal. Binaries inside library crates
//! (`src/bin/`) may print.

use std::path::{Path, PathBuf};

const FORBIDDEN: &[&str] = &[
    "println!",
    "eprintln!",
    "print!(",
    "eprint!(",
    "dbg!(",
    "tracing_subscriber",
    "set_global_default",
    "set_tracer_provider",
    "set_meter_provider",
    "set_text_map_propagator",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn library_crates_never_print_or_install_telemetry() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for e in std::fs::read_dir(crates).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "sandboxio-cli" || !e.path().join("src").is_dir() {
            continue;
        }
        rust_files(&e.path().join("src"), &mut files);
    }
    assert!(files.len() > 20, "found the library sources: {files:?}");
    let mut hits = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let mut in_tests = false;
        for (n, line) in text.lines().enumerate() {
            // Unit-test modules may print (they run under the test harness only).
            if line.trim_start().starts_with("#[cfg(test)]") {
                in_tests = true;
            }
            let code = line.split("//").next().unwrap_or("");
            if in_tests {
                continue;
            }
            for pat in FORBIDDEN {
                if code.contains(pat) {
                    hits.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "library code prints or installs telemetry:\n{}",
        hits.join("\n")
    );
}
