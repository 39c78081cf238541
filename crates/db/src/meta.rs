//! Keys of the `meta` column family (layouts in docs/design.md).

use settee_storage::DbId;

/// `N | name` → database record.
pub fn db_name_key(name: &str) -> Vec<u8> {
    let mut k = b"N".to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

pub const NAME_PREFIX: &[u8] = b"N";
pub const NAME_END: &[u8] = b"O";

/// Highest database id ever allocated (ids are never reused).
pub const NEXT_DB_ID: &[u8] = b"I";

fn with_db(tag: u8, db: DbId) -> Vec<u8> {
    let mut k = vec![tag];
    k.extend_from_slice(&db.to_be_bytes());
    k
}

/// `S | db` → Stats.
pub fn stats_key(db: DbId) -> Vec<u8> {
    with_db(b'S', db)
}

/// `P | db` → properties JSON (revs_limit, security, purged_infos_limit, uuid).
pub fn props_key(db: DbId) -> Vec<u8> {
    with_db(b'P', db)
}

/// `U | seq` → database event (for `_db_updates`).
pub fn event_key(seq: u64) -> Vec<u8> {
    with_db(b'U', seq)
}

/// `Q | db | purge_seq` → a purge: the document id and the revisions purged (for view
/// indexes, which must drop the rows of purged documents).
pub fn purge_key(db: DbId, purge_seq: u64) -> Vec<u8> {
    let mut k = with_db(b'Q', db);
    k.extend_from_slice(&purge_seq.to_be_bytes());
    k
}

/// `T | db | partition` → `PartitionStats` of one partition of a partitioned database.
pub fn partition_key(db: DbId, partition: &str) -> Vec<u8> {
    let mut k = with_db(b'T', db);
    k.extend_from_slice(partition.as_bytes());
    k
}

/// `[T | db, T | db+1)`: every partition counter of the database.
pub fn partition_range(db: DbId) -> (Vec<u8>, Vec<u8>) {
    (with_db(b'T', db), with_db(b'T', db + 1))
}

/// `G` → the `_db_updates` stream's uuid (32 hex digits).
pub const EVENTS_UUID: &[u8] = b"G";

pub const EVENT_PREFIX: &[u8] = b"U";
pub const EVENT_END: &[u8] = b"V";

const DB_RECORD_V1: u8 = 1;

pub fn encode_db_record(id: DbId) -> Vec<u8> {
    let mut v = vec![DB_RECORD_V1];
    v.extend_from_slice(&id.to_be_bytes());
    v
}

pub fn decode_db_record(v: &[u8]) -> Option<DbId> {
    match v {
        [DB_RECORD_V1, rest @ ..] if rest.len() == 8 => {
            Some(u64::from_be_bytes(rest.try_into().ok()?))
        }
        _ => None,
    }
}
