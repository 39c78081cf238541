//! The crate's integration tests, one binary (each file a module): one link, and one
//! compile of the shared helpers, instead of one per file.

mod attachments;
mod scans;
mod uuid;
mod writer;
