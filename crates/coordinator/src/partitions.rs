//! A partition of a clustered database: its documents are placed by the partition (the
//! hash of `{partition}:`), so they all live in one range, and one copy of that range
//! answers for it (CouchDB's `fabric_db_partition_info` asks that range's shards).

use crate::{copy_path, enc, Coordinator};
use serde_json::{json, Value};
use settee_cluster::ShardMap;
use settee_node::{Error, Result};

impl Coordinator {
    /// `GET /{db}/_partition/{partition}` of a clustered database: its range's copy's
    /// answer, named after the database.
    pub(crate) fn partition_info_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        partition: &str,
    ) -> Result<Value> {
        let range = &map.copies_of(&format!("{partition}:")).range;
        let target = |r: &str| format!("{}/_partition/{}", copy_path(map, db, r), enc(partition));
        let answers = self.one_copy_per_range(
            map,
            |r| (r == range).then(|| ("GET", target(r), None)),
            None,
        )?;
        let mut info = (answers.into_iter().next().map(|a| a.body))
            .ok_or_else(|| Error::internal("no range holds the partition"))?;
        info["db_name"] = json!(db);
        Ok(info)
    }
}
