//! The upstreams' resources, resource templates and prompts, namespaced like their tools:
//! a prompt `summarise` of upstream `files` is `files__summarise`, a resource's URI is
//! wrapped (`uri.rs`) and its name prefixed. Listings ask every upstream at once (started
//! if need be), each bounded by its `call_timeout`; one that fails is left out of that
//! listing. Listing is not an operation; reading a resource and getting a prompt are
//! (`forward.rs`), as is subscribing to a resource (`subscribe.rs`). Each listed item is
//! pinned (`offer_pins.rs`); one that changed since it was approved is marked.

use std::sync::Arc;

use rmcp::model::{Prompt, Resource, ResourceTemplate};

use super::upstream::{Listed, Listing, Upstream};
use super::{offer_pins, uri, Proxy, SEPARATOR};
use crate::error::McpError;

impl Proxy {
    async fn gather(&self, what: Listing) -> Vec<(Arc<Upstream>, Listed)> {
        let asks: Vec<_> = self
            .upstreams
            .iter()
            .map(|u| {
                let u = u.clone();
                tokio::spawn(async move {
                    let got = u.listing(what).await;
                    (u, got)
                })
            })
            .collect();
        let mut out = Vec::new();
        for a in asks {
            match a.await {
                Ok((u, Ok(l))) => out.push((u, l)),
                Ok((u, Err(e))) => {
                    tracing::warn!(upstream = %u.name(), code = e.code(), "listing the upstream's {what:?} failed: {e}")
                }
                Err(_) => {}
            }
        }
        out
    }

    /// Every upstream's resources, their URIs wrapped and names prefixed.
    pub async fn resources(&self) -> Vec<Resource> {
        let mut out = Vec::new();
        for (u, l) in self.gather(Listing::Resources).await {
            if let Listed::Resources(v) = l {
                let mut v: Vec<Resource> = v
                    .into_iter()
                    .map(|mut r| {
                        r.uri = uri::wrap(u.name(), &r.uri);
                        r.name = format!("{}{SEPARATOR}{}", u.name(), r.name);
                        r
                    })
                    .collect();
                offer_pins::resources(&self.notifier.pins, u.name(), &mut v);
                out.extend(v);
            }
        }
        out
    }

    /// Every upstream's resource templates, wrapped so that an expansion reads through
    /// the proxy.
    pub async fn resource_templates(&self) -> Vec<ResourceTemplate> {
        let mut out = Vec::new();
        for (u, l) in self.gather(Listing::Templates).await {
            if let Listed::Templates(v) = l {
                let mut v: Vec<ResourceTemplate> = v
                    .into_iter()
                    .map(|mut t| {
                        t.uri_template = uri::wrap_template(u.name(), &t.uri_template);
                        t.name = format!("{}{SEPARATOR}{}", u.name(), t.name);
                        t
                    })
                    .collect();
                offer_pins::templates(&self.notifier.pins, u.name(), &mut v);
                out.extend(v);
            }
        }
        out
    }

    /// Every upstream's prompts, as `<upstream>__<prompt>`.
    pub async fn prompts(&self) -> Vec<Prompt> {
        let mut out = Vec::new();
        for (u, l) in self.gather(Listing::Prompts).await {
            if let Listed::Prompts(v) = l {
                let mut v: Vec<Prompt> = v
                    .into_iter()
                    .map(|mut p| {
                        p.name = format!("{}{SEPARATOR}{}", u.name(), p.name);
                        p
                    })
                    .collect();
                offer_pins::prompts(&self.notifier.pins, u.name(), &mut v);
                out.extend(v);
            }
        }
        out
    }

    /// The upstream and its own URI for a namespaced resource URI (in any spelling).
    pub fn find_resource(&self, wrapped: &str) -> Option<(Arc<Upstream>, String)> {
        let (up, own) = uri::unwrap(wrapped)?;
        self.upstreams
            .iter()
            .find(|u| u.name() == up)
            .map(|u| (u.clone(), own))
    }

    /// The upstream, its own URI as decoded, and its normal form (`uri::normalise`: what
    /// policy decides on and the upstream is sent) for a namespaced resource URI;
    /// `Ok(None)` when it names no upstream's resource, an error when it is ambiguous.
    pub fn resolve_resource(
        &self,
        wrapped: &str,
    ) -> Result<Option<(Arc<Upstream>, String, String)>, McpError> {
        let Some((up, own)) = self.find_resource(wrapped) else {
            return Ok(None);
        };
        let normal = uri::normalise(&own).map_err(|why| McpError::AmbiguousUri {
            uri: wrapped.to_string(),
            why: why.to_string(),
        })?;
        Ok(Some((up, own, normal)))
    }
}
