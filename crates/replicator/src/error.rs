//! What can stop a replication, and how CouchDB reports it. CouchDB's replicator passes
//! Erlang terms around as reasons; `POST /_replicate` and `_scheduler` print them, so the
//! terms are rebuilt here ([`Term`]) and [`Error::answer`] and [`Error::crash_reason`]
//! give the two printed forms. The HTTP layer gives the status codes.

use std::fmt;

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
    /// A database the replication names does not exist (`db_not_found`); the text is
    /// CouchDB's reason, e.g. `could not open http://host/db/`.
    #[error("{0}")]
    DbNotFound(String),
    /// A peer refused the replicator's credentials (401) or its access (403): retrying does
    /// not help, so the replication fails.
    #[error("{reason}")]
    Unauthorized { status: u16, reason: String },
    /// A request failed in a way a retry may cure (5xx, 429, a timeout, a dropped
    /// connection), and its retries are spent.
    #[error("{0}")]
    RequestFailed(RequestFailed),
    /// A peer answered something the protocol does not allow.
    #[error("{0}")]
    Protocol(String),
    /// No replication with that id is running (`cancel`).
    #[error("{0}")]
    NotFound(String),
    /// The replication was stopped while it waited to retry a request.
    #[error("replication cancelled")]
    Cancelled,
    /// Reading the source's changes failed after the replication had started
    /// (CouchDB: the changes reader died).
    #[error("changes_reader_died: {0}")]
    ChangesReader(Box<Error>),
    /// Copying a batch failed after the replication had started (CouchDB: a worker died;
    /// `pid` names it).
    #[error("worker_died: {error}")]
    Worker { pid: u64, error: Box<Error> },
    /// Recording a checkpoint failed (`side`: `source` or `target`).
    #[error("checkpoint on the {side}: {error}")]
    Checkpoint {
        side: &'static str,
        error: Box<Error>,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// A request whose retries are spent, as CouchDB's HTTP client reports it
/// (`{http_request_failed, Method, Url, Error}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestFailed {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request's URL, credentials removed.
    pub url: String,
    pub cause: Cause,
}

/// Why the last attempt of a request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The peer answered this status (5xx, 429 or 408).
    Status(u16),
    /// The connection was refused.
    Refused,
    /// The host name does not resolve.
    Nxdomain,
    /// The peer stayed silent longer than `connection_timeout`.
    Timeout,
    /// The connection closed before the answer was complete.
    Closed,
    /// Anything else, described.
    Other(String),
}

impl fmt::Display for RequestFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match &self.cause {
            Cause::Status(s) => format!("answered {s}"),
            Cause::Refused => "refused the connection".into(),
            Cause::Nxdomain => "does not resolve".into(),
            Cause::Timeout => "timed out".into(),
            Cause::Closed => "closed the connection".into(),
            Cause::Other(e) => e.clone(),
        };
        write!(f, "{} {} {why}", self.method, self.url)
    }
}

impl RequestFailed {
    /// The term CouchDB's HTTP client exits with.
    fn term(&self) -> Term {
        use Term::{Atom as A, Tuple as T};
        let error = |t: Term| T(vec![A("error"), t]);
        let conn_failed =
            |reason: &'static str| error(T(vec![A("conn_failed"), T(vec![A("error"), A(reason)])]));
        let cause = match &self.cause {
            Cause::Status(s) => T(vec![A("code"), Term::Int(i64::from(*s))]),
            Cause::Refused => conn_failed("econnrefused"),
            Cause::Nxdomain => conn_failed("nxdomain"),
            Cause::Timeout => error(A("req_timedout")),
            Cause::Closed => A("sel_conn_closed"),
            Cause::Other(e) => error(Term::Bin(e.clone())),
        };
        T(vec![
            A("http_request_failed"),
            Term::Str(self.method.clone()),
            Term::Str(self.url.clone()),
            error(cause),
        ])
    }
}

/// The reason of a failed replication, as CouchDB carries it: an error name with a text
/// (`{Name, <<"text">>}`) or some other term.
enum Reason {
    Pair(&'static str, String),
    Other(Term),
}

impl Error {
    /// The reason this error has when a replication ends with it, as CouchDB's
    /// `replication_start_error` (errors met while connecting to the endpoints) and its
    /// job's exit reasons (errors met later) give it.
    fn reason(&self) -> Reason {
        match self {
            Error::DbNotFound(r) => Reason::Pair("db_not_found", r.clone()),
            Error::Unauthorized {
                status: 403,
                reason,
            } => Reason::Pair("forbidden", reason.clone()),
            Error::Unauthorized { reason, .. } => Reason::Pair("unauthorized", reason.clone()),
            Error::RequestFailed(f) => match &f.cause {
                Cause::Status(code) => Reason::Other(Term::Tuple(vec![
                    Term::Atom("http_error_code"),
                    Term::Int(i64::from(*code)),
                    Term::Bin(format!("{} {}", f.method, f.url)),
                ])),
                Cause::Nxdomain => Reason::Pair("nxdomain", format!("could not resolve {}", f.url)),
                _ => Reason::Other(f.term()),
            },
            Error::ChangesReader(_) => Reason::Other(Term::Atom("changes_reader_died")),
            Error::Worker { pid, error } => Reason::Other(Term::Tuple(vec![
                Term::Atom("worker_died"),
                Term::Pid(*pid),
                error.term(),
            ])),
            Error::Checkpoint { side, error } => match error.as_ref() {
                Error::RequestFailed(f) => Reason::Other(f.term()),
                other => Reason::Pair(
                    "checkpoint_commit_failure",
                    format!("Error updating the {side} checkpoint document: {other}"),
                ),
            },
            Error::Cancelled => Reason::Other(Term::Atom("cancelled")),
            Error::BadRequest(m) => Reason::Pair("bad_request", m.clone()),
            Error::NotFound(m) => Reason::Pair("not_found", m.clone()),
            Error::Invalid(m) | Error::Protocol(m) => Reason::Other(Term::Bin(m.clone())),
        }
    }

    /// The term of a failure inside a worker (what it exited with).
    fn term(&self) -> Term {
        match self {
            Error::RequestFailed(f) => f.term(),
            other => match other.reason() {
                Reason::Pair(name, text) => Term::Tuple(vec![Term::Atom(name), Term::Bin(text)]),
                Reason::Other(t) => t,
            },
        }
    }

    /// How `POST /_replicate` reports a replication that ended with this error: `error`
    /// and `reason`. A `{Name, Text}` reason is sent as it is (CouchDB's error table then
    /// gives the status: `unauthorized` 401, `forbidden` 403, the rest — `db_not_found`
    /// included — 500); any other term as `error` with the term printed.
    pub fn answer(&self) -> (String, String) {
        match self.reason() {
            Reason::Pair(name, text) => (name.to_string(), text),
            Reason::Other(Term::Bin(text)) => ("error".into(), text),
            Reason::Other(term) => ("error".into(), term.to_string()),
        }
    }

    /// How `_scheduler` shows a crash with this error (`rep_error_to_binary`): errors met
    /// while connecting as `name: text`, a checkpoint failure as its text, other terms
    /// printed.
    pub fn crash_reason(&self) -> String {
        let started = !matches!(
            self,
            Error::ChangesReader(_) | Error::Worker { .. } | Error::Checkpoint { .. }
        );
        match self.reason() {
            Reason::Pair(name, text) if started => format!("{name}: {text}"),
            Reason::Pair(_, text) => text,
            Reason::Other(Term::Bin(text)) => text,
            Reason::Other(term) => term.to_string(),
        }
    }
}

/// An Erlang term, printed as `io_lib:format("~p")` prints it on one line.
#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    Atom(&'static str),
    Int(i64),
    /// A binary: `<<"text">>`.
    Bin(String),
    /// A string (a list of characters): `"text"`.
    Str(String),
    Tuple(Vec<Term>),
    /// A process id `<0.N.0>`.
    Pid(u64),
}

fn quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Term::Atom(a) => f.write_str(a),
            Term::Int(i) => write!(f, "{i}"),
            Term::Bin(s) => {
                f.write_str("<<")?;
                quoted(f, s)?;
                f.write_str(">>")
            }
            Term::Str(s) => quoted(f, s),
            Term::Pid(n) => write!(f, "<0.{n}.0>"),
            Term::Tuple(items) => {
                f.write_str("{")?;
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str("}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(method: &str, url: &str, cause: Cause) -> Error {
        Error::RequestFailed(RequestFailed {
            method: method.into(),
            url: url.into(),
            cause,
        })
    }

    #[test]
    fn start_errors_as_replicate_answers_them() {
        let e = Error::DbNotFound("could not open http://h/db/".into());
        assert_eq!(
            e.answer(),
            ("db_not_found".into(), "could not open http://h/db/".into())
        );
        assert_eq!(
            e.crash_reason(),
            "db_not_found: could not open http://h/db/"
        );
        let e = failed("GET", "http://h/db/", Cause::Status(500));
        assert_eq!(
            e.answer(),
            (
                "error".into(),
                r#"{http_error_code,500,<<"GET http://h/db/">>}"#.into()
            )
        );
        let e = failed("GET", "http://h:1/db/", Cause::Refused);
        assert_eq!(
            e.crash_reason(),
            r#"{http_request_failed,"GET","http://h:1/db/",{error,{error,{conn_failed,{error,econnrefused}}}}}"#
        );
        let e = failed("GET", "http://nowhere/db/", Cause::Nxdomain);
        assert_eq!(
            e.answer(),
            (
                "nxdomain".into(),
                "could not resolve http://nowhere/db/".into()
            )
        );
        let e = Error::Unauthorized {
            status: 401,
            reason: "unauthorized to access or create database http://h/db/".into(),
        };
        assert_eq!(e.answer().0, "unauthorized");
    }

    #[test]
    fn errors_of_a_running_replication() {
        let e = Error::ChangesReader(Box::new(failed("GET", "u", Cause::Timeout)));
        assert_eq!(e.answer(), ("error".into(), "changes_reader_died".into()));
        let e = Error::Worker {
            pid: 7,
            error: Box::new(failed("POST", "http://h/db/_bulk_docs", Cause::Status(500))),
        };
        assert_eq!(
            e.crash_reason(),
            r#"{worker_died,<0.7.0>,{http_request_failed,"POST","http://h/db/_bulk_docs",{error,{code,500}}}}"#
        );
        let e = Error::Checkpoint {
            side: "target",
            error: Box::new(Error::Protocol("conflict".into())),
        };
        assert_eq!(
            e.crash_reason(),
            "Error updating the target checkpoint document: conflict"
        );
        assert_eq!(e.answer().0, "checkpoint_commit_failure");
    }
}
