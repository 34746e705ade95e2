//! From a `browse` operation to the sandbox request that runs: pure, apart from looking up
//! which Chromium binary the host has.

use std::path::Path;
use std::time::Duration;

use sandboxio_core::{ByteSize, ExecRequest, IsolationTier, Limits, NetworkMode};

use super::{BROWSE_NETWORK, BROWSE_NO_BROWSER, BROWSE_REQUEST, BROWSE_TIER};

/// Chromium binaries, in order of preference. Only paths under `/usr` (bound read-only
/// into every sandbox) can run inside it; `/usr/bin/chromium` on Debian is a shell
/// wrapper that reads `/etc/chromium.d`, which the sandbox's root does not have.
pub const CHROMIUM_CANDIDATES: &[&str] = &[
    "/usr/lib/chromium/chromium",
    "/usr/lib/chromium-browser/chromium-browser",
    "/usr/lib64/chromium-browser/chromium-browser",
];

/// Where the browser keeps everything it writes: inside the sandbox's private `/tmp`
/// (a tmpfs destroyed with the sandbox).
pub const BROWSER_HOME: &str = "/tmp/sandboxio-browse";
/// The screenshot's path inside the sandbox (its output directory).
pub const SCREENSHOT_INSIDE: &str = "/output/screenshot.png";
/// The screenshot's file name in the output directory.
pub const SCREENSHOT_FILE: &str = "screenshot.png";
/// The browser's window (and screenshot) size.
pub const WINDOW: (u32, u32) = (1280, 800);

/// Limits a browse takes where the request leaves them unset, before `[limits]`: a
/// browser needs more memory, processes, files and `/tmp` (which also backs `/dev/shm`)
/// than a script, and a DOM is larger than most output. `[limits.max]` still applies: a
/// ceiling below one of these denies the browse (`SBX_E1517`) unless the request asks for
/// less.
pub const DEFAULT_LIMITS: Limits = Limits {
    timeout: Duration::from_secs(60),
    memory: ByteSize::mib(1024),
    cpu_seconds: 120,
    cpu_quota_millis: 0,
    pids: 512,
    file_size: ByteSize(0),
    open_files: 1024,
    stdout_cap: ByteSize::mib(8),
    stderr_cap: ByteSize::mib(1),
    tmp_size: ByteSize::mib(256),
    output_size: ByteSize::mib(64),
};

/// Chromium's flags, each with why. The URL comes last, after `--`.
const FLAGS: &[(&str, &str)] = &[
    ("--headless", "no display"),
    (
        "--no-sandbox",
        "Chromium's own sandbox needs namespaces or a setuid helper that our sandbox (seccomp, no capabilities, no_new_privs) refuses; our namespace tier is the boundary around the whole browser",
    ),
    ("--disable-gpu", "no GPU in a sandbox"),
    ("--no-first-run", "no first-run work"),
    ("--no-default-browser-check", "nothing to check"),
    (
        "--disable-background-networking",
        "no connections the page did not cause (updates, safe browsing lists, metrics)",
    ),
    ("--disable-component-update", "no component downloads"),
    ("--disable-sync", "no account sync"),
    ("--disable-default-apps", "no bundled apps"),
    ("--disable-extensions", "no extensions"),
    ("--disable-breakpad", "no crash reporter"),
    ("--disable-domain-reliability", "no reliability beacons"),
    ("--no-pings", "no hyperlink auditing pings"),
    ("--mute-audio", "no audio device"),
    ("--hide-scrollbars", "clean screenshots"),
    (
        "--proxy-bypass-list=<-loopback>",
        "loopback too goes through the proxy (Chromium bypasses it by default), so the SSRF guard sees it",
    ),
    (
        "--disable-features=NetworkTimeServiceQuerying",
        "no clock queries to the vendor (the browser's update and sign-in probes remain: denied and recorded like any unlisted host)",
    ),
    ("--dump-dom", "the page's DOM on standard output, after load"),
];

/// Whether `tier` may run a browse: the namespace tier only (a browser runs hostile
/// pages; the process tier is not a boundary, the landlock tier has no network).
pub fn check_tier(tier: IsolationTier) -> Result<(), (&'static str, String)> {
    if tier == IsolationTier::Namespace {
        return Ok(());
    }
    Err((
        BROWSE_TIER,
        format!(
            "a browse runs only in the namespace tier (asked: `{tier}`): the browser loads hostile pages and only that tier is a boundary around it"
        ),
    ))
}

/// The first Chromium binary of [`CHROMIUM_CANDIDATES`] that exists, per `exists`.
pub fn find_chromium(
    exists: impl Fn(&Path) -> bool,
) -> Result<&'static str, (&'static str, String)> {
    CHROMIUM_CANDIDATES
        .iter()
        .copied()
        .find(|p| exists(Path::new(p)))
        .ok_or_else(|| {
            (
                BROWSE_NO_BROWSER,
                format!(
                    "no Chromium found at {} (Debian: `apt-get install chromium`)",
                    CHROMIUM_CANDIDATES.join(", ")
                ),
            )
        })
}

/// What a caller's sandbox request may carry into a browse: its limits and its network.
/// Anything else (a program, files, input, mounts, a terminal) is refused, never ignored.
pub fn check_caller_request(req: &ExecRequest) -> Result<(), (&'static str, String)> {
    let mut extra = Vec::new();
    if !req.argv.is_empty() {
        extra.push("argv");
    }
    if !req.env.is_empty() {
        extra.push("env");
    }
    if req.stdin.is_some() || req.stdin_stream {
        extra.push("stdin");
    }
    if req.tty {
        extra.push("tty");
    }
    if !req.files.is_empty() {
        extra.push("files");
    }
    if req.input_dir.is_some() {
        extra.push("input_dir");
    }
    if req.output_dir.is_some() {
        extra.push("output_dir");
    }
    if !req.mounts.is_empty() {
        extra.push("mounts");
    }
    if req.workdir.is_some() {
        extra.push("workdir");
    }
    if req.allow_exec_in_writable {
        extra.push("allow_exec_in_writable");
    }
    if extra.is_empty() {
        return Ok(());
    }
    Err((
        BROWSE_REQUEST,
        format!(
            "a browse takes only limits and network from its sandbox request, not {}",
            extra
                .iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// The network a browse runs with: the request's own, never `none` (the browser would
/// reach nothing; it is never given another way out).
pub fn check_network(net: &NetworkMode) -> Result<(), (&'static str, String)> {
    match net {
        NetworkMode::None => Err((
            BROWSE_NETWORK,
            "a browse needs network `allowlist` or `full` (`[network] mode`): with `none` the browser could reach nothing".into(),
        )),
        _ => Ok(()),
    }
}

/// Unset limits take [`DEFAULT_LIMITS`] (the configured `[limits]` fill what those leave
/// unset, and `[limits.max]` is checked, when the gateway resolves the request).
pub fn browse_limits(asked: &Limits) -> Limits {
    let d = &DEFAULT_LIMITS;
    fn or<T: PartialEq + Default + Copy>(a: T, d: T) -> T {
        if a == T::default() {
            d
        } else {
            a
        }
    }
    Limits {
        timeout: or(asked.timeout, d.timeout),
        memory: ByteSize(or(asked.memory.0, d.memory.0)),
        cpu_seconds: or(asked.cpu_seconds, d.cpu_seconds),
        cpu_quota_millis: or(asked.cpu_quota_millis, d.cpu_quota_millis),
        pids: or(asked.pids, d.pids),
        file_size: ByteSize(or(asked.file_size.0, d.file_size.0)),
        open_files: or(asked.open_files, d.open_files),
        stdout_cap: ByteSize(or(asked.stdout_cap.0, d.stdout_cap.0)),
        stderr_cap: ByteSize(or(asked.stderr_cap.0, d.stderr_cap.0)),
        tmp_size: ByteSize(or(asked.tmp_size.0, d.tmp_size.0)),
        output_size: ByteSize(or(asked.output_size.0, d.output_size.0)),
    }
}

/// How long the browser waits for the page before it stops loading and dumps what it
/// has: two thirds of the run's timeout, so the answer is written before the sandbox's
/// own deadline kills everything.
pub fn page_timeout(run_timeout: Duration) -> Duration {
    run_timeout.saturating_mul(2) / 3
}

/// The whole sandbox request of a browse (limits already resolved).
pub fn request(
    chromium: &str,
    url: &str,
    screenshot: bool,
    network: NetworkMode,
    limits: Limits,
) -> ExecRequest {
    let mut argv = vec![chromium.to_string()];
    argv.extend(FLAGS.iter().map(|(f, _)| f.to_string()));
    argv.push(format!("--user-data-dir={BROWSER_HOME}/profile"));
    argv.push(format!("--disk-cache-dir={BROWSER_HOME}/cache"));
    argv.push(format!(
        "--proxy-server=http://127.0.0.1:{}",
        sandboxio_sandbox::ns::EGRESS_PORT
    ));
    argv.push(format!("--window-size={},{}", WINDOW.0, WINDOW.1));
    argv.push(format!(
        "--timeout={}",
        page_timeout(limits.timeout).as_millis()
    ));
    if screenshot {
        argv.push(format!("--screenshot={SCREENSHOT_INSIDE}"));
    }
    argv.push("--".into());
    argv.push(url.to_string());
    let mut req = ExecRequest::new(argv);
    req.env_allowlist = vec!["LANG".into(), "TZ".into()];
    for (k, v) in [
        ("HOME", BROWSER_HOME.to_string()),
        ("XDG_CONFIG_HOME", format!("{BROWSER_HOME}/config")),
        ("XDG_CACHE_HOME", format!("{BROWSER_HOME}/cache")),
    ] {
        req.env.insert(k.into(), v);
    }
    req.network = network;
    req.limits = limits;
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_namespace_tier_may_browse() {
        assert!(check_tier(IsolationTier::Namespace).is_ok());
        for t in [IsolationTier::Process, IsolationTier::Landlock] {
            assert_eq!(check_tier(t).unwrap_err().0, BROWSE_TIER);
        }
    }

    #[test]
    fn network_none_is_refused() {
        assert_eq!(
            check_network(&NetworkMode::None).unwrap_err().0,
            BROWSE_NETWORK
        );
        assert!(check_network(&NetworkMode::Full).is_ok());
    }

    #[test]
    fn a_caller_request_with_a_program_or_files_is_refused() {
        let mut r = ExecRequest::new(Vec::<String>::new());
        assert!(check_caller_request(&r).is_ok());
        r.limits.memory = ByteSize::mib(2048);
        r.network = NetworkMode::Full;
        assert!(check_caller_request(&r).is_ok());
        r.argv = vec!["sh".into()];
        r.files.insert("x".into(), b"y".to_vec());
        let (code, why) = check_caller_request(&r).unwrap_err();
        assert_eq!(code, BROWSE_REQUEST);
        assert!(why.contains("`argv`") && why.contains("`files`"), "{why}");
    }

    #[test]
    fn no_browser_names_where_it_looked() {
        let (code, why) = find_chromium(|_| false).unwrap_err();
        assert_eq!(code, BROWSE_NO_BROWSER);
        assert!(why.contains("/usr/lib/chromium/chromium"));
        assert_eq!(
            find_chromium(|p| p.ends_with("chromium-browser")).unwrap(),
            "/usr/lib/chromium-browser/chromium-browser"
        );
    }

    #[test]
    fn the_callers_limits_win_over_the_browse_defaults() {
        let mut asked = Limits::UNSET;
        asked.memory = ByteSize::mib(700);
        let l = browse_limits(&asked);
        assert_eq!(l.memory, ByteSize::mib(700));
        assert_eq!(l.pids, DEFAULT_LIMITS.pids);
        assert_eq!(l.timeout, DEFAULT_LIMITS.timeout);
    }

    #[test]
    fn the_url_is_last_after_the_end_of_flags_and_everything_stays_in_tmp() {
        let r = request(
            "/usr/lib/chromium/chromium",
            "http://site.test/",
            true,
            NetworkMode::Full,
            DEFAULT_LIMITS,
        );
        let n = r.argv.len();
        assert_eq!(&r.argv[n - 2..], ["--", "http://site.test/"]);
        assert!(r
            .argv
            .contains(&"--proxy-server=http://127.0.0.1:3128".to_string()));
        assert!(r
            .argv
            .contains(&"--screenshot=/output/screenshot.png".to_string()));
        assert!(r.argv.contains(&"--timeout=40000".to_string()));
        for a in r.argv.iter().filter(|a| a.contains("-dir=")) {
            assert!(a.contains("=/tmp/"), "{a}");
        }
        assert!(r.env.values().all(|v| v.starts_with("/tmp/")));
        assert!(!r.keep_workspace);
        let no_shot = request(
            "c",
            "http://x.test/",
            false,
            NetworkMode::Full,
            DEFAULT_LIMITS,
        );
        assert!(!no_shot.argv.iter().any(|a| a.starts_with("--screenshot")));
    }
}
