//! What a malformed request is, in the terms the HTTP error table needs: `settee-http` maps
//! each variant to CouchDB's `{status, error, reason}` (`impl From<settee_wire::Error> for
//! ApiError`), so the names and reasons here are the ones clients see.

/// A request the grammar refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// `400 bad_request`.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// `400 query_parse_error`.
    #[error("query parse error: {0}")]
    QueryParse(String),
    /// A rule of CouchDB's domain (document ids, revisions), with its own error name.
    #[error(transparent)]
    Core(#[from] settee_core::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn bad_request(reason: impl Into<String>) -> Self {
        Error::BadRequest(reason.into())
    }
}
