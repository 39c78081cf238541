//! The crate's integration tests, one binary (each file a module): one link, and one
//! compile of the shared helpers, instead of one per file.

mod access;
mod all_docs;
mod attachments;
mod changes;
mod common;
mod dbs;
mod design_fns;
mod docs;
mod find;
mod replication;
mod server;
mod views;
