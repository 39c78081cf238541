//! CouchDB's replicator. [`Endpoint`] is the seam between the algorithm ([`job`]) and the
//! two databases it copies between: [`remote::Remote`] reaches an HTTP peer; the HTTP crate
//! implements it for this server's own databases, so local replication needs no loopback
//! HTTP. Checkpoints ([`checkpoint`]) and replication ids ([`id`]) are pure.

pub mod checkpoint;
pub mod endpoint;
mod error;
pub mod id;
pub mod job;
pub mod remote;
pub mod schedule;
pub mod spec;
pub mod streamed;

pub use endpoint::{
    ChangeRow, Changes, Content, Doc, Endpoint, Fetch, Filter, Follows, Missing, PeerInfo, Wait,
    WriteFailure,
};
pub use error::{Cause, Error, RequestFailed, Result, Term};
