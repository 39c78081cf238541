//! The grammar of client requests, as CouchDB reads it: a raw path into a typed
//! [`Endpoint`], query parameters ([`Params`]) with CouchDB's typed getters and messages,
//! view-query arguments ([`mrargs::MrArgs`]), `Range` headers, attachment read options,
//! the framing of a `multipart/related` document upload, and the connection-level request
//! head gate ([`head::Gate`]) that makes CouchDB's lenient request targets fit for hyper.
//!
//! Pure: no I/O, no storage, no HTTP server. That is what lets every parser that takes client
//! bytes be fuzzed (`fuzz/`) without building RocksDB, and lets `settee-http` stay dispatch:
//! it matches these values to handlers and turns [`Error`] into its one error table.

mod atts;
mod error;
pub mod head;
pub mod mrargs;
pub mod multipart;
mod params;
pub mod path;
mod ranges;

pub use atts::AttOpts;
pub use error::{Error, Result};
pub use multipart::{accepts, boundary_of, read_related, FollowsSink};
pub use params::{decode_param_json, parse_json, Params};
pub use path::{check_url_encoding, design_fn, url_encode, DbOp, DesignFn, Endpoint, NodeOp};
pub use ranges::{byte_ranges, MAX_RANGES};
