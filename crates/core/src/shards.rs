//! CouchDB's shard ring (`mem3`): `q` contiguous ranges of the 32-bit hash space, and the
//! hash that places a document in one of them. Settee stores a database in one place
//! whatever `q` is; this is what `_shards` reports, as a single CouchDB node would.

/// The `q` ranges, inclusive: each `2^32 / q` wide, the last one ending at `ffffffff`.
pub fn ranges(q: u32) -> Vec<(u32, u32)> {
    let q = u64::from(q.max(1));
    let width = (1u64 << 32) / q;
    (0..q)
        .map(|i| {
            let start = i * width;
            let end = if i + 1 == q {
                u64::from(u32::MAX)
            } else {
                start + width - 1
            };
            (start as u32, end as u32)
        })
        .collect()
}

/// A range as CouchDB names it: `00000000-7fffffff`.
pub fn range_name((start, end): (u32, u32)) -> String {
    format!("{start:08x}-{end:08x}")
}

/// A range's bounds from its name (`00000000-7fffffff`): two 8-digit hex numbers, the
/// first not above the second.
pub fn parse_range(name: &str) -> Option<(u32, u32)> {
    let (b, e) = name.split_once('-')?;
    let hex = |s: &str| {
        (s.len() == 8 && s.bytes().all(|c| c.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
    };
    let (b, e) = (hex(b)?, hex(e)?);
    (b <= e).then_some((b, e))
}

/// The two halves of `range` as CouchDB's resharding cuts it (`mem3_reshard`'s
/// `target_ranges` with 2 parts): the first `len / 2` positions, then the rest. `None`
/// for a range of a single position.
pub fn split_range((start, end): (u32, u32)) -> Option<[(u32, u32); 2]> {
    let len = u64::from(end) - u64::from(start) + 1;
    if len < 2 {
        return None;
    }
    let first_end = (u64::from(start) + len / 2 - 1) as u32;
    Some([(start, first_end), (first_end + 1, end)])
}

/// The hash placing `id`: CRC-32 of the id, or in a partitioned database of its partition
/// (ids starting with `_` hash whole, as `couch_partition:hash` does).
pub fn hash(id: &str, partitioned: bool) -> u32 {
    let key = match crate::partition_of(id) {
        Some(p) if partitioned => p,
        _ => id,
    };
    crc32fast::hash(key.as_bytes())
}

/// The range of the ring of `q` that holds `id`.
pub fn range_of(q: u32, id: &str, partitioned: bool) -> (u32, u32) {
    let h = hash(id, partitioned);
    *ranges(q)
        .iter()
        .find(|(s, e)| (*s..=*e).contains(&h))
        .expect("the ranges cover the hash space")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_as_couchdb_cuts_them() {
        let names = |q| ranges(q).into_iter().map(range_name).collect::<Vec<_>>();
        assert_eq!(names(1), ["00000000-ffffffff"]);
        assert_eq!(names(2), ["00000000-7fffffff", "80000000-ffffffff"]);
        assert_eq!(
            names(3),
            [
                "00000000-55555554",
                "55555555-aaaaaaa9",
                "aaaaaaaa-ffffffff"
            ]
        );
        assert_eq!(names(8).len(), 8);
    }

    #[test]
    fn ids_hash_by_crc32_and_partitions_together() {
        // CRC-32 ("IEEE") of "foo", as erlang:crc32/1 gives it.
        assert_eq!(hash("foo", false), 0x8c73_6521);
        assert_eq!(hash("foo:a", true), hash("foo:b", true));
        assert_eq!(hash("foo:a", true), hash("foo", false));
        assert_eq!(hash("_design/x", true), hash("_design/x", false));
        assert_eq!(range_of(2, "foo", false), (0x8000_0000, 0xffff_ffff));
    }

    #[test]
    fn ranges_split_in_two_as_couchdb_cuts_them() {
        let names = |r: [(u32, u32); 2]| r.map(range_name);
        let whole = parse_range("00000000-ffffffff").unwrap();
        assert_eq!(
            names(split_range(whole).unwrap()),
            ["00000000-7fffffff", "80000000-ffffffff"]
        );
        // A third of the ring (CouchDB's q=3 first range), an odd length: the rest goes last.
        let third = parse_range("00000000-55555554").unwrap();
        assert_eq!(
            names(split_range(third).unwrap()),
            ["00000000-2aaaaaa9", "2aaaaaaa-55555554"]
        );
        assert_eq!(split_range((5, 6)), Some([(5, 5), (6, 6)]));
        assert_eq!(split_range((7, 7)), None);
        for bad in [
            "",
            "0-1",
            "00000000",
            "0000000g-ffffffff",
            "80000000-7fffffff",
        ] {
            assert_eq!(parse_range(bad), None, "{bad}");
        }
    }
}
