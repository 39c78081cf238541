//! Replication through this node, as CouchDB's replicator application runs it: this
//! node's databases as replication endpoints ([`LocalDb`], in process), the scheduler's
//! jobs (`jobs`), and the `_replicator` database's documents (`docs`). [`Replicator`]
//! holds them; `http` parses requests into its calls and renders their answers.
//!
//! Two things come from the caller through [`Hooks`]: authenticating an endpoint's
//! credentials as a request's would be (which is the HTTP layer's), and naming an error
//! as CouchDB's error table does (a local endpoint's failures reach the replicator as a
//! peer's answer would).

mod docs;
mod jobs;
mod local;

pub use docs::{ensure_replicator_db, REPLICATOR_DB};
pub use local::LocalDb;

use crate::{blocking, doc_json, Error, Node, Result};
use serde_json::{json, Map, Value};
use settee_auth::UserCtx;
use settee_replicator::id::{self, EndpointId, FilterId, IdInput};
use settee_replicator::job::{Job, Options, Outcome, Progress};
use settee_replicator::remote::{without_credentials, Remote, RemoteSpec, Url};
use settee_replicator::spec::{PeerSpec, Request};
use settee_replicator::{Endpoint, Error as RepError, Filter};
use settee_wire::url_encode;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::watch;

type RepResult<T> = std::result::Result<T, RepError>;

/// What the replicator needs from the layer above it.
pub trait Hooks: Send + Sync + 'static {
    /// The user `headers` (lowercase names) authenticate on this node, as if they came
    /// with a request; a refusal as a peer's 401 or 403 reads.
    fn authenticate(&self, node: &Node, headers: &[(String, String)]) -> RepResult<UserCtx>;

    /// `(status, error, reason)` of an error, as CouchDB's error table gives them.
    fn describe(&self, e: Error) -> (u16, String, String);
}

/// The replication manager of this node: its jobs and the `_replicator` documents.
pub struct Replicator {
    pub node: Arc<Node>,
    hooks: Arc<dyn Hooks>,
    /// The server's uuid, part of every replication id.
    server_uuid: String,
    /// The address the server listens on, once bound (replication endpoints naming it are
    /// this node's own databases).
    local_addr: OnceLock<SocketAddr>,
    replications: jobs::Replications,
    scheduler_docs: docs::Docs,
    /// The `_replicator` documents another cluster member runs (`docs::runs_here`).
    elsewhere: Mutex<BTreeSet<String>>,
}

/// The node's services (`state.couch`, `state.config`) read through.
impl std::ops::Deref for Replicator {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.node
    }
}

/// What `POST /_replicate` did.
#[derive(Debug)]
pub enum Replicated {
    /// A continuous replication scheduled (CouchDB's 202), by full id.
    Started(String),
    /// A replication stopped and removed, by full id.
    Cancelled(String),
    /// A one-shot replication's end: `ok`, then CouchDB's `checkpoint_history`
    /// (`no_changes` and the checkpoint found, or the one written).
    Finished(Map<String, Value>),
}

impl Replicator {
    pub fn new(node: Arc<Node>, hooks: Arc<dyn Hooks>, server_uuid: String) -> Arc<Replicator> {
        Arc::new(Replicator {
            node,
            hooks,
            server_uuid,
            local_addr: OnceLock::new(),
            replications: Default::default(),
            scheduler_docs: Default::default(),
            elsewhere: Default::default(),
        })
    }

    /// Starts the document processor (following `_replicator`'s changes) and the
    /// rescheduling timer; needs the Tokio runtime.
    pub fn start(self: &Arc<Self>) {
        docs::start(self);
    }

    /// Records the address the server listens on.
    pub fn set_local_addr(&self, addr: SocketAddr) {
        let _ = self.local_addr.set(addr);
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr.get().copied()
    }

    /// The database `name` of this node as an endpoint, used as `user` (`url`: how
    /// replication ids and tasks name it).
    pub fn local_db(&self, name: &str, user: UserCtx, url: String) -> LocalDb {
        LocalDb::new(&self.node, &self.hooks, name, user, url)
    }

    /// `POST /_replicate` of `body` by `caller`. The replication becomes a job of the
    /// scheduler (without a document), as in CouchDB: a continuous one is answered at
    /// once; for a one-shot one the caller waits for the job's end, and a second identical
    /// request made meanwhile waits for the same job and gets the same answer. The job
    /// runs to its end even if its callers hang up.
    pub async fn replicate(
        self: &Arc<Self>,
        caller: &Caller,
        body: &Map<String, Value>,
    ) -> Result<Replicated> {
        let r = Request::parse(body)?;
        if r.cancel {
            if let Some(id) = &r.id {
                return self.cancel(&caller.user, id);
            }
        }
        let prepared = prepare(self, caller, &r).await?;
        let full = prepared.full.clone();
        if r.cancel {
            return self.cancel(&caller.user, &full);
        }
        let user = &caller.user;
        // CouchDB's check_authorization: another user's job is a server admin's to join.
        if let Some(owner) = self.replications.owner(&full) {
            if owner != user.name && !user.is_server_admin() {
                return Err(Error::Unauthorized("You are not a server admin.".into()));
            }
        }
        let job = jobs::NewJob {
            prepared,
            user: user.name.clone(),
            origin: None,
        };
        if r.options.continuous {
            self.replications.add(self, job, None);
            return Ok(Replicated::Started(full));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.replications.add(self, job, Some(tx));
        let outcome = match rx.await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => return Err(Error::Replication(e)),
            Err(_) => return Err(RepError::Cancelled.into()),
        };
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        if outcome.no_changes {
            out.insert("no_changes".into(), json!(true));
        }
        out.extend(outcome.history);
        Ok(Replicated::Finished(out))
    }

    /// Stops and removes a replication job by full id: its owner's or a server admin's
    /// to do.
    fn cancel(self: &Arc<Self>, user: &UserCtx, id: &str) -> Result<Replicated> {
        let Some(owner) = self.replications.owner(id) else {
            return Err(Error::NotFound("missing".into()));
        };
        if !user.is_server_admin() && owner != user.name {
            return Err(Error::Unauthorized(
                "Can't cancel a replication triggered by another user".into(),
            ));
        }
        self.replications.remove(self, id);
        Ok(Replicated::Cancelled(id.to_string()))
    }

    /// The replications running now, as `_active_tasks` rows.
    pub fn tasks(&self) -> Vec<Value> {
        self.replications.tasks()
    }

    /// The jobs by state, for the statistics.
    pub fn counts(self: &Arc<Self>) -> settee_metrics::ReplicatorJobs {
        self.replications.counts(self)
    }

    /// `_scheduler/jobs`: every job's row.
    pub fn jobs_json(&self) -> Vec<Value> {
        self.replications.jobs_json()
    }

    /// `_scheduler/jobs/{id}`.
    pub fn job_json(&self, id: &str) -> Option<Value> {
        self.replications.job_json(id)
    }

    /// The `_replicator` documents known, in id order.
    pub fn doc_ids(&self) -> Vec<String> {
        self.scheduler_docs.ids()
    }

    /// A document's `_scheduler/docs` row; `None` for an unknown document, or one whose
    /// job just ended.
    pub fn doc_row(self: &Arc<Self>, doc_id: &str) -> Option<Value> {
        docs::doc_row(self, doc_id)
    }

    /// The other running cluster members' answers (200s only, as JSON) to `GET target`
    /// of their scheduler (`/_scheduler/…`), asked as this member: each answers for the
    /// replications it runs, as CouchDB's `_scheduler` gathers every node's by
    /// `rpc:multicall`. None on a single node; a member that fails to answer is left out.
    pub async fn other_members(&self, target: &str) -> Vec<Value> {
        let Some(cluster) = self.node.cluster() else {
            return Vec::new();
        };
        let me = cluster.config().node.clone();
        let others = (cluster.members().into_iter()).filter(|m| m.name != me);
        let asks = others.map(|m| async move {
            let answer = self
                .node
                .peer_json(&m.name, "GET", target, None, None)
                .await;
            match answer {
                Ok(Some(a)) if a.status == 200 => serde_json::from_slice(&a.body).ok(),
                _ => None,
            }
        });
        futures_util::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Either kind of endpoint.
#[derive(Clone)]
enum Peer {
    Local(LocalDb),
    Remote(Remote),
}

/// This server's own address, as endpoint URLs name it.
/// Whether the in-process path may serve database `name`: this node holds it whole. On a
/// cluster member every database but the node's own (`_`-named, shard copies) is reached
/// through the coordinator over HTTP, being clustered or becoming so when `create_target`
/// makes it.
fn held_whole(state: &Replicator, name: &str) -> bool {
    state.node.cluster().is_none() || name.starts_with('_') || settee_core::is_shard_name(name)
}

fn is_own(state: &Replicator, url: &Url) -> bool {
    let Some(own) = state.local_addr() else {
        return false;
    };
    let port_matches = url.port_or_known_default() == Some(own.port());
    let host_matches = match url.host_str() {
        Some("localhost") => true,
        Some(h) => {
            let h = h.trim_start_matches('[').trim_end_matches(']');
            h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback() || ip == own.ip())
        }
        None => false,
    };
    url.scheme() == "http" && port_matches && host_matches
}

/// The user a set of credentials (an endpoint's URL, `auth` and `headers`) authenticates
/// on this server, as if they came with a request.
fn user_of(
    state: &Replicator,
    url: &Url,
    headers: &Map<String, Value>,
    basic: &Option<(String, String)>,
) -> RepResult<UserCtx> {
    let mut h: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.to_ascii_lowercase(), v.as_str()?.to_string())))
        .collect();
    let user = percent_encoding::percent_decode_str(url.username())
        .decode_utf8_lossy()
        .into_owned();
    let creds = basic.clone().or_else(|| {
        (!user.is_empty()).then(|| {
            let pass = url.password().unwrap_or("");
            (
                user,
                percent_encoding::percent_decode_str(pass)
                    .decode_utf8_lossy()
                    .into_owned(),
            )
        })
    });
    if let Some((u, p)) = creds {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        h.retain(|(k, _)| k != "authorization");
        h.push(("authorization".into(), format!("Basic {token}")));
    }
    state.hooks.authenticate(&state.node, &h)
}

/// Who asks for a replication: their user and the credentials CouchDB forwards for bare
/// database names (`None` where bare names are refused: `_replicator` documents).
pub struct Caller {
    pub user: UserCtx,
    pub forwarded: Option<(String, String)>,
}

/// An endpoint of a request: its peer and its replication-id identity.
fn endpoint(
    state: &Replicator,
    caller: &Caller,
    spec: &PeerSpec,
    r: &Request,
) -> Result<(Peer, EndpointId)> {
    match spec {
        PeerSpec::Name(name) => {
            // CouchDB 3 turns a bare name into a URL of itself carrying the caller's
            // `Authorization` and session cookie; its id is computed from that.
            let Some((authorization, cookie)) = &caller.forwarded else {
                return Err(RepError::Invalid("local_endpoints_not_supported".into()).into());
            };
            let addr = state
                .local_addr()
                .map_or("127.0.0.1:5984".to_string(), |a| a.to_string());
            let url = format!("http://{addr}/{}", url_encode(name));
            let mut headers = Map::new();
            headers.insert("authorization".into(), json!(authorization));
            headers.insert("cookie".into(), json!(cookie));
            let eid = EndpointId::new(&url, &headers, None)
                .ok_or_else(|| Error::bad_request("invalid endpoint"))?;
            if !held_whole(state, name) {
                let remote = Remote::new(&RemoteSpec {
                    url,
                    headers,
                    basic: None,
                    timeout: r.options.connection_timeout,
                    retries: r.retries,
                    connections: r.http_connections.max(1) as usize,
                })?;
                return Ok((Peer::Remote(remote), eid));
            }
            Ok((
                Peer::Local(state.local_db(name, caller.user.clone(), format!("{url}/"))),
                eid,
            ))
        }
        PeerSpec::Url {
            url,
            headers,
            basic,
        } => {
            let invalid = || Error::from(RepError::Invalid("endpoint has an invalid url".into()));
            let parsed = Url::parse(url).map_err(|_| invalid())?;
            let eid = EndpointId::new(url, headers, basic.as_ref().map(|(u, _)| u.as_str()))
                .ok_or_else(invalid)?;
            let name = percent_encoding::percent_decode_str(parsed.path().trim_matches('/'))
                .decode_utf8_lossy()
                .into_owned();
            if is_own(state, &parsed) && held_whole(state, &name) {
                let user = user_of(state, &parsed, headers, basic)?;
                let mut shown = without_credentials(url);
                if !shown.ends_with('/') {
                    shown.push('/');
                }
                return Ok((Peer::Local(state.local_db(&name, user, shown)), eid));
            }
            let remote = Remote::new(&RemoteSpec {
                url: url.clone(),
                headers: headers.clone(),
                basic: basic.clone(),
                timeout: r.options.connection_timeout,
                retries: r.retries,
                connections: r.http_connections.max(1) as usize,
            })?;
            Ok((Peer::Remote(remote), eid))
        }
    }
}

fn shown(peer: &Peer) -> String {
    match peer {
        Peer::Local(l) => l.name(),
        Peer::Remote(r) => without_credentials(&r.name()),
    }
}

/// The source code of a design filter function (`ddoc/name`), which the replication id
/// includes.
async fn filter_code(source: &Peer, ddoc: &str, name: &str) -> Result<String> {
    let id = format!("_design/{ddoc}");
    let found = match source {
        Peer::Local(l) => {
            let db = l.db()?;
            let d = blocking::<_, Error>(move || Ok(db.open_doc(&id, None)?))
                .await
                .ok();
            d.and_then(|d| serde_json::from_slice::<Value>(&doc_json(&d, &Default::default())).ok())
        }
        Peer::Remote(r) => r.get_doc(&id).await?,
    };
    found
        .as_ref()
        .and_then(|d| {
            d.get("filters")?
                .get(name)?
                .as_str()
                .map(|s| s.trim().to_string())
        })
        .ok_or_else(|| {
            Error::NotFound(format!(
                "Couldn't open document `_design/{ddoc}` from source database `{}`: not_found",
                shown(source)
            ))
        })
}

/// A replication ready to run: its endpoints and ids. Each run of the job uses a copy.
#[derive(Clone)]
pub struct Prepared {
    source: Peer,
    target: Peer,
    base: String,
    pub full: String,
    pub options: Options,
    /// What makes two requests for this id the same replication (CouchDB compares its
    /// normalized `#rep{}`): endpoints and options, not who asks.
    pub fingerprint: String,
}

impl Prepared {
    pub fn source(&self) -> String {
        shown(&self.source)
    }

    pub fn target(&self) -> String {
        shown(&self.target)
    }
}

/// Builds a replication's endpoints and computes its id.
async fn prepare(state: &Replicator, caller: &Caller, r: &Request) -> Result<Prepared> {
    let missing = || Error::from(RepError::Invalid("Missing replicator database".into()));
    let (source, src_id) = endpoint(state, caller, r.source.as_ref().ok_or_else(missing)?, r)?;
    let (target, tgt_id) = endpoint(state, caller, r.target.as_ref().ok_or_else(missing)?, r)?;
    let filter = match (&r.options.filter, &r.filter_function) {
        (Filter::All, _) => FilterId::None,
        (Filter::DocIds(ids), _) => FilterId::DocIds(ids.clone()),
        (Filter::Selector(s), _) => FilterId::Selector(s.clone()),
        (Filter::Design { name, query_params }, None) => FilterId::Named {
            code: name.clone(),
            query_params: query_params.clone(),
        },
        (Filter::Design { query_params, .. }, Some((ddoc, fname))) => FilterId::Named {
            code: filter_code(&source, ddoc, fname).await?,
            query_params: query_params.clone(),
        },
    };
    let (base, ext) = id::replication_id(&IdInput {
        server_uuid: &state.server_uuid,
        source: &src_id,
        target: &tgt_id,
        filter: &filter,
        winning_revs_only: r.options.winning_revs_only,
        since_seq: r.options.since_seq.as_ref(),
        continuous: r.options.continuous,
        create_target: r.options.create_target,
    });
    let fingerprint = format!(
        "{:?}",
        Request {
            cancel: false,
            id: None,
            ..r.clone()
        }
    );
    Ok(Prepared {
        source,
        target,
        full: format!("{base}{ext}"),
        base,
        options: r.options.clone(),
        fingerprint,
    })
}

/// Where a replication comes from: a `_replicator` document, or `_replicate` (`None`).
#[derive(Clone, Debug, PartialEq)]
pub struct Origin {
    pub database: String,
    pub doc_id: String,
}

/// Runs one run of a replication job, until its end or until `stop` is set (a peer's
/// retry waits end when it is).
async fn run_pair(
    p: Prepared,
    progress: Arc<Mutex<Progress>>,
    stop: watch::Receiver<bool>,
) -> Result<Outcome, RepError> {
    let (base_id, options) = (p.base, p.options);
    let watched = |peer: Peer| match peer {
        Peer::Remote(r) => Peer::Remote(r.watching(stop.clone())),
        local => local,
    };
    let (source, target) = (watched(p.source), watched(p.target));
    macro_rules! job {
        ($s:expr, $t:expr) => {
            Job {
                source: $s,
                target: $t,
                base_id,
                options,
                progress,
                stop,
            }
            .run()
            .await
        };
    }
    match (source, target) {
        (Peer::Local(s), Peer::Local(t)) => job!(s, t),
        (Peer::Local(s), Peer::Remote(t)) => job!(s, t),
        (Peer::Remote(s), Peer::Local(t)) => job!(s, t),
        (Peer::Remote(s), Peer::Remote(t)) => job!(s, t),
    }
}
