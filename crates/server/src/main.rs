//! `settee`: a CouchDB-compatible document database server.

mod config;
mod disk;
mod gate;
mod logging;
mod serve;

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings (its `malloc_conf` symbol): return freed pages to the system within a
/// second, from a background thread, so an index build's peak does not linger as RSS.
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);
// SAFETY: points at a static, immutable, NUL-terminated string.
unsafe impl Sync for MallocConf {}
#[export_name = "malloc_conf"]
static MALLOC_CONF: MallocConf =
    MallocConf(c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr());

use clap::{CommandFactory, Parser, Subcommand};
use settee_db::Couch;
use settee_http::{app, AppState, HttpConfig};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "settee",
    version,
    about = "A CouchDB-compatible document database"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the CouchDB HTTP API.
    Serve(config::ServeArgs),
    /// The client commands (bench, compact, backup, restore, cluster, completions): they
    /// speak HTTP to any CouchDB-compatible server.
    #[command(flatten)]
    Client(settee_cli::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let from_env = std::env::var("SETTEE_LOG").ok();
    let log = logging::init(from_env.as_deref().unwrap_or(logging::DEFAULT_LEVEL));
    let result = match cli.command {
        Command::Serve(args) => serve(args, log, from_env.is_some()),
        Command::Client(command) => {
            settee_cli::run(command, Cli::command).map_err(|e| e.to_string())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("settee: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `log_from_env`: `SETTEE_LOG` chose the starting log level, over `[log] level`.
fn serve(
    args: config::ServeArgs,
    log: logging::LevelHandle,
    log_from_env: bool,
) -> Result<(), String> {
    let settings = config::resolve(&args)?;
    settee_core::node::set_name(&settings.node_name)?;
    if let (false, Some(level)) = (log_from_env, settings.node.get("log", "level")) {
        log.set(&level);
    }
    let couch = Couch::open(
        &settings.data_dir.join("store"),
        settee_db::Config::default(),
        &settee_storage::StoreOptions::with_cache(settings.storage_cache_size),
    )
    .map_err(|e| format!("cannot open the data directory: {e}"))?;
    // The authentication database, admin-only as CouchDB 3 creates it.
    if couch.get(settee_auth::users::USERS_DB).is_err() {
        couch
            .create(
                settee_auth::users::USERS_DB,
                settee_auth::security::admin_only(),
            )
            .map_err(|e| format!("cannot create _users: {e}"))?;
    }
    settee_http::ensure_auth_ddoc(&couch, &settings.node)
        .map_err(|e| format!("cannot write _design/_auth: {e}"))?;
    settee_http::ensure_replicator_db(&couch, &settings.node)
        .map_err(|e| format!("cannot create _replicator: {e:?}"))?;
    let http_config = HttpConfig {
        max_http_request_size: settings.max_http_request_size,
        server_uuid: settings.server_uuid.clone(),
        ..Default::default()
    };
    let mut views_config = settee_views::Config::default();
    settee_http::register_query_language(&mut views_config.native);
    if settings.view_workers > 0 {
        views_config.workers = settings.view_workers;
    }
    views_config.query_servers = std::sync::Arc::new(query_servers(&settings.node));
    let views = settee_views::Views::new(views_config);
    let node = std::sync::Arc::new(settee_node::Node::new(
        couch.clone(),
        views,
        std::sync::Arc::new(settings.node),
    ));
    // A cluster member serves clustered databases from their copies (the coordinator
    // finds the cluster state once it is joined, below, and keeps the clustered
    // authentication database's `_design/_auth` from then on).
    let mut keep_auth_ddoc = None;
    let state = match settings.cluster {
        Some(_) => {
            let render_error: settee_coordinator::RenderError = |e| {
                let (status, body) = settee_http::ApiError::from(e).status_and_body();
                (status.as_u16(), body)
            };
            let coordinator = std::sync::Arc::new(settee_coordinator::Coordinator::new(
                node.clone(),
                render_error,
            ));
            let fabric: std::sync::Arc<dyn settee_node::Fabric> = coordinator.clone();
            node.set_fabric(std::sync::Arc::downgrade(&fabric));
            keep_auth_ddoc = Some(coordinator.clone());
            AppState::with_fabric(node.clone(), fabric, http_config)
        }
        None => AppState::new(node.clone(), http_config),
    };
    disk::spawn(
        settings.data_dir.clone(),
        couch.disk().clone(),
        node.config.clone(),
    );
    // `[log] level` changes through `/_config` apply at once.
    node.set_log_control(Box::new(move |level| {
        log.set(level.unwrap_or(logging::DEFAULT_LEVEL))
    }));
    if let Some((name, pw)) = &settings.generated_password {
        eprintln!("No admin was configured: created server admin `{name}` with password `{pw}`.");
        eprintln!(
            "Only its hash is stored (in {}); this is the only time it is shown.",
            settings.data_dir.join("local.ini").display()
        );
    }
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let served = runtime.block_on(async move {
        // Connections are read through the request head gate (`gate.rs`) and served by
        // `serve.rs` (which sets TCP_NODELAY).
        let tcp = tokio::net::TcpListener::bind(settings.bind)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", settings.bind))?;
        let listener = gate::GateListener(tcp);
        // The bound address, not the requested one: with port 0 this tells the caller
        // (the test harness, scripts) which port the kernel chose.
        let local = axum::serve::Listener::local_addr(&listener).map_err(|e| e.to_string())?;
        state.set_local_addr(local);
        if let Some(cluster) = &settings.cluster {
            let config = cluster_config(cluster, &settings.node_name, local);
            let cluster = settee_cluster::Cluster::start(config)
                .await
                .map_err(|e| format!("cannot use the cluster state: {e}"))?;
            node.set_cluster(cluster);
            // Internal replication: this member's copies push what the others lack.
            settee_sync::start(node.clone(), state.replicator());
            // Resharding: this member runs the split jobs it claims.
            settee_node::reshard::run::start(node.clone(), state.replicator());
            if let Some(coordinator) = &keep_auth_ddoc {
                settee_coordinator::keep_auth_ddoc(std::sync::Arc::downgrade(coordinator));
            }
            // Users read from other members are kept while their database's changes are
            // followed.
            settee_node::auth_cache::follow(std::sync::Arc::downgrade(&node));
        }
        state.start_scheduler();
        eprintln!(
            "Settee {} listening on http://{local}",
            env!("CARGO_PKG_VERSION")
        );
        serve::serve(listener, app(state), shutdown()).await;
        // A member that stops leaves the running members at once (its lease revoked), not
        // when its lease runs out.
        if let Some(cluster) = node.cluster() {
            cluster.stop().await;
        }
        Ok::<(), String>(())
    });
    couch
        .flush()
        .map_err(|e| format!("flushing at shutdown: {e}"))?;
    served
}

/// What the cluster crate needs of this node's settings; the URL others reach it at is by
/// default the host of its name (`settee1@10.0.0.1`) and the port it listens on.
fn cluster_config(
    c: &config::ClusterSettings,
    node_name: &str,
    local: std::net::SocketAddr,
) -> settee_cluster::Config {
    let url = c.url.clone().unwrap_or_else(|| {
        let host = node_name.split_once('@').map_or("127.0.0.1", |(_, h)| h);
        format!("http://{host}:{}", local.port())
    });
    let mut config = settee_cluster::Config::new(node_name, &url, c.endpoints.clone(), &c.secret);
    config.prefix = c.prefix.clone();
    config.lease_ttl = std::time::Duration::from_secs(c.lease_ttl);
    config
}

/// The external query servers, CouchDB 3's way: `COUCHDB_QUERY_SERVER_<LANG>` variables
/// over the `[query_servers]` section of the ini files (read at start only: a command line
/// is not something `/_config` should be able to change), `python` defaulting to Settee's
/// own server when it is installed. Their live settings (timeout, process limit) follow `/_config`.
fn query_servers(node: &settee_node::NodeConfig) -> settee_views::QueryServers {
    use settee_views::queryserver::{Languages, QueryServers};
    let section =
        |name: &str| -> Vec<(String, String)> { node.section(name).into_iter().collect() };
    let languages = Languages::resolve(
        std::env::vars(),
        &section("query_servers"),
        &section("native_query_servers"),
    );
    for (lang, command) in &languages.0 {
        tracing::info!(language = %lang, %command, "query server");
    }
    QueryServers::new(languages, Default::default())
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("signal handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
    tracing::info!("shutting down");
}
