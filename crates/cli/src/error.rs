//! One error type for the client commands; `main` prints it and exits non-zero.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad argument (URL, option).
    #[error("{0}")]
    Usage(String),
    /// The connection or the HTTP exchange failed.
    #[error("{url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    /// The server answered with an error status (CouchDB's `{"error","reason"}` shown).
    #[error("{method} {url}: {status} {body}")]
    Status {
        method: String,
        url: String,
        status: u16,
        body: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A backup file, log file or server answer that is not what it should be.
    #[error("{0}")]
    Format(String),
}

impl Error {
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
