//! Key prefixes for per-database column families.

pub type DbId = u64;

/// The 8-byte prefix every key of database `db` starts with.
pub fn db_prefix(db: DbId) -> [u8; 8] {
    db.to_be_bytes()
}

/// `[start, end)` covering every key of database `db`.
pub fn db_range(db: DbId) -> (Vec<u8>, Vec<u8>) {
    (db.to_be_bytes().to_vec(), (db + 1).to_be_bytes().to_vec())
}

/// `db | suffix`.
pub fn key_in_db(db: DbId, suffix: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + suffix.len());
    k.extend_from_slice(&db.to_be_bytes());
    k.extend_from_slice(suffix);
    k
}

/// `db | seq`, both big-endian so keys sort by sequence.
pub fn seq_key(db: DbId, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&db.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}
