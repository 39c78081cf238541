//! The crate's integration tests, one binary (each file a module): one link, and one
//! compile of the shared helpers, instead of one per file.

mod common;
mod compile;
mod doc;
mod filter;
mod limits;
mod map;
mod reduce;
mod render;
mod require;
mod validate;
