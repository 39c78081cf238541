//! `settee cluster status` and `settee cluster add-node`: a cluster seen and grown through
//! any member's HTTP API (CouchDB's `_membership`, `_shards`, `_nodes` and `_cluster_setup`),
//! so they work on a CouchDB cluster as on a Settee one. `move` and `rebalance`, Settee's
//! own, are in `moves`; `split` (CouchDB's resharding API) in `split`.

use crate::client::{enc, Client, Target};
use crate::{progress, Error};
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Show the members (listed and running) and, for each database, its q and n and
    /// which nodes hold each of its ranges.
    Status(StatusArgs),
    /// Add a node to the cluster: by name (PUT /_node/_local/_nodes/{name}), or by --host
    /// and --port as the set-up wizard's add_node does (the node checked first).
    AddNode(AddNodeArgs),
    /// Move a database's copy of a range from one node to another (Settee's
    /// POST /_cluster/move), showing its progress.
    Move(crate::moves::MoveArgs),
    /// Move copies until every running member holds about as many as any other (after a
    /// node was added); prints the plan, then runs the moves one by one.
    Rebalance(crate::moves::RebalanceArgs),
    /// Split a database's ranges (or one, --range) in two on every copy, through the
    /// resharding API (POST /_reshard/jobs), and wait for the jobs to end.
    Split(crate::split::SplitArgs),
}

/// The member asked.
#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    /// Any member of the cluster (credentials of a server admin may be in it).
    #[arg(long, env = "COUCH_URL", default_value = "http://127.0.0.1:5984")]
    pub url: String,
    /// Credentials as NAME:PASSWORD (instead of those in the URL).
    #[arg(long, env = "SETTEE_USER")]
    pub user: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Print the status as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct AddNodeArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The node's name, `name@host` (as its --node-name).
    #[arg(required_unless_present = "host", conflicts_with = "host")]
    pub name: Option<String>,
    /// The node's host, reached at --port by the member asked (the wizard's add_node).
    #[arg(long)]
    pub host: Option<String>,
    /// The node's HTTP port, with --host.
    #[arg(long, default_value_t = 5984, requires = "host")]
    pub port: u16,
    /// A server admin's credentials on the node added (NAME:PASSWORD), with --host; by
    /// default those given for the member asked.
    #[arg(long, requires = "host")]
    pub node_user: Option<String>,
    /// How long to wait, in seconds, for a node added by name to run (0: do not wait).
    #[arg(long, default_value_t = 30)]
    pub wait: u64,
}

pub fn run(args: &ClusterArgs) -> Result<(), Error> {
    match &args.command {
        ClusterCommand::Status(a) => status(a),
        ClusterCommand::AddNode(a) => add_node(a),
        ClusterCommand::Move(a) => crate::moves::move_copy(a),
        ClusterCommand::Rebalance(a) => crate::moves::rebalance(a),
        ClusterCommand::Split(a) => crate::split::split(a),
    }
}

pub(crate) fn server(args: &ServerArgs) -> Result<Client, Error> {
    Target::server(&args.url, args.user.as_deref())
}

/// `_membership`'s lists: (running, listed).
pub(crate) fn membership(client: &Client) -> Result<(Vec<String>, Vec<String>), Error> {
    let m = client.json("GET", "/_membership", None)?;
    let names = |k: &str| -> Vec<String> {
        let list = m[k].as_array().into_iter().flatten();
        list.filter_map(|n| n.as_str().map(str::to_owned)).collect()
    };
    Ok((names("all_nodes"), names("cluster_nodes")))
}

fn status(args: &StatusArgs) -> Result<(), Error> {
    let client = server(&args.server)?;
    let (running, listed) = membership(&client)?;
    let dbs: Vec<String> = serde_json::from_value(client.json("GET", "/_all_dbs", None)?)
        .map_err(|e| Error::Format(format!("_all_dbs: {e}")))?;
    let bar = progress::bar("databases", dbs.len() as u64, "dbs");
    let mut placed = Map::new();
    for db in &dbs {
        bar.inc(1);
        let path = format!("/{}", enc(db));
        // A database deleted since it was listed is left out.
        let (status, body) = client.send("GET", &path, None)?;
        if status == 404 {
            continue;
        }
        client.check("GET", &path, status, &body)?;
        let info: Value =
            serde_json::from_slice(&body).map_err(|e| Error::Format(format!("GET {path}: {e}")))?;
        let shards = client.json("GET", &format!("{path}/_shards"), None)?;
        placed.insert(
            db.clone(),
            json!({
                "q": info["cluster"]["q"],
                "n": info["cluster"]["n"],
                "shards": shards["shards"],
            }),
        );
    }
    bar.finish_and_clear();
    let all = json!({"all_nodes": running, "cluster_nodes": listed, "dbs": placed});
    if args.json {
        println!("{all:#}");
    } else {
        print!("{}", render(client.root(), &all));
    }
    Ok(())
}

/// The status as text: the members, then each database and its ranges.
fn render(root: &str, all: &Value) -> String {
    let names = |k: &str| -> Vec<&str> {
        let list = all[k].as_array().into_iter().flatten();
        list.filter_map(Value::as_str).collect()
    };
    let (running, listed) = (names("all_nodes"), names("cluster_nodes"));
    let mut out = format!(
        "cluster at {root}: {} nodes listed, {} running\n",
        listed.len(),
        running.len()
    );
    let mut members: Vec<&str> = listed.clone();
    members.extend(running.iter().filter(|r| !listed.contains(r)));
    for m in members {
        let state = match (listed.contains(&m), running.contains(&m)) {
            (true, true) => "running",
            (true, false) => "not running",
            _ => "running, not listed",
        };
        out += &format!("  {m:<32} {state}\n");
    }
    let dbs = all["dbs"].as_object().cloned().unwrap_or_default();
    out += &format!("databases: {}\n", dbs.len());
    for (db, d) in &dbs {
        out += &format!("  {db}  q={} n={}\n", d["q"], d["n"]);
        for (range, nodes) in d["shards"].as_object().into_iter().flatten() {
            let nodes: Vec<&str> = (nodes.as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .collect();
            out += &format!("    {range}  {}\n", nodes.join(" "));
        }
    }
    out
}

fn add_node(args: &AddNodeArgs) -> Result<(), Error> {
    let client = server(&args.server)?;
    match (&args.name, &args.host) {
        (Some(name), _) => add_by_name(&client, name, args.wait),
        (None, Some(host)) => add_by_host(&client, args, host),
        (None, None) => Err(Error::Usage("a node name or --host is needed".into())),
    }
}

/// CouchDB's manual way: the node listed in `_nodes`, then awaited among the running.
fn add_by_name(client: &Client, name: &str, wait: u64) -> Result<(), Error> {
    let (running, listed) = membership(client)?;
    if listed.iter().any(|n| n == name) {
        println!("{name} is listed already");
    } else {
        let path = format!("/_node/_local/_nodes/{}", enc(name));
        client.json("PUT", &path, Some(&json!({})))?;
        println!("{name} listed");
    }
    if running.iter().any(|n| n == name) {
        println!("{name} is running");
        return Ok(());
    }
    if wait == 0 {
        println!("{name} is not running yet");
        return Ok(());
    }
    let spinner = progress::spinner("add-node");
    spinner.set_message(format!("waiting for {name} to run"));
    let deadline = Instant::now() + Duration::from_secs(wait);
    while Instant::now() < deadline {
        if membership(client)?.0.iter().any(|n| n == name) {
            spinner.finish_and_clear();
            println!("{name} is running");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    spinner.finish_and_clear();
    Err(Error::Format(format!(
        "{name} is listed but did not start running within {wait} s: start it with this \
         cluster's settings (for Settee: --node-name {name} --cluster ENDPOINTS and the \
         cluster's secret)"
    )))
}

/// The wizard's `add_node`: the member asked reaches the node, checks it and lists it.
fn add_by_host(client: &Client, args: &AddNodeArgs, host: &str) -> Result<(), Error> {
    let credentials = match &args.node_user {
        Some(c) => Some(c.clone()),
        None => client.credentials(),
    };
    let (username, password) = match credentials.as_deref().and_then(|c| c.split_once(':')) {
        Some((u, p)) => (Some(u), Some(p)),
        None => (None, None),
    };
    let body = json!({
        "action": "add_node",
        "host": host,
        "port": args.port,
        "username": username,
        "password": password,
    });
    client.json("POST", "/_cluster_setup", Some(&body))?;
    let node = Client::new(
        format!("http://{host}:{}", args.port),
        credentials.as_deref(),
    );
    let name = node.json("GET", "/_node/_local", None)?;
    let name = name["name"].as_str().unwrap_or(host);
    println!("{name} added");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_lists_members_then_ranges() {
        let all = json!({
            "all_nodes": ["a@h", "b@h"],
            "cluster_nodes": ["a@h", "b@h", "c@h"],
            "dbs": {"db": {"q": 2, "n": 2, "shards": {
                "00000000-7fffffff": ["a@h", "b@h"],
                "80000000-ffffffff": ["b@h", "c@h"],
            }}},
        });
        let text = render("http://x", &all);
        assert!(text.starts_with("cluster at http://x: 3 nodes listed, 2 running\n"));
        assert!(text.contains("  c@h") && text.contains("not running"));
        assert!(text.contains("  db  q=2 n=2\n    00000000-7fffffff  a@h b@h\n"));
    }
}
