//! CouchDB's disk monitor (`[disk_monitor]`, CouchDB 3.4+): past a percentage of the data
//! file system in use, interactive document writes are refused, stale views are not brought
//! up to date by queries, and background index updates do not start. Replicated writes
//! (`new_edits=false`), purges, compaction and database deletion still run: they are how
//! space comes back.
//!
//! The decisions are pure ([`Thresholds::blocks`], [`percent_used`]); the file system is
//! measured by the binary, which stores the figure with [`DiskMonitor::set_percent_used`]
//! every interval. Settee keeps every database and index in one directory, so CouchDB's two
//! figures (`database_dir`, `view_index_dir`) are one here.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::RwLock;

/// The reason of a write refused past `interactive_database_writes_threshold` (CouchDB's).
pub const WRITES_REFUSED: &str = "database_dir is too full";
/// The reason of a write that failed because the file system is full (`ENOSPC`).
pub const NO_SPACE: &str = "No space left on device";
/// The reason of a query refused past `interactive_view_indexing_threshold` (CouchDB's).
pub const INDEXING_REFUSED: &str = "not enough room to update index";

/// The error of an interactive edit refused past `interactive_database_writes_threshold`.
pub fn edits_refused() -> crate::Error {
    crate::Error::InsufficientStorage(WRITES_REFUSED.into())
}

/// The `[disk_monitor]` settings, with CouchDB's defaults. Thresholds are percentages of
/// the file system in use; past one (strictly greater), its kind of work stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// `enable` (default `false`): nothing is ever refused while it is off.
    pub enable: bool,
    /// `background_view_indexing_threshold` (80).
    pub background_view_indexing: u8,
    /// `interactive_view_indexing_threshold` (90).
    pub interactive_view_indexing: u8,
    /// `interactive_database_writes_threshold` (90).
    pub interactive_database_writes: u8,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            enable: false,
            background_view_indexing: 80,
            interactive_view_indexing: 90,
            interactive_database_writes: 90,
        }
    }
}

/// What is refused at one level of use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Blocks {
    pub interactive_writes: bool,
    pub interactive_indexing: bool,
    pub background_indexing: bool,
}

impl Thresholds {
    pub fn blocks(&self, percent_used: u8) -> Blocks {
        if !self.enable {
            return Blocks::default();
        }
        Blocks {
            interactive_writes: percent_used > self.interactive_database_writes,
            interactive_indexing: percent_used > self.interactive_view_indexing,
            background_indexing: percent_used > self.background_view_indexing,
        }
    }
}

/// The percentage of a file system in use as `df` (and Erlang's `disksup`, which CouchDB
/// reads) reports it: used blocks over the blocks an unprivileged user could have (used +
/// available; the root reserve counts as neither), rounded up, so a nearly full disk never
/// shows as less full than it is.
pub fn percent_used(total_blocks: u64, free_blocks: u64, available_blocks: u64) -> u8 {
    let used = total_blocks.saturating_sub(free_blocks) as u128;
    let usable = used + available_blocks as u128;
    if usable == 0 {
        return 0;
    }
    (used * 100).div_ceil(usable).min(100) as u8
}

/// The live state: settings (changed through `/_config`) and the last measurement. Shared
/// by every database and the view indexer.
#[derive(Debug, Default)]
pub struct DiskMonitor {
    thresholds: RwLock<Thresholds>,
    percent_used: AtomicU8,
}

impl DiskMonitor {
    pub fn set_thresholds(&self, t: Thresholds) {
        *self.thresholds.write().unwrap_or_else(|e| e.into_inner()) = t;
    }

    pub fn thresholds(&self) -> Thresholds {
        *self.thresholds.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_percent_used(&self, percent: u8) {
        self.percent_used.store(percent.min(100), Ordering::Relaxed);
    }

    pub fn percent_used(&self) -> u8 {
        self.percent_used.load(Ordering::Relaxed)
    }

    pub fn blocks(&self) -> Blocks {
        self.thresholds().blocks(self.percent_used())
    }

    /// `Err(insufficient_storage)` while interactive edits are refused (past
    /// `interactive_database_writes_threshold`), as `couch_db:update_docs` refuses them.
    pub fn room_for_edits(&self) -> crate::Result<()> {
        if self.blocks().interactive_writes {
            return Err(edits_refused());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_blocks_nothing() {
        let t = Thresholds::default();
        assert_eq!(t.blocks(100), Blocks::default());
    }

    #[test]
    fn thresholds_are_strict() {
        let t = Thresholds {
            enable: true,
            ..Thresholds::default()
        };
        assert_eq!(t.blocks(80), Blocks::default());
        let b = t.blocks(81);
        assert!(b.background_indexing && !b.interactive_indexing && !b.interactive_writes);
        assert!(!t.blocks(90).interactive_writes);
        let b = t.blocks(91);
        assert!(b.background_indexing && b.interactive_indexing && b.interactive_writes);
    }

    #[test]
    fn zero_threshold_blocks_any_use() {
        let t = Thresholds {
            enable: true,
            interactive_database_writes: 0,
            ..Thresholds::default()
        };
        assert!(!t.blocks(0).interactive_writes);
        assert!(t.blocks(1).interactive_writes);
    }

    #[test]
    fn percent_used_as_df() {
        assert_eq!(percent_used(0, 0, 0), 0);
        assert_eq!(percent_used(100, 100, 100), 0);
        assert_eq!(percent_used(100, 0, 0), 100);
        // 5 % reserved for root: 50 used of 95 usable is 52.6 %, shown as 53.
        assert_eq!(percent_used(100, 50, 45), 53);
        // Anything in use shows as at least 1 %.
        assert_eq!(percent_used(1_000_000, 999_999, 999_999), 1);
    }

    #[test]
    fn monitor_combines_settings_and_measurement() {
        let m = DiskMonitor::default();
        m.set_percent_used(95);
        assert!(!m.blocks().interactive_writes);
        m.set_thresholds(Thresholds {
            enable: true,
            ..Thresholds::default()
        });
        assert!(m.blocks().interactive_writes);
        m.set_percent_used(50);
        assert_eq!(m.blocks(), Blocks::default());
        m.set_percent_used(250);
        assert_eq!(m.percent_used(), 100);
    }
}
