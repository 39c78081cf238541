//! `_cluster_setup`: CouchDB's set-up wizard (its `setup` application, which Fauxton's
//! setup page drives) on a Settee node.
//!
//! CouchDB's wizard makes a node a cluster member at run time: `enable_cluster` sets its
//! admin, bind address and `n`; `add_node` hands another node the Erlang cookie and lists
//! it in `_nodes`; `finish_cluster` copies admins, uuid and cookie secret to every node and
//! creates the system databases. A Settee node joins a cluster when it starts (`--cluster`
//! with etcd's endpoints, `--node-name`, the cluster's secret) and lists itself, so here:
//!
//! - a member is enabled from its start: `enable_cluster` answers CouchDB's "already
//!   enabled", and with `remote_node` asks that node as CouchDB does;
//! - `add_node` reaches the node at `host:port` with the credentials given (as a server
//!   admin, as CouchDB's request of it needs), learns its name from `/_node/_local`,
//!   checks that it runs in this cluster and takes this cluster's secret (a signed request,
//!   `settee_cluster::peer`), and lists it if it is not listed;
//! - `finish_cluster` waits for every listed node to run, copies `[admins]`, the server
//!   uuid and the cookie secret to the other members, creates the databases to ensure
//!   (`_users`, `_replicator` by default) and records in etcd that the set-up is finished
//!   ([`settee_cluster::Cluster::finish_setup`]). The state reads `cluster_finished` once
//!   that record exists and the databases do (CouchDB has no record: its system databases
//!   are made by `finish_cluster`, where Settee makes its own at start).
//!
//! A node in no cluster stays the single node it is: `single_node_enabled`.

use crate::dbs::CreateDb;
use crate::{Error, Fabric, Node, Result};
use bytes::Bytes;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Map, Value};
use settee_cluster::Cluster;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The wizard's states, as `GET /_cluster_setup` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupState {
    /// No server admin exists yet.
    ClusterDisabled,
    /// A cluster member whose set-up is not finished.
    ClusterEnabled,
    ClusterFinished,
    /// A node in no cluster, or a member set up for one copy of each range.
    SingleNodeEnabled,
    /// A member set up for one copy of each range (`[cluster] n = 1`), not finished.
    SingleNodeDisabled,
}

impl SetupState {
    pub fn as_str(self) -> &'static str {
        match self {
            SetupState::ClusterDisabled => "cluster_disabled",
            SetupState::ClusterEnabled => "cluster_enabled",
            SetupState::ClusterFinished => "cluster_finished",
            SetupState::SingleNodeEnabled => "single_node_enabled",
            SetupState::SingleNodeDisabled => "single_node_disabled",
        }
    }
}

/// `enable_cluster` with `remote_node`: what is asked of that node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteEnable {
    pub remote_node: String,
    pub port: Option<String>,
    pub remote_current_user: Option<String>,
    pub remote_current_password: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub bind_address: Option<String>,
    pub node_count: Option<Value>,
}

/// `add_node`'s fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddNode {
    pub host: String,
    pub port: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// The node's name before `@`, when the caller names it.
    pub name: Option<String>,
}

/// A `POST /_cluster_setup` body's action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetupAction {
    /// `enable_cluster` for this node.
    EnableCluster,
    EnableRemote(RemoteEnable),
    AddNode(AddNode),
    FinishCluster {
        ensure_dbs_exist: Option<Vec<String>>,
    },
    EnableSingleNode,
    RemoveNode,
    ReceiveCookie,
}

/// The system databases `finish_cluster` creates and the state checks by default.
pub const CLUSTER_SYSTEM_DBS: [&str; 2] = ["_users", "_replicator"];

/// How long `finish_cluster` waits for the listed nodes to run (CouchDB's `test_util:wait`).
const CONNECT_WAIT: Duration = Duration::from_secs(5);

fn bad(reason: impl Into<String>) -> Error {
    Error::BadRequest(reason.into())
}

fn named(status: u16, error: &str, reason: impl Into<String>) -> Error {
    Error::Relayed {
        status,
        error: error.into(),
        reason: reason.into(),
    }
}

fn not_clustered() -> Error {
    bad(
        "This node is not in a cluster: a Settee node joins one when it starts, with --cluster \
         (etcd's endpoints), --node-name and the cluster's secret (SETTEE_CLUSTER_SECRET)",
    )
}

impl SetupAction {
    /// The action a body names (CouchDB's 400 `Invalid Action'` for any other), its fields
    /// read as CouchDB reads them: strings, and a port as a number or a string.
    pub fn parse(body: &Map<String, Value>) -> Result<SetupAction> {
        let text = |k: &str| -> Result<Option<String>> {
            match body.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(bad(format!("{k} must be a string"))),
            }
        };
        let port = || -> Result<Option<String>> {
            match body.get("port") {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) if n.is_u64() => Ok(Some(n.to_string())),
                Some(Value::String(s)) if s.parse::<u16>().is_ok() => Ok(Some(s.clone())),
                Some(_) => Err(bad("port must be a port number")),
            }
        };
        Ok(match body.get("action").and_then(Value::as_str) {
            Some("enable_cluster") => match text("remote_node")? {
                None => SetupAction::EnableCluster,
                Some(remote_node) => SetupAction::EnableRemote(RemoteEnable {
                    remote_node,
                    port: port()?,
                    remote_current_user: text("remote_current_user")?,
                    remote_current_password: text("remote_current_password")?,
                    username: text("username")?,
                    password: text("password")?,
                    bind_address: text("bind_address")?,
                    node_count: body.get("node_count").cloned(),
                }),
            },
            Some("add_node") => SetupAction::AddNode(AddNode {
                host: text("host")?.ok_or_else(|| bad("Add node failed. Missing host."))?,
                port: port()?,
                username: text("username")?,
                password: text("password")?,
                name: text("name")?,
            }),
            Some("finish_cluster") => SetupAction::FinishCluster {
                ensure_dbs_exist: body.get("ensure_dbs_exist").map(db_list).transpose()?,
            },
            Some("enable_single_node") => SetupAction::EnableSingleNode,
            Some("remove_node") => SetupAction::RemoveNode,
            Some("receive_cookie") => SetupAction::ReceiveCookie,
            _ => return Err(bad("Invalid Action'")),
        })
    }
}

/// `ensure_dbs_exist`: a list of database names.
pub fn db_list(v: &Value) -> Result<Vec<String>> {
    let names = v.as_array().and_then(|a| {
        a.iter()
            .map(|n| n.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
    });
    names.ok_or_else(|| bad("ensure_dbs_exist must be a list of database names"))
}

fn default_dbs() -> Vec<String> {
    CLUSTER_SYSTEM_DBS.map(str::to_owned).to_vec()
}

fn has_dbs(fabric: &dyn Fabric, dbs: &[String]) -> bool {
    dbs.iter().all(|db| fabric.open_db(db).is_ok())
}

impl Node {
    /// `GET /_cluster_setup`: the wizard's state, `dbs` the databases that must exist for
    /// it to be finished (`ensure_dbs_exist`, default [`CLUSTER_SYSTEM_DBS`]).
    pub fn setup_state(&self, fabric: &dyn Fabric, dbs: Option<Vec<String>>) -> SetupState {
        let Some(cluster) = self.cluster() else {
            return SetupState::SingleNodeEnabled;
        };
        // CouchDB's order: `[couchdb] single_node`, then `[cluster] n = 1` (one copy is a
        // single node's set-up), then admins, then the databases.
        if self.config.get_bool("couchdb", "single_node", false) {
            return SetupState::SingleNodeEnabled;
        }
        let admins = !self.config.section("admins").is_empty();
        let dbs = dbs.unwrap_or_else(default_dbs);
        let finished = || cluster.setup_finished().is_some() && has_dbs(fabric, &dbs);
        match (self.config.get_u64("cluster", "n", 3) == 1, admins) {
            (true, true) if finished() => SetupState::SingleNodeEnabled,
            (true, _) => SetupState::SingleNodeDisabled,
            (false, false) => SetupState::ClusterDisabled,
            (false, true) if finished() => SetupState::ClusterFinished,
            (false, true) => SetupState::ClusterEnabled,
        }
    }

    /// `POST /_cluster_setup`: does `action` (see the module's documentation).
    pub async fn cluster_setup(&self, fabric: Arc<dyn Fabric>, action: SetupAction) -> Result<()> {
        let cluster = self.cluster().cloned();
        match (action, cluster) {
            (SetupAction::EnableCluster | SetupAction::EnableRemote(_), None) => {
                Err(not_clustered())
            }
            (SetupAction::EnableCluster, Some(_)) => Err(bad("Cluster is already enabled")),
            (SetupAction::EnableRemote(r), Some(_)) => self.enable_remote(r).await,
            (SetupAction::AddNode(_), None) => Err(bad("Cluster is not enabled.")),
            (SetupAction::AddNode(a), Some(c)) => self.add_node(&c, a).await,
            (SetupAction::FinishCluster { ensure_dbs_exist }, c) => {
                self.finish_cluster(fabric, c, ensure_dbs_exist).await
            }
            (SetupAction::EnableSingleNode, Some(_)) => Err(bad(
                "This node is a member of a cluster (it was started with --cluster): it cannot \
                 be set up as a single node",
            )),
            (SetupAction::EnableSingleNode, None) => Err(named(
                501,
                "not_implemented",
                "This node is set up as a single node when it first starts",
            )),
            (SetupAction::RemoveNode, _) => Err(named(
                501,
                "not_implemented",
                "remove_node is not supported: remove a node with DELETE \
                 /_node/_local/_nodes/{name}",
            )),
            (SetupAction::ReceiveCookie, _) => Err(bad(
                "Settee nodes have no Erlang cookie: a cluster's members share the secret \
                 they are started with (SETTEE_CLUSTER_SECRET or [cluster] secret)",
            )),
        }
    }

    /// `enable_cluster` with `remote_node`: CouchDB's request of that node, this node's
    /// stored hash of the admin's password sent instead of the password. A node that
    /// answers it is "already enabled" (every Settee member does) counts as enabled.
    async fn enable_remote(&self, r: RemoteEnable) -> Result<()> {
        let port = r.port.as_deref().unwrap_or("5984");
        let mut body = json!({"action": "enable_cluster"});
        if let Some(user) = &r.username {
            body["username"] = json!(user);
            match self.config.get("admins", user) {
                Some(hash) => body["password_hash"] = json!(hash),
                None => body["password"] = json!(r.password),
            }
        }
        let fields = [
            ("bind_address", r.bind_address.map(Value::String)),
            ("port", r.port.clone().map(Value::String)),
            ("node_count", r.node_count),
        ];
        for (k, v) in fields {
            if let Some(v) = v {
                body[k] = v;
            }
        }
        let url = format!("http://{}:{port}/_cluster_setup", r.remote_node);
        let mut request = client().post(&url).json(&body);
        if let Some(user) = &r.remote_current_user {
            request = request.basic_auth(user, r.remote_current_password.as_deref());
        }
        let resp = (request.send().await)
            .map_err(|_| bad("Enable cluster failed. Invalid Host and/or Port."))?;
        let status = resp.status().as_u16();
        let answer: Value = resp.json().await.unwrap_or(Value::Null);
        let reason = answer["reason"].as_str().unwrap_or_default();
        match status {
            201 => Ok(()),
            400 if reason == "Cluster is already enabled" => Ok(()),
            401 | 403 => Err(bad("Enable cluster failed. Invalid admin credentials.")),
            _ => Err(bad(format!(
                "Enable cluster failed on {}:{port}: {status} {reason}",
                r.remote_node
            ))),
        }
    }

    /// `add_node`: the node at `host:port` named by its own `/_node/_local`, which must run
    /// in this cluster under this cluster's secret; listed unless it is.
    async fn add_node(&self, cluster: &Cluster, a: AddNode) -> Result<()> {
        let port = a.port.as_deref().unwrap_or("5984");
        let at = format!("{}:{port}", a.host);
        let mut request = client().get(format!("http://{at}/_node/_local"));
        if let Some(user) = &a.username {
            request = request.basic_auth(user, a.password.as_deref());
        }
        let resp = (request.send().await)
            .map_err(|_| bad("Add node failed. Invalid Host and/or Port."))?;
        match resp.status().as_u16() {
            200 => {}
            401 | 403 => return Err(bad("Add node failed. Invalid admin credentials,")),
            s => return Err(bad(format!("Add node failed. {at} answered {s}"))),
        }
        let info: Value = resp.json().await.unwrap_or(Value::Null);
        let Some(name) = info["name"].as_str().map(str::to_owned) else {
            return Err(bad(format!(
                "Add node failed. {at} did not give its node name"
            )));
        };
        if let Some(want) = &a.name {
            if name.split('@').next() != Some(want.as_str()) {
                return Err(bad(format!(
                    "Add node failed. The node at {at} is {name}, not {want}@{}",
                    a.host
                )));
            }
        }
        let not_running = || {
            bad(format!(
                "Add node failed. {name} (at {at}) is not running in this cluster: start it \
                 with --cluster {} and this cluster's secret",
                cluster.config().endpoints.join(",")
            ))
        };
        let signed = self.forward(&name, "GET", "/_node/_local", None, Bytes::new());
        match signed.await {
            Ok(Some(f)) if f.status == 200 => {}
            Ok(Some(f)) => {
                return Err(bad(format!(
                    "Add node failed. {name} refuses this cluster's secret ({})",
                    f.status
                )))
            }
            Ok(None) | Err(_) => return Err(not_running()),
        }
        if cluster.node_doc(&name).is_some_and(|d| !d.deleted) {
            return Ok(());
        }
        match self.put_node_doc(&name, json!({}), None).await {
            Ok(_) | Err(Error::Cluster(settee_cluster::Error::Conflict)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `finish_cluster`: the listed nodes running, this node's admins, uuid and cookie
    /// secret copied to the other members, the databases to ensure created, the set-up
    /// recorded as finished. CouchDB's 400 when it was finished and the databases exist.
    async fn finish_cluster(
        &self,
        fabric: Arc<dyn Fabric>,
        cluster: Option<Arc<Cluster>>,
        dbs: Option<Vec<String>>,
    ) -> Result<()> {
        if let Some(c) = &cluster {
            wait_connected(c).await?;
            self.sync_config(c).await?;
        }
        let dbs = dbs.unwrap_or_else(default_dbs);
        let finished = cluster
            .as_ref()
            .is_none_or(|c| c.setup_finished().is_some());
        if finished && has_dbs(&*fabric, &dbs) {
            return Err(bad("Cluster is already finished"));
        }
        crate::blocking(move || {
            for db in &dbs {
                if fabric.open_db(db).is_ok() {
                    continue;
                }
                // A creation that lost a race with another is as good as done.
                if let Err(e) = fabric.create_db(db, CreateDb::default()) {
                    fabric.open_db(db).map_err(|_| e)?;
                }
            }
            Ok::<_, Error>(())
        })
        .await?;
        if let Some(c) = &cluster {
            c.finish_setup().await?;
        }
        Ok(())
    }

    /// Sets `[admins]`, `[couchdb] uuid` and `[chttpd_auth] secret` on every other running
    /// member as they are here, so that any member knows the admins, names the same server
    /// and takes the others' session cookies (CouchDB's `sync_admins`, `sync_uuid`,
    /// `sync_auth_secret`).
    async fn sync_config(&self, cluster: &Cluster) -> Result<()> {
        let mut settings: Vec<(&str, String, String)> = (self.config.section("admins"))
            .into_iter()
            .map(|(k, v)| ("admins", k, v))
            .collect();
        for (section, key) in [("couchdb", "uuid"), ("chttpd_auth", "secret")] {
            if let Some(v) = self.config.get(section, key) {
                settings.push((section, key.to_owned(), v));
            }
        }
        let me = &cluster.config().node;
        for member in cluster.members().iter().filter(|m| &m.name != me) {
            for (section, key, value) in &settings {
                let target = format!("/_node/_local/_config/{section}/{}", enc(key));
                let body = Bytes::from(Value::String(value.clone()).to_string());
                let sent =
                    self.forward(&member.name, "PUT", &target, Some("application/json"), body);
                if !matches!(sent.await, Ok(Some(f)) if f.status == 200) {
                    return Err(named(
                        500,
                        "setup_error",
                        "Cluster setup unable to sync admin passwords",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Waits until every listed node is running (CouchDB's `wait_connected`).
async fn wait_connected(cluster: &Cluster) -> Result<()> {
    let deadline = Instant::now() + CONNECT_WAIT;
    loop {
        let running: Vec<String> = cluster.members().into_iter().map(|m| m.name).collect();
        if cluster.nodes().iter().all(|d| running.contains(&d.name)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(named(
                500,
                "setup_error",
                "Cluster setup timed out waiting for nodes to connect",
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A name as one path segment.
pub(crate) fn enc(segment: &str) -> String {
    utf8_percent_encode(segment, NON_ALPHANUMERIC).to_string()
}

/// The client the wizard's requests of other nodes go through.
fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<SetupAction> {
        SetupAction::parse(v.as_object().unwrap())
    }

    #[test]
    fn actions_parse_as_couchdb_reads_them() {
        assert!(matches!(parse(json!({})), Err(Error::BadRequest(r)) if r == "Invalid Action'"));
        assert!(matches!(
            parse(json!({"action": 1})),
            Err(Error::BadRequest(_))
        ));
        assert_eq!(
            parse(json!({"action": "enable_cluster", "node_count": 3})).unwrap(),
            SetupAction::EnableCluster
        );
        let add = parse(json!({"action": "add_node", "host": "h", "port": 15984,
                               "username": "a", "password": "p", "singlenode": false}));
        assert_eq!(
            add.unwrap(),
            SetupAction::AddNode(AddNode {
                host: "h".into(),
                port: Some("15984".into()),
                username: Some("a".into()),
                password: Some("p".into()),
                name: None,
            })
        );
        assert!(parse(json!({"action": "add_node", "port": 1})).is_err());
        assert!(parse(json!({"action": "add_node", "host": "h", "port": "x"})).is_err());
        assert!(parse(json!({"action": "add_node", "host": 1})).is_err());
        let remote = parse(json!({"action": "enable_cluster", "remote_node": "r", "port": "1"}));
        assert!(
            matches!(remote, Ok(SetupAction::EnableRemote(r)) if r.port.as_deref() == Some("1"))
        );
        assert_eq!(
            parse(json!({"action": "finish_cluster", "ensure_dbs_exist": ["a"]})).unwrap(),
            SetupAction::FinishCluster {
                ensure_dbs_exist: Some(vec!["a".into()])
            }
        );
        assert!(parse(json!({"action": "finish_cluster", "ensure_dbs_exist": [1]})).is_err());
    }
}
