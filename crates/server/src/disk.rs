//! The measuring half of `[disk_monitor]`: a thread that reads the data directory's file
//! system use (`statvfs`) every `[settee] disk_check_interval` milliseconds and hands the
//! percentage to [`DiskMonitor`], which decides what to refuse.

use settee_db::disk::{percent_used, DiskMonitor};
use settee_node::NodeConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the file system is measured by default. CouchDB follows Erlang's `disksup`
/// check interval instead of a setting of its own.
pub const DEFAULT_INTERVAL_MS: u64 = 60_000;

/// The file system holding `dir`: percent in use as `df` shows it.
fn measure(dir: &Path) -> std::io::Result<u8> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` is a valid place for the result.
    if unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // `fsblkcnt_t` is 32 bits wide on some targets.
    #[allow(clippy::unnecessary_cast)]
    Ok(percent_used(
        st.f_blocks as u64,
        st.f_bfree as u64,
        st.f_bavail as u64,
    ))
}

/// Measures once now (so the first requests see a figure), then every interval on a thread
/// of its own for the life of the process.
pub fn spawn(dir: PathBuf, monitor: Arc<DiskMonitor>, node: Arc<NodeConfig>) {
    let update = move || match measure(&dir) {
        Ok(p) => monitor.set_percent_used(p),
        Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "disk monitor: statvfs failed"),
    };
    update();
    std::thread::Builder::new()
        .name("disk-monitor".into())
        .spawn(move || loop {
            let ms = node.get_u64("settee", "disk_check_interval", DEFAULT_INTERVAL_MS);
            std::thread::sleep(Duration::from_millis(ms.max(10)));
            update();
        })
        .expect("spawn disk monitor");
}
