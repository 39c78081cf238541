/// Domain errors raised by pure rules. The HTTP layer maps each variant to CouchDB's
/// `{status, error, reason}` triple in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("bad_request: {0}")]
    BadRequest(String),
    #[error("illegal_docid: {0}")]
    IllegalDocId(String),
    #[error("illegal_partition: {0}")]
    IllegalPartition(String),
    #[error("doc_validation: {0}")]
    DocValidation(String),
    #[error("illegal_database_name: {0}")]
    IllegalDbName(String),
    #[error("document_too_large: {0}")]
    DocTooLarge(String),
}

impl Error {
    pub fn bad_request(reason: impl Into<String>) -> Self {
        Error::BadRequest(reason.into())
    }
}
