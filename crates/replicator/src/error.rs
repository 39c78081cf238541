//! What can stop a replication. The HTTP layer maps these to CouchDB's answers.

/// A failed replication step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The replication request itself is malformed (400 `bad_request`).
    #[error("{0}")]
    BadRequest(String),
    /// A request CouchDB's parser refuses with a bare `{error, Reason}` (500 `error`): no
    /// source or target, an endpoint that is not a URL, a malformed filter name.
    #[error("{0}")]
    Invalid(String),
    /// A database the replication names does not exist (404 `db_not_found`); the text is
    /// CouchDB's reason, e.g. `could not open http://host/db/`.
    #[error("{0}")]
    DbNotFound(String),
    /// A peer refused the replicator's credentials (401) or its access (403): retrying does
    /// not help, so the replication fails.
    #[error("{reason}")]
    Unauthorized { status: u16, reason: String },
    /// A peer answered with an error a retry may cure (5xx, a timeout, a dropped connection),
    /// once the retries are spent.
    #[error("{0}")]
    Unreachable(String),
    /// A peer answered something the protocol does not allow.
    #[error("{0}")]
    Protocol(String),
    /// No replication with that id is running (`cancel`).
    #[error("{0}")]
    NotFound(String),
    /// The replication was cancelled.
    #[error("replication cancelled")]
    Cancelled,
}

pub type Result<T> = std::result::Result<T, Error>;
