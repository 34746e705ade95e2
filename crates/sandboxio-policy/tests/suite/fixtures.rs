use sandboxio_core::ErrorCode;
use sandboxio_policy::{check_files, PolicySet, PolicySource, MAX_POLICY_FILE_BYTES};

/// Every file in `tests/fixtures/bad` starts with `# expect: SBX_Ennnn` and must fail to
/// load with exactly that code, with a location when the error is inside the file.
#[test]
fn malformed_policy_corpus_gives_expected_codes() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bad");
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let bytes = std::fs::read(&path).unwrap();
        let first = bytes.split(|b| *b == b'\n').next().unwrap();
        let first = std::str::from_utf8(first).unwrap();
        let want = first
            .strip_prefix("# expect: ")
            .unwrap_or_else(|| panic!("{path:?}"));
        let err = PolicySet::load_files(&[&path]).expect_err(&format!("{path:?} loaded"));
        assert_eq!(err.code(), want, "{path:?}: {err}");
        let msg = err.to_string();
        assert!(!msg.ends_with('.'), "{msg}");
        let loc = err
            .location()
            .unwrap_or_else(|| panic!("{path:?}: no location: {err}"));
        assert!(loc.line >= 1 && loc.column >= 1);
        assert!(msg.starts_with(&path.display().to_string()), "{msg}");
        // `check` reports the same first error.
        let report = check_files(&[&path]);
        assert!(!report.is_ok());
        assert_eq!(report.errors[0].code(), want, "{path:?}");
        n += 1;
    }
    assert!(n >= 25, "only {n} fixtures");
}

#[test]
fn error_positions_point_at_the_offending_value() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bad");
    let cases = [
        ("unknown_key.toml", 7, 1),
        ("bad_glob.toml", 5, 8),
        ("bad_money.toml", 6, 14),
        ("unknown_effect.toml", 4, 10),
        ("duplicate_id.toml", 8, 1),
        ("failing_example.toml", 8, 13),
        ("not_utf8.toml", 3, 10),
    ];
    for (file, line, col) in cases {
        let err = PolicySet::load_files(&[format!("{dir}/{file}")]).unwrap_err();
        let loc = err.location().unwrap();
        assert_eq!((loc.line, loc.column), (line, col), "{file}: {err}");
    }
}

#[test]
fn huge_policy_is_refused_from_memory_and_from_disk() {
    let mut text = String::from("# padding\n");
    while text.len() as u64 <= MAX_POLICY_FILE_BYTES {
        text.push_str(
            "# xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
        );
    }
    let e = PolicySet::from_sources(&[PolicySource::new("big.toml", text.as_bytes())]).unwrap_err();
    assert_eq!(e.code(), "SBX_E1215");
    let path = std::env::temp_dir().join(format!("sbx-policy-huge-{}.toml", std::process::id()));
    std::fs::write(&path, &text).unwrap();
    let e = PolicySet::load_files(&[&path]).unwrap_err();
    std::fs::remove_file(&path).ok();
    assert_eq!(e.code(), "SBX_E1215");
    assert!(
        e.to_string().contains("larger than the 1048576-byte limit"),
        "{e}"
    );
}

#[test]
fn a_device_or_a_fifo_is_refused_without_reading_or_waiting() {
    let e = PolicySet::load_files(&["/dev/zero"]).unwrap_err();
    assert_eq!(e.code(), "SBX_E1217");
    let why = std::error::Error::source(&e).unwrap().to_string();
    assert!(why.contains("character device"), "{why}");
    let fifo = std::env::temp_dir().join(format!("sbx-policy-fifo-{}", std::process::id()));
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // No writer: an ordinary open would wait for ever.
    let e = PolicySet::load_files(&[&fifo]).unwrap_err();
    std::fs::remove_file(&fifo).ok();
    assert_eq!(e.code(), "SBX_E1217");
    let why = std::error::Error::source(&e).unwrap().to_string();
    assert!(why.contains("FIFO"), "{why}");
}

#[test]
fn missing_file_is_a_read_error() {
    let e = PolicySet::load_files(&["/nonexistent/policy.toml"]).unwrap_err();
    assert_eq!(e.code(), "SBX_E1217");
    assert_eq!(
        check_files(&["/nonexistent/policy.toml"]).errors[0].code(),
        "SBX_E1217"
    );
}
