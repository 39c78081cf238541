//! Logging in CouchDB's line format, to stderr, with a level that `[log] level` changes at
//! runtime:
//!
//! ```text
//! [notice] 2026-11-26T10:00:00.000000Z nonode@nohost <0.7.0> a1b2c3d4e5 localhost:5984 127.0.0.1 admin GET /db 200 ok 3
//! ```
//!
//! level, UTC time to the microsecond, node, the emitting thread (where CouchDB names an
//! Erlang process), the request's id (`--------` outside requests), then the message. The
//! access log's events (target [`settee_http::ACCESS_LOG_TARGET`]) are CouchDB's `notice`
//! level, which tracing lacks: they are `INFO` events that the `notice` setting keeps
//! while hiding other `INFO` events.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The filter for a CouchDB level name (`debug`, `info`, `notice`, `warning`, `error`,
/// `critical`, `alert`, `emergency`, `none`), or for a tracing filter directive (what
/// `SETTEE_LOG` takes); `None` for neither.
pub fn filter_for(level: &str) -> Option<EnvFilter> {
    let directive = match level.trim().to_ascii_lowercase().as_str() {
        "debug" => "debug".to_string(),
        "info" => "info".to_string(),
        "notice" => format!("warn,{}=info", settee_http::ACCESS_LOG_TARGET),
        "warning" | "warn" => "warn".to_string(),
        "error" | "err" | "critical" | "crit" | "alert" | "emergency" | "emerg" => {
            "error".to_string()
        }
        "none" => "off".to_string(),
        _ => level.trim().to_string(),
    };
    EnvFilter::try_new(directive).ok()
}

/// CouchDB's default level.
pub const DEFAULT_LEVEL: &str = "info";

/// Changes the level of the installed logger.
#[derive(Clone)]
pub struct LevelHandle(reload::Handle<EnvFilter, Registry>);

impl LevelHandle {
    /// Applies `level`; an unknown one is reported and leaves the level as it was.
    pub fn set(&self, level: &str) {
        match filter_for(level) {
            Some(filter) => {
                if let Err(e) = self.0.reload(filter) {
                    tracing::warn!(error = %e, "changing the log level");
                }
            }
            None => tracing::warn!(level, "unknown [log] level; the level is unchanged"),
        }
    }
}

/// Installs the logger with `level` (a CouchDB level or a filter directive).
pub fn init(level: &str) -> LevelHandle {
    let filter = filter_for(level).unwrap_or_else(|| EnvFilter::new(DEFAULT_LEVEL));
    let (filter, handle) = reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .event_format(CouchFormat)
                .with_writer(std::io::stderr),
        )
        .init();
    LevelHandle(handle)
}

struct CouchFormat;

impl<S, N> FormatEvent<S, N> for CouchFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let level = if meta.target() == settee_http::ACCESS_LOG_TARGET {
            "notice"
        } else {
            match *meta.level() {
                Level::ERROR => "error",
                Level::WARN => "warning",
                Level::INFO => "info",
                _ => "debug",
            }
        };
        settee_metrics::global().logged(level);
        let nonce = ctx
            .event_scope()
            .and_then(|scope| {
                scope
                    .from_root()
                    .find(|s| s.name() == "request")
                    .and_then(|s| {
                        let ext = s.extensions();
                        let fields = ext.get::<FormattedFields<N>>()?;
                        Some(fields.fields.trim_start_matches("nonce=").to_string())
                    })
            })
            .unwrap_or_else(|| "--------".to_string());
        write!(
            writer,
            "[{level}] {} {} <0.{}.0> {nonce} ",
            timestamp(std::time::SystemTime::now()),
            settee_core::node::name(),
            thread_number(),
        )?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// A small number naming the current thread, stable for its life.
fn thread_number() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    thread_local! {
        static N: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    N.with(|n| *n)
}

/// `2026-11-26T10:00:00.000000Z` (UTC), as CouchDB's log timestamps.
fn timestamp(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_couchdb_shaped() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_795_600_800_000_123);
        assert_eq!(timestamp(t), "2026-11-25T10:00:00.000123Z");
        assert_eq!(
            timestamp(std::time::UNIX_EPOCH),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn levels() {
        for l in [
            "debug", "info", "notice", "warning", "error", "critical", "none",
        ] {
            assert!(filter_for(l).is_some(), "{l}");
        }
        assert!(filter_for("settee_http=debug,warn").is_some());
        let notice = filter_for("notice").unwrap().to_string();
        assert!(notice.contains("couchdb::access=info"), "{notice}");
    }
}
