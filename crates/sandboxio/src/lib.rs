//! The public API of sandboxio, re-exported from the crates that own each part.
pub use sandboxio_audit as audit;
pub use sandboxio_budget as budget;
pub use sandboxio_core as core;
pub use sandboxio_gateway as gateway;
pub use sandboxio_policy as policy;
pub use sandboxio_sandbox as sandbox;
