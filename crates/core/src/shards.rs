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
}
