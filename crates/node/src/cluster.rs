//! The node's part in a cluster: `_membership` and the membership list's documents
//! (`/_node/_local/_nodes/…`, CouchDB's `_nodes` database), read from the cluster state
//! this node follows and written to etcd. A node in no cluster is the only member of its
//! own list, as a single CouchDB node's `_nodes` holds only itself; its list cannot be
//! edited.

use crate::{Error, Node, Result};
use bytes::Bytes;
use serde_json::{json, Value};
use settee_cluster::{peer, Cluster};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// `_membership`: the members running now and the membership list, each by name.
#[derive(Debug, PartialEq, Eq)]
pub struct Membership {
    pub all_nodes: Vec<String>,
    pub cluster_nodes: Vec<String>,
}

/// The revision CouchDB gives a node's document of `{}`: a single node's own.
const FIRST_REV: &str = "1-967a00dff5e02add41819138abb3284d";

impl Node {
    /// Makes this node a member of `cluster` (once, at start).
    pub fn set_cluster(&self, cluster: Arc<Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// The cluster state, when this node is in a cluster.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.get()
    }

    fn clustered(&self) -> Result<&Arc<Cluster>> {
        self.cluster().ok_or(Error::NotClustered)
    }

    pub fn membership(&self) -> Membership {
        match self.cluster() {
            Some(c) => Membership {
                all_nodes: c.members().into_iter().map(|m| m.name).collect(),
                cluster_nodes: c.nodes().into_iter().map(|d| d.name).collect(),
            },
            None => {
                let me = vec![settee_core::node::name().to_owned()];
                Membership {
                    all_nodes: me.clone(),
                    cluster_nodes: me,
                }
            }
        }
    }

    /// A node's document (`GET /_node/_local/_nodes/{name}`).
    pub fn node_doc(&self, name: &str) -> Result<Value> {
        match self.cluster() {
            Some(c) => match c.node_doc(name) {
                Some(d) if d.deleted => Err(Error::NotFound("deleted".into())),
                Some(d) => Ok(d.to_json()),
                None => Err(Error::NotFound("missing".into())),
            },
            None if name == settee_core::node::name() => {
                Ok(json!({"_id": name, "_rev": FIRST_REV}))
            }
            None => Err(Error::NotFound("missing".into())),
        }
    }

    /// The membership list as a database (`GET /_node/_local/_nodes`), members in the order
    /// CouchDB 3.5.2 shows a node-local database's. The counts are the list's; what has no
    /// equivalent in etcd is shown as a fresh database shows it (file sizes are the
    /// documents' bytes, `uuid` is derived from the cluster's key prefix).
    pub fn nodes_info(&self) -> Value {
        let (s, scope) = match self.cluster() {
            Some(c) => (c.list_stats(), c.config().prefix.clone()),
            None => (
                settee_cluster::ListStats {
                    doc_count: 1,
                    doc_del_count: 0,
                    update_seq: 1,
                    external: 2,
                },
                settee_core::node::name().to_owned(),
            ),
        };
        let uuid = hex::encode(<md5::Md5 as md5::Digest>::digest(format!("_nodes {scope}")));
        json!({
            "db_name": "_nodes",
            "engine": "couch_bt_engine",
            "doc_count": s.doc_count,
            "doc_del_count": s.doc_del_count,
            "update_seq": s.update_seq,
            "purge_seq": 0,
            "compact_running": false,
            "sizes": {"active": s.external, "external": s.external, "file": s.external},
            "instance_start_time": "0",
            "disk_format_version": 8,
            "committed_update_seq": s.update_seq,
            "compacted_seq": 0,
            "props": {},
            "uuid": uuid,
        })
    }

    /// The list's documents as `_all_docs` rows' (id, rev), by id.
    pub fn node_docs(&self) -> Vec<(String, String)> {
        match self.cluster() {
            Some(c) => c
                .nodes()
                .into_iter()
                .map(|d| (d.name, d.rev.to_string()))
                .collect(),
            None => vec![(settee_core::node::name().to_owned(), FIRST_REV.to_owned())],
        }
    }

    /// Adds or edits a node's document: its new revision.
    pub async fn put_node_doc(&self, name: &str, body: Value, rev: Option<&str>) -> Result<String> {
        let rev = self.clustered()?.put_node(name, body, rev).await?;
        Ok(rev.to_string())
    }

    /// Whether `name` is another running member of this node's cluster.
    pub fn is_member(&self, name: &str) -> bool {
        self.cluster()
            .is_some_and(|c| c.members().iter().any(|m| m.name == name))
    }

    /// Sends a request for `/_node/_local/…` (`target`: path and query) to member `name`,
    /// signed as this node (`settee_cluster::peer`) on behalf of a server admin this node
    /// has authenticated: its answer, or `None` when `name` is no running member.
    pub async fn forward(
        &self,
        name: &str,
        method: &str,
        target: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Option<Forwarded>> {
        let headers: Vec<(&str, &str)> = content_type
            .map(|ct| ("content-type", ct))
            .into_iter()
            .collect();
        (self.peer_raw(name, method, target, None, &headers, body)).await
    }

    /// `GET` of an attachment's content (`target`) from member `name`, as a client that
    /// accepts gzip (content stored compressed comes as stored, `content_encoding` gzip),
    /// signed as this node on behalf of a server admin (the caller authorized the client).
    pub async fn peer_attachment(&self, name: &str, target: &str) -> Result<Option<Forwarded>> {
        let gzip = [("accept-encoding", "gzip")];
        (self.peer_raw(name, "GET", target, None, &gzip, Bytes::new())).await
    }

    /// A request of JSON to member `name` (see `peer_raw`): the member answers JSON (never
    /// multipart).
    pub async fn peer_json(
        &self,
        name: &str,
        method: &str,
        target: &str,
        user: Option<&settee_auth::UserCtx>,
        body: Option<Bytes>,
    ) -> Result<Option<Forwarded>> {
        let mut headers = vec![("accept", "application/json")];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        (self.peer_raw(
            name,
            method,
            target,
            user,
            &headers,
            body.unwrap_or_default(),
        ))
        .await
    }

    /// Sends a request for `target` (path and query) to member `name`, signed as this node,
    /// for `user` when given (the member then applies that user's rights): its answer, or
    /// `None` when `name` is no running member. The body may be of any type (an
    /// attachment's content, a `multipart/related` document); `headers` (lowercase name,
    /// value) describe it.
    pub async fn peer_raw(
        &self,
        name: &str,
        method: &str,
        target: &str,
        user: Option<&settee_auth::UserCtx>,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Option<Forwarded>> {
        let Some(cluster) = self.cluster() else {
            return Ok(None);
        };
        let Some(member) = cluster.members().into_iter().find(|m| m.name == name) else {
            return Ok(None);
        };
        let config = cluster.config();
        let now = crate::users::now_secs();
        let user = user.map(|u| json!({"name": u.name, "roles": u.roles}).to_string());
        let auth = peer::sign_for(
            &config.secret,
            &config.node,
            user.as_deref(),
            method,
            target,
            now,
        );
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| Error::bad_request("Bad method"))?;
        let mut request = peer_client()
            .request(method, format!("{}{target}", member.url))
            .header(peer::HEADER, auth)
            .body(body);
        for (header, value) in headers {
            request = request.header(*header, *value);
        }
        let wait = self.fabric_timeout(FabricWait::of(target, headers));
        if let Some(wait) = wait {
            request = request.timeout(wait);
        }
        let unreachable_because =
            |e: String| Error::MembersUnavailable(format!("node {name} did not answer: {e}"));
        let unreachable = |e: reqwest::Error| match (e.is_timeout(), wait) {
            (true, Some(wait)) => Error::PeerTimeout(format!(
                "node {name} did not answer within {} ms",
                wait.as_millis()
            )),
            _ => unreachable_because(e.to_string()),
        };
        // A member that stops running while it is asked (it hangs, or is cut off, and its
        // lease runs out) is no answer from then on, as one not running when asked: the
        // request is not left to wait for its timeout.
        let exchange = async {
            let resp = request.send().await?;
            let status = resp.status().as_u16();
            let header = |name| {
                (resp.headers().get(name))
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let content_type = header(reqwest::header::CONTENT_TYPE);
            let content_encoding = header(reqwest::header::CONTENT_ENCODING);
            let body = resp.bytes().await?;
            Ok::<_, reqwest::Error>(Forwarded {
                status,
                content_type,
                content_encoding,
                body,
            })
        };
        tokio::select! {
            answer = exchange => answer.map(Some).map_err(unreachable),
            () = cluster.stopped_running(name) => Err(unreachable_because("it stopped running".into())),
        }
    }

    /// How long a request of `kind` to another member may take (`None`: no limit), as
    /// CouchDB's `[fabric] {kind}_timeout` (milliseconds, or `infinity`).
    pub fn fabric_timeout(&self, kind: FabricWait) -> Option<Duration> {
        let (key, default) = match kind {
            FabricWait::Request => ("request_timeout", Some(60_000)),
            FabricWait::Attachments => ("attachments_timeout", Some(600_000)),
            FabricWait::View => ("view_timeout", None),
            FabricWait::PartitionView => ("partition_view_timeout", None),
            FabricWait::Changes(asked) => {
                return (self.fabric_timeout(FabricWait::Request)).map(|start| start + asked)
            }
        };
        let ms = match self.config.get("fabric", key) {
            Some(v) if v.trim() == "infinity" => None,
            Some(v) => v.trim().parse::<u64>().ok().or(default),
            None => default,
        };
        ms.map(Duration::from_millis)
    }

    /// Removes a node's document: the deletion's revision.
    pub async fn delete_node_doc(&self, name: &str, rev: Option<&str>) -> Result<String> {
        let rev = self.clustered()?.delete_node(name, rev).await?;
        Ok(rev.to_string())
    }
}

/// Which of CouchDB's `[fabric]` timeouts bounds a request to another member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricWait {
    /// Anything else (`request_timeout`, 60 s).
    Request,
    /// Attachment content and multipart documents, sent or read (`attachments_timeout`,
    /// 10 minutes).
    Attachments,
    /// A copy's view, Mango or `_all_docs` stream, which may build an index first
    /// (`view_timeout`, no limit).
    View,
    /// The same of a partition (`partition_view_timeout`, no limit).
    PartitionView,
    /// A copy's `_changes`: `request_timeout` beyond the longpoll's own wait (this), as
    /// CouchDB bounds a feed's start by `request_timeout` and its waits by the feed's
    /// `timeout` alone.
    Changes(Duration),
}

impl FabricWait {
    /// The wait of a request for `target` (path and query) with `headers` (lowercase
    /// name, value).
    pub fn of(target: &str, headers: &[(&str, &str)]) -> FabricWait {
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let streams = path.contains("/_view/")
            || ["/_find", "/_all_docs", "/_design_docs", "/_local_docs"]
                .iter()
                .any(|end| path.ends_with(end));
        let json = |v: &str| v.starts_with("application/json");
        if path.ends_with("/_changes") {
            FabricWait::Changes(longpoll_wait(target))
        } else if streams && path.contains("/_partition/") {
            FabricWait::PartitionView
        } else if streams {
            FabricWait::View
        } else if (headers.iter())
            .any(|(h, v)| (*h == "content-type" || *h == "accept") && !json(v))
        {
            FabricWait::Attachments
        } else {
            FabricWait::Request
        }
    }
}

/// How long a `_changes` request for `target` asks the copy to wait for a change: its
/// `timeout` when it is a longpoll, else nothing.
fn longpoll_wait(target: &str) -> Duration {
    let params = settee_wire::Params::parse(target.split_once('?').map(|(_, q)| q));
    match params.get("feed") {
        Some("longpoll") => Duration::from_millis(
            (params.get("timeout"))
                .and_then(|t| t.parse().ok())
                .unwrap_or(0),
        ),
        _ => Duration::ZERO,
    }
}

/// A member's answer to a forwarded request.
#[derive(Debug)]
pub struct Forwarded {
    pub status: u16,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub body: Bytes,
}

/// The client requests to other members go through (its connections kept between them).
fn peer_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("an HTTP client")
    })
}

#[cfg(test)]
mod tests {
    use super::FabricWait as W;

    #[test]
    fn each_request_to_a_member_has_couchdbs_fabric_wait() {
        let json = [
            ("accept", "application/json"),
            ("content-type", "application/json"),
        ];
        let copy = "/shards%2F00000000-ffffffff%2Fdb.1";
        let of = |tail: &str, h: &[(&str, &str)]| W::of(&format!("{copy}{tail}"), h);
        assert_eq!(of("/_design/d/_view/v?limit=0", &json), W::View);
        assert_eq!(of("/_find", &json), W::View);
        assert_eq!(of("/_all_docs?include_docs=true", &json), W::View);
        assert_eq!(
            of("/_changes?since=0&feed=longpoll&timeout=45000", &json),
            W::Changes(std::time::Duration::from_secs(45))
        );
        assert_eq!(
            of("/_changes?since=0&timeout=45000", &json),
            W::Changes(std::time::Duration::ZERO)
        );
        assert_eq!(
            of("/_partition/p/_design/d/_view/v", &json),
            W::PartitionView
        );
        assert_eq!(of("/_partition/p/_all_docs", &json), W::PartitionView);
        assert_eq!(of("/_purge", &json), W::Request);
        assert_eq!(of("/_design/d/_info", &json), W::Request);
        assert_eq!(of("/doc?r=1", &json), W::Request);
        // A document named like an endpoint is a document.
        assert_eq!(of("/_find_me", &json), W::Request);
        assert_eq!(of("/doc/a.png", &[("accept", "*/*")]), W::Attachments);
        let multipart = [("content-type", "multipart/related; boundary=x")];
        assert_eq!(of("/doc", &multipart), W::Attachments);
    }
}
