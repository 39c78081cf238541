//! [`Cluster`]: this node's view of the cluster state in etcd, and the writes to it.

use crate::map::{self, Candidate, ShardMap};
use crate::nodes::{self, ListStats, NodeDoc};
use crate::{Config, Error, Result};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use settee_core::Rev;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running member: its name and where its HTTP API answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub url: String,
}

/// The kinds of keys under the prefix, each `{prefix}/{kind}/{name}`.
const NODES: &str = "nodes";
const LIVE: &str = "live";
const DBS: &str = "dbs";
const JOBS: &str = "jobs";
/// `{prefix}/setup/finished`: the cluster set-up wizard's `finish_cluster` has run.
const SETUP: &str = "setup";
const FINISHED: &str = "finished";
/// `{prefix}/reshard/{name}`: resharding's jobs and switch (`settee_node::reshard`), JSON
/// values this crate stores without reading.
const RESHARD: &str = "reshard";
/// `{prefix}/reshard-guard/{group}`: moved by every resharding record made counted in
/// `group` ([`Cluster::create_reshard_within`]); its value means nothing.
const RESHARD_GUARD: &str = "reshard-guard";

/// What [`Cluster::create_reshard_within`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    Made,
    /// The record was there already.
    Exists,
    /// The group holds its limit of records already.
    Full,
}

/// What this node knows of the state, as of etcd revision `revision`.
#[derive(Default)]
struct Cache {
    /// The membership list.
    nodes: BTreeMap<String, NodeDoc>,
    live: BTreeMap<String, Member>,
    dbs: BTreeMap<String, Arc<ShardMap>>,
    /// Job → the node owning it.
    jobs: BTreeMap<String, String>,
    /// Who finished the cluster's set-up, once one did.
    finished: Option<Finished>,
    /// Resharding's records: value and modification revision.
    reshard: BTreeMap<String, (Vec<u8>, i64)>,
    revision: i64,
}

impl Cache {
    fn put(&mut self, kind: &str, name: &str, value: &[u8], modified: i64) -> Result<()> {
        let corrupt = |why: String| Error::Corrupt {
            key: format!("{kind}/{name}"),
            why,
        };
        match kind {
            NODES => {
                self.nodes
                    .insert(name.to_owned(), NodeDoc::from_json(name, value)?);
            }
            LIVE => {
                let m: Member =
                    serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
                self.live.insert(name.to_owned(), m);
            }
            DBS => {
                let m: ShardMap =
                    serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
                if m.version != map::MAP_VERSION {
                    return Err(corrupt(format!("map version {}", m.version)));
                }
                self.dbs.insert(name.to_owned(), Arc::new(m));
            }
            JOBS => {
                let owner: Owner =
                    serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
                self.jobs.insert(name.to_owned(), owner.node);
            }
            RESHARD => {
                self.reshard
                    .insert(name.to_owned(), (value.to_vec(), modified));
            }
            SETUP if name == FINISHED => {
                let f: Finished =
                    serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
                self.finished = Some(f);
            }
            _ => {}
        }
        Ok(())
    }

    fn delete(&mut self, kind: &str, name: &str) {
        match kind {
            NODES => drop(self.nodes.remove(name)),
            LIVE => drop(self.live.remove(name)),
            DBS => drop(self.dbs.remove(name)),
            JOBS => drop(self.jobs.remove(name)),
            RESHARD => drop(self.reshard.remove(name)),
            SETUP if name == FINISHED => self.finished = None,
            _ => {}
        }
    }
}

/// A job's value: who runs it.
#[derive(Serialize, Deserialize)]
struct Owner {
    node: String,
}

/// The set-up's value: the member that finished it, and when (unix seconds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    pub node: String,
    pub at: u64,
}

/// This node's handle on the cluster state.
pub struct Cluster {
    config: Config,
    client: Client,
    cache: RwLock<Cache>,
    /// The cache's revision, for writers waiting to see their write (0: not loaded yet).
    seen: watch::Sender<i64>,
    /// The lease this node's keys are held by, once it has joined (jobs are claimed under
    /// it).
    lease: Mutex<Option<i64>>,
    /// The newest lease granted to this node, from the moment etcd granted it: what a
    /// stop revokes, even when the stop comes before the node has finished joining (its
    /// `live` key may already be held by it).
    granted: Mutex<Option<i64>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Cluster {
    /// Starts following the cluster state and keeping this node alive in it. Succeeds
    /// while etcd is unreachable too: both are retried until it answers.
    pub async fn start(config: Config) -> Result<Arc<Cluster>> {
        // `require_leader`: an etcd member that has lost its leader refuses at once (and
        // ends its watches) instead of holding requests it cannot commit.
        let options = ConnectOptions::new()
            .with_connect_timeout(config.timeout)
            .with_keep_alive(Duration::from_secs(2), config.timeout)
            .with_require_leader(true);
        let client = Client::connect(&config.endpoints, Some(options)).await?;
        let cluster = Arc::new(Cluster {
            config,
            client,
            cache: RwLock::default(),
            seen: watch::channel(0).0,
            lease: Mutex::new(None),
            granted: Mutex::new(None),
            tasks: Mutex::default(),
        });
        let follow = tokio::spawn(cluster.clone().follow());
        let session = tokio::spawn(cluster.clone().session());
        cluster.tasks.lock().unwrap().extend([follow, session]);
        Ok(cluster)
    }

    /// Stops taking part: the background tasks end and the lease is revoked, so this node
    /// is no longer alive and its jobs are free at once.
    pub async fn stop(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
        self.lease.lock().unwrap().take();
        let granted = self.granted.lock().unwrap().take();
        if let Some(id) = granted {
            let revoked = (self.call(|mut c| async move { c.lease_revoke(id).await })).await;
            if let Err(e) = revoked {
                tracing::warn!(error = %e, lease = id, "cluster lease not revoked at stop");
            }
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Waits until the state has been read once (or `limit` passes): false if it was not.
    pub async fn wait_loaded(&self, limit: Duration) -> bool {
        self.seen_revision(1, limit).await
    }

    /// The running members, by name (CouchDB's `all_nodes`).
    pub fn members(&self) -> Vec<Member> {
        self.cache.read().unwrap().live.values().cloned().collect()
    }

    /// Completes once `name` is no longer running (its `live` key gone: stopped, or its
    /// lease ran out).
    pub async fn stopped_running(&self, name: &str) {
        let mut rx = self.seen.subscribe();
        let running = |c: &Cache| c.live.contains_key(name);
        let _ = rx.wait_for(|_| !running(&self.cache.read().unwrap())).await;
    }

    /// The membership list, by name (CouchDB's `cluster_nodes`): removed nodes left out.
    pub fn nodes(&self) -> Vec<NodeDoc> {
        let cache = self.cache.read().unwrap();
        cache
            .nodes
            .values()
            .filter(|d| !d.deleted)
            .cloned()
            .collect()
    }

    /// A node's document, a removed node's tombstone too.
    pub fn node_doc(&self, name: &str) -> Option<NodeDoc> {
        self.cache.read().unwrap().nodes.get(name).cloned()
    }

    /// What the list holds, counted as CouchDB counts a database.
    pub fn list_stats(&self) -> ListStats {
        nodes::stats(self.cache.read().unwrap().nodes.values())
    }

    /// Adds or edits a node's document (`PUT /_node/_local/_nodes/{name}`): its new
    /// revision.
    pub async fn put_node(&self, name: &str, body: Value, rev: Option<&str>) -> Result<Rev> {
        let key = self.key(NODES, name);
        let (current, version) = self.read_node(&key, name).await?;
        let doc = nodes::put(current.as_ref(), name, body, rev)?;
        self.store_node(&key, version, &doc).await?;
        Ok(doc.rev)
    }

    /// Removes a node's document, leaving its tombstone: the deletion's revision.
    pub async fn delete_node(&self, name: &str, rev: Option<&str>) -> Result<Rev> {
        let key = self.key(NODES, name);
        let (current, version) = self.read_node(&key, name).await?;
        let doc = nodes::delete(current.as_ref(), rev)?;
        self.store_node(&key, version, &doc).await?;
        Ok(doc.rev)
    }

    /// Stores `doc` if its key is still at `version`: a conflict otherwise, unless this
    /// very write was made by an earlier attempt (its token is the one stored).
    async fn store_node(&self, key: &str, version: i64, doc: &NodeDoc) -> Result<()> {
        let value = doc.stored(&format!("{:032x}", rand::random::<u128>()));
        let when = Compare::mod_revision(key, CompareOp::Equal, version);
        let done = self
            .txn(key, when, TxnOp::put(key, value.as_slice(), None))
            .await?;
        if !done.applied_or_holds(&value) {
            return Err(Error::Conflict);
        }
        Ok(())
    }

    /// A node's document as etcd has it now, with its key's modification revision (0:
    /// absent), for an edit conditional on it.
    async fn read_node(&self, key: &str, name: &str) -> Result<(Option<NodeDoc>, i64)> {
        let (got, _) = self
            .call(|mut c| async move { c.get(key, None).await })
            .await?;
        match got.kvs().first() {
            Some(kv) => Ok((
                Some(NodeDoc::from_json(name, kv.value())?),
                kv.mod_revision(),
            )),
            None => Ok((None, 0)),
        }
    }

    /// A clustered database's map.
    pub fn db(&self, name: &str) -> Option<Arc<ShardMap>> {
        self.cache.read().unwrap().dbs.get(name).cloned()
    }

    /// Waits until the cache holds the map naming shard copy `copy`
    /// (`shards/{range}/{db}.{created}`), or `limit` passes: whether it does.
    pub async fn wait_for_copy(&self, copy: &str, limit: Duration) -> bool {
        let Some((range, db, created)) = split_copy(copy) else {
            return false;
        };
        let mapped = || {
            self.db(db).is_some_and(|m| {
                m.created == created && m.by_range.iter().any(|c| c.range == range)
            })
        };
        let mut rx = self.seen.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|_| mapped()))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The clustered databases, by name.
    pub fn dbs(&self) -> Vec<String> {
        self.cache.read().unwrap().dbs.keys().cloned().collect()
    }

    /// Creates a database's map in one transaction, its copies planned over the membership
    /// list (nodes whose document says `"decom": true` excluded, as CouchDB does).
    pub async fn create_db(
        &self,
        name: &str,
        q: u32,
        n: u32,
        placement: Option<&str>,
        partitioned: bool,
    ) -> Result<Arc<ShardMap>> {
        let candidates: Vec<Candidate> = self
            .nodes()
            .into_iter()
            .filter(|d| !matches!(d.body.get("decom"), Some(Value::Bool(true))))
            .map(|d| Candidate {
                zone: d.zone().map(str::to_owned),
                name: d.name,
            })
            .collect();
        let rotate = rand::random::<usize>() % candidates.len().max(1);
        let uuid = format!("{:032x}", rand::random::<u128>());
        let mut planned = map::plan(q, n, placement, partitioned, &candidates, rotate, &uuid)?;
        planned.created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let key = self.key(DBS, name);
        let value = serde_json::to_vec(&planned).expect("json");
        let when = Compare::create_revision(key.as_str(), CompareOp::Equal, 0);
        let done = self
            .txn(&key, when, TxnOp::put(key.as_str(), value.as_slice(), None))
            .await?;
        if !done.applied_or_holds(&value) {
            return Err(Error::Exists);
        }
        Ok(Arc::new(planned))
    }

    /// Deletes a database's map in one transaction.
    pub async fn delete_db(&self, name: &str) -> Result<()> {
        let key = self.key(DBS, name);
        let when = Compare::create_revision(key.as_str(), CompareOp::Greater, 0);
        let done = self
            .txn(&key, when, TxnOp::delete(key.as_str(), None))
            .await?;
        if !done.applied_or_gone() {
            return Err(Error::NotFound("missing"));
        }
        Ok(())
    }

    /// Stores `edited` at `key` if the key is still at `mod_revision` (as
    /// [`Self::stored_map`] read it): an edit made meanwhile is a conflict, never a lost
    /// update.
    async fn put_stored_map(
        &self,
        key: &str,
        edited: ShardMap,
        mod_revision: i64,
    ) -> Result<Arc<ShardMap>> {
        let value = serde_json::to_vec(&edited).expect("json");
        let when = Compare::mod_revision(key, CompareOp::Equal, mod_revision);
        let done = (self.txn(key, when, TxnOp::put(key, value.as_slice(), None))).await?;
        if !done.applied_or_holds(&value) {
            return Err(Error::Conflict);
        }
        Ok(Arc::new(edited))
    }

    /// `db`'s map as etcd holds it now (not the cache): its key, the map and the key's
    /// modification revision, on which an edit is made conditional.
    async fn stored_map(&self, db: &str) -> Result<(String, ShardMap, i64)> {
        let key = self.key(DBS, db);
        let (got, _) = (self.call(|mut c| {
            let key = key.clone();
            async move { c.get(key, None).await }
        }))
        .await?;
        let Some(kv) = got.kvs().first() else {
            return Err(Error::NotFound("missing"));
        };
        let current: ShardMap = serde_json::from_slice(kv.value()).map_err(|e| Error::Corrupt {
            key: format!("{DBS}/{db}"),
            why: e.to_string(),
        })?;
        let mod_revision = kv.mod_revision();
        Ok((key, current, mod_revision))
    }

    /// Replaces the nodes holding `range` of `db`'s map (the creation `uuid`) with `nodes`,
    /// if `expected` holds it now: one transaction conditional on the map's modification
    /// revision as read just before, so an edit made meanwhile (another move, the
    /// database deleted or created again) is a conflict, never a lost update. The map as
    /// stored, once this node's cache shows it.
    pub async fn set_range_nodes(
        &self,
        db: &str,
        uuid: &str,
        range: &str,
        expected: &[String],
        nodes: Vec<String>,
    ) -> Result<Arc<ShardMap>> {
        let (key, current, mod_revision) = self.stored_map(db).await?;
        let held = current.by_range.iter().find(|c| c.range == range);
        let Some(held) = held else {
            return Err(map::PlanError::UnknownRange(range.to_owned()).into());
        };
        if current.uuid != uuid || held.nodes != expected {
            return Err(Error::Conflict);
        }
        let edited = current.with_range_nodes(range, nodes)?;
        self.put_stored_map(&key, edited, mod_revision).await
    }

    /// Replaces `range` of `db`'s map (the creation `uuid`) by its two halves, held by the
    /// nodes that held it ([`ShardMap::with_range_split`]): one transaction conditional on
    /// the map's modification revision as read just before, so an edit made meanwhile is
    /// a conflict, never a lost update. A map already split there (by an earlier attempt,
    /// or another member's) is answered as it is. The map as stored, once this node's
    /// cache shows it.
    pub async fn split_range(&self, db: &str, uuid: &str, range: &str) -> Result<Arc<ShardMap>> {
        let (key, current, mod_revision) = self.stored_map(db).await?;
        if current.uuid != uuid {
            return Err(Error::Conflict);
        }
        if !current.by_range.iter().any(|c| c.range == range) {
            let halves = (settee_core::shards::parse_range(range))
                .and_then(settee_core::shards::split_range)
                .map(|h| h.map(settee_core::shards::range_name));
            let split = |[a, b]: [String; 2]| {
                let held = |r: &str| current.by_range.iter().any(|c| c.range == r);
                held(&a) && held(&b)
            };
            if halves.is_some_and(split) {
                self.seen_revision(mod_revision, self.config.timeout).await;
                return Ok(Arc::new(current));
            }
            return Err(map::PlanError::UnknownRange(range.to_owned()).into());
        }
        let edited = current.with_range_split(range)?;
        self.put_stored_map(&key, edited, mod_revision).await
    }

    /// Resharding's records (`{prefix}/reshard/{name}`): name, value and modification
    /// revision, by name.
    pub fn reshard_records(&self) -> Vec<(String, Vec<u8>, i64)> {
        let cache = self.cache.read().unwrap();
        (cache.reshard.iter())
            .map(|(k, (v, m))| (k.clone(), v.clone(), *m))
            .collect()
    }

    /// One of resharding's records: its value and modification revision.
    pub fn reshard_record(&self, name: &str) -> Option<(Vec<u8>, i64)> {
        self.cache.read().unwrap().reshard.get(name).cloned()
    }

    /// Stores a record of resharding if its key's modification revision is still
    /// `expected` (0: absent): whether it did (a conflict otherwise).
    pub async fn put_reshard(&self, name: &str, value: &[u8], expected: i64) -> Result<bool> {
        let key = self.key(RESHARD, name);
        let when = match expected {
            0 => Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
            m => Compare::mod_revision(key.as_str(), CompareOp::Equal, m),
        };
        let done = self
            .txn(&key, when, TxnOp::put(key.as_str(), value, None))
            .await?;
        Ok(done.applied_or_holds(value))
    }

    /// Makes resharding record `name` (absent till now) unless the records named under
    /// `under` that `counts` says belong to `group`, read from etcd itself, number `limit`
    /// already. The count and the creation are one step: the creation is conditional on
    /// `group`'s guard key not having moved since the count was read, and every creation
    /// in the group moves it, so two creations cannot both pass the same count (a lost
    /// race counts again). CouchDB's `max_jobs`, which one process per node counts there.
    pub async fn create_reshard_within(
        &self,
        name: &str,
        value: &[u8],
        under: &str,
        (group, limit): (&str, u64),
        counts: impl Fn(&[u8]) -> bool,
    ) -> Result<Created> {
        let key = self.key(RESHARD, name);
        let guard = self.key(RESHARD_GUARD, group);
        let prefix = self.key(RESHARD, under);
        loop {
            let (listed, _) = self
                .call(|mut c| {
                    let prefix = prefix.clone();
                    async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await }
                })
                .await?;
            if listed.kvs().iter().any(|kv| kv.key() == key.as_bytes()) {
                return Ok(Created::Exists);
            }
            let held = listed.kvs().iter().filter(|kv| counts(kv.value())).count();
            if held as u64 >= limit {
                return Ok(Created::Full);
            }
            let read_at = listed.header().map_or(0, |h| h.revision());
            let when = vec![
                Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
                Compare::mod_revision(guard.as_str(), CompareOp::Less, read_at + 1),
            ];
            let ops = vec![
                TxnOp::put(key.as_str(), value, None),
                TxnOp::put(guard.as_str(), "", None),
            ];
            let done = self.txn_all(&key, when, ops).await?;
            match done.current {
                _ if done.applied_or_holds(value) => return Ok(Created::Made),
                Some(_) => return Ok(Created::Exists),
                // The guard moved: another creation in the group; count again.
                None => continue,
            }
        }
    }

    /// Deletes a record of resharding: whether it was there.
    pub async fn delete_reshard(&self, name: &str) -> Result<bool> {
        let key = self.key(RESHARD, name);
        let when = Compare::create_revision(key.as_str(), CompareOp::Greater, 0);
        let done = self
            .txn(&key, when, TxnOp::delete(key.as_str(), None))
            .await?;
        Ok(done.applied_or_gone())
    }

    /// Takes `job` for this node unless another node holds it: whether this node owns it
    /// now. The claim lasts while this node's lease does.
    pub async fn claim(&self, job: &str) -> Result<bool> {
        let lease = self
            .lease
            .lock()
            .unwrap()
            .ok_or_else(|| Error::Unavailable("this node has no lease yet".into()))?;
        let key = self.key(JOBS, job);
        let value = self.owner_value();
        let put = PutOptions::new().with_lease(lease);
        let when = Compare::create_revision(key.as_str(), CompareOp::Equal, 0);
        let op = TxnOp::put(key.as_str(), value.as_slice(), Some(put));
        Ok(self.txn(&key, when, op).await?.applied_or_holds(&value))
    }

    /// Gives up `job` if this node holds it.
    pub async fn release(&self, job: &str) -> Result<()> {
        let key = self.key(JOBS, job);
        let mine = self.owner_value();
        let when = Compare::value(key.as_str(), CompareOp::Equal, mine);
        self.txn(&key, when, TxnOp::delete(key.as_str(), None))
            .await?;
        Ok(())
    }

    /// The node owning `job`, if one does.
    pub fn owner(&self, job: &str) -> Option<String> {
        self.cache.read().unwrap().jobs.get(job).cloned()
    }

    /// Who finished the cluster's set-up (`_cluster_setup`'s `finish_cluster`), if one did.
    pub fn setup_finished(&self) -> Option<Finished> {
        self.cache.read().unwrap().finished.clone()
    }

    /// Records that this node finished the cluster's set-up, unless one did already:
    /// whether this call recorded it (a second finish keeps the first's record).
    pub async fn finish_setup(&self) -> Result<bool> {
        let key = self.key(SETUP, FINISHED);
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mine = Finished {
            node: self.config.node.clone(),
            at,
        };
        let value = serde_json::to_vec(&mine).expect("json");
        let when = Compare::create_revision(key.as_str(), CompareOp::Equal, 0);
        let op = TxnOp::put(key.as_str(), value.as_slice(), None);
        Ok(self.txn(&key, when, op).await?.applied_or_holds(&value))
    }

    /// A job's value when this node holds it.
    fn owner_value(&self) -> Vec<u8> {
        let owner = Owner {
            node: self.config.node.clone(),
        };
        serde_json::to_vec(&owner).expect("json")
    }

    /// `{prefix}/{kind}/{name}`.
    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}/{kind}/{name}", self.config.prefix)
    }

    /// One etcd request (made by `call` on a client), unreachable after the configured
    /// timeout; and whether it was made more than once. A request that failed on the way
    /// (a connection to a member that is down, a leader election) is made again, on the
    /// member the client picks next: that is how it reaches a live member when one of
    /// several is down. So is an attempt with no answer within [`ATTEMPT_SHARE`] of the
    /// timeout: a proposal an etcd follower forwarded to a leader that has just died is
    /// never answered (etcd gives up on it after its own 5 s and more), while the members
    /// left elect a new leader within a second or two. An attempt that failed or was not
    /// answered may still have been applied, so every write here is a transaction whose
    /// outcome tells its own earlier attempt apart ([`Outcome`]).
    async fn call<T, F>(&self, mut call: impl FnMut(Client) -> F) -> Result<(T, bool)>
    where
        F: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let patience = (self.config.timeout / ATTEMPT_SHARE).max(MIN_ATTEMPT);
        let mut retried = false;
        loop {
            let attempt_end = deadline.min(tokio::time::Instant::now() + patience);
            let attempt = tokio::time::timeout_at(attempt_end, call(self.client.clone())).await;
            match attempt {
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!("etcd request unanswered, made again");
                    retried = true;
                }
                Err(_) => return Err(self.no_answer()),
                Ok(Err(e)) if transient(&e) && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, "etcd request made again");
                    retried = true;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(r) => return Ok((r?, retried)),
            }
        }
    }

    /// One step of a stream (or its opening), unreachable after the configured timeout.
    async fn request<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.config.timeout, call).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(self.no_answer()),
        }
    }

    fn no_answer(&self) -> Error {
        Error::Unavailable(format!("no answer within {:?}", self.config.timeout))
    }

    /// Runs `op` on `key` if `when` holds, else reads `key`; returns once the cache shows
    /// the outcome (later reads of this node come from the cache: read your writes).
    async fn txn(&self, key: &str, when: Compare, op: TxnOp) -> Result<Outcome> {
        self.txn_all(key, vec![when], vec![op]).await
    }

    /// [`Self::txn`] with several conditions and writes: all the writes when every
    /// condition holds, else none.
    async fn txn_all(&self, key: &str, when: Vec<Compare>, ops: Vec<TxnOp>) -> Result<Outcome> {
        let txn = Txn::new()
            .when(when)
            .and_then(ops)
            .or_else([TxnOp::get(key, None)]);
        let (resp, retried) = self
            .call(|mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        self.seen_revision(revision, self.config.timeout).await;
        let current = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map(|kv| kv.value().to_vec())),
            _ => None,
        });
        Ok(Outcome {
            applied: resp.succeeded(),
            current: current.flatten(),
            retried,
        })
    }

    /// Waits until the cache reflects `revision` (or `limit` passes): whether it does.
    async fn seen_revision(&self, revision: i64, limit: Duration) -> bool {
        let mut rx = self.seen.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|r| *r >= revision))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Keeps the cache following etcd: a full read, then a watch from the revision read;
    /// both again whenever the watch breaks.
    async fn follow(self: Arc<Self>) {
        loop {
            if let Err(e) = self.load_and_watch().await {
                tracing::debug!(error = %e, "cluster state watch");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn load_and_watch(&self) -> Result<()> {
        let prefix = format!("{}/", self.config.prefix);
        let mut client = self.client.clone();
        let got = self
            .request(client.get(prefix.as_str(), Some(GetOptions::new().with_prefix())))
            .await?;
        let revision = got.header().map_or(0, |h| h.revision());
        let mut fresh = Cache {
            revision,
            ..Cache::default()
        };
        for kv in got.kvs() {
            if let Some((kind, name)) = split_key(&prefix, kv.key()) {
                if let Err(e) = fresh.put(kind, name, kv.value(), kv.mod_revision()) {
                    tracing::error!(error = %e, "cluster state");
                }
            }
        }
        *self.cache.write().unwrap() = fresh;
        self.seen.send_replace(revision);
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let (_watcher, mut stream) = self
            .request(client.watch(prefix.as_str(), Some(options)))
            .await?;
        while let Some(resp) = stream.message().await? {
            if resp.canceled() {
                return Err(Error::Unavailable(format!(
                    "watch canceled: {}",
                    resp.cancel_reason()
                )));
            }
            let mut cache = self.cache.write().unwrap();
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                let Some((kind, name)) = split_key(&prefix, kv.key()) else {
                    continue;
                };
                match ev.event_type() {
                    EventType::Put => {
                        if let Err(e) = cache.put(kind, name, kv.value(), kv.mod_revision()) {
                            tracing::error!(error = %e, "cluster state");
                        }
                    }
                    EventType::Delete => cache.delete(kind, name),
                }
                cache.revision = cache.revision.max(kv.mod_revision());
            }
            if let Some(h) = resp.header() {
                cache.revision = cache.revision.max(h.revision());
            }
            let revision = cache.revision;
            drop(cache);
            self.seen.send_replace(revision);
        }
        Err(Error::Unavailable("the watch ended".into()))
    }

    /// Keeps this node alive in the cluster: a lease, this node's key under it and its
    /// document in the membership list (a CouchDB node lists itself in its own `_nodes`);
    /// a new lease whenever the old one is lost.
    async fn session(self: Arc<Self>) {
        loop {
            if let Err(e) = self.hold_lease().await {
                tracing::warn!(error = %e, node = %self.config.node, "cluster lease");
            }
            // Expired, or holding nothing yet (the `live` key is its last put).
            *self.lease.lock().unwrap() = None;
            *self.granted.lock().unwrap() = None;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn hold_lease(&self) -> Result<()> {
        let ttl = self.config.lease_ttl.as_secs().max(1) as i64;
        let (granted, _) = self
            .call(|mut c| async move { c.lease_grant(ttl, None).await })
            .await?;
        let lease = granted.id();
        *self.granted.lock().unwrap() = Some(lease);
        let me = Member {
            name: self.config.node.clone(),
            url: self.config.url.clone(),
        };
        // Listed before running: the `live` key is put last, so whoever sees this node
        // running (a later revision) has seen it listed too, and a database created then
        // places copies on it.
        match self
            .put_node(&me.name, Value::Object(Default::default()), None)
            .await
        {
            Ok(_) | Err(Error::Conflict) => {}
            Err(e) => return Err(e),
        }
        let value = serde_json::to_vec(&me).expect("json");
        let key = self.key(LIVE, &me.name);
        self.call(|mut c| {
            let (key, value) = (key.clone(), value.clone());
            async move {
                c.put(key, value, Some(PutOptions::new().with_lease(lease)))
                    .await
            }
        })
        .await?;
        *self.lease.lock().unwrap() = Some(lease);
        tracing::info!(node = %me.name, lease, "joined the cluster state");
        // Kept alive through whichever member answers: a keep-alive stream that breaks
        // (its member went down) is opened again for the same lease, so this node's keys
        // and jobs stay; only a lease that ran out makes a new one.
        loop {
            match self.keep_alive(lease).await {
                Ok(()) => return Err(Error::Unavailable("the lease expired".into())),
                Err(e) => tracing::debug!(error = %e, lease, "cluster lease keep-alive"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Keeps `lease` alive until it expires (`Ok`) or the stream breaks.
    async fn keep_alive(&self, lease: i64) -> Result<()> {
        let ttl = self.config.lease_ttl.as_millis() as u64;
        let every = Duration::from_millis((ttl / 3).max(200));
        let ((mut keeper, mut answers), _) = self
            .call(|mut c| async move { c.lease_keep_alive(lease).await })
            .await?;
        loop {
            self.request(keeper.keep_alive()).await?;
            match self.request(answers.message()).await? {
                Some(a) if a.ttl() > 0 => {}
                Some(_) => return Ok(()),
                None => return Err(Error::Unavailable("the lease's stream ended".into())),
            }
            tokio::time::sleep(every).await;
        }
    }
}

/// An etcd request attempt waits this fraction of the timeout for its answer before it is
/// made again (see `Cluster::call`) ...
const ATTEMPT_SHARE: u32 = 4;
/// ... and at least this long.
const MIN_ATTEMPT: Duration = Duration::from_millis(500);

/// Whether a failed request may succeed if made again: the connection failed, or etcd
/// was between leaders.
fn transient(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded
        ),
        _ => false,
    }
}

/// What a conditional write found.
struct Outcome {
    /// The condition held and the write was made.
    applied: bool,
    /// The key's value when the condition did not hold.
    current: Option<Vec<u8>>,
    /// The request was made more than once.
    retried: bool,
}

impl Outcome {
    /// The put was made, now or by an earlier attempt of the same request (the key holds
    /// exactly what it put).
    fn applied_or_holds(&self, value: &[u8]) -> bool {
        self.applied || self.current.as_deref() == Some(value)
    }

    /// The delete was made, now or by an earlier attempt (the key is gone after a retry).
    fn applied_or_gone(&self) -> bool {
        self.applied || (self.retried && self.current.is_none())
    }
}

/// `(range, db, created)` of a shard copy's name.
fn split_copy(copy: &str) -> Option<(&str, &str, u64)> {
    let (range, rest) = copy.strip_prefix("shards/")?.split_once('/')?;
    let (db, created) = rest.rsplit_once('.')?;
    Some((range, db, created.parse().ok()?))
}

/// `(kind, name)` of a key under `prefix` (which ends with `/`).
fn split_key<'a>(prefix: &str, key: &'a [u8]) -> Option<(&'a str, &'a str)> {
    let rest = std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()?;
    rest.split_once('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_name_splits_into_range_database_and_creation() {
        assert_eq!(
            split_copy("shards/00000000-7fffffff/a.b/c.1700000000"),
            Some(("00000000-7fffffff", "a.b/c", 1700000000))
        );
        assert_eq!(split_copy("shards/00000000-7fffffff/db"), None);
        assert_eq!(split_copy("db.1700000000"), None);
    }
}
