use super::*;
use proptest::prelude::*;
use sandboxio_core::ErrorCode;

#[test]
fn default_file_parses_to_defaults() {
    let c = Config::parse(DEFAULT_TOML, "default.toml").unwrap();
    assert_eq!(c, Config::default());
}

#[test]
fn empty_file_is_safe_defaults() {
    let c = Config::parse("", "x").unwrap();
    assert_eq!(c.network.mode, NetworkModeName::None);
    assert_eq!(c.sandbox.tier, sandboxio_core::IsolationTier::Namespace);
    assert_eq!(c.limits.memory.bytes(), 512 << 20);
}

#[test]
fn unknown_key_names_key_and_line() {
    let e = Config::parse("[limits]\ntimeout = \"5s\"\nmemroy = \"1GiB\"\n", "c.toml").unwrap_err();
    assert_eq!(e.code(), "SBX_E1102");
    let msg = e.to_string();
    assert!(msg.contains("memroy"), "{msg}");
    assert!(msg.starts_with("c.toml:3:"), "{msg}");
}

#[test]
fn bad_size_names_key_and_line() {
    let e = Config::parse("[limits]\n\nmemory = \"12 parsecs\"\n", "c.toml").unwrap_err();
    assert_eq!(e.code(), "SBX_E1103");
    let msg = e.to_string();
    assert!(
        msg.contains("c.toml:3:") && msg.contains("`memory`"),
        "{msg}"
    );
}

#[test]
fn syntax_error_has_its_own_code() {
    let e = Config::parse("[limits\nx=", "c.toml").unwrap_err();
    assert_eq!(e.code(), "SBX_E1101");
}

#[test]
fn approval_timeout_defaults_to_five_minutes_and_is_read() {
    assert_eq!(
        Config::default().approvals.timeout.0,
        std::time::Duration::from_secs(300)
    );
    let c = Config::parse("[approvals]\ntimeout = \"90s\"\n", "c.toml").unwrap();
    assert_eq!(c.approvals.timeout.0, std::time::Duration::from_secs(90));
}

#[test]
fn approval_timeout_out_of_bounds_names_key_and_line() {
    for bad in ["\"0s\"", "\"2d\"", "\"soon\""] {
        let text = format!("[approvals]\n\ntimeout = {bad}\n");
        let e = Config::parse(&text, "c.toml").unwrap_err();
        assert_eq!(e.code(), "SBX_E1103", "{bad}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("c.toml:3:") && msg.contains("`timeout`"),
            "{bad}: {msg}"
        );
    }
    let e = Config::parse("[approvals]\ntimout = \"5s\"\n", "c.toml").unwrap_err();
    assert_eq!(e.code(), "SBX_E1102");
}

#[test]
fn unknown_tier_is_rejected() {
    let e = Config::parse("[sandbox]\ntier = \"docker\"\n", "c.toml").unwrap_err();
    assert_eq!(e.code(), "SBX_E1103");
}

#[test]
fn init_refuses_to_overwrite_and_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("sbx-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("sandboxio.toml");
    std::fs::write(&p, "# mine\n").unwrap();
    let e = write_default(&p).unwrap_err();
    assert_eq!(e.code(), "SBX_E1108");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "# mine\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn non_utf8_file_is_rejected() {
    let dir = std::env::temp_dir().join(format!("sbx-cfg8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.toml");
    std::fs::write(&p, b"[limits]\nmemory = \"\xff\xfe\"\n").unwrap();
    assert_eq!(Config::load(&p).unwrap_err().code(), "SBX_E1107");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_endless_or_blocking_file_is_refused_quickly() {
    // `/dev/zero` says it is 0 bytes long and never ends; a FIFO with no writer blocks
    // an ordinary open for ever. Neither is read.
    let e = Config::load(std::path::Path::new("/dev/zero")).unwrap_err();
    assert_eq!(e.code(), "SBX_E1104");
    let dir = std::env::temp_dir().join(format!("sbx-cfgfifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo.toml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let e = Config::load(&fifo).unwrap_err();
    assert_eq!(e.code(), "SBX_E1104");
    let why = std::error::Error::source(&e).unwrap().to_string();
    assert!(why.contains("FIFO"), "{why}");
    // Over the limit: refused without reading it all (a sparse file of 2 MiB).
    let big = dir.join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    assert_eq!(Config::load(&big).unwrap_err().code(), "SBX_E1106");
    std::fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn parser_never_panics_on_arbitrary_text(s in "\\PC{0,200}") {
        let _ = Config::parse(&s, "fuzz");
    }

    #[test]
    fn parser_never_panics_on_mutated_default(pos in 0usize..2000, byte in any::<u8>()) {
        let mut b = DEFAULT_TOML.as_bytes().to_vec();
        let i = pos % b.len();
        b[i] = byte;
        if let Ok(s) = String::from_utf8(b) {
            let _ = Config::parse(&s, "fuzz");
        }
    }
}

#[test]
fn state_url_is_typed_and_a_malformed_one_is_refused_with_its_line() {
    let c = Config::parse(
        "[state]\nurl = \"postgres://sbx:pw@db/sandboxio\"\npool = 4\nlease = \"3s\"\n",
        "c.toml",
    )
    .unwrap();
    let url = c.state.url.as_ref().unwrap();
    assert_eq!(url.redacted(), "postgres://sbx:***@db/sandboxio");
    assert_eq!(c.state.pool.unwrap().get(), 4);
    assert!(
        !format!("{c:?}").contains(":pw@"),
        "Debug shows no password"
    );
    for (text, why) in [
        ("[state]\n\nurl = \"mysql://db/x\"\n", "scheme `mysql`"),
        ("[state]\n\nurl = \"postgres:///x\"\n", "names no host"),
        ("[state]\n\npool = 0\n", "out of range"),
    ] {
        let e = Config::parse(text, "c.toml").unwrap_err();
        assert_eq!(e.code(), "SBX_E1103", "{text}");
        let msg = e.to_string();
        assert!(msg.starts_with("c.toml:3:") && msg.contains(why), "{msg}");
    }
}

#[test]
fn server_starts_parse_and_a_bad_hold_names_its_line() {
    let c = Config::parse(
        "[server]\nmax_starting = 8\nstart_hold = \"50ms\"\n",
        "c.toml",
    )
    .unwrap();
    assert_eq!(c.server.max_starting, Some(8));
    assert_eq!(
        c.server.start_hold.map(|d| d.as_duration()),
        Some(std::time::Duration::from_millis(50))
    );
    let e = Config::parse("[server]\nstart_hold = \"soon\"\n", "c.toml").unwrap_err();
    assert!(e.code().starts_with("SBX_E11"), "{}", e.code());
    assert!(e.to_string().starts_with("c.toml:2:"), "{e}");
}
