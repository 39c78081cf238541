//! This process as the operating system sees it (Linux `/proc/self`); zeros elsewhere.

/// Figures of this process, read afresh on each call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Process {
    /// Resident memory (`VmRSS`), and its peak (`VmHWM`), in bytes.
    pub rss_bytes: u64,
    pub rss_peak_bytes: u64,
    /// Virtual memory (`VmSize`) in bytes.
    pub virtual_bytes: u64,
    pub threads: u64,
    pub open_fds: u64,
    /// Voluntary plus involuntary context switches.
    pub context_switches: u64,
    /// Bytes passed to `read`/`write`-like calls (sockets and files: `rchar`, `wchar`).
    pub io_read_bytes: u64,
    pub io_written_bytes: u64,
}

/// The value of `key:` in a `/proc` key-value file, its first number (kB → bytes when
/// the unit is `kB`).
fn field(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| {
            let mut parts = v.split_whitespace();
            let n: u64 = parts.next()?.parse().ok()?;
            Some(if parts.next() == Some("kB") {
                n * 1024
            } else {
                n
            })
        })
        .unwrap_or(0)
}

pub fn snapshot() -> Process {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    Process {
        rss_bytes: field(&status, "VmRSS"),
        rss_peak_bytes: field(&status, "VmHWM"),
        virtual_bytes: field(&status, "VmSize"),
        threads: field(&status, "Threads"),
        open_fds: open_fds(),
        context_switches: field(&status, "voluntary_ctxt_switches")
            + field(&status, "nonvoluntary_ctxt_switches"),
        io_read_bytes: field(&io, "rchar"),
        io_written_bytes: field(&io, "wchar"),
    }
}

/// Open file descriptors (the directory listing itself holds one more while it is read).
pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse() {
        let text = "Name:\tx\nVmRSS:\t  1024 kB\nThreads:\t7\n";
        assert_eq!(field(text, "VmRSS"), 1024 * 1024);
        assert_eq!(field(text, "Threads"), 7);
        assert_eq!(field(text, "VmHWM"), 0);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process() {
        let p = snapshot();
        assert!(
            p.rss_bytes > 0 && p.threads >= 1 && p.open_fds >= 3,
            "{p:?}"
        );
    }
}
