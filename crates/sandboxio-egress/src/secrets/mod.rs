//! Secrets that sandboxio stores for the edge: sealed at rest with ChaCha20-Poly1305 under a
//! key kept apart from the state (its own 0600 file, or the environment). Values are never
//! printed, logged or serialised; listing shows names and bound hosts only.

mod error;
mod key;
mod store;
mod value;

pub use error::SecretError;
pub use key::{KeySource, SecretKey};
pub use store::{Sealed, SecretInfo, SecretStore, Undo};
pub use value::{validate_hosts, validate_name, SecretValue, MAX_VALUE};
