//! The listener of a clustered authentication database (CouchDB's `chttpd_auth_cache`
//! listener): a member follows the database's `_changes` through the cluster and drops
//! each user whose document changed from the users it keeps
//! ([`settee_auth::user_cache`]), so a user read from another member's copy is read once,
//! not on every request.
//!
//! [`follow`] runs while the node lives: whenever the configured authentication database
//! is clustered, a continuous feed of it from `now` (with heartbeats, so it never ends
//! idle); the cache serves once the feed is live, and is emptied whenever the feed ends
//! (an error, a copy's member gone, the database deleted or another one configured). The
//! feed is started again [`RETRY`] later, as CouchDB restarts its listener.

use crate::changes::{ChangesOpts, FeedOut, Live, ShownSeq};
use crate::settings::auth_db;
use crate::{Node, Result};
use futures_util::future::BoxFuture;
use settee_auth::users;
use settee_core::SeqArg;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How long after its feed ends (or while the database is not clustered) the listener
/// looks again (CouchDB's is 5 s).
const RETRY: Duration = Duration::from_secs(5);

/// How often an idle feed beats (and so sees whether its database is still the one
/// configured). A change is seen at once whatever it is: the feed's waits on the copies
/// end with their first change.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// Follows the clustered authentication database for the users cache while `node` lives
/// (see the module's documentation).
pub fn follow(node: Weak<Node>) {
    tokio::spawn(async move {
        loop {
            let Some(n) = node.upgrade() else {
                return;
            };
            let db = auth_db(&n.config);
            let clustered = n.cluster().and_then(|c| c.db(&db)).is_some();
            if let (true, Some(fabric)) = (clustered, n.fabric()) {
                let mut opts = ChangesOpts::new(settee_core::SeqCodec::clustered());
                opts.since = SeqArg::Now;
                opts.heartbeat = Some(HEARTBEAT);
                let out = Box::new(Listener {
                    node: node.clone(),
                    db: db.clone(),
                });
                drop(n);
                fabric.live_changes(&db, opts, Live::default(), out).await;
            } else {
                drop(n);
            }
            if let Some(n) = node.upgrade() {
                n.users.remote.follow(None);
            }
            tokio::time::sleep(RETRY).await;
        }
    });
}

/// The feed's reader: drops changed users, and marks the cache live once the feed waits.
struct Listener {
    node: Weak<Node>,
    db: String,
}

impl Listener {
    fn node(&self) -> Option<Arc<Node>> {
        self.node.upgrade()
    }
}

impl FeedOut for Listener {
    fn row(&mut self, _seq: Option<ShownSeq>, row: &[u8]) -> bool {
        let Some(node) = self.node() else {
            return false;
        };
        #[derive(serde::Deserialize)]
        struct Row {
            id: String,
        }
        match serde_json::from_slice::<Row>(row) {
            Ok(Row { id }) => {
                if let Some(name) = id.strip_prefix(users::PREFIX) {
                    node.users.remote.invalidate(name);
                }
            }
            // A row this reader cannot place: nothing kept can be trusted.
            Err(_) => node.users.remote.follow(Some(&self.db)),
        }
        true
    }

    fn is_open(&self) -> bool {
        self.node().is_some_and(|n| auth_db(&n.config) == self.db)
    }

    fn waiting(&mut self) -> BoxFuture<'_, ()> {
        if let Some(node) = self.node() {
            if !node.users.remote.follows(&self.db) {
                node.users.remote.follow(Some(&self.db));
            }
        }
        Box::pin(std::future::ready(()))
    }

    fn beat(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn gone(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    fn end(self: Box<Self>, end: Result<(ShownSeq, u64)>) -> BoxFuture<'static, ()> {
        if let Err(e) = end {
            tracing::info!(db = %self.db, error = %e, "the users cache's feed ended");
        }
        Box::pin(std::future::ready(()))
    }
}
