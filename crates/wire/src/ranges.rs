//! `Range: bytes=…` headers of attachment reads.

/// Most ranges one request may ask for; with more, CouchDB sends the whole attachment.
pub const MAX_RANGES: usize = 9;

/// A parsed `Range: bytes=…` header, as CouchDB reads it: `None` to send the whole
/// attachment (no header, one that does not parse, a first range of `0-`, too many
/// ranges), `Err` for 416, or the inclusive ranges, ends clamped to the length.
///
/// Every range returned satisfies `from <= to < len`.
#[allow(clippy::result_unit_err)]
pub fn byte_ranges(value: &str, len: u64) -> Option<Result<Vec<(u64, u64)>, ()>> {
    let spec = value.trim().strip_prefix("bytes=")?;
    let mut ranges = Vec::new();
    for part in spec.split(',') {
        let (a, b) = part.split_once('-')?;
        let (a, b) = (a.trim(), b.trim());
        let last = len.saturating_sub(1);
        let range = match (a.parse::<u64>().ok(), b.parse::<u64>().ok()) {
            (Some(a), Some(b)) if a <= b => (a, b.min(last)),
            (Some(_), Some(_)) => return Some(Err(())),
            (Some(0), None) if b.is_empty() && ranges.is_empty() => return None,
            (Some(a), None) if b.is_empty() => (a, last),
            (None, Some(n)) if a.is_empty() && n > 0 => (len.saturating_sub(n), last),
            _ => return None,
        };
        if len == 0 || range.0 >= len {
            return Some(Err(()));
        }
        ranges.push(range);
    }
    (ranges.len() <= MAX_RANGES).then_some(Ok(ranges))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(byte_ranges("bytes=0-4", 10), Some(Ok(vec![(0, 4)])));
        assert_eq!(byte_ranges("bytes=5-", 10), Some(Ok(vec![(5, 9)])));
        assert_eq!(byte_ranges("bytes=-3", 10), Some(Ok(vec![(7, 9)])));
        assert_eq!(byte_ranges("bytes=8-100", 10), Some(Ok(vec![(8, 9)])));
        assert_eq!(byte_ranges("bytes=10-12", 10), Some(Err(())));
        assert_eq!(byte_ranges("bytes=4-2", 10), Some(Err(())));
        assert_eq!(
            byte_ranges("bytes=0-1, 3-4,-2", 10),
            Some(Ok(vec![(0, 1), (3, 4), (8, 9)]))
        );
        assert_eq!(byte_ranges("bytes=0-", 10), None, "CouchDB sends it whole");
        assert_eq!(
            byte_ranges("bytes=1-2,0-", 10),
            Some(Ok(vec![(1, 2), (0, 9)]))
        );
        assert_eq!(byte_ranges("bytes=0-1,x", 10), None);
        assert_eq!(byte_ranges("items=0-1", 10), None);
        let many = ["0-0"; MAX_RANGES + 1].join(",");
        assert_eq!(byte_ranges(&format!("bytes={many}"), 10), None);
    }
}
