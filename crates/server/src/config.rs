//! Configuration: command-line flags over environment variables over an ini file in
//! CouchDB's style (`[chttpd]`, `[couchdb]`, `[admins]`), over defaults.
//!
//! The data directory holds `local.ini`, which Settee itself writes: the first-run admin's
//! hash and the server uuid. Plaintext admin passwords found in an ini file are replaced by
//! their hash, as CouchDB does.

use ini::Ini;
use settee_auth::password::{PasswordHash, DEFAULT_ITERATIONS};
use std::collections::HashMap;
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
}

pub struct Settings {
    /// `[couchdb] os_process_timeout`: per-call limit for JavaScript, in ms.
    pub os_process_timeout_ms: u64,
    /// `[settee] js_memory_limit`: bytes per JavaScript runtime.
    pub js_memory_limit: usize,
    /// `[settee] view_index_workers`: map workers per index update (0 = one per core).
    pub view_workers: usize,
    /// `[query_server_config] reduce_limit`.
    pub reduce_limit: bool,
    pub data_dir: PathBuf,
    pub bind: SocketAddr,
    /// The live configuration: the `--config` file, then `local.ini`, plus `--admin`.
    pub node: settee_http::NodeConfig,
    pub server_uuid: String,
    pub max_document_size: usize,
    pub max_http_request_size: usize,
    /// A password generated on first start, to print once.
    pub generated_password: Option<(String, String)>,
}

fn get<'a>(inis: &'a [Ini], section: &str, key: &str) -> Option<&'a str> {
    inis.iter()
        .rev()
        .find_map(|i| i.get_from(Some(section), key))
}

fn load(path: &Path) -> Result<Ini, String> {
    Ini::load_from_file(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

pub fn resolve(args: &ServeArgs) -> Result<Settings, String> {
    let mut inis = Vec::new();
    if let Some(p) = &args.config {
        inis.push(load(p)?);
    }
    let data_dir = args
        .data_dir
        .clone()
        .or_else(|| get(&inis, "couchdb", "database_dir").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("./settee-data"));
    std::fs::create_dir_all(&data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let local_path = data_dir.join("local.ini");
    let mut local = if local_path.exists() {
        load(&local_path)?
    } else {
        Ini::new()
    };
    let mut dirty = false;

    // Hash any plaintext admin passwords in local.ini in place.
    let plain: Vec<(String, String)> = local
        .section(Some("admins"))
        .map(|s| {
            s.iter()
                .filter(|(_, v)| PasswordHash::parse(v).is_none())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default();
    for (name, pw) in plain {
        local
            .with_section(Some("admins"))
            .set(name, PasswordHash::new(&pw, DEFAULT_ITERATIONS).stored());
        dirty = true;
    }
    inis.push(local.clone());

    let mut admins = HashMap::new();
    for ini in &inis {
        if let Some(section) = ini.section(Some("admins")) {
            for (name, value) in section.iter() {
                let hash = PasswordHash::parse(value)
                    .unwrap_or_else(|| PasswordHash::new(value, DEFAULT_ITERATIONS));
                admins.insert(name.to_string(), hash);
            }
        }
    }
    let mut cli_admin = None;
    if let Some(spec) = &args.admin {
        let (name, pw) = spec.split_once(':').ok_or("--admin takes NAME:PASSWORD")?;
        let hash = PasswordHash::new(pw, 10_000);
        admins.insert(name.to_string(), hash.clone());
        cli_admin = Some((name.to_string(), hash));
    }
    let mut generated_password = None;
    if admins.is_empty() {
        let pw = hex::encode(rand::random::<[u8; 16]>());
        let hash = PasswordHash::new(&pw, DEFAULT_ITERATIONS);
        local
            .with_section(Some("admins"))
            .set("admin", hash.stored());
        admins.insert("admin".into(), hash);
        generated_password = Some(("admin".to_string(), pw));
        dirty = true;
    }
    let server_uuid = match get(&inis, "couchdb", "uuid") {
        Some(u) => u.to_string(),
        None => {
            let u = hex::encode(rand::random::<[u8; 16]>());
            local.with_section(Some("couchdb")).set("uuid", u.clone());
            dirty = true;
            u
        }
    };
    if dirty {
        local
            .write_to_file(&local_path)
            .map_err(|e| format!("cannot write {}: {e}", local_path.display()))?;
    }

    let bind = match args.bind {
        Some(b) => b,
        None => {
            let addr = get(&inis, "chttpd", "bind_address").unwrap_or("127.0.0.1");
            let port = get(&inis, "chttpd", "port").unwrap_or("5984");
            format!("{addr}:{port}")
                .parse()
                .map_err(|e| format!("bad bind address {addr}:{port}: {e}"))?
        }
    };
    let int = |section: &str, key: &str, default: usize| -> Result<usize, String> {
        get(&inis, section, key).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| format!("[{section}] {key} must be an integer"))
        })
    };
    let node = settee_http::NodeConfig::load(
        &args.config.iter().cloned().collect::<Vec<_>>(),
        local_path,
    )?;
    for (name, hash) in admins {
        if node
            .get("admins", &name)
            .is_none_or(|v| PasswordHash::parse(&v).is_none())
        {
            node.set_transient("admins", &name, &hash.stored());
        }
    }
    if let Some((name, hash)) = cli_admin {
        node.set_transient("admins", &name, &hash.stored());
    }
    Ok(Settings {
        data_dir,
        bind,
        node,
        server_uuid,
        max_document_size: int(
            "couchdb",
            "max_document_size",
            settee_db::Config::default().max_document_size,
        )?,
        max_http_request_size: int(
            "chttpd",
            "max_http_request_size",
            settee_http::HttpConfig::default().max_http_request_size,
        )?,
        os_process_timeout_ms: int("couchdb", "os_process_timeout", 5000)? as u64,
        js_memory_limit: int("settee", "js_memory_limit", 64 << 20)?,
        view_workers: int("settee", "view_index_workers", 0)?,
        reduce_limit: get(&inis, "query_server_config", "reduce_limit") != Some("false"),
        generated_password,
    })
}
