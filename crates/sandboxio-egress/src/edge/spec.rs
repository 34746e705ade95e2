//! `[[secrets]]` compiled: each entry's name, its one source and its bound hosts, checked
//! once when the configuration is loaded; values are read by [`SecretSpec::load`].

use std::collections::BTreeSet;
use std::path::PathBuf;

use sandboxio_config::SecretSection;

use crate::error::EgressError;
use crate::rules::HostGlob;
use crate::secrets::{validate_hosts, validate_name, SecretStore, SecretValue};

/// Where a secret's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A variable of the supervisor's environment.
    Env(String),
    /// A file (one trailing newline is not part of the value).
    File(PathBuf),
    /// The sealed store (`sandboxio secrets set NAME`).
    Stored,
}

/// One `[[secrets]]` entry, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSpec {
    pub name: String,
    pub source: Source,
    /// Host globs; empty only for a stored secret (then the hosts it was sealed with).
    pub hosts: Vec<String>,
}

/// A secret with its value, ready for the edge.
#[derive(Debug)]
pub struct LoadedSecret {
    pub name: String,
    pub value: SecretValue,
    pub hosts: Vec<HostGlob>,
}

impl SecretSpec {
    /// Checks every entry: a valid name, used once; exactly one source; bound hosts
    /// (named, not `*`).
    pub fn from_sections(sections: &[SecretSection]) -> Result<Vec<SecretSpec>, EgressError> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(sections.len());
        for (i, s) in sections.iter().enumerate() {
            let bad = |why: String| EgressError::InvalidSecret { index: i + 1, why };
            validate_name(&s.name).map_err(|e| bad(e.to_string()))?;
            if !seen.insert(s.name.clone()) {
                return Err(bad(format!("the name `{}` is used twice", s.name)));
            }
            let source =
                match (&s.env, &s.file, s.stored) {
                    (Some(v), None, false) => {
                        validate_name(v).map_err(|_| {
                            bad(format!(
                                "`env = \"{v}\"` is not an environment variable name"
                            ))
                        })?;
                        Source::Env(v.clone())
                    }
                    (None, Some(f), false) => {
                        if !f.is_absolute() {
                            return Err(bad(format!(
                                "`file = \"{}\"` must be an absolute path",
                                f.display()
                            )));
                        }
                        Source::File(f.clone())
                    }
                    (None, None, true) => Source::Stored,
                    (None, None, false) => {
                        return Err(bad(
                            "no source: set one of `env`, `file` or `stored = true`".into(),
                        ))
                    }
                    _ => return Err(bad(
                        "more than one source: set only one of `env`, `file` or `stored = true`"
                            .into(),
                    )),
                };
            if !(source == Source::Stored && s.hosts.is_empty()) {
                validate_hosts(&s.hosts).map_err(|e| bad(e.to_string()))?;
            }
            out.push(SecretSpec {
                name: s.name.clone(),
                source,
                hosts: s.hosts.clone(),
            });
        }
        Ok(out)
    }

    /// Reads the value. `env` looks up the supervisor's environment; `store` is the sealed
    /// store, for `stored` secrets. A stored secret's configured hosts may only narrow the
    /// hosts it was sealed with.
    pub fn load(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        store: Option<&SecretStore>,
    ) -> Result<LoadedSecret, EgressError> {
        let unavailable = |why: String| EgressError::SecretUnavailable {
            name: self.name.clone(),
            why,
        };
        let (value, hosts) = match &self.source {
            Source::Env(var) => {
                let v = env(var)
                    .ok_or_else(|| unavailable(format!("the variable `{var}` is not set")))?;
                let v = SecretValue::new(v.into_bytes())
                    .map_err(|e| unavailable(format!("the variable `{var}`: {e}")))?;
                (v, self.hosts.clone())
            }
            Source::File(p) => {
                let bytes = std::fs::read(p).map_err(|e| {
                    unavailable(format!("cannot read `{}`: {}", p.display(), e.kind()))
                })?;
                let v = SecretValue::from_input(bytes)
                    .map_err(|e| unavailable(format!("the file `{}`: {e}", p.display())))?;
                (v, self.hosts.clone())
            }
            Source::Stored => {
                let store = store.ok_or_else(|| unavailable("no secret store".into()))?;
                let (v, sealed) = store
                    .reveal(&self.name)
                    .map_err(|e| unavailable(format!("{e}")))?;
                if let Some(h) = self.hosts.iter().find(|h| !sealed.contains(h)) {
                    return Err(unavailable(format!(
                        "`{h}` is not among the hosts it was sealed with; `hosts` may only narrow them"
                    )));
                }
                let hosts = if self.hosts.is_empty() {
                    sealed
                } else {
                    self.hosts.clone()
                };
                (v, hosts)
            }
        };
        let hosts = hosts
            .iter()
            .map(|h| HostGlob::parse(h).map_err(|e| unavailable(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        if hosts.is_empty() || hosts.contains(&HostGlob::Any) {
            return Err(unavailable("it is bound to no particular host".into()));
        }
        Ok(LoadedSecret {
            name: self.name.clone(),
            value,
            hosts,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use sandboxio_core::ErrorCode;

    fn section(name: &str, env: Option<&str>, file: Option<&str>, stored: bool) -> SecretSection {
        SecretSection {
            name: name.into(),
            env: env.map(Into::into),
            file: file.map(Into::into),
            stored,
            hosts: vec!["api.example.com".into()],
        }
    }

    #[test]
    fn bad_entries_are_refused_with_a_code() {
        let ok = section("TOKEN", Some("TOKEN"), None, false);
        assert_eq!(
            SecretSpec::from_sections(std::slice::from_ref(&ok))
                .unwrap()
                .len(),
            1
        );
        let cases = [
            (section("1BAD", Some("X"), None, false), "secret name"),
            (section("T", None, None, false), "no source"),
            (
                section("T", Some("X"), Some("/f"), false),
                "more than one source",
            ),
            (section("T", Some("X"), None, true), "more than one source"),
            (
                section("T", Some("A-B"), None, false),
                "not an environment variable",
            ),
            (section("T", None, Some("rel/path"), false), "absolute"),
            (
                SecretSection {
                    hosts: vec!["*".into()],
                    ..ok.clone()
                },
                "not bound",
            ),
            (
                SecretSection {
                    hosts: vec![],
                    ..ok.clone()
                },
                "at least one bound host",
            ),
        ];
        for (s, why) in cases {
            let e = SecretSpec::from_sections(&[s]).unwrap_err();
            assert_eq!(e.code(), "SBX_E2405");
            assert!(e.to_string().contains(why), "{e}");
        }
        let e = SecretSpec::from_sections(&[ok.clone(), ok]).unwrap_err();
        assert!(e.to_string().contains("used twice"), "{e}");
        // A stored secret may leave its hosts to the store.
        let mut stored = section("T", None, None, true);
        stored.hosts.clear();
        SecretSpec::from_sections(&[stored]).unwrap();
    }

    #[test]
    fn values_load_from_env_and_file_and_missing_ones_say_why() {
        let specs = SecretSpec::from_sections(&[section("T", Some("SRC"), None, false)]).unwrap();
        let env = |k: &str| (k == "SRC").then(|| "v-123".to_string());
        let s = specs[0].load(&env, None).unwrap();
        assert_eq!(s.value.expose(), b"v-123");
        assert_eq!(s.hosts, vec![HostGlob::Exact("api.example.com".into())]);
        let e = specs[0].load(&|_: &str| None, None).unwrap_err();
        assert_eq!(e.code(), "SBX_E2408");
        assert!(!e.to_string().contains("v-123"));

        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("v");
        std::fs::write(&f, "from-file\n").unwrap();
        let specs =
            SecretSpec::from_sections(&[section("T", None, Some(f.to_str().unwrap()), false)])
                .unwrap();
        assert_eq!(
            specs[0].load(&env, None).unwrap().value.expose(),
            b"from-file"
        );
        std::fs::remove_file(&f).unwrap();
        assert_eq!(specs[0].load(&env, None).unwrap_err().code(), "SBX_E2408");
    }

    #[test]
    fn stored_values_load_with_their_sealed_hosts_which_config_may_only_narrow() {
        use crate::secrets::KeySource;
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(
            dir.path().join("secrets.json"),
            KeySource::value("K", "ab".repeat(32)),
        );
        let sealed = vec!["api.example.com".to_string(), "*.example.org".to_string()];
        store
            .set(
                "T",
                &sealed,
                &SecretValue::new(b"stored-v".to_vec()).unwrap(),
            )
            .unwrap();
        let mut sec = section("T", None, None, true);
        sec.hosts.clear();
        let specs = SecretSpec::from_sections(&[sec.clone()]).unwrap();
        let s = specs[0].load(&|_: &str| None, Some(&store)).unwrap();
        assert_eq!(s.value.expose(), b"stored-v");
        assert_eq!(s.hosts.len(), 2);
        sec.hosts = vec!["*.example.org".into()];
        let specs = SecretSpec::from_sections(&[sec.clone()]).unwrap();
        let s = specs[0].load(&|_: &str| None, Some(&store)).unwrap();
        assert_eq!(s.hosts, vec![HostGlob::Subdomains("example.org".into())]);
        sec.hosts = vec!["evil.test".into()];
        let specs = SecretSpec::from_sections(&[sec]).unwrap();
        let e = specs[0].load(&|_: &str| None, Some(&store)).unwrap_err();
        assert_eq!(e.code(), "SBX_E2408");
        assert!(e.to_string().contains("only narrow"), "{e}");
        // Not in the store: not available.
        let mut other = section("NOPE", None, None, true);
        other.hosts.clear();
        let specs = SecretSpec::from_sections(&[other]).unwrap();
        assert_eq!(
            specs[0]
                .load(&|_: &str| None, Some(&store))
                .unwrap_err()
                .code(),
            "SBX_E2408"
        );
    }
}
