//! The design documents that validate writes to a clustered database's copies (CouchDB's
//! `load_validation_funs` of a shard: `ddoc_cache` over `fabric:design_docs` of the
//! clustered database). A copy holds only its own range's design documents, so a member
//! reads the whole database's — `_design_docs` of one copy per range, as
//! `fabric:design_docs` — and keeps them per database ([`Designs`]), for every copy it
//! holds of it.
//!
//! How a member learns that they changed: a coordinator that wrote a design document
//! tells every running member, itself included, before it answers the write
//! ([`Coordinator::designs_changed`]; CouchDB's updater casts `ddoc_cache:refresh` and
//! `reset_validation_funs` to every node, after the commit). Each forgets the database's
//! set and reads it afresh at the next write it validates; a load that was under way
//! when it was told is not kept (the database's generation moved). So a design document
//! written through any member validates the next write through any member. A member that
//! missed the message (cut off when it was sent) or a design document that reached a
//! copy some other way (internal replication of a write that answered 202) is caught up
//! within [`MAX_AGE`], after which a set is read again anyway.
//!
//! A member's own writes to a copy (internal replication, read repair: signed as the
//! member, for no client) are validated by nothing, as CouchDB's internal replication.

use crate::copies::rows_of;
use crate::{enc, Coordinator};
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_docs::{ClusterDesigns, DesignEntry, DesignSet, Validating};
use settee_node::{Error, Node, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a member trusts a set it read, whatever it was told.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(60);

/// How long a coordinator waits for the members it tells of a design document change.
const TELL_TIMEOUT: Duration = Duration::from_secs(5);

/// The path of a member's `Designs::forget` for database `db`.
pub(crate) fn changed_path(db: &str) -> String {
    format!("/_node/_local/_settee/ddocs_changed/{}", enc(db))
}

/// Clustered databases' design document sets, as this member read them.
#[derive(Default)]
pub(crate) struct Designs {
    state: Mutex<State>,
    /// Held while a database's set is read, so that concurrent writes read it once.
    loading: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

#[derive(Default)]
struct State {
    sets: HashMap<String, Cached>,
    /// Per database, how many times it was told of a change: a set read across a change
    /// is not kept.
    generations: HashMap<String, u64>,
}

struct Cached {
    /// The shard map's uuid (a database created again under its name is another).
    uuid: String,
    generation: u64,
    read_at: Instant,
    set: Arc<DesignSet>,
}

impl Designs {
    /// Forgets database `db`'s set.
    pub(crate) fn forget(&self, db: &str) {
        let mut state = self.state.lock().expect("design sets");
        state.sets.remove(db);
        *state.generations.entry(db.to_owned()).or_default() += 1;
    }

    /// The set cached for `db` with map `uuid`, if fresh; and the database's generation.
    fn cached(&self, db: &str, uuid: &str) -> (Option<Arc<DesignSet>>, u64) {
        let state = self.state.lock().expect("design sets");
        let generation = state.generations.get(db).copied().unwrap_or(0);
        let set = (state.sets.get(db))
            .filter(|c| c.uuid == uuid && c.generation == generation)
            .filter(|c| c.read_at.elapsed() < MAX_AGE)
            .map(|c| c.set.clone());
        (set, generation)
    }

    /// Keeps `set`, read since generation `generation`, unless `db` changed meanwhile.
    fn keep(&self, db: &str, uuid: &str, generation: u64, set: &Arc<DesignSet>) {
        let mut state = self.state.lock().expect("design sets");
        if state.generations.get(db).copied().unwrap_or(0) != generation {
            return;
        }
        let cached = Cached {
            uuid: uuid.to_owned(),
            generation,
            read_at: Instant::now(),
            set: set.clone(),
        };
        state.sets.insert(db.to_owned(), cached);
    }

    fn load_lock(&self, db: &str) -> Arc<Mutex<()>> {
        let mut loading = self.loading.lock().expect("design loads");
        loading.entry(db.to_owned()).or_default().clone()
    }
}

/// What the node's write path asks (`settee_docs::ClusterDesigns`): the coordinator's
/// parts, holding the node weakly (the node holds this).
pub(crate) struct Hook {
    pub(crate) node: Weak<Node>,
    pub(crate) security: Arc<crate::security::SecurityCache>,
    pub(crate) designs: Arc<Designs>,
    pub(crate) render_error: crate::RenderError,
    pub(crate) builds: Arc<crate::builds::Builds>,
}

impl Hook {
    /// The coordinator of these parts, while the node lives.
    fn coordinator(&self) -> Option<Coordinator> {
        Some(Coordinator {
            node: self.node.upgrade()?,
            security: self.security.clone(),
            designs: self.designs.clone(),
            render_error: self.render_error,
            builds: self.builds.clone(),
        })
    }
}

impl ClusterDesigns for Hook {
    fn validating(&self, db: &str, user: &UserCtx) -> settee_docs::Result<Validating> {
        let Some(name) = settee_core::shard_db(db) else {
            return Ok(Validating::Own);
        };
        let Some(coordinator) = self.coordinator() else {
            return Ok(Validating::Own);
        };
        let Some((cluster, map)) = coordinator.clustered(name) else {
            // A copy of a database no longer in the cluster: its own, as any database.
            return Ok(Validating::Own);
        };
        let member = user.is_server_admin()
            && (user.name.as_deref()).is_some_and(|n| cluster.nodes().iter().any(|d| d.name == n));
        if member {
            return Ok(Validating::Skipped);
        }
        let set = coordinator.design_set(name, &map).map_err(|e| {
            tracing::warn!(db = %name, error = %e, "reading the design documents to validate");
            settee_docs::Error::Db(settee_db::Error::Internal(format!(
                "could not load validation funs: {e}"
            )))
        })?;
        Ok(Validating::Clustered(set))
    }

    fn changed(&self, db: &str) {
        self.designs.forget(db);
    }

    fn designs(&self, db: &str) -> settee_docs::Result<Option<Arc<DesignSet>>> {
        let Some(coordinator) = self.coordinator() else {
            return Ok(None);
        };
        let Some((_, map)) = coordinator.clustered(db) else {
            return Ok(None);
        };
        let set = coordinator.design_set(db, &map).map_err(|e| {
            settee_docs::Error::Db(settee_db::Error::Internal(format!(
                "could not read the design documents of {db}: {e}"
            )))
        })?;
        Ok(Some(set))
    }
}

impl Coordinator {
    /// The design documents of clustered database `db`: this member's, else read from
    /// one copy per range (blocks; see the module's documentation).
    pub(crate) fn design_set(&self, db: &str, map: &ShardMap) -> Result<Arc<DesignSet>> {
        let designs = &self.designs;
        if let (Some(set), _) = designs.cached(db, &map.uuid) {
            return Ok(set);
        }
        let lock = designs.load_lock(db);
        let _loading = lock.lock().expect("a design load");
        // Read by another write meanwhile?
        let (cached, generation) = designs.cached(db, &map.uuid);
        if let Some(set) = cached {
            return Ok(set);
        }
        let set = Arc::new(self.read_design_set(db, map)?);
        designs.keep(db, &map.uuid, generation, &set);
        Ok(set)
    }

    /// `_design_docs` of one copy per range, with the documents.
    fn read_design_set(&self, db: &str, map: &ShardMap) -> Result<DesignSet> {
        let mut docs = Vec::new();
        for answer in self.design_docs_of(db, map)? {
            for mut row in rows_of(answer.body) {
                let doc = row["doc"].take();
                let text = |k: &str| doc[k].as_str().map(str::to_owned);
                let (Some(id), Some(rev)) = (text("_id"), text("_rev")) else {
                    return Err(Error::internal(
                        "a design document row without its document",
                    ));
                };
                docs.push(DesignEntry { id, rev, body: doc });
            }
        }
        Ok(DesignSet::new(docs))
    }

    /// Tells every running member, this one too, that design documents of `db` changed
    /// (see the module's documentation); waits for their answers, at most
    /// [`TELL_TIMEOUT`].
    pub(crate) async fn designs_changed(&self, db: &str) {
        self.designs.forget(db);
        let Some(cluster) = self.node.cluster() else {
            return;
        };
        let me = settee_core::node::name();
        let path = changed_path(db);
        let tells = (cluster.members().into_iter())
            .filter(|m| m.name != me)
            .map(|m| {
                let path = path.clone();
                async move {
                    let answer = self.node.peer_json(&m.name, "POST", &path, None, None);
                    match tokio::time::timeout(TELL_TIMEOUT, answer).await {
                        Ok(Ok(Some(a))) if a.status == 200 => {}
                        other => {
                            let other = format!("{other:?}");
                            tracing::warn!(member = %m.name, %db, answer = %other,
                                "a member not told of a design document change");
                        }
                    }
                }
            });
        futures_util::future::join_all(tells).await;
    }

    /// After a write of documents `ids` to clustered database `db`: if any is a design
    /// document, every member is told (see [`Coordinator::designs_changed`]).
    pub(crate) async fn after_write<'a>(&self, db: &str, mut ids: impl Iterator<Item = &'a str>) {
        if ids.any(|id| id.starts_with("_design/")) {
            self.designs_changed(db).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> Arc<DesignSet> {
        let docs = (ids.iter())
            .map(|id| DesignEntry {
                id: id.to_string(),
                rev: "1-a".into(),
                body: serde_json::json!({}),
            })
            .collect();
        Arc::new(DesignSet::new(docs))
    }

    #[test]
    fn a_set_read_across_a_change_is_not_kept() {
        let designs = Designs::default();
        let (none, generation) = designs.cached("db", "u1");
        assert!(none.is_none());
        // A change while the set is read: the old set must not come back.
        designs.forget("db");
        designs.keep("db", "u1", generation, &set(&["_design/old"]));
        let (none, generation) = designs.cached("db", "u1");
        assert!(none.is_none());
        designs.keep("db", "u1", generation, &set(&["_design/new"]));
        let (got, _) = designs.cached("db", "u1");
        assert_eq!(got.unwrap().docs[0].id, "_design/new");
        // Another creation of the name, or a change, forgets it.
        assert!(designs.cached("db", "u2").0.is_none());
        designs.forget("db");
        assert!(designs.cached("db", "u1").0.is_none());
        assert!(designs.cached("other", "u1").0.is_none());
    }

    #[test]
    fn sets_are_in_id_order_and_fingerprinted_by_ids_and_revisions() {
        let (a, b) = (
            set(&["_design/b", "_design/a"]),
            set(&["_design/a", "_design/b"]),
        );
        assert_eq!(a.docs[0].id, "_design/a");
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.fingerprint, set(&["_design/a"]).fingerprint);
    }
}
