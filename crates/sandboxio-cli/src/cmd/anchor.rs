//! One trail against the signed heads a store keeps. The head is found by the trail's
//! path (its `trail_id`, on any node of a shared store), else, for a trail copied to
//! another place, by content (a head whose last record the trail holds with its hash).
//! A trail that holds records and matches no head fails: it was never anchored in this
//! store, or it was cut or replaced. Several heads for one path (the same path on several
//! hosts) pass when the trail holds one of them.

use std::path::{Path, PathBuf};

use sandboxio_gateway::layers::audit::{HeadCheck, SignedHead, VerifyingKey};
use sandboxio_gateway::store::{AnchorBreak, KeptHead, TrailAnchors};
use serde::Serialize;

/// How a trail compares with its anchor in the state store.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Anchor {
    /// The store read (none found: the trail could not be compared).
    pub state_db: Option<String>,
    pub trail: String,
    /// The node (host) whose replica wrote the head, in a shared store.
    pub node: Option<String>,
    /// How the head was found: `path`, or `content` for a trail read from another place.
    pub matched: Option<&'static str>,
    pub head: Option<SignedHead>,
    pub check: Option<HeadCheck>,
    /// Starts that found this trail not holding its head (kept as evidence).
    pub breaks: Vec<AnchorBreak>,
    /// Whether the head's signature verified (`None`: no key given, not checked).
    pub head_signature: Option<bool>,
    pub ok: bool,
    pub why: String,
}

impl Anchor {
    /// The head this anchor was checked against, as (node, trail id).
    pub fn used(&self) -> Option<(Option<String>, String)> {
        self.head
            .as_ref()
            .map(|h| (self.node.clone(), h.trail.clone()))
    }

    fn finish_breaks(mut self) -> Anchor {
        if let Some(b) = self.breaks.last() {
            self.ok = false;
            self.why = format!(
                "{} earlier start(s) found the trail not holding its signed head; the last, at {}: {}",
                self.breaks.len(),
                b.at.format("%Y-%m-%dT%H:%M:%SZ"),
                b.found
            );
        }
        self
    }
}

/// Compares the trail whose active file is `base` (files `paths`, `records` records) with
/// the heads in `store` (its description and what it keeps).
pub(super) fn check(
    base: &Path,
    paths: &[PathBuf],
    records: u64,
    store: Option<(String, &TrailAnchors)>,
    keys: &[VerifyingKey],
    unanchored_why: &str,
) -> Anchor {
    let trail = sandboxio_gateway::layers::audit::trail_id(base);
    let mut a = Anchor {
        state_db: None,
        trail: trail.clone(),
        node: None,
        matched: None,
        head: None,
        check: None,
        breaks: Vec::new(),
        head_signature: None,
        ok: true,
        why: String::new(),
    };
    let Some((db, anchors)) = store else {
        a.why = unanchored_why.into();
        return a;
    };
    a.state_db = Some(db);
    let by_path: Vec<&KeptHead> = anchors
        .heads
        .iter()
        .filter(|k| k.head.trail == trail)
        .collect();
    let (candidates, how) = if by_path.is_empty() {
        let held = anchors
            .heads
            .iter()
            .filter(|k| sandboxio_gateway::layers::audit::check_head(paths, &k.head).ok())
            .collect::<Vec<_>>();
        (held, "content")
    } else {
        (by_path, "path")
    };
    if candidates.is_empty() {
        a.breaks = anchors
            .breaks
            .iter()
            .filter(|b| b.brk.trail == trail)
            .map(|b| b.brk.clone())
            .collect();
        if records == 0 {
            a.why = "the trail holds no records and the store keeps no signed head for it".into();
        } else {
            a.ok = false;
            a.why = "the store keeps no signed head for this trail and none that the trail \
                     holds: it was never anchored in this store, or it was cut or replaced"
                .into();
        }
        return a.finish_breaks();
    }
    let n = candidates.len();
    let mut first_failure: Option<Anchor> = None;
    for k in candidates {
        let c = against(a.clone(), k, how, paths, anchors, keys);
        if c.ok {
            return c;
        }
        first_failure.get_or_insert(c);
    }
    let mut c = first_failure.unwrap_or(a);
    if n > 1 {
        c.why = format!(
            "none of the {n} signed heads kept for this trail's path (one per host) is held by \
             it; the first: {}",
            c.why
        );
    }
    c
}

fn against(
    mut a: Anchor,
    k: &KeptHead,
    how: &'static str,
    paths: &[PathBuf],
    anchors: &TrailAnchors,
    keys: &[VerifyingKey],
) -> Anchor {
    a.node = k.node.clone();
    a.matched = Some(how);
    a.head = Some(k.head.clone());
    a.breaks = anchors
        .breaks
        .iter()
        .filter(|b| b.brk.trail == k.head.trail && b.node == k.node)
        .map(|b| b.brk.clone())
        .collect();
    if !keys.is_empty() {
        let good = k.head.verify_signature(keys);
        a.head_signature = Some(good);
        if !good {
            a.ok = false;
            a.why = "the signed head's signature does not verify under the given keys".into();
            return a;
        }
    }
    let check = sandboxio_gateway::layers::audit::check_head(paths, &k.head);
    a.ok = check.ok();
    a.why = check.describe();
    a.check = Some(check);
    a.finish_breaks()
}
