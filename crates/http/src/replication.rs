//! Replication through this server: `POST /_replicate`, this server's databases as
//! replication endpoints, and the replications running now (`_active_tasks`, `cancel`).
//!
//! A database of this server, named bare or by a URL of this server, is read and written in
//! process ([`LocalDb`]), never through loopback HTTP, as the user the request's (or the
//! URL's) credentials authenticate: reads need a member, and writes go through the write
//! path `_bulk_docs` takes (`settee_docs::write`: design documents, `_users` rules,
//! `validate_doc_update`, attachments).

use crate::error::{ApiError, ApiResult};
use crate::handlers::attachments::AttRender;
use crate::handlers::{attachments, blocking};
use crate::jobs::NewJob;
use crate::reply::json;
use crate::{AppState, Req};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_auth::security::SecurityObject;
use settee_auth::UserCtx;
use settee_core::{ParsedDoc, Rev, SeqArg, SeqCodec};
use settee_db::{Database, LocalUpdate};
use settee_docs::atts::FollowsWriter;
use settee_docs::Followed;
use settee_node::changes::ReplicationFilter;
use settee_node::doc_json_with;
use settee_node::seqs;
use settee_replicator::id::{self, EndpointId, FilterId, IdInput};
use settee_replicator::job::{Job, Options, Outcome, Progress};
use settee_replicator::remote::{without_credentials, Remote, RemoteSpec, Url};
use settee_replicator::spec::{PeerSpec, Request};
use settee_replicator::{
    ChangeRow, Changes, Content, Doc, Endpoint, Error as RepError, Fetch, Filter, Follows, Missing,
    PeerInfo, Wait, WriteFailure,
};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

type RepResult<T> = Result<T, RepError>;

/// An API error met by a local endpoint, as the replicator sees a peer's answer.
fn rep_error(e: ApiError) -> RepError {
    let (status, error, reason) = e.parts();
    match status.as_u16() {
        401 | 403 => RepError::Unauthorized {
            status: status.as_u16(),
            reason: reason.to_string(),
        },
        _ => RepError::Protocol(format!("{error}: {reason}")),
    }
}

/// A database of this server, used as the user `user`.
#[derive(Clone)]
pub struct LocalDb {
    state: AppState,
    name: String,
    user: UserCtx,
    /// The database's URL as CouchDB shows it (password hidden, trailing `/`).
    url: String,
}

impl LocalDb {
    /// The database `name` of this server, read and written as `user`; `url` is how
    /// replication ids and tasks name it.
    pub fn new(state: &AppState, name: &str, user: UserCtx, url: String) -> LocalDb {
        LocalDb {
            state: state.clone(),
            name: name.to_string(),
            user,
            url,
        }
    }

    /// The database, if it exists and the user may read and write it.
    fn db(&self) -> RepResult<Arc<Database>> {
        let db = self
            .state
            .couch
            .get(&self.name)
            .map_err(|_| RepError::DbNotFound(format!("could not open {}", self.url)))?;
        let sec = SecurityObject::from_json(&db.props().security);
        if !sec.is_member(&self.user) {
            // As a peer's 401 or 403 reads (see `Remote`): a 403 names only the URL.
            let (status, reason) = match self.user.name {
                None => (
                    401,
                    format!("unauthorized to access or create database {}", self.url),
                ),
                Some(_) => (403, self.url.clone()),
            };
            return Err(RepError::Unauthorized { status, reason });
        }
        Ok(db)
    }
}

/// Where a replication's `since` (a checkpoint's seq, or `0`) stands in the database.
fn seq_of(codec: &SeqCodec, v: &Value) -> RepResult<u64> {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match codec.since(&text) {
        Ok(SeqArg::Seq(n)) => Ok(n),
        _ => Err(RepError::BadRequest(format!("Invalid sequence `{text}`"))),
    }
}

impl Endpoint for LocalDb {
    fn name(&self) -> String {
        self.url.clone()
    }

    async fn info(&self) -> RepResult<PeerInfo> {
        let db = self.db()?;
        Ok(PeerInfo {
            update_seq: Value::String(seqs(&db).update_seq(db.update_seq())),
            instance_start_time: "0".into(),
        })
    }

    async fn create(&self, params: &Map<String, Value>) -> RepResult<()> {
        if self.state.couch.exists(&self.name) {
            return Ok(());
        }
        if params.get("partitioned") == Some(&Value::Bool(true)) {
            return Err(RepError::BadRequest(
                "Partitioned databases are not supported by this Settee version".into(),
            ));
        }
        if !self.user.is_server_admin() {
            return Err(RepError::Unauthorized {
                status: 401,
                reason: format!("unauthorized to access or create database {}", self.url),
            });
        }
        let security = settee_auth::security::default_for(
            self.state
                .config
                .get("couchdb", "default_security")
                .as_deref(),
        );
        let (couch, name) = (self.state.couch.clone(), self.name.clone());
        blocking(move || Ok(couch.create(&name, security).map(|_| ())?))
            .await
            .map_err(rep_error)
    }

    async fn get_local(&self, id: &str) -> RepResult<Option<Value>> {
        let db = self.db()?;
        let found = db.local_doc(id).map_err(|e| rep_error(e.into()))?;
        Ok(found
            .map(|d| serde_json::from_slice(&settee_node::local_json(&d)).unwrap_or(Value::Null)))
    }

    async fn put_local(&self, id: &str, mut body: Value) -> RepResult<String> {
        let db = self.db()?;
        let rev = match body.as_object_mut().and_then(|o| o.shift_remove("_rev")) {
            Some(Value::String(r)) => r.strip_prefix("0-").and_then(|n| n.parse().ok()),
            _ => None,
        };
        let parsed = settee_core::parse_doc(body).map_err(|e| rep_error(e.into()))?;
        let update = LocalUpdate {
            id: id.to_string(),
            rev,
            deleted: false,
            body: parsed.body,
        };
        let n = settee_node::write::put_local(&db, update, false)
            .await
            .map_err(|e| rep_error(e.into()))?
            .unwrap_or_default();
        Ok(format!("0-{n}"))
    }

    async fn changes(
        &self,
        since: &Value,
        limit: usize,
        filter: &Filter,
        wait: Wait,
    ) -> RepResult<Changes> {
        let db = self.db()?;
        let codec = seqs(&db);
        let since_n = seq_of(&codec, since)?;
        let filter = match filter {
            Filter::All => ReplicationFilter::All,
            Filter::DocIds(ids) => {
                ReplicationFilter::DocIds(ids.iter().cloned().collect::<HashSet<_>>())
            }
            Filter::Selector(s) => ReplicationFilter::Selector(Arc::new(
                settee_mango::Selector::parse(s)
                    .map_err(|e| RepError::BadRequest(e.to_string()))?,
            )),
            Filter::Design { name, query_params } => ReplicationFilter::Named {
                name: name.clone(),
                query_params: query_params.clone(),
                user: self.user.clone(),
            },
        };
        let wait = match wait {
            Wait::No => None,
            Wait::UpTo(ms) => Some(Duration::from_millis(ms)),
        };
        let (rows, last) = (self.state.node)
            .changes_for_replication(db, since_n, limit as u64, filter, wait)
            .await
            .map_err(|e| rep_error(e.into()))?;
        let rows = rows.iter().filter_map(ChangeRow::from_json).collect();
        let last_seq = if last == since_n {
            since.clone()
        } else {
            Value::String(codec.changes_seq(last))
        };
        Ok(Changes { rows, last_seq })
    }

    async fn revs_diff(&self, revs: Vec<(String, Vec<String>)>) -> RepResult<Vec<Missing>> {
        let db = self.db()?;
        let mut asked = Vec::with_capacity(revs.len());
        for (id, rs) in revs {
            let parsed = rs
                .iter()
                .map(|r| {
                    settee_core::Rev::parse(r)
                        .map_err(|_| RepError::Protocol(format!("bad revision {r}")))
                })
                .collect::<RepResult<Vec<_>>>()?;
            asked.push((id, parsed));
        }
        let diff = blocking(move || Ok(db.revs_diff(asked)?))
            .await
            .map_err(rep_error)?;
        Ok(diff
            .into_iter()
            .map(|(id, missing, ancestors)| Missing {
                id,
                revs: missing.iter().map(ToString::to_string).collect(),
                possible_ancestors: ancestors.iter().map(ToString::to_string).collect(),
            })
            .collect())
    }

    async fn bulk_get(&self, wanted: Vec<(String, String)>, fetch: Fetch) -> RepResult<Vec<Doc>> {
        let (db, user) = (self.db()?, self.user.clone());
        let atts = attachments::AttOpts {
            inline: fetch.inline,
            encoding_info: !fetch.inline,
            since_pos: 0,
        };
        blocking(move || read_revisions(&db, &user, wanted, atts, fetch.stored))
            .await
            .map_err(rep_error)
    }

    fn takes_stored(&self) -> bool {
        true
    }

    async fn bulk_docs(&self, docs: Vec<Doc>) -> RepResult<Vec<WriteFailure>> {
        let db = self.db()?;
        let mut failures = Vec::new();
        let mut parsed = Vec::with_capacity(docs.len());
        for d in docs {
            let d = match d {
                Doc::Stored(p) => {
                    parsed.push(p);
                    continue;
                }
                Doc::Json(v) => v,
            };
            let id = d
                .get("_id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match settee_core::parse_doc(d) {
                Ok(p) if p.revs.is_some() && p.id.is_some() => parsed.push(p),
                Ok(_) => failures.push(failure(
                    &id,
                    ApiError::bad_request("missing _id or _revisions"),
                )),
                Err(e) => failures.push(failure(&id, e.into())),
            }
        }
        failures.extend(self.write_replicated(&db, parsed, Followed::new()).await?);
        Ok(failures)
    }

    /// The content as stored, whatever `gzip` says: the stub asked about came from this
    /// same store.
    async fn attachment(&self, id: &str, rev: &str, name: &str, _gzip: bool) -> RepResult<Content> {
        let db = self.db()?;
        let rev = settee_core::Rev::parse(rev)
            .map_err(|_| RepError::Protocol(format!("bad revision {rev}")))?;
        let (id, name) = (id.to_string(), name.to_string());
        let chunks = blocking(move || {
            let doc = db.open_doc(&id, Some(&rev))?;
            attachments::stored_content(&db, &doc.body, &name)
        })
        .await
        .map_err(rep_error)?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            for chunk in chunks {
                let item = chunk
                    .map(bytes::Bytes::from)
                    .map_err(|e| rep_error(e.into()));
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    break;
                }
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    /// Each part is stored as it arrives, as a `multipart/related` upload's parts are
    /// (`attachments::FollowsWriter`), then the revision is admitted and written with
    /// them.
    async fn put_streamed(
        &self,
        doc: Value,
        atts: Vec<Follows>,
    ) -> RepResult<Option<WriteFailure>> {
        let db = self.db()?;
        let id = doc
            .get("_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let entries = doc
            .get("_attachments")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let settings = self.state.write_settings();
        let mut followed = Followed::new();
        for f in atts {
            let Some(Value::Object(entry)) = entries.get(&f.name) else {
                return Err(RepError::Protocol(format!(
                    "{id}: attachment {} has no entry to follow",
                    f.name
                )));
            };
            let name = f.name.clone();
            match store_follows(&db, entry, &settings, f).await? {
                Ok(written) => {
                    followed.insert(name, written);
                }
                Err(refused) => return Ok(Some(failure(&id, refused.into()))),
            }
        }
        let parsed = match settee_core::parse_doc(doc) {
            Ok(p) if p.revs.is_some() && p.id.is_some() => p,
            Ok(_) => {
                let e = ApiError::bad_request("missing _id or _revisions");
                return Ok(Some(failure(&id, e)));
            }
            Err(e) => return Ok(Some(failure(&id, e.into()))),
        };
        let refused = self.write_replicated(&db, vec![parsed], followed).await?;
        Ok(refused.into_iter().next())
    }
}

impl LocalDb {
    /// Writes replicated revisions (whose `follows` contents are stored already) through
    /// the write path `_bulk_docs` takes; the revisions refused.
    async fn write_replicated(
        &self,
        db: &Arc<Database>,
        docs: Vec<ParsedDoc>,
        followed: Followed,
    ) -> RepResult<Vec<WriteFailure>> {
        let ids: Vec<String> = docs
            .iter()
            .map(|p| p.id.clone().unwrap_or_default())
            .collect();
        let settings = self.state.write_settings();
        let written = settee_docs::write(&settings, db, &self.user, docs, false, followed)
            .await
            .map_err(|e| rep_error(e.into()))?;
        Ok(ids
            .iter()
            .zip(written)
            .filter_map(|(id, w)| w.err().map(|e| failure(id, e.into())))
            .collect())
    }
}

/// Stores one attachment's content as it arrives from the source: what was stored, the
/// target's refusal (`attachment_too_large`), or the source's failure (nothing is kept).
async fn store_follows(
    db: &Database,
    entry: &Map<String, Value>,
    settings: &settee_docs::Settings,
    f: Follows,
) -> RepResult<settee_docs::Result<settee_docs::Written>> {
    use futures_util::StreamExt;
    let mut w = FollowsWriter::new(db, entry, &settings.compression, settings.att_limit);
    let mut content = f.content;
    let mut received = 0u64;
    while let Some(chunk) = content.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                w.discard();
                return Err(e);
            }
        };
        received += chunk.len() as u64;
        if let Err(refused) = w.write(&chunk) {
            return Ok(Err(refused));
        }
    }
    if received != f.length {
        w.discard();
        return Err(RepError::Protocol(format!(
            "attachment {}: {received} bytes arrived of {}",
            f.name, f.length
        )));
    }
    Ok(w.finish())
}

/// Revisions of documents as `_bulk_get` reads them for `user` (`revs=true&latest=true`,
/// attachments as `atts` says); a revision that can no longer be read is left out, as
/// `_bulk_get` answers it with an error. With `stored`, revisions without attachments are
/// handed over as stored (unless the user would see them altered).
fn read_revisions(
    db: &Database,
    user: &UserCtx,
    wanted: Vec<(String, String)>,
    atts: attachments::AttOpts,
    stored: bool,
) -> ApiResult<Vec<Doc>> {
    let revs_limit = db.props().revs_limit as usize;
    let opts = settee_node::write::revision_reader(db, user, true);
    let stored = stored && opts.reader.is_none();
    let mut out = Vec::with_capacity(wanted.len());
    for (id, rev) in wanted {
        let Ok(d) = Rev::parse(&rev)
            .map_err(drop)
            .and_then(|r| settee_node::write::open_latest(db, &id, &r).map_err(drop))
        else {
            continue;
        };
        let doc = if stored && settee_core::split_stored(&d.body).1.is_none() {
            let path = d.info.tree.ancestry(&d.rev);
            Doc::Stored(ParsedDoc {
                id: Some(d.id),
                revs: Some((
                    d.rev.pos,
                    path.into_iter().take(revs_limit.max(1)).collect(),
                )),
                deleted: d.deleted,
                body: d.body,
                atts: None,
                body_term: None,
            })
        } else {
            let rendered = doc_json_with(&d, &opts, atts.render(db, &d.body)?);
            Doc::Json(
                serde_json::from_slice(&rendered)
                    .map_err(|e| ApiError::Db(settee_db::Error::Internal(e.to_string())))?,
            )
        };
        out.push(doc);
    }
    Ok(out)
}

fn failure(id: &str, e: ApiError) -> WriteFailure {
    let (_, error, reason) = e.parts();
    WriteFailure {
        id: id.to_string(),
        error: error.to_string(),
        reason: reason.to_string(),
    }
}

/// Either kind of endpoint.
#[derive(Clone)]
enum Peer {
    Local(LocalDb),
    Remote(Remote),
}

/// This server's own address, as endpoint URLs name it.
fn is_own(state: &AppState, url: &Url) -> bool {
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
    state: &AppState,
    url: &Url,
    headers: &Map<String, Value>,
    basic: &Option<(String, String)>,
) -> RepResult<UserCtx> {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        if let (Ok(name), Some(Ok(value))) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            v.as_str().map(axum::http::HeaderValue::from_str),
        ) {
            h.insert(name, value);
        }
    }
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
        if let Ok(v) = axum::http::HeaderValue::from_str(&format!("Basic {token}")) {
            h.insert(axum::http::header::AUTHORIZATION, v);
        }
    }
    let creds = crate::auth::Credentials {
        headers: &h,
        peer: "127.0.0.1",
    };
    state
        .auth
        .authenticate(&creds, &state.config, &state.couch)
        .map(|a| a.user)
        .map_err(|e| {
            let (status, _, reason) = e.parts();
            RepError::Unauthorized {
                status: status.as_u16(),
                reason: reason.to_string(),
            }
        })
}

/// Who asks for a replication: their user and the credentials CouchDB forwards for bare
/// database names (`None` where bare names are refused: `_replicator` documents).
pub(crate) struct Caller {
    pub user: UserCtx,
    pub forwarded: Option<(String, String)>,
}

impl Caller {
    fn of(req: &Req) -> Caller {
        let cookie = req
            .header("cookie")
            .and_then(|c| {
                c.split(';')
                    .map(str::trim)
                    .find(|p| p.starts_with("AuthSession="))
            })
            .unwrap_or("");
        Caller {
            user: req.user.clone(),
            forwarded: Some((
                req.header("authorization").unwrap_or("").to_string(),
                cookie.to_string(),
            )),
        }
    }
}

/// An endpoint of a request: its peer and its replication-id identity.
fn endpoint(
    state: &AppState,
    caller: &Caller,
    spec: &PeerSpec,
    r: &Request,
) -> ApiResult<(Peer, EndpointId)> {
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
            let url = format!("http://{addr}/{}", crate::location::url_encode(name));
            let mut headers = Map::new();
            headers.insert("authorization".into(), json!(authorization));
            headers.insert("cookie".into(), json!(cookie));
            let eid = EndpointId::new(&url, &headers, None)
                .ok_or_else(|| ApiError::bad_request("invalid endpoint"))?;
            Ok((
                Peer::Local(LocalDb::new(
                    state,
                    name,
                    caller.user.clone(),
                    format!("{url}/"),
                )),
                eid,
            ))
        }
        PeerSpec::Url {
            url,
            headers,
            basic,
        } => {
            let invalid =
                || ApiError::from(RepError::Invalid("endpoint has an invalid url".into()));
            let parsed = Url::parse(url).map_err(|_| invalid())?;
            let eid = EndpointId::new(url, headers, basic.as_ref().map(|(u, _)| u.as_str()))
                .ok_or_else(invalid)?;
            if is_own(state, &parsed) {
                let name = parsed.path().trim_matches('/');
                let name = percent_encoding::percent_decode_str(name)
                    .decode_utf8_lossy()
                    .into_owned();
                let user = user_of(state, &parsed, headers, basic).map_err(ApiError::from)?;
                let mut shown = without_credentials(url);
                if !shown.ends_with('/') {
                    shown.push('/');
                }
                return Ok((Peer::Local(LocalDb::new(state, &name, user, shown)), eid));
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
async fn filter_code(source: &Peer, ddoc: &str, name: &str) -> ApiResult<String> {
    let id = format!("_design/{ddoc}");
    let found = match source {
        Peer::Local(l) => {
            let db = l.db()?;
            let d = blocking(move || Ok(db.open_doc(&id, None)?)).await.ok();
            d.and_then(|d| {
                serde_json::from_slice::<Value>(&settee_node::doc_json(&d, &Default::default()))
                    .ok()
            })
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
            ApiError::NotFound(format!(
                "Couldn't open document `_design/{ddoc}` from source database `{}`: not_found",
                shown(source)
            ))
        })
}

/// A replication ready to run: its endpoints and ids. Each run of the job uses a copy.
#[derive(Clone)]
pub(crate) struct Prepared {
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
pub(crate) async fn prepare(state: &AppState, caller: &Caller, r: &Request) -> ApiResult<Prepared> {
    let missing = || ApiError::from(RepError::Invalid("Missing replicator database".into()));
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
        server_uuid: &state.http.server_uuid,
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
pub(crate) struct Origin {
    pub database: String,
    pub doc_id: String,
}

/// `POST /_replicate`. The replication becomes a job of the scheduler (without a
/// document), as in CouchDB: a continuous one is answered at once; for a one-shot one
/// the caller waits for the job's end, and a second identical request made meanwhile
/// waits for the same job and gets the same answer. The job runs to its end even if its
/// callers hang up.
pub async fn replicate(state: &AppState, mut req: Req) -> ApiResult<Response> {
    // CouchDB reads the body as a JSON object before it looks at the method.
    if !crate::handlers::unavailable::has_body(&req) {
        return Err(ApiError::bad_request("Missing request body"));
    }
    let body = match req.json().await? {
        Value::Object(m) => m,
        _ => return Err(ApiError::bad_request("Request body must be a JSON object")),
    };
    crate::handlers::allow(&req.method, "POST")?;
    crate::req::require_json(&req.headers)?;
    let r = Request::parse(&body)?;
    if r.cancel {
        if let Some(id) = &r.id {
            return cancel(state, &req, id);
        }
    }
    let prepared = prepare(state, &Caller::of(&req), &r).await?;
    let full = prepared.full.clone();
    if r.cancel {
        return cancel(state, &req, &full);
    }
    // CouchDB's check_authorization: another user's job is a server admin's to join.
    if let Some(owner) = state.replications.owner(&full) {
        if owner != req.user.name && !req.user.is_server_admin() {
            return Err(ApiError::unauthorized("You are not a server admin."));
        }
    }
    let job = NewJob {
        prepared,
        user: req.user.name.clone(),
        origin: None,
    };
    if r.options.continuous {
        state.replications.add(state, job, None);
        return Ok(json(
            StatusCode::ACCEPTED,
            &json!({"ok": true, "_local_id": full}),
        ));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    state.replications.add(state, job, Some(tx));
    let outcome = match rx.await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => return Err(ApiError::from(&*e)),
        Err(_) => return Err(ApiError::from(&RepError::Cancelled)),
    };
    Ok(json(StatusCode::OK, &Value::Object(answer(outcome))))
}

/// A finished one-shot replication's answer: `ok`, then CouchDB's `checkpoint_history`
/// (`no_changes` and the checkpoint found, or the one written).
fn answer(outcome: Outcome) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("ok".into(), json!(true));
    if outcome.no_changes {
        out.insert("no_changes".into(), json!(true));
    }
    out.extend(outcome.history);
    out
}

/// Runs one run of a replication job, until its end or until `stop` is set (a peer's
/// retry waits end when it is).
pub(crate) async fn run_pair(
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

/// Stops and removes a replication job by full id: its owner's or a server admin's to do.
fn cancel(state: &AppState, req: &Req, id: &str) -> ApiResult<Response> {
    let Some(owner) = state.replications.owner(id) else {
        return Err(ApiError::NotFound("missing".into()));
    };
    if !req.user.is_server_admin() && owner != req.user.name {
        return Err(ApiError::unauthorized(
            "Can't cancel a replication triggered by another user",
        ));
    }
    state.replications.remove(state, id);
    Ok(json(StatusCode::OK, &json!({"ok": true, "_local_id": id})))
}

/// `SocketAddr` this server listens on, once known.
pub type LocalAddr = std::sync::OnceLock<SocketAddr>;
