//! The `settee` command line's client commands: `bench`, `compact`, `backup`, `restore`,
//! `cluster` and `completions`. Each speaks HTTP to any CouchDB-compatible server (Settee
//! or CouchDB), so this crate depends on no other Settee crate; the binary
//! (`crates/server`) only dispatches to [`run`].
//!
//! Blocking I/O throughout (ureq, threads for concurrency): a command line waits for its
//! answers anyway, and threads keep each command a plain loop. Progress bars (indicatif)
//! draw on stderr only when it is a terminal, so scripts and tests see the results alone.

mod backup;
mod bench;
mod client;
mod cluster;
mod compact;
mod error;
mod moves;
mod plot;
mod progress;
mod restore;
mod split;

pub use client::{Client, Target};
pub use error::Error;

use clap::Subcommand;

/// The client subcommands, flattened into the binary's own `Command` enum.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the benchmark workloads (inserts, a view build, view queries, random reads)
    /// against a CouchDB-compatible server; print a results table, write JSON, Markdown
    /// and an SVG plot of throughput over time.
    Bench(bench::BenchArgs),
    /// Compact a database (and with --views its design documents' view indexes), waiting
    /// until the server reports it finished.
    Compact(compact::CompactArgs),
    /// Back up a database to a file in couchbackup's line-delimited format (resumable).
    Backup(backup::BackupArgs),
    /// Restore a backup file (written by `settee backup` or couchbackup) into a database.
    Restore(restore::RestoreArgs),
    /// See and grow a cluster through any of its members: `status` (members, databases'
    /// q and n and where their ranges live), `add-node`, `move` (a copy to another
    /// member), `rebalance`.
    Cluster(cluster::ClusterArgs),
    /// Print a shell completion script for `settee` to stdout.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// Runs a client command. `root` builds the whole `settee` command (for completions).
pub fn run(command: Command, root: impl FnOnce() -> clap::Command) -> Result<(), Error> {
    match command {
        Command::Bench(args) => bench::run(&args),
        Command::Compact(args) => compact::run(&args),
        Command::Backup(args) => backup::run(&args),
        Command::Restore(args) => restore::run(&args),
        Command::Cluster(args) => cluster::run(&args),
        Command::Completions { shell } => {
            let mut cmd = root();
            let name = cmd.get_name().to_string();
            clap_complete::generate(shell, &mut cmd, name, &mut std::io::stdout());
            Ok(())
        }
    }
}
