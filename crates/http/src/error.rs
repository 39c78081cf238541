//! The one error table: every failure becomes CouchDB's `{"error","reason"}` here.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use settee_db::Error as DbError;
use std::borrow::Cow;

#[derive(Debug)]
pub enum ApiError {
    Db(DbError),
    Core(settee_core::Error),
    BadRequest(String),
    QueryParse(String),
    NotFound(String),
    Unauthorized(String),
    Forbidden(String),
    MethodNotAllowed(&'static str),
    BadContentType(&'static str),
    NotAcceptable(String),
    PreconditionFailed(String),
    TooLarge,
    NotImplemented(String),
    /// `410 gone`.
    Gone(String),
    /// An error whose name is not fixed (from views and the JavaScript sandbox).
    Named(StatusCode, String, String),
    /// A `500` CouchDB answers from a crash of its own code (an Erlang `badmatch`, …),
    /// where the body's `ref` and the `X-Couch-Stack-Hash` header carry a crc32 of the
    /// Erlang stack: `stack_hash` is the value CouchDB 3.5.2 reports at the same site.
    Crash {
        error: Cow<'static, str>,
        reason: String,
        stack_hash: u32,
    },
}

impl From<settee_node::Error> for ApiError {
    fn from(e: settee_node::Error) -> Self {
        use settee_node::Error as N;
        match e {
            N::Db(d) => ApiError::Db(d),
            N::Views(v) => v.into(),
            N::Docs(d) => d.into(),
            N::Core(c) => ApiError::Core(c),
            N::Rejected(r) => r.into(),
            N::Mango(m) => m.into(),
            N::BadRequest(r) => ApiError::BadRequest(r),
            N::ExternalResponse(what) => ApiError::Named(
                StatusCode::INTERNAL_SERVER_ERROR,
                "external_response_error".into(),
                format!("Invalid data from external server: {what}"),
            ),
            N::Unauthorized(r) => ApiError::Unauthorized(r),
            N::Forbidden(r) => ApiError::Forbidden(r),
            N::Denied(d) => d.into(),
            N::QueryParse(r) => ApiError::QueryParse(r),
            // The ref CouchDB 3.5.2 reports for a view query of an unknown language.
            N::UnknownQueryLanguage(language) => ApiError::Crash {
                error: "unknown_query_language".into(),
                reason: language,
                stack_hash: 4180022058,
            },
            N::Wire(w) => w.into(),
            N::Replication(r) => ApiError::from(&*r),
            N::NoUsableIndex(r) => {
                ApiError::Named(StatusCode::BAD_REQUEST, "no_usable_index".into(), r)
            }
            N::NotFound(r) => ApiError::NotFound(r),
            N::Bare(reason) => {
                ApiError::Named(StatusCode::INTERNAL_SERVER_ERROR, "error".into(), reason)
            }
            N::UpdateByGet => ApiError::Named(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed".into(),
                "Update functions do not allow GET".into(),
            ),
            N::MissingRev => ApiError::Named(
                StatusCode::CONFLICT,
                "not_found".into(),
                "missing_rev".into(),
            ),
            N::ContentMd5Mismatch => ApiError::Named(
                StatusCode::BAD_REQUEST,
                "content_md5_mismatch".into(),
                "Possible message corruption.".into(),
            ),
            N::Config(c) => c.into(),
            N::Rewrite(f) => {
                use settee_core::rewrite::RewriteError as R;
                use settee_node::rewrite::Failure as F;
                let named = |status, error: &str, reason: String| {
                    ApiError::Named(status, error.into(), reason)
                };
                let internal = StatusCode::INTERNAL_SERVER_ERROR;
                match f {
                    F::InvalidPath => named(
                        StatusCode::NOT_FOUND,
                        "rewrite_error",
                        "Invalid path.".into(),
                    ),
                    F::BadAnswer(reason) => named(internal, "rewrite_error", reason),
                    F::Unknown(answer) => named(internal, "unknown_error", answer),
                    F::Rules(R::NoMatch) => ApiError::NotFound("missing".into()),
                    F::Rules(R::InvalidTarget) => {
                        named(internal, "error", "invalid_rewrite_target".into())
                    }
                    F::Rules(R::Insecure) => named(
                        internal,
                        "insecure_rewrite_rule",
                        "too many ../.. segments".into(),
                    ),
                    F::Rules(R::BadJson(_)) => ApiError::bad_request("invalid UTF-8 JSON"),
                }
            }
            N::SavingDdoc(e) => {
                let e = ApiError::from(*e);
                let (status, error, _) = e.parts();
                let reason = match status.as_u16() {
                    401 | 403 => return e,
                    409 => "Encountered a conflict while saving the design document.".into(),
                    _ => format!("Unknown error while saving the design document: {error}"),
                };
                ApiError::Named(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "error_saving_ddoc".into(),
                    reason,
                )
            }
            N::UnknownUuidAlgorithm(name) => ApiError::Named(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unknown_uuid_algorithm".into(),
                name,
            ),
            N::Cluster(c) => c.into(),
            N::RelayedCrash {
                error,
                reason,
                stack_hash,
            } => ApiError::Crash {
                error: error.into(),
                reason,
                stack_hash,
            },
            N::Relayed {
                status,
                error,
                reason,
            } => ApiError::Named(
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                error,
                reason,
            ),
            n @ N::NotOnCluster(_) => ApiError::NotImplemented(n.to_string()),
            // CouchDB's `{service_unavailable, Reason}`.
            n @ N::NotClustered => ApiError::Named(
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable".into(),
                n.to_string(),
            ),
            N::MembersUnavailable(why) => ApiError::Named(
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable".into(),
                why,
            ),
            // A fabric worker's `timeout` (the member's own words go to the log).
            N::PeerTimeout(why) => {
                tracing::warn!(%why, "a member timed out");
                ApiError::Named(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "timeout".into(),
                    TIMEOUT_REASON.into(),
                )
            }
        }
    }
}

impl From<settee_views::Error> for ApiError {
    fn from(e: settee_views::Error) -> Self {
        use settee_views::{Error as V, JsError};
        use StatusCode as S;
        match e {
            V::Db(d) => ApiError::Db(d),
            // A full disk under an index update is a 507 as under a document write.
            V::Store(s) => ApiError::Db(DbError::Storage(s)),
            V::Design(d) => ApiError::Named(S::BAD_REQUEST, "invalid_design_doc".into(), d.0),
            // An empty function source is the query server's `not_found`.
            V::Js(JsError::Compile { reason, .. }) if reason == "missing function" => {
                ApiError::NotFound(reason)
            }
            V::Js(j) => {
                let (error, reason) = settee_views::js_error_parts(&j);
                let status = match j {
                    JsError::Compile { .. } => S::BAD_REQUEST,
                    _ => S::INTERNAL_SERVER_ERROR,
                };
                ApiError::Named(status, error.into(), reason)
            }
            V::Reduce(f) => ApiError::Named(S::INTERNAL_SERVER_ERROR, f.error, f.reason),
            V::Spill(e) if e.kind() == std::io::ErrorKind::StorageFull => ApiError::Db(
                DbError::InsufficientStorage(settee_db::disk::NO_SPACE.into()),
            ),
            // A server's own error answer goes through the table design functions' errors
            // go through (`not_found` is a 404, ...), as CouchDB throws it.
            V::QueryServer(settee_views::queryserver::Error::Server { error, reason }) => {
                settee_js::Rejection::Error {
                    error,
                    reason: serde_json::Value::String(reason),
                }
                .into()
            }
            V::QueryServer(q) => {
                let (error, reason) = q.parts();
                ApiError::Named(S::INTERNAL_SERVER_ERROR, error, reason)
            }
            other => ApiError::Db(settee_db::Error::Internal(other.to_string())),
        }
    }
}

/// A design function's error term as `chttpd:error_info` renders it: the entries of its table
/// that such a term can reach, else status 500 with the name as `error` and the reason as
/// CouchDB prints it (`reduce::reason_text`). A `null` reason leaves the name alone, which
/// the table knows as an atom or calls `unknown_error`.
impl From<settee_js::Rejection> for ApiError {
    fn from(r: settee_js::Rejection) -> Self {
        use settee_core::reduce::reason_text;
        use settee_js::Rejection as R;
        use StatusCode as S;
        let named =
            |status, error: &str, reason: String| ApiError::Named(status, error.into(), reason);
        match r {
            R::Forbidden(reason) => ApiError::Forbidden(reason_text(&reason)),
            R::Unauthorized(reason) => ApiError::Unauthorized(reason_text(&reason)),
            R::Failed(e) => settee_views::Error::Js(e).into(),
            R::Error { error, reason } if reason.is_null() => match error.as_str() {
                "not_found" => named(S::NOT_FOUND, "not_found", "missing".into()),
                "bad_request" => named(S::BAD_REQUEST, "bad_request", String::new()),
                "conflict" => named(S::CONFLICT, "conflict", "Document update conflict.".into()),
                "timeout" => named(S::INTERNAL_SERVER_ERROR, "timeout", TIMEOUT_REASON.into()),
                _ => named(S::INTERNAL_SERVER_ERROR, "unknown_error", error),
            },
            R::Error { error, reason } => {
                let reason = reason_text(&reason);
                match error.as_str() {
                    "bad_request" | "query_parse_error" | "illegal_docid" | "doc_validation"
                    | "invalid_since_seq" => named(S::BAD_REQUEST, &error, reason),
                    "not_found" | "filter_fetch_error" => named(S::NOT_FOUND, "not_found", reason),
                    "not_acceptable" => named(S::NOT_ACCEPTABLE, "not_acceptable", reason),
                    "method_not_allowed" => named(S::METHOD_NOT_ALLOWED, &error, reason),
                    "conflict" => {
                        named(S::CONFLICT, "conflict", "Document update conflict.".into())
                    }
                    "missing_stub" => named(S::PRECONDITION_FAILED, "missing_stub", reason),
                    "bad_ctype" => named(S::UNSUPPORTED_MEDIA_TYPE, "bad_content_type", reason),
                    "timeout" => named(S::INTERNAL_SERVER_ERROR, "timeout", TIMEOUT_REASON.into()),
                    "disabled" => named(S::NOT_IMPLEMENTED, "disabled", reason),
                    "service_unavailable" => {
                        named(S::SERVICE_UNAVAILABLE, "service unavailable", reason)
                    }
                    _ => named(S::INTERNAL_SERVER_ERROR, &error, reason),
                }
            }
        }
    }
}

impl From<settee_cluster::Error> for ApiError {
    fn from(e: settee_cluster::Error) -> Self {
        use settee_cluster::Error as C;
        match e {
            // CouchDB's `{service_unavailable, Reason}`: what needs the cluster state cannot
            // be done while etcd is unreachable.
            C::Unavailable(_) => ApiError::Named(
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable".into(),
                e.to_string(),
            ),
            C::Conflict => ApiError::Db(DbError::Conflict),
            C::NotFound(what) => ApiError::NotFound(what.into()),
            C::Exists => ApiError::Db(DbError::DbExists),
            C::Doc(c) => ApiError::Core(c),
            C::Plan(p) => ApiError::BadRequest(p.to_string()),
            C::Corrupt { .. } => ApiError::Named(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error".into(),
                e.to_string(),
            ),
        }
    }
}

/// `chttpd:error_info(timeout)`'s reason.
const TIMEOUT_REASON: &str = "The request could not be processed in a reasonable amount of time.";

impl From<settee_replicator::Error> for ApiError {
    fn from(e: settee_replicator::Error) -> Self {
        ApiError::from(&e)
    }
}

impl From<&settee_replicator::Error> for ApiError {
    fn from(e: &settee_replicator::Error) -> Self {
        use settee_replicator::Error as R;
        match e {
            R::BadRequest(m) => ApiError::BadRequest(m.clone()),
            // CouchDB's parser throws these as a bare `{error, Reason}`.
            R::Invalid(m) => {
                ApiError::Named(StatusCode::INTERNAL_SERVER_ERROR, "error".into(), m.clone())
            }
            R::NotFound(m) => ApiError::NotFound(m.clone()),
            // A replication that ended with an error: CouchDB's reason, through its error
            // table, where a replication's names other than these fall to 500.
            other => match other.answer() {
                (e, reason) if e == "unauthorized" => ApiError::Unauthorized(reason),
                (e, reason) if e == "forbidden" => ApiError::Forbidden(reason),
                (e, reason) if e == "not_found" => ApiError::NotFound(reason),
                (e, reason) if e == "bad_request" => ApiError::BadRequest(reason),
                (error, reason) => {
                    ApiError::Named(StatusCode::INTERNAL_SERVER_ERROR, error, reason)
                }
            },
        }
    }
}

impl From<settee_docs::Error> for ApiError {
    fn from(e: settee_docs::Error) -> Self {
        use settee_docs::Error as W;
        use StatusCode as S;
        match e {
            W::Db(d) => ApiError::Db(d),
            W::Core(c) => ApiError::Core(c),
            W::Views(v) => v.into(),
            W::BadRequest(r) => ApiError::BadRequest(r),
            W::Unauthorized(r) => ApiError::Unauthorized(r),
            W::Forbidden(r) => ApiError::Forbidden(r),
            W::MissingStub(r) => ApiError::Named(S::PRECONDITION_FAILED, "missing_stub".into(), r),
            W::Failed { error, reason } => ApiError::Named(S::INTERNAL_SERVER_ERROR, error, reason),
            // A validation function's own error: CouchDB's status for the names it knows.
            W::Rejected { error, reason } => {
                let status = match error.as_str() {
                    "not_found" => S::NOT_FOUND,
                    "conflict" => S::CONFLICT,
                    "bad_request" => S::BAD_REQUEST,
                    // A map function its query server could not compile (as JavaScript's).
                    "compilation_error" => S::BAD_REQUEST,
                    _ => S::INTERNAL_SERVER_ERROR,
                };
                ApiError::Named(status, error, reason)
            }
        }
    }
}

impl From<settee_mango::Error> for ApiError {
    fn from(e: settee_mango::Error) -> Self {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
        ApiError::Named(status, e.name().into(), e.to_string())
    }
}

impl From<settee_auth::Denied> for ApiError {
    fn from(d: settee_auth::Denied) -> Self {
        match d {
            settee_auth::Denied::Unauthorized(r) => ApiError::Unauthorized(r),
            settee_auth::Denied::Forbidden(r) => ApiError::Forbidden(r),
            settee_auth::Denied::BadRequest(r) => ApiError::BadRequest(r),
            settee_auth::Denied::NotFound(r) => ApiError::NotFound(r),
            settee_auth::Denied::Crash(r) => {
                ApiError::Named(StatusCode::INTERNAL_SERVER_ERROR, "unknown_error".into(), r)
            }
        }
    }
}

impl From<settee_node::config::ConfigError> for ApiError {
    fn from(e: settee_node::config::ConfigError) -> Self {
        use settee_node::config::ConfigError as C;
        match e {
            C::Invalid(reason) => ApiError::bad_request(reason),
            C::Io(msg) => ApiError::Db(DbError::Internal(msg)),
        }
    }
}

impl ApiError {
    pub fn unauthorized(reason: impl Into<String>) -> ApiError {
        ApiError::Unauthorized(reason.into())
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        ApiError::Db(e)
    }
}

/// A request the grammar refuses (`settee_wire`): its names are this table's own.
impl From<settee_wire::Error> for ApiError {
    fn from(e: settee_wire::Error) -> Self {
        use settee_wire::Error as W;
        match e {
            W::BadRequest(r) => ApiError::BadRequest(r),
            W::QueryParse(r) => ApiError::QueryParse(r),
            W::Core(c) => ApiError::Core(c),
        }
    }
}

impl From<settee_core::Error> for ApiError {
    fn from(e: settee_core::Error) -> Self {
        ApiError::Core(e)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn bad_request(reason: impl Into<String>) -> Self {
        ApiError::BadRequest(reason.into())
    }

    /// `(status, error, reason)` as CouchDB 3 reports them.
    /// The error's status and JSON body (`error`, `reason`, and a crash's `ref`).
    pub fn status_and_body(&self) -> (StatusCode, serde_json::Value) {
        let (status, error, reason) = self.parts();
        let mut body = json!({"error": error, "reason": reason});
        if let ApiError::Crash { stack_hash, .. } = self {
            body["ref"] = (*stack_hash).into();
        }
        (status, body)
    }

    pub fn parts(&self) -> (StatusCode, Cow<'static, str>, String) {
        match self {
            ApiError::Named(status, error, reason) => {
                (*status, error.clone().into(), reason.clone())
            }
            ApiError::Crash { error, reason, .. } => (
                StatusCode::INTERNAL_SERVER_ERROR,
                error.clone(),
                reason.clone(),
            ),
            other => {
                let (status, error, reason) = other.fixed_parts();
                (status, error.into(), reason)
            }
        }
    }

    fn fixed_parts(&self) -> (StatusCode, &'static str, String) {
        use settee_core::Error as C;
        use StatusCode as S;
        match self {
            ApiError::Db(e) => match e {
                DbError::Core(c) => ApiError::Core(c.clone()).fixed_parts(),
                DbError::NotFound(r) => (S::NOT_FOUND, "not_found", r.to_string()),
                DbError::DbNotFound => {
                    (S::NOT_FOUND, "not_found", "Database does not exist.".into())
                }
                DbError::DbExists => (
                    S::PRECONDITION_FAILED,
                    "file_exists",
                    "The database could not be created, the file already exists.".into(),
                ),
                DbError::Conflict => (S::CONFLICT, "conflict", "Document update conflict.".into()),
                DbError::BadRequest(r) => (S::BAD_REQUEST, "bad_request", r.clone()),
                DbError::AttachmentTooLarge => (
                    S::PAYLOAD_TOO_LARGE,
                    "attachment_too_large",
                    "Attachment exceeds the maximum size".into(),
                ),
                DbError::PartitionOverflow(id) => (
                    S::FORBIDDEN,
                    "partition_overflow",
                    format!("Partition limit exceeded due to update on '{id}'"),
                ),
                DbError::DocTooLarge(id) => {
                    (S::PAYLOAD_TOO_LARGE, "document_too_large", id.clone())
                }
                // CouchDB 3.4's answer past a `[disk_monitor]` threshold; a full disk
                // gets the same name (CouchDB itself has no mapping for `enospc`).
                DbError::InsufficientStorage(r) => {
                    (S::INSUFFICIENT_STORAGE, "insufficient_storage", r.clone())
                }
                DbError::Storage(e) if e.is_no_space() => (
                    S::INSUFFICIENT_STORAGE,
                    "insufficient_storage",
                    settee_db::disk::NO_SPACE.into(),
                ),
                DbError::Storage(_) | DbError::Internal(_) => (
                    S::INTERNAL_SERVER_ERROR,
                    "internal_server_error",
                    "An internal error occurred.".into(),
                ),
            },
            ApiError::Core(c) => match c {
                C::BadRequest(r) => (S::BAD_REQUEST, "bad_request", r.clone()),
                C::IllegalDocId(r) => (S::BAD_REQUEST, "illegal_docid", r.clone()),
                C::IllegalPartition(r) => (S::BAD_REQUEST, "illegal_partition", r.clone()),
                C::DocValidation(r) => (S::BAD_REQUEST, "doc_validation", r.clone()),
                C::IllegalDbName(r) => (S::BAD_REQUEST, "illegal_database_name", r.clone()),
                C::DocTooLarge(id) => (S::PAYLOAD_TOO_LARGE, "document_too_large", id.clone()),
            },
            ApiError::BadRequest(r) => (S::BAD_REQUEST, "bad_request", r.clone()),
            ApiError::QueryParse(r) => (S::BAD_REQUEST, "query_parse_error", r.clone()),
            ApiError::NotFound(r) => (S::NOT_FOUND, "not_found", r.clone()),
            ApiError::Unauthorized(r) => (S::UNAUTHORIZED, "unauthorized", r.clone()),
            ApiError::Forbidden(r) => (S::FORBIDDEN, "forbidden", r.clone()),
            ApiError::MethodNotAllowed(allow) => (
                S::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("Only {allow} allowed"),
            ),
            ApiError::BadContentType(r) => {
                (S::UNSUPPORTED_MEDIA_TYPE, "bad_content_type", r.to_string())
            }
            ApiError::NotAcceptable(r) => (S::NOT_ACCEPTABLE, "not_acceptable", r.clone()),
            ApiError::PreconditionFailed(r) => {
                (S::PRECONDITION_FAILED, "precondition_failed", r.clone())
            }
            ApiError::TooLarge => (
                S::PAYLOAD_TOO_LARGE,
                "too_large",
                "the request entity is too large".into(),
            ),
            ApiError::NotImplemented(r) => (S::NOT_IMPLEMENTED, "not_implemented", r.clone()),
            ApiError::Gone(r) => (S::GONE, "gone", r.clone()),
            // Named in `parts`.
            ApiError::Named(status, _, reason) => (*status, "unknown_error", reason.clone()),
            ApiError::Crash { reason, .. } => {
                (S::INTERNAL_SERVER_ERROR, "unknown_error", reason.clone())
            }
        }
    }

    /// The JSON body alone, for per-item errors inside a 200/201 response.
    pub fn to_json(&self) -> serde_json::Value {
        let (_, error, reason) = self.parts();
        json!({"error": error, "reason": reason})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.status_and_body();
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = ?self, "internal error");
        }
        let body = serde_json::to_vec(&body).expect("json");
        let mut resp = crate::response::json_bytes(status, body);
        match self {
            ApiError::MethodNotAllowed(allow) => {
                resp.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            ApiError::Crash { stack_hash, .. } => {
                resp.headers_mut()
                    .insert("x-couch-stack-hash", HeaderValue::from(stack_hash));
            }
            _ => {}
        }
        resp
    }
}
