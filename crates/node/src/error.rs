//! The node's errors. They name what went wrong as CouchDB names it; `http`'s one error
//! table gives each its status and body.

/// A failed node operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Db(#[from] settee_db::Error),
    #[error(transparent)]
    Views(#[from] settee_views::Error),
    #[error(transparent)]
    Core(#[from] settee_core::Error),
    /// `[uuids] algorithm` names no generator (CouchDB's 500 `unknown_uuid_algorithm`).
    #[error("{0}")]
    UnknownUuidAlgorithm(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
