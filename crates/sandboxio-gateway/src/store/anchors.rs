//! Every trail head a store keeps, read without taking part (no replica, no lease, no
//! writes), for `sandboxio audit verify`: each replica keeps its own signed trail and its
//! head in the shared store, so a set of trails is checked against the heads of every
//! node. A SQLite store has one node (this host); its heads carry none.

use std::path::PathBuf;

use sandboxio_audit::SignedHead;
use sandboxio_config::StateUrl;
use serde::Serialize;

use super::{AnchorBreak, SqliteStore, Store, StoreResult};

/// Where the heads are kept.
#[derive(Debug, Clone)]
pub enum AnchorSource {
    /// A SQLite state database (`state.db`).
    Sqlite(PathBuf),
    /// The shared PostgreSQL store of a set of replicas.
    Shared(StateUrl),
}

impl AnchorSource {
    /// The database, for people (a URL without its password).
    pub fn describe(&self) -> String {
        match self {
            AnchorSource::Sqlite(p) => p.display().to_string(),
            AnchorSource::Shared(u) => u.redacted(),
        }
    }
}

/// A head as kept, with the node (host name) whose replica wrote it in a shared store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptHead {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub head: SignedHead,
}

/// A break as kept, with its node in a shared store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptBreak {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(flatten)]
    pub brk: AnchorBreak,
}

/// Every head and break a store keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TrailAnchors {
    pub heads: Vec<KeptHead>,
    pub breaks: Vec<KeptBreak>,
}

/// Reads the heads and breaks of every trail (every node's, in a shared store).
pub fn read_trail_anchors(src: &AnchorSource) -> StoreResult<TrailAnchors> {
    match src {
        AnchorSource::Sqlite(db) => {
            let store = SqliteStore::open_read_only(db)?;
            Ok(TrailAnchors {
                heads: store
                    .heads()?
                    .into_iter()
                    .map(|head| KeptHead { node: None, head })
                    .collect(),
                breaks: store
                    .anchor_breaks()?
                    .into_iter()
                    .map(|brk| KeptBreak { node: None, brk })
                    .collect(),
            })
        }
        AnchorSource::Shared(url) => super::pg::read_anchors(url),
    }
}
