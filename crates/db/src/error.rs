/// Errors of the document store. `settee-http` maps each to CouchDB's status and body.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Core(#[from] settee_core::Error),
    #[error(transparent)]
    Storage(#[from] settee_storage::Error),
    #[error("not_found: {0}")]
    NotFound(&'static str),
    #[error("not_found: Database does not exist.")]
    DbNotFound,
    #[error("file_exists")]
    DbExists,
    #[error("conflict")]
    Conflict,
    #[error("bad_request: {0}")]
    BadRequest(String),
    #[error("document_too_large: {0}")]
    DocTooLarge(String),
    /// `[couchdb] max_partition_size` reached by an edit that grows the document (its id).
    #[error("partition_overflow: {0}")]
    PartitionOverflow(String),
    #[error("attachment_too_large")]
    AttachmentTooLarge,
    /// The data file system is too full for this write: past `[disk_monitor]
    /// interactive_database_writes_threshold`, or out of space (`ENOSPC`). The reason.
    #[error("insufficient_storage: {0}")]
    InsufficientStorage(String),
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    pub fn bad_request(reason: impl Into<String>) -> Self {
        Error::BadRequest(reason.into())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
