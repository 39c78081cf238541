//! Database-name and document-id rules, as CouchDB 3 enforces them.

use crate::Error;

/// Longest database name CouchDB accepts.
pub const MAX_DB_NAME_LEN: usize = 238;
const SYSTEM_DBS: &[&str] = &["_users", "_replicator", "_global_changes"];

pub fn validate_db_name(name: &str) -> Result<(), Error> {
    let illegal = || {
        Error::IllegalDbName(format!(
            "Name: '{name}'. Only lowercase characters (a-z), digits (0-9), and any of the \
             characters _, $, (, ), +, -, and / are allowed. Must begin with a letter."
        ))
    };
    if SYSTEM_DBS.contains(&name) {
        return Ok(());
    }
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b'a'..=b'z') => {}
        _ => return Err(illegal()),
    }
    let ok = |b: u8| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'$' | b'(' | b')' | b'+' | b'-' | b'/');
    if !bytes.all(ok) || name.len() > MAX_DB_NAME_LEN {
        return Err(illegal());
    }
    Ok(())
}

/// The database name of a shard copy, CouchDB's `shards/{range}/{db}.{suffix}`.
pub fn shard_name(range: &str, db: &str, suffix: u64) -> String {
    format!("shards/{range}/{db}.{suffix}")
}

/// Whether `name` is a shard copy's database name ([`shard_name`]): a range of two
/// 8-digit lowercase hex bounds, a valid database name and a decimal suffix.
pub fn is_shard_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("shards/") else {
        return false;
    };
    let Some((range, copy)) = rest.split_once('/') else {
        return false;
    };
    let hex8 = |s: &str| s.len() == 8 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let range_ok = range
        .split_once('-')
        .is_some_and(|(b, e)| hex8(b) && hex8(e));
    let Some((db, suffix)) = copy.rsplit_once('.') else {
        return false;
    };
    range_ok
        && !suffix.is_empty()
        && suffix.bytes().all(|b| b.is_ascii_digit())
        && validate_db_name(db).is_ok()
}

/// The clustered database whose shard copy `name` is (CouchDB's `mem3:dbname`).
pub fn shard_db(name: &str) -> Option<&str> {
    if !is_shard_name(name) {
        return None;
    }
    let copy = name.strip_prefix("shards/")?.split_once('/')?.1;
    Some(copy.rsplit_once('.')?.0)
}

/// Which namespace a document id lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocKind {
    Normal,
    Design,
    Local,
}

impl DocKind {
    pub fn of(id: &str) -> DocKind {
        if id.starts_with("_design/") {
            DocKind::Design
        } else if id.starts_with("_local/") {
            DocKind::Local
        } else {
            DocKind::Normal
        }
    }
}

pub fn validate_doc_id(id: &str) -> Result<DocKind, Error> {
    let illegal = |r: &str| Err(Error::IllegalDocId(r.to_string()));
    match id {
        "" => return illegal("Document id must not be empty"),
        "_design/" => return illegal("Illegal document id `_design/`"),
        "_local/" => return illegal("Illegal document id `_local/`"),
        _ => {}
    }
    let kind = DocKind::of(id);
    if kind == DocKind::Normal && id.starts_with('_') {
        return illegal("Only reserved document ids may start with underscore.");
    }
    Ok(kind)
}

/// A partition name as CouchDB's `couch_partition:validate_partition` accepts it: not
/// empty, not starting with `_`, without `:`. (A `&str` is always valid UTF-8.)
/// CouchDB's default `[couchdb] max_partition_size`: 10 GiB.
pub const MAX_PARTITION_SIZE: u64 = 10 * 1024 * 1024 * 1024;

pub fn validate_partition(p: &str) -> Result<(), Error> {
    let illegal = |r: &str| Err(Error::IllegalPartition(r.to_string()));
    if p.is_empty() {
        illegal("Partition must not be empty")
    } else if p.starts_with('_') {
        illegal("Partition must not start with an underscore")
    } else if p.contains(':') {
        illegal("Partition must not contain a colon")
    } else {
        Ok(())
    }
}

/// A document id of a partitioned database: `partition:id` with a valid partition and a
/// valid id after it; design and local documents belong to no partition.
pub fn validate_partitioned_doc_id(id: &str) -> Result<DocKind, Error> {
    let kind = validate_doc_id(id)?;
    if kind != DocKind::Normal {
        return Ok(kind);
    }
    let Some((partition, rest)) = id.split_once(':') else {
        return Err(Error::IllegalDocId(
            "Doc id must be of form partition:id".into(),
        ));
    };
    validate_partition(partition)?;
    validate_doc_id(rest)?;
    Ok(kind)
}

/// The ids of a partition's documents: from `p:` up to (not including) `p;`, `;` being
/// the byte after `:`.
pub fn partition_id_range(partition: &str) -> (String, String) {
    (format!("{partition}:"), format!("{partition};"))
}

/// The partition of a document id (`None` for design/local documents and ids without `:`).
pub fn partition_of(id: &str) -> Option<&str> {
    if id.starts_with('_') {
        return None;
    }
    id.split_once(':').map(|(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shard_names() {
        let name = shard_name("00000000-7fffffff", "my/db", 1_700_000_000);
        assert_eq!(name, "shards/00000000-7fffffff/my/db.1700000000");
        assert!(is_shard_name(&name));
        assert_eq!(shard_db(&name), Some("my/db"));
        assert_eq!(shard_db("my/db"), None);
        for bad in [
            "shards/00000000-7fffffff/db",
            "shards/0000000-7fffffff/db.1",
            "shards/00000000-7FFFFFFF/db.1",
            "shards/00000000-7fffffff/Db.1",
            "shards/00000000-7fffffff/db.1x",
            "shards/00000000-7fffffff/.1",
            "db.1",
        ] {
            assert!(!is_shard_name(bad), "{bad}");
        }
    }

    #[test]
    fn partitioned_ids() {
        assert_eq!(validate_partitioned_doc_id("p:x"), Ok(DocKind::Normal));
        assert_eq!(validate_partitioned_doc_id("p:x:y"), Ok(DocKind::Normal));
        assert_eq!(
            validate_partitioned_doc_id("_design/x"),
            Ok(DocKind::Design)
        );
        let err = |id| validate_partitioned_doc_id(id).unwrap_err();
        assert_eq!(
            err("x"),
            Error::IllegalDocId("Doc id must be of form partition:id".into())
        );
        assert_eq!(
            err(":x"),
            Error::IllegalPartition("Partition must not be empty".into())
        );
        assert_eq!(
            err("p:"),
            Error::IllegalDocId("Document id must not be empty".into())
        );
        assert_eq!(
            err("_p:x"),
            Error::IllegalDocId("Only reserved document ids may start with underscore.".into())
        );
        assert_eq!(
            err("p:_x"),
            Error::IllegalDocId("Only reserved document ids may start with underscore.".into())
        );
        assert_eq!(partition_of("p:x"), Some("p"));
        assert_eq!(partition_of("_design/p:x"), None);
    }

    #[test]
    fn db_names() {
        for ok in ["a", "abc", "a-b_c$d(e)f+g/h", "_users", "_replicator", "a0"] {
            assert!(validate_db_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "A", "0abc", "_foo", "abc!", "aBc", "a b", "é"] {
            assert!(validate_db_name(bad).is_err(), "{bad}");
        }
        assert!(validate_db_name(&"a".repeat(238)).is_ok());
        assert!(validate_db_name(&"a".repeat(239)).is_err());
    }

    #[test]
    fn doc_ids() {
        assert_eq!(validate_doc_id("x"), Ok(DocKind::Normal));
        assert_eq!(validate_doc_id("_design/x"), Ok(DocKind::Design));
        assert_eq!(validate_doc_id("_local/x"), Ok(DocKind::Local));
        for bad in ["", "_design/", "_local/", "_foo", "_"] {
            assert!(validate_doc_id(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn db_name_rule_matches_regex(name in "[a-z0-9_$()+/A-Z!-]{0,12}") {
            let expect = name.len() <= MAX_DB_NAME_LEN
                && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_$()+-/".contains(c));
            let system = SYSTEM_DBS.contains(&name.as_str());
            prop_assert_eq!(validate_db_name(&name).is_ok(), expect || system);
        }

        #[test]
        fn doc_ids_not_starting_with_underscore_are_valid(id in "[^_].*") {
            prop_assert_eq!(validate_doc_id(&id), Ok(DocKind::Normal));
        }
    }
}
