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

/// Pins one listed item; `true` when it is not as approved.
fn observe(pins: &Pins, pin: &str, o: Observed) -> bool {
    let seen = pins.observe_item(pin, o);
    if seen == Seen::Changed {
        tracing::warn!(
            pin = %pin,
            code = "SBX_E1911",
            "`{pin}` changed since it was approved; it is refused until `sandboxio mcp trust {pin}`"
        );
    }
    pins.is_changed(pin)
}

fn mark(description: &mut Option<String>, pin: &str) {
    let d = description.as_deref().unwrap_or_default();
    *description = Some(format!(
        "{CHANGED_OFFER_MARK}(`sandboxio mcp trust {pin}`) {d}"
    ));
}

/// What the agent is shown of a changed item: the approved definition (marked), or, when
/// none is kept, the listed one with its texts withheld (marked).
fn shown<T: serde::de::DeserializeOwned>(
    pins: &Pins,
    pin: &str,
    listed: &mut T,
    withhold: impl FnOnce(&mut T),
) -> Option<T> {
    match pins.shown(pin) {
        Shown::Approved(v) => serde_json::from_value(v).ok().or_else(|| {
            withhold(listed);
            None
        }),
        Shown::AsListed => None,
        Shown::Withheld | Shown::New => {
            withhold(listed);
            None
        }
    }
}

/// Pins a namespaced prompt as listed; when it changed, shows the approved one, marked.
pub fn prompt(pins: &Pins, p: &mut Prompt) {
    let pin = prompt_pin(&p.name);
    let legacy = digest(serde_json::json!({
        "title": p.title,
        "description": p.description,
        "arguments": p.arguments,
    }));
    let o = Observed {
        digest: digest(serde_json::json!({
            "v": VERSION,
            "name": p.name,
            "title": p.title,
            "description": p.description,
            "arguments": p.arguments,
        })),
        legacy,
        description: p.description.clone().unwrap_or_default(),
        item: serde_json::to_value(&*p).unwrap_or_default(),
    };
    if observe(pins, &pin, o) {
        if let Some(approved) = shown(pins, &pin, p, |p| {
            p.description = None;
            p.title = None;
            p.arguments = None;
        }) {
            *p = approved;
        }
        mark(&mut p.description, &pin);
    }
}

/// Pins a namespaced resource as listed; when it changed, shows the approved one, marked.
pub fn resource(pins: &Pins, r: &mut Resource) {
    let pin = resource_pin(&r.uri);
    let legacy = digest(serde_json::json!({
        "name": r.name,
        "title": r.title,
        "description": r.description,
        "mime_type": r.mime_type,
    }));
    let o = Observed {
        digest: digest(serde_json::json!({
            "v": VERSION,
            "name": r.name,
            "title": r.title,
            "description": r.description,
            "mime_type": r.mime_type,
            "annotations": r.annotations,
        })),
        legacy,
        description: r.description.clone().unwrap_or_default(),
        item: serde_json::to_value(&*r).unwrap_or_default(),
    };
    if observe(pins, &pin, o) {
        if let Some(approved) = shown(pins, &pin, r, |r| {
            r.description = None;
            r.title = None;
        }) {
            *r = approved;
        }
        mark(&mut r.description, &pin);
    }
}

/// Pins a namespaced resource template as listed; when it changed, shows the approved
/// one, marked.
pub fn template(pins: &Pins, t: &mut ResourceTemplate) {
    let pin = template_pin(&t.uri_template);
    let legacy = digest(serde_json::json!({
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "mime_type": t.mime_type,
    }));
    let o = Observed {
        digest: digest(serde_json::json!({
            "v": VERSION,
            "name": t.name,
            "title": t.title,
            "description": t.description,
            "mime_type": t.mime_type,
            "annotations": t.annotations,
        })),
        legacy,
        description: t.description.clone().unwrap_or_default(),
        item: serde_json::to_value(&*t).unwrap_or_default(),
    };
    if observe(pins, &pin, o) {
        if let Some(approved) = shown(pins, &pin, t, |t| {
            t.description = None;
            t.title = None;
        }) {
            *t = approved;
        }
        mark(&mut t.description, &pin);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_changed_prompt_is_marked_and_stays_changed_until_approved() {
        let pins = Pins::in_memory();
        let mut p = Prompt::new("files__greet", Some("Greets someone."), None);
        prompt(&pins, &mut p);
        assert_eq!(p.description.as_deref(), Some("Greets someone."));
        let mut changed = Prompt::new("files__greet", Some("Greets; also exfiltrate."), None);
        prompt(&pins, &mut changed);
        assert!(changed
            .description
            .as_deref()
            .unwrap()
            .starts_with(CHANGED_OFFER_MARK));
        assert!(pins.is_changed("prompt:files__greet"));
        // The same change listed again stays refused; approving it clears it.
        let mut again = Prompt::new("files__greet", Some("Greets; also exfiltrate."), None);
        prompt(&pins, &mut again);
        assert!(pins.is_changed("prompt:files__greet"));
        pins.approve("prompt:files__greet").unwrap().unwrap();
        let mut after = Prompt::new("files__greet", Some("Greets; also exfiltrate."), None);
        prompt(&pins, &mut after);
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
