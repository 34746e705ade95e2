//! Connections: an r2d2 pool of `postgres` clients, each with its prepared statements, and
//! a transaction wrapper that prepares each statement once per connection.
//!
//! The `postgres` client drives its own small runtime and refuses to run on a thread that
//! is driving tokio; [`off_thread`] therefore runs every call on a short-lived thread of
//! its own when the caller is inside a runtime (a scoped thread, so the call may borrow),
//! and in place otherwise. The caller blocks as it does on SQLite's lock.

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{NoTls, Row, Statement};

use super::super::StoreResult;
use crate::error::GatewayError;

pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// One pooled connection and the statements prepared on it.
pub(crate) struct PgConn {
    client: postgres::Client,
    stmts: HashMap<&'static str, Statement>,
}

pub(crate) struct Manager {
    pub config: postgres::Config,
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<PgConn, postgres::Error> {
        Ok(PgConn {
            client: self.config.connect(NoTls)?,
            stmts: HashMap::new(),
        })
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(|_| ())
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.client.is_closed()
    }
}

/// Maps a client error; contention (serialization failure, deadlock) and a lost
/// connection are transient.
pub(crate) fn pg(action: &'static str) -> impl Fn(postgres::Error) -> GatewayError {
    move |e| GatewayError::Postgres { action, source: e }
}

/// Whether an error is worth running the transaction again for.
pub(crate) fn retryable(e: &GatewayError) -> bool {
    use postgres::error::SqlState;
    match e {
        GatewayError::Postgres { source, .. } => matches!(
            source.code(),
            Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
        ),
        _ => false,
    }
}

/// The database's clock (the one every replica shares), in Unix milliseconds.
pub(crate) fn db_now_ms(tx: &mut Tx<'_>) -> StoreResult<i64> {
    match tx.opt(
        "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint",
        &[],
    )? {
        Some(r) => col(&r, 0, "clock", "now"),
        None => Err(crate::store::values::corrupt("clock", "now", "no row")),
    }
}

/// Runs `f` where the `postgres` client may block: in place outside a tokio runtime, on a
/// scoped thread inside one.
pub(crate) fn off_thread<T: Send>(f: impl FnOnce() -> StoreResult<T> + Send) -> StoreResult<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("sbx-pg-call".into())
            .spawn_scoped(s, f)
            .map_err(|e| GatewayError::PostgresUnavailable {
                url: String::new(),
                why: format!("cannot start a thread for the call: {e}"),
            })?;
        h.join().unwrap_or_else(|_| {
            Err(GatewayError::PostgresUnavailable {
                url: String::new(),
                why: "the call's thread failed".into(),
            })
        })
    })
}

/// A transaction whose statements are prepared once per connection.
pub(crate) struct Tx<'a> {
    tx: postgres::Transaction<'a>,
    stmts: &'a mut HashMap<&'static str, Statement>,
    action: &'static str,
}

impl<'a> Tx<'a> {
    pub(crate) fn begin(conn: &'a mut PgConn, action: &'static str) -> StoreResult<Tx<'a>> {
        let PgConn { client, stmts } = conn;
        let tx = client.transaction().map_err(pg(action))?;
        Ok(Tx { tx, stmts, action })
    }

    pub(crate) fn commit(self) -> StoreResult<()> {
        self.tx.commit().map_err(pg(self.action))
    }

    fn stmt(&mut self, sql: &'static str) -> StoreResult<Statement> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.tx.prepare(sql).map_err(pg(self.action))?;
        self.stmts.insert(sql, s.clone());
        Ok(s)
    }

    pub(crate) fn exec(&mut self, sql: &'static str, p: Params<'_>) -> StoreResult<u64> {
        let s = self.stmt(sql)?;
        self.tx.execute(&s, p).map_err(pg(self.action))
    }

    pub(crate) fn rows(&mut self, sql: &'static str, p: Params<'_>) -> StoreResult<Vec<Row>> {
        let s = self.stmt(sql)?;
        self.tx.query(&s, p).map_err(pg(self.action))
    }

    pub(crate) fn opt(&mut self, sql: &'static str, p: Params<'_>) -> StoreResult<Option<Row>> {
        let s = self.stmt(sql)?;
        self.tx.query_opt(&s, p).map_err(pg(self.action))
    }

    /// Runs statements that take no parameters (schema changes), unprepared.
    pub(crate) fn batch(&mut self, sql: &str) -> StoreResult<()> {
        self.tx.batch_execute(sql).map_err(pg(self.action))
    }
}

/// Reads column `i` of `row`; a value of the wrong type is a corrupt value, not a panic.
pub(crate) fn col<'r, T: postgres::types::FromSql<'r>>(
    row: &'r Row,
    i: usize,
    table: &'static str,
    column: &'static str,
) -> StoreResult<T> {
    row.try_get(i).map_err(|e| GatewayError::Corrupt {
        table,
        column,
        value: e.to_string(),
    })
}
