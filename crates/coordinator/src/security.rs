//! A clustered database's security object: kept on every copy (CouchDB's
//! `fabric_db_meta`), written to all of them (done when a majority, one per range at
//! least, took it), read from all of them (the most common answer), and cached briefly
//! for authorizing requests.

use crate::copies::passed_over;
use crate::merge::{self, Reply};
use crate::{block_on, copy_error, copy_path, unavailable, Coordinator};
use futures_util::future::join_all;
use serde_json::Value;
use settee_auth::security::SecurityObject;
use settee_cluster::ShardMap;
use settee_node::{Error, Result};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an authorization trusts a security object read from the copies: a change
/// made through another member is seen by this one at most this late (one made through
/// this member at once).
const SECURITY_TTL: Duration = Duration::from_secs(1);

/// Security objects read for authorization, by the database's map uuid (a database
/// deleted and created again under its name is another).
#[derive(Default)]
pub(crate) struct SecurityCache(Mutex<HashMap<String, (Instant, SecurityObject)>>);

impl SecurityCache {
    fn get(&self, uuid: &str) -> Option<SecurityObject> {
        let cache = self.0.lock().expect("security cache");
        (cache.get(uuid))
            .filter(|(at, _)| at.elapsed() < SECURITY_TTL)
            .map(|(_, sec)| sec.clone())
    }

    fn put(&self, uuid: &str, security: &Value) {
        let mut cache = self.0.lock().expect("security cache");
        cache.retain(|_, (at, _)| at.elapsed() < SECURITY_TTL);
        let entry = (Instant::now(), SecurityObject::from_json(security));
        cache.insert(uuid.to_owned(), entry);
    }
}

impl Coordinator {
    /// Every copy's `method` on its `_security` (as this member: the coordinator has
    /// authorized the client), each with its range's index.
    async fn every_copy_security(
        &self,
        db: &str,
        map: &ShardMap,
        method: &str,
        body: Option<&Value>,
    ) -> Vec<(usize, Reply)> {
        let asks = (map.by_range.iter().enumerate()).flat_map(|(r, copies)| {
            let path = format!("{}/_security", copy_path(map, db, &copies.range));
            copies.nodes.iter().map(move |node| {
                let path = path.clone();
                async move { (r, self.ask(node, method, &path, None, body).await) }
            })
        });
        join_all(asks).await
    }

    /// The security object most copies hold.
    pub(crate) fn security_clustered(&self, db: &str, map: &ShardMap) -> Result<Value> {
        block_on(self.read_security(db, map))
    }

    /// [`Self::security_clustered`], from async code.
    pub(crate) async fn read_security(&self, db: &str, map: &ShardMap) -> Result<Value> {
        let replies = self.every_copy_security(db, map, "GET", None).await;
        let answers: Vec<Value> = (replies.into_iter())
            .filter_map(|(_, r)| match r {
                Reply::Answered { status: 200, body } => Some(body),
                _ => None,
            })
            .collect();
        let security = merge::security(&answers)
            .ok_or_else(|| unavailable(format!("no copy of {db} gave its security object")))?;
        self.security.put(&map.uuid, &security);
        Ok(security)
    }

    /// Writes `security` on every copy (as this member: the client is authorized here).
    pub(crate) fn set_security_clustered(
        &self,
        db: &str,
        map: &ShardMap,
        security: Value,
    ) -> Result<()> {
        let replies = block_on(self.every_copy_security(db, map, "PUT", Some(&security)));
        let mut took = vec![0; map.by_range.len()];
        for (r, reply) in &replies {
            if matches!(reply, Reply::Answered { status: 200, .. }) {
                took[*r] += 1;
            }
        }
        let copies: Vec<usize> = map.by_range.iter().map(|c| c.nodes.len()).collect();
        if merge::security_written(&took, &copies) {
            self.security.put(&map.uuid, &security);
            return Ok(());
        }
        // A refusal of the object or of the client is the copies' answer; otherwise too
        // few copies took it (CouchDB's `no_majority`).
        for (_, reply) in &replies {
            if let Reply::Answered { status, body } = reply {
                if *status != 200 && !passed_over(*status, body) {
                    return Err(copy_error(*status, body));
                }
            }
        }
        Err(Error::Bare("no_majority".into()))
    }

    /// The security object authorizing requests on `db`: cached, else read from the
    /// copies (waiting for them from the request's task).
    pub(crate) fn authorizing_security(&self, db: &str, map: &ShardMap) -> Result<SecurityObject> {
        if let Some(sec) = self.security.get(&map.uuid) {
            return Ok(sec);
        }
        // Authorization runs on the request's task: only a multi-threaded runtime lets it
        // wait there (as the server's is).
        let security = match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::CurrentThread => {
                return Err(unavailable(
                    "security objects need a multi-threaded runtime".into(),
                ))
            }
            _ => tokio::task::block_in_place(|| self.security_clustered(db, map))?,
        };
        Ok(SecurityObject::from_json(&security))
    }
}
