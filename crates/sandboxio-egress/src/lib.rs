//! sandboxio-egress: the egress proxy a sandbox reaches the network through.
//!
//! A sandbox with network `allowlist` or `full` keeps its own network namespace with
//! loopback only; the sandbox crate hands its loopback listener to this proxy, which
//! serves it from outside. Every CONNECT tunnel and every plain HTTP request is a target
//! ([`Target`]) that a [`Decide`] answers before anything leaves: the gateway decides each
//! as a `net_connect` operation and runs the [`Guard`] (rules, the proxy's own lookup, the
//! SSRF guard) as its side effect, so the proxy connects only to the address it checked.

pub mod cidr;
pub mod decide;
pub mod dns;
pub mod edge;
pub mod error;
pub mod guard;
pub mod proxy;
pub mod resolve;
pub mod rules;
pub mod secrets;
pub mod ssrf;
pub mod target;

pub use decide::{channel, Ask, ChannelDecider, Decide, GuardOnly, Verdict};
pub use edge::Edge;
pub use error::{EgressError, Refusal};
pub use guard::Guard;
pub use proxy::{Budget, Limits, Proxy, Summary};
pub use resolve::Resolver;
pub use rules::{EgressConfig, Rules};
pub use target::{Scheme, Target};
