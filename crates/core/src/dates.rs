//! Calendar dates of Unix times (UTC) in the formats CouchDB writes. Pure.

/// Weekday names by `days since 1970-01-01 % 7` (that day was a Thursday).
pub const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
pub const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A Unix time broken down in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    /// 1–12.
    pub month: i64,
    /// 1–31.
    pub day: i64,
    pub hour: u64,
    pub minute: u64,
    pub second: u64,
    pub weekday: &'static str,
}

/// `unix_secs` in UTC (Howard Hinnant's `civil_from_days`).
pub fn utc(unix_secs: u64) -> Utc {
    let days = unix_secs / 86_400;
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    Utc {
        year: yoe + era * 400 + i64::from(month <= 2),
        month,
        day: doy - (153 * mp + 2) / 5 + 1,
        hour: unix_secs / 3600 % 24,
        minute: unix_secs / 60 % 60,
        second: unix_secs % 60,
        weekday: WEEKDAYS[(days % 7) as usize],
    }
}

/// `Wed, 25 Nov 2026 03:05:00 GMT` (RFC 1123, as `httpd_util:rfc1123_date`).
pub fn rfc1123(unix_secs: u64) -> String {
    let t = utc(unix_secs);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        t.weekday,
        t.day,
        MONTHS[(t.month - 1) as usize],
        t.year,
        t.hour,
        t.minute,
        t.second
    )
}

/// `2026-11-25T03:05:00Z`.
pub fn iso8601(unix_secs: u64) -> String {
    let t = utc(unix_secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(rfc1123(1_795_575_900), "Wed, 25 Nov 2026 03:05:00 GMT");
        assert_eq!(rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(iso8601(1_795_575_900), "2026-11-25T03:05:00Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
    }
}
