//! Why a write was refused or failed. `http` maps each variant to CouchDB's status,
//! `error` and `reason` in its one error table.

use settee_auth::Denied;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Db(#[from] settee_db::Error),
    #[error(transparent)]
    Core(#[from] settee_core::Error),
    /// Design-document checks and failures of the JavaScript sandbox.
    #[error(transparent)]
    Views(#[from] settee_views::Error),
    #[error("bad_request: {0}")]
    BadRequest(String),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// An attachment stub that describes no attachment of the replaced revision.
    #[error("missing_stub: {0}")]
    MissingStub(String),
    /// A validation function threw an object naming its own error.
    #[error("{error}: {reason}")]
    Rejected { error: String, reason: String },
    /// A validation function that cannot run (its source does not compile): the query
    /// server's error, which CouchDB answers with status 500.
    #[error("{error}: {reason}")]
    Failed { error: String, reason: String },
}

impl From<Denied> for Error {
    fn from(d: Denied) -> Self {
        match d {
            Denied::BadRequest(r) => Error::BadRequest(r),
            Denied::Unauthorized(r) => Error::Unauthorized(r),
            Denied::Forbidden(r) => Error::Forbidden(r),
            Denied::NotFound(r) => Error::Rejected {
                error: "not_found".into(),
                reason: r,
            },
            Denied::Crash(r) => Error::Rejected {
                error: "unknown_error".into(),
                reason: r,
            },
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
