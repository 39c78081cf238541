//! The node's errors. They name what went wrong as CouchDB names it; `http`'s one error
//! table gives each its status and body.

/// A failed node operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Db(#[from] settee_db::Error),
    #[error(transparent)]
    Views(#[from] settee_views::Error),
    /// A document write's failure (admission, validation, attachments).
    #[error(transparent)]
    Docs(#[from] settee_docs::Error),
    #[error(transparent)]
    Core(#[from] settee_core::Error),
    /// A design function's (or query server's) answer of its own: CouchDB's error table
    /// gives its status by name.
    #[error("{0:?}")]
    Rejected(settee_js::Rejection),
    #[error(transparent)]
    Mango(#[from] settee_mango::Error),
    /// No index serves a `_find`'s sort (CouchDB's 400 `no_usable_index`), in the words
    /// of a partitioned database.
    #[error("{0}")]
    NoUsableIndex(String),
    /// CouchDB's 400 `query_parse_error`.
    #[error("{0}")]
    QueryParse(String),
    /// A view whose language no query server speaks, found when its index is updated
    /// (CouchDB's indexer crashes with `unknown_query_language`).
    #[error("{0}")]
    UnknownQueryLanguage(String),
    /// A request argument the grammar refuses.
    #[error(transparent)]
    Wire(#[from] settee_wire::Error),
    /// CouchDB's 401 `unauthorized`.
    #[error("{0}")]
    Unauthorized(String),
    /// CouchDB's 403 `forbidden`.
    #[error("{0}")]
    Forbidden(String),
    /// A security object's refusal.
    #[error(transparent)]
    Denied(#[from] settee_auth::Denied),
    /// A design function's or query server's answer that is not what the protocol
    /// allows (CouchDB's 500 `external_response_error`).
    #[error("Invalid data from external server: {0}")]
    ExternalResponse(String),
    /// A replication's failure (its request, an endpoint, or the job's end), shared by
    /// every caller waiting for the job.
    #[error("{0}")]
    Replication(std::sync::Arc<settee_replicator::Error>),
    /// An attachment change names a revision the document does not have (CouchDB's 409
    /// `not_found`/`missing_rev` for `{{not_found, missing}, Rev}`).
    #[error("missing_rev")]
    MissingRev,
    /// An upload's `Content-MD5` does not match its content (CouchDB's 400
    /// `content_md5_mismatch`).
    #[error("Possible message corruption.")]
    ContentMd5Mismatch,
    /// A bare `{error, Reason}` CouchDB throws: a 500 named `error` with the reason (a
    /// security object its shards refuse, `chttpd_security_tests`; a local document's
    /// revision of another generation than 0).
    #[error("{0}")]
    Bare(String),
    /// An update function asked for with GET (CouchDB's 405, without `Allow`).
    #[error("Update functions do not allow GET")]
    UpdateByGet,
    /// CouchDB's 400 `bad_request`.
    #[error("{0}")]
    BadRequest(String),
    /// CouchDB's 404 `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// A Mango index's design document failed to save: CouchDB answers
    /// `error_saving_ddoc` for it, unless the write was refused ([`Error::is_refusal`]).
    #[error("error_saving_ddoc: {0}")]
    SavingDdoc(Box<Error>),
    /// A `_rewrite` that cannot be done.
    #[error("{0:?}")]
    Rewrite(crate::rewrite::Failure),
    /// A configuration change that cannot be stored.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The cluster state's refusal or failure (etcd unreachable, a membership edit of
    /// another revision, …).
    #[error(transparent)]
    Cluster(#[from] settee_cluster::Error),
    /// Other members did not answer (not running, or refusing connections): what needed
    /// them cannot be done now (503 `service unavailable`).
    #[error("{0}")]
    MembersUnavailable(String),
    /// Another member did not answer within its `[fabric]` timeout (CouchDB's 500
    /// `timeout`).
    #[error("{0}")]
    PeerTimeout(String),
    /// What needs a cluster, asked of a node that is in none.
    #[error("This node is not a member of a cluster (start it with --cluster).")]
    NotClustered,
    /// An endpoint whose work is not yet behind the fabric, asked of a database this node
    /// does not hold whole (a clustered one): 501 `not_implemented`.
    #[error("{0} is not yet supported on clustered databases")]
    NotOnCluster(&'static str),
    /// A shard copy's error answer, passed on as the copy gave it (status, `error`,
    /// `reason`): what the copy's node decided is the client's answer.
    #[error("{error}: {reason}")]
    Relayed {
        status: u16,
        error: String,
        reason: String,
    },
    /// A shard copy's 500 with CouchDB's `ref` (a crash's stack hash), passed on with it.
    #[error("{error}: {reason}")]
    RelayedCrash {
        error: String,
        reason: String,
        stack_hash: u32,
    },
    /// `[uuids] algorithm` names no generator (CouchDB's 500 `unknown_uuid_algorithm`).
    #[error("{0}")]
    UnknownUuidAlgorithm(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<settee_js::Rejection> for Error {
    fn from(r: settee_js::Rejection) -> Self {
        Error::Rejected(r)
    }
}

impl From<settee_replicator::Error> for Error {
    fn from(e: settee_replicator::Error) -> Self {
        Error::Replication(std::sync::Arc::new(e))
    }
}

impl Error {
    pub fn bad_request(reason: impl Into<String>) -> Error {
        Error::BadRequest(reason.into())
    }

    /// Whether this is a refusal of the caller (CouchDB's 401 or 403), not a failure.
    pub fn is_refusal(&self) -> bool {
        use settee_auth::Denied;
        use settee_js::Rejection;
        match self {
            Error::Unauthorized(_) | Error::Forbidden(_) => true,
            Error::Denied(d) => matches!(d, Denied::Unauthorized(_) | Denied::Forbidden(_)),
            Error::Docs(d) => matches!(
                d,
                settee_docs::Error::Unauthorized(_) | settee_docs::Error::Forbidden(_)
            ),
            Error::Rejected(r) => matches!(r, Rejection::Unauthorized(_) | Rejection::Forbidden(_)),
            Error::SavingDdoc(e) => e.is_refusal(),
            _ => false,
        }
    }

    /// A failure of Settee's own (stored bytes that do not parse, …): CouchDB's 500.
    pub fn internal(what: impl Into<String>) -> Error {
        Error::Db(settee_db::Error::Internal(what.into()))
    }
}
