//! CouchDB's query-server protocol: design-document functions in languages other than
//! JavaScript run in external processes (CouchDB's `couch_os_process`), one JSON command
//! per line on the child's stdin, one JSON answer per line on its stdout.
//!
//! This crate owns the client side: [`Process`] (spawn, prompt with a per-answer deadline,
//! logs, errors, crash and garbage detection, pipelined `map_doc`), the per-language
//! [`pool`] of ready processes ([`QueryServers`]), and the configuration CouchDB 3 reads
//! (`COUCHDB_QUERY_SERVER_<LANG>` environment variables, `[query_servers]`).
//!
//! Threading contract: [`QueryServers`] is shared by every thread; a [`Lease`] is one
//! thread's exclusive use of one process and goes back to the pool when dropped (or is
//! killed there when it broke). Everything blocks; async callers use blocking threads.

mod config;
mod ddoc;
mod pool;
mod process;

pub use config::{Command, Languages};
pub use ddoc::{DdocRef, ListSession};
pub use pool::{Lease, QueryServers, Settings, Setup};
pub use process::{Emits, Process};

/// How a query-server call failed. Everything but [`Error::Server`] broke the process
/// (it was killed and will be replaced).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No query server is configured for the language.
    #[error("unknown query language {0}")]
    UnknownLanguage(String),
    #[error("cannot start query server `{command}`: {reason}")]
    Spawn { command: String, reason: String },
    /// No answer within `os_process_timeout`.
    #[error("OS process timed out.")]
    Timeout,
    /// The process closed its pipes (exited, with this status if it is known).
    #[error("OS process exited (status {0:?})")]
    Exited(Option<i32>),
    /// An answer that is not JSON or not the shape the command asks for.
    #[error("OS process answered garbage: {0}")]
    Garbage(String),
    #[error("OS process I/O: {0}")]
    Io(String),
    /// `["error", error, reason]`: the call failed, the process is fine.
    #[error("{error}: {reason}")]
    Server { error: String, reason: String },
    /// `["fatal", error, reason]`: the call failed and the process was stopped.
    #[error("{error}: {reason}")]
    Fatal { error: String, reason: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// CouchDB's error name and reason (`chttpd:error_info` of what the call threw):
    /// `os_process_error` for a process that failed, the server's own for its errors.
    pub fn parts(&self) -> (String, String) {
        match self {
            Error::UnknownLanguage(l) => ("unknown_query_language".into(), l.clone()),
            Error::Server { error, reason } | Error::Fatal { error, reason } => {
                (error.clone(), reason.clone())
            }
            Error::Exited(Some(code)) => {
                ("os_process_error".into(), format!("{{exit_status,{code}}}"))
            }
            other => ("os_process_error".into(), other.to_string()),
        }
    }

    /// Whether the process survived the failure.
    pub fn process_survives(&self) -> bool {
        matches!(self, Error::Server { .. })
    }
}
