//! Configuration: command-line flags over environment variables over an ini file in
//! CouchDB's style (`[chttpd]`, `[couchdb]`, `[admins]`), over defaults.
//!
//! The data directory holds `local.ini`, which Settee itself writes: the first-run admin's
//! hash, the server uuid, and changes made with `/_node/_local/_config`. Plaintext admin
//! passwords found in an ini file are replaced by their hash, as CouchDB does.
//!
//! Everything is read through the live [`NodeConfig`]; the values copied into [`Settings`]
//! here are the restart-only ones (listed in `docs/design.md`).

use settee_auth::password::{PasswordHash, DEFAULT_ITERATIONS};
use settee_node::NodeConfig;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Directory for all data (created if missing).
    #[arg(long, env = "SETTEE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "SETTEE_BIND")]
    pub bind: Option<SocketAddr>,
    /// Server admin as NAME:PASSWORD (not persisted).
    #[arg(long, env = "SETTEE_ADMIN")]
    pub admin: Option<String>,
    /// An ini file in CouchDB's format, read before `<data-dir>/local.ini`.
    #[arg(long, env = "SETTEE_CONFIG")]
    pub config: Option<PathBuf>,
    /// This node's name, `name@host` as CouchDB's Erlang node names (`[settee] node_name`;
    /// default `nonode@nohost`).
    #[arg(long, env = "SETTEE_NODE_NAME")]
    pub node_name: Option<String>,
    /// Join the cluster whose state is in the etcd at these comma-separated client URLs
    /// (`[etcd] endpoints`); needs a `--node-name` and the cluster secret.
    #[arg(long, env = "SETTEE_CLUSTER")]
    pub cluster: Option<String>,
}

/// How this node takes part in a cluster (`--cluster`, `[etcd]`, `[cluster]`).
pub struct ClusterSettings {
    pub endpoints: Vec<String>,
    /// `[etcd] prefix`: where the cluster's keys start.
    pub prefix: String,
    /// `[cluster] lease_ttl`, seconds.
    pub lease_ttl: u64,
    /// `[cluster] url`: where other nodes reach this one (default: the host of the node's
    /// name and the port listened on).
    pub url: Option<String>,
    /// `SETTEE_CLUSTER_SECRET` or `[cluster] secret`: what nodes prove themselves to each
    /// other with.
    pub secret: String,
}

/// What the binary needs at startup. Settings that components read live (document size,
/// JavaScript limits, `reduce_limit`, …) are applied from `node` by `AppState`.
pub struct Settings {
    /// `[settee] view_index_workers`: map workers per index update (0 = one per core).
    pub view_workers: usize,
    /// `[settee] storage_cache_size`: the storage engine's block cache in bytes, which
    /// memtables are charged to as well (read at start).
    pub storage_cache_size: usize,
    pub data_dir: PathBuf,
    pub bind: SocketAddr,
    /// The live configuration: the `--config` file, then `local.ini`, plus `--admin`.
    pub node: settee_node::NodeConfig,
    pub server_uuid: String,
    /// This node's name (`--node-name`, `[settee] node_name`).
    pub node_name: String,
    pub max_http_request_size: usize,
    /// Set when this node is a member of a cluster.
    pub cluster: Option<ClusterSettings>,
    /// A password generated on first start, to print once.
    pub generated_password: Option<(String, String)>,
}

/// Replaces plaintext admin passwords written into `local.ini` by hand with their hash,
/// in place (values from read-only files are hashed for the run only, below).
fn hash_local_admins(local_path: &Path, iterations: u32) -> Result<bool, String> {
    let local = NodeConfig::load(&[], local_path.to_path_buf()).map_err(|e| e.to_string())?;
    let mut changed = false;
    for (name, value) in local.section("admins") {
        if PasswordHash::parse(&value).is_none() {
            let hash = PasswordHash::new(&value, iterations).stored();
            local
                .set("admins", &name, &hash)
                .map_err(|e| e.to_string())?;
            changed = true;
        }
    }
    Ok(changed)
}

pub fn resolve(args: &ServeArgs) -> Result<Settings, String> {
    let files: Vec<PathBuf> = args.config.iter().cloned().collect();
    let data_dir = match (&args.data_dir, &args.config) {
        (Some(d), _) => d.clone(),
        (None, Some(p)) => NodeConfig::load(std::slice::from_ref(p), PathBuf::new())
            .map_err(|e| e.to_string())?
            .get("couchdb", "database_dir")
            .filter(|d| !d.is_empty())
            .map_or_else(|| PathBuf::from("./settee-data"), PathBuf::from),
        (None, None) => PathBuf::from("./settee-data"),
    };
    std::fs::create_dir_all(&data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let local_path = data_dir.join("local.ini");
    let iterations_in = |node: &NodeConfig| {
        node.get_u64("chttpd_auth", "iterations", DEFAULT_ITERATIONS.into())
            .clamp(1, u32::MAX.into()) as u32
    };
    let node = NodeConfig::load(&files, local_path.clone()).map_err(|e| e.to_string())?;
    node.set_defaults(settee_node::config::builtin_defaults());
    // What the command line (or environment) chose, shown by `_config` for this run.
    if args.data_dir.is_some() {
        node.set_transient("couchdb", "database_dir", &data_dir.display().to_string());
    }
    if let Some(bind) = args.bind {
        node.set_transient("chttpd", "bind_address", &bind.ip().to_string());
        node.set_transient("chttpd", "port", &bind.port().to_string());
    }
    let iterations = iterations_in(&node);
    if hash_local_admins(&local_path, iterations)? {
        node.reload().map_err(|e| e.to_string())?;
    }

    // Plaintext passwords in read-only files are hashed for this run only.
    for (name, value) in node.section("admins") {
        if PasswordHash::parse(&value).is_none() {
            node.set_transient(
                "admins",
                &name,
                &PasswordHash::new(&value, iterations).stored(),
            );
        }
    }
    if let Some(spec) = &args.admin {
        let (name, pw) = spec.split_once(':').ok_or("--admin takes NAME:PASSWORD")?;
        node.set_transient("admins", name, &PasswordHash::new(pw, 10_000).stored());
    }
    let mut generated_password = None;
    if node.section("admins").is_empty() {
        let pw = hex::encode(rand::random::<[u8; 16]>());
        let hash = PasswordHash::new(&pw, iterations);
        node.set("admins", "admin", &hash.stored())
            .map_err(|e| e.to_string())?;
        generated_password = Some(("admin".to_string(), pw));
    }
    let server_uuid = match node.get("couchdb", "uuid") {
        Some(u) => u,
        None => {
            let u = hex::encode(rand::random::<[u8; 16]>());
            node.set("couchdb", "uuid", &u).map_err(|e| e.to_string())?;
            u
        }
    };

    let bind = match args.bind {
        Some(b) => b,
        None => {
            let addr = node.get_or("chttpd", "bind_address", "127.0.0.1");
            let port = node.get_or("chttpd", "port", "5984");
            format!("{addr}:{port}")
                .parse()
                .map_err(|e| format!("bad bind address {addr}:{port}: {e}"))?
        }
    };
    let int = |section: &str, key: &str, default: usize| -> Result<usize, String> {
        node.get(section, key).map_or(Ok(default), |v| {
            v.trim()
                .parse()
                .map_err(|_| format!("[{section}] {key} must be an integer"))
        })
    };
    // Refuse to start on values the live settings would silently replace by defaults.
    for (section, key) in [
        ("couchdb", "max_document_size"),
        ("couchdb", "os_process_timeout"),
        ("settee", "js_memory_limit"),
    ] {
        int(section, key, 0)?;
    }
    let max_http_request_size = int(
        "chttpd",
        "max_http_request_size",
        settee_node::config::MAX_HTTP_REQUEST_SIZE,
    )?;
    let view_workers = int("settee", "view_index_workers", 0)?;
    let node_name = match &args.node_name {
        Some(n) => n.clone(),
        None => node.get_or("settee", "node_name", settee_core::node::DEFAULT_NAME),
    };
    settee_core::node::check_name(&node_name)?;
    let storage_cache_size = int(
        "settee",
        "storage_cache_size",
        settee_storage::StoreOptions::default().block_cache_bytes,
    )?;
    let cluster = cluster_settings(args, &node, &node_name)?;
    Ok(Settings {
        cluster,
        data_dir,
        bind,
        node,
        server_uuid,
        node_name,
        max_http_request_size,
        view_workers,
        storage_cache_size,
        generated_password,
    })
}

/// The cluster this node joins, if any: etcd's endpoints from `--cluster` (or `[etcd]
/// endpoints`); a member needs a real name (not `nonode@nohost`) and the cluster's secret.
fn cluster_settings(
    args: &ServeArgs,
    node: &NodeConfig,
    node_name: &str,
) -> Result<Option<ClusterSettings>, String> {
    let Some(list) = args
        .cluster
        .clone()
        .or_else(|| node.get("etcd", "endpoints"))
    else {
        return Ok(None);
    };
    let endpoints: Vec<String> = list
        .split(',')
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect();
    if endpoints.is_empty() {
        return Err("--cluster needs etcd's client URLs".into());
    }
    if node_name == settee_core::node::DEFAULT_NAME {
        return Err("a cluster member needs a name: --node-name name@host".into());
    }
    let secret = std::env::var("SETTEE_CLUSTER_SECRET")
        .ok()
        .or_else(|| node.get("cluster", "secret"))
        .filter(|s| !s.is_empty())
        .ok_or("a cluster member needs the cluster's secret: SETTEE_CLUSTER_SECRET or [cluster] secret")?;
    let lease_ttl = node
        .get("cluster", "lease_ttl")
        .map_or(Ok(10), |v| v.trim().parse::<u64>())
        .ok()
        .filter(|&t| t > 0)
        .ok_or("[cluster] lease_ttl must be a positive number of seconds")?;
    Ok(Some(ClusterSettings {
        endpoints,
        prefix: node.get_or("etcd", "prefix", "/settee"),
        lease_ttl,
        url: node.get("cluster", "url"),
        secret,
    }))
}
