//! Mango, CouchDB's declarative query language: selectors (normalisation, matching),
//! and — built on them — index choice and query planning.
//!
//! Everything here is pure: values in, values out. The HTTP crate parses requests and
//! executes plans against the database and the view engine; this crate decides what a
//! selector means and which documents it matches, exactly as CouchDB 3.5 does, with
//! CouchDB's error names and reason texts ([`Error`]).

pub mod bookmark;
pub mod erlfmt;
mod error;
pub mod field;
pub mod index;
pub mod lazy;
pub mod opts;
pub mod plan;
pub mod selector;

pub use error::Error;
pub use selector::{normalize, Selector};
