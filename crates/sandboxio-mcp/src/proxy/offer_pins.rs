//! Pins of the upstreams' prompts, resources and resource templates, like the tools':
//! what an agent reads to decide what a prompt or resource is (its name, title,
//! description, arguments, MIME type or annotations) is pinned at first sight; a later
//! listing that differs is shown as approved (the approved definition, kept in the pin,
//! marked; withheld when none is kept), and getting the prompt, reading or subscribing to
//! the resource (or to any URI a changed template could expand to) is refused
//! (`SBX_E1911`, one record) until a person approves it with `sandboxio mcp trust <pin>`.
//!
//! The pins live in the same `mcp-pins.json` as the tools', under names that cannot be a
//! tool's (tool pins are `<upstream>__<tool>`): `prompt:<upstream>__<prompt>`,
//! `resource:<namespaced URI>`, `template:<namespaced URI template>`.

use rmcp::model::{Prompt, Resource, ResourceTemplate};
use sandboxio_core::fingerprint::sha256_hex;

use super::pins::{Observed, Pins, Seen, Shown, VERSION};
use super::uri;

/// Marks a prompt or resource whose description changed since it was approved.
pub const CHANGED_OFFER_MARK: &str =
    "[sandboxio: changed since it was approved; refused until a person approves it again] ";
/// Marks a prompt or resource first seen after its upstream's first listing of its kind:
/// withheld (none of its text shown) and refused until a person approves it.
pub const NEW_OFFER_MARK: &str =
    "[sandboxio: new since its upstream was first listed; withheld; refused until a person approves it] ";

/// The pin of a namespaced prompt.
pub fn prompt_pin(namespaced: &str) -> String {
    format!("prompt:{namespaced}")
}

/// The pin of a namespaced resource URI.
pub fn resource_pin(namespaced_uri: &str) -> String {
    format!("resource:{namespaced_uri}")
}

/// The pin of a namespaced resource template.
pub fn template_pin(namespaced_template: &str) -> String {
    format!("template:{namespaced_template}")
}

fn digest(v: serde_json::Value) -> String {
    sha256_hex(serde_json::to_string(&v).unwrap_or_default().as_bytes())
}

/// Pins one upstream's listing of one kind (`prefix`, see `Pins::observe_listing`);
/// for each item, whether it is not as approved (changed, or new since the upstream's
/// first listing of that kind).
fn observe(pins: &Pins, prefix: &str, items: Vec<(String, Observed)>) -> Vec<bool> {
    pins.observe_listing(prefix, items)
        .into_iter()
        .map(|(pin, seen)| {
            warn_seen(&pin, &seen);
            pins.is_changed(&pin)
        })
        .collect()
}

fn mark(description: &mut Option<String>, pin: &str, new: bool) {
    let d = description.as_deref().unwrap_or_default();
    let m = if new {
        NEW_OFFER_MARK
    } else {
        CHANGED_OFFER_MARK
    };
    *description = Some(format!("{m}(`sandboxio mcp trust {pin}`) {d}"));
}

/// What the agent is shown of a changed item: the approved definition (marked), or, when
/// none is kept or the item is new, the listed one with its texts withheld (marked).
fn show<T: serde::de::DeserializeOwned>(
    pins: &Pins,
    pin: &str,
    listed: &mut T,
    withhold: impl FnOnce(&mut T),
    description: impl FnOnce(&mut T) -> &mut Option<String>,
) {
    let new = match pins.shown(pin) {
        Shown::AsListed => return,
        Shown::Approved(v) => match serde_json::from_value(v) {
            Ok(approved) => {
                *listed = approved;
                false
            }
            Err(_) => {
                withhold(listed);
                false
            }
        },
        Shown::Withheld => {
            withhold(listed);
            false
        }
        Shown::New => {
            withhold(listed);
            true
        }
    };
    mark(description(listed), pin, new);
}

/// The own URI (or template) of a namespaced one in its normal form (`uri::normalise`),
/// the form reads are decided on; as listed when it has none (ambiguous: such a read is
/// refused anyway).
fn normal_own(wrapped: &str) -> Option<(String, String)> {
    let (up, own) = uri::unwrap(wrapped)?;
    let normal = uri::normalise(&own).unwrap_or(own);
    Some((up.to_string(), normal))
}

/// The pin of a namespaced resource as listed: keyed by the normal form of the
/// upstream's URI, whatever spelling the upstream listed it in.
pub fn listed_resource_pin(wrapped: &str) -> String {
    match normal_own(wrapped) {
        Some((up, normal)) => resource_pin(&uri::wrap(&up, &normal)),
        None => resource_pin(wrapped),
    }
}

/// The pin of a namespaced resource template as listed, keyed by its normal form.
pub fn listed_template_pin(wrapped: &str) -> String {
    match normal_own(wrapped) {
        Some((up, normal)) => template_pin(&uri::wrap_template(&up, &normal)),
        None => template_pin(wrapped),
    }
}

fn item(v: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// Pins `upstream`'s namespaced prompts as listed; a changed one is shown as approved,
/// a new one withheld, both marked.
pub fn prompts(pins: &Pins, upstream: &str, ps: &mut [Prompt]) {
    let items = ps
        .iter()
        .map(|p| {
            let legacy = digest(serde_json::json!({
                "title": p.title,
                "description": p.description,
                "arguments": p.arguments,
            }));
            let o = Observed {
                digest: digest(super::pins::with_extras(
                    serde_json::json!({
                        "v": VERSION,
                        "name": p.name,
                        "title": p.title,
                        "description": p.description,
                        "arguments": p.arguments,
                    }),
                    &p.icons,
                    &p.meta,
                )),
                legacy,
                description: p.description.clone().unwrap_or_default(),
                item: item(p),
            };
            (prompt_pin(&p.name), o)
        })
        .collect();
    let prefix = prompt_pin(&format!("{upstream}{}", super::SEPARATOR));
    for (p, pinned) in ps.iter_mut().zip(observe(pins, &prefix, items)) {
        if pinned {
            let pin = prompt_pin(&p.name);
            show(
                pins,
                &pin,
                p,
                |p| {
                    p.description = None;
                    p.title = None;
                    p.arguments = None;
                    p.icons = None;
                    p.meta = None;
                },
                |p| &mut p.description,
            );
        }
    }
}

/// Pins `upstream`'s namespaced resources as listed (keyed by their normal URIs).
pub fn resources(pins: &Pins, upstream: &str, rs: &mut [Resource]) {
    let items = rs
        .iter()
        .map(|r| {
            let legacy = digest(serde_json::json!({
                "name": r.name,
                "title": r.title,
                "description": r.description,
                "mime_type": r.mime_type,
            }));
            let o = Observed {
                digest: digest(super::pins::with_extras(
                    serde_json::json!({
                        "v": VERSION,
                        "name": r.name,
                        "title": r.title,
                        "description": r.description,
                        "mime_type": r.mime_type,
                        "annotations": r.annotations,
                    }),
                    &r.icons,
                    &r.meta,
                )),
                legacy,
                description: r.description.clone().unwrap_or_default(),
                item: item(r),
            };
            (listed_resource_pin(&r.uri), o)
        })
        .collect();
    let prefix = resource_pin(&format!("{}{upstream}/", uri::SCHEME));
    for (r, pinned) in rs.iter_mut().zip(observe(pins, &prefix, items)) {
        if pinned {
            let pin = listed_resource_pin(&r.uri);
            show(
                pins,
                &pin,
                r,
                |r| {
                    r.description = None;
                    r.title = None;
                    r.icons = None;
                    r.meta = None;
                },
                |r| &mut r.description,
            );
        }
    }
}

/// Pins `upstream`'s namespaced resource templates as listed (keyed by their normal
/// form).
pub fn templates(pins: &Pins, upstream: &str, ts: &mut [ResourceTemplate]) {
    let items = ts
        .iter()
        .map(|t| {
            let legacy = digest(serde_json::json!({
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "mime_type": t.mime_type,
            }));
            let o = Observed {
                digest: digest(super::pins::with_extras(
                    serde_json::json!({
                        "v": VERSION,
                        "name": t.name,
                        "title": t.title,
                        "description": t.description,
                        "mime_type": t.mime_type,
                        "annotations": t.annotations,
                    }),
                    &t.icons,
                    &t.meta,
                )),
                legacy,
                description: t.description.clone().unwrap_or_default(),
                item: item(t),
            };
            (listed_template_pin(&t.uri_template), o)
        })
        .collect();
    let prefix = template_pin(&format!("{}{upstream}/", uri::SCHEME));
    for (t, pinned) in ts.iter_mut().zip(observe(pins, &prefix, items)) {
        if pinned {
            let pin = listed_template_pin(&t.uri_template);
            show(
                pins,
                &pin,
                t,
                |t| {
                    t.description = None;
                    t.title = None;
                    t.icons = None;
                    t.meta = None;
                },
                |t| &mut t.description,
            );
        }
    }
}

/// The pin that refuses a read or subscription of `upstream`'s resource, given the
/// upstream's own URI in each spelling the proxy considered (as decoded, normalised): a
/// changed pin of that resource (keyed by the canonical namespaced URI), or a changed
/// pin of a template the URI could be an expansion of. `None` when nothing changed.
pub fn changed_for_uri(pins: &Pins, upstream: &str, owns: &[&str]) -> Option<String> {
    for own in owns {
        let pin = resource_pin(&uri::wrap(upstream, own));
        if pins.is_changed(&pin) {
            return Some(pin);
        }
    }
    let prefix = template_pin(&format!("{}{upstream}/", uri::SCHEME));
    for (pin, p) in pins.list() {
        if !pin.starts_with(&prefix) || !p.changed() {
            continue;
        }
        let Some((_, own_template)) = uri::unwrap(&pin["template:".len()..]) else {
            continue;
        };
        if owns
            .iter()
            .any(|own| uri::template_matches(&own_template, own))
        {
            return Some(pin);
        }
    }
    None
}

/// Warns of a pin that is refused after a listing: changed since approved, or new since
/// its upstream was first listed.
pub(super) fn warn_seen(pin: &str, seen: &Seen) {
    match seen {
        Seen::Changed => tracing::warn!(
            pin = %pin,
            code = "SBX_E1911",
            "`{pin}` changed since it was approved; it is refused until `sandboxio mcp trust {pin}`"
        ),
        Seen::Unapproved => tracing::warn!(
            pin = %pin,
            code = "SBX_E1911",
            "`{pin}` is new since its upstream was first listed; it is refused until `sandboxio mcp trust {pin}`"
        ),
        Seen::New | Seen::Same => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_changed_prompt_is_marked_and_stays_changed_until_approved() {
        let pins = Pins::in_memory();
        let mut p = Prompt::new("files__greet", Some("Greets someone."), None);
        prompts(&pins, "files", std::slice::from_mut(&mut p));
        assert_eq!(p.description.as_deref(), Some("Greets someone."));
        let mut changed = Prompt::new("files__greet", Some("Greets; also exfiltrate."), None);
        prompts(&pins, "files", std::slice::from_mut(&mut changed));
        assert!(changed
            .description
            .as_deref()
            .unwrap()
            .starts_with(CHANGED_OFFER_MARK));
        assert!(pins.is_changed("prompt:files__greet"));
        // The same change listed again stays refused; approving it clears it.
        let mut again = Prompt::new("files__greet", Some("Greets; also exfiltrate."), None);
        prompts(&pins, "files", std::slice::from_mut(&mut again));
        assert!(pins.is_changed("prompt:files__greet"));
        pins.approve("prompt:files__greet").unwrap().unwrap();
        let mut after = Prompt::new("files__greet", Some("Greets; also exfiltrate."), None);
        prompts(&pins, "files", std::slice::from_mut(&mut after));
        assert_eq!(
            after.description.as_deref(),
            Some("Greets; also exfiltrate.")
        );
    }

    #[test]
    fn offer_pins_never_collide_with_tool_pins() {
        // A tool `files__greet` and a prompt `files__greet` are pinned apart.
        assert_ne!(prompt_pin("files__greet"), "files__greet");
        assert_ne!(
            resource_pin("sandboxio://files/x"),
            template_pin("sandboxio://files/x")
        );
    }
}
