//! The node's live configuration, as CouchDB's `/_node/_local/_config` shows it: ini
//! sections layered read-only files first, then `<data-dir>/local.ini`, which is the one
//! file changes are written to. Handlers read it on every request, so a change made through
//! the API takes effect at once for every setting read here.
//!
//! As in CouchDB's ini format, an empty value (`key =`) deletes the key from every earlier
//! layer; that is how a deletion of a value set by a read-only file is persisted. Files are
//! read and written without quote or escape processing (CouchDB has none): values are
//! single lines, which [`validate`] enforces before anything is written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// `[chttpd] max_http_request_size` when nothing sets it.
pub const MAX_HTTP_REQUEST_SIZE: usize = 256 << 20;

pub type Section = BTreeMap<String, String>;
pub type Sections = BTreeMap<String, Section>;

/// One layer: `None` is a deletion of the key from the layers below.
type Layer = BTreeMap<String, BTreeMap<String, Option<String>>>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A section, key or value that cannot be stored in an ini file; the text is
    /// CouchDB's reason (`Invalid configuration section` / `key` / `value`).
    #[error("{0}")]
    Invalid(&'static str),
    /// `local.ini` (or a read-only file, on reload) could not be read or written.
    #[error("{0}")]
    Io(String),
}

pub struct NodeConfig {
    files: Vec<PathBuf>,
    /// Where changes are persisted (`None`: in memory only, for tests).
    local_path: Option<PathBuf>,
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    /// The built-in defaults (CouchDB's `default.ini`): the settings Settee honours, at
    /// the values it uses when nothing else sets them.
    defaults: Layer,
    /// Values from the read-only files, later files winning.
    base: Layer,
    /// The writable layer, as persisted.
    local: Layer,
    /// Values given at startup for this run only (command-line admins, hashes of
    /// plaintext passwords found in read-only files). They survive `_reload`; a persisted
    /// change of the same key replaces them.
    startup: Layer,
    /// Changes made with `X-Couch-Persist: false`; `_reload` drops them, as CouchDB does.
    unpersisted: Layer,
}

impl State {
    fn layers(&self) -> [&Layer; 5] {
        [
            &self.unpersisted,
            &self.startup,
            &self.local,
            &self.base,
            &self.defaults,
        ]
    }

    fn get(&self, section: &str, key: &str) -> Option<&String> {
        self.layers()
            .into_iter()
            .find_map(|l| l.get(section).and_then(|m| m.get(key)))
            .and_then(Option::as_ref)
    }

    /// One section, merged over the layers (cheaper than [`State::merged`]).
    fn section(&self, name: &str) -> Section {
        let mut out: BTreeMap<String, Option<String>> = BTreeMap::new();
        for layer in self.layers().into_iter().rev() {
            if let Some(s) = layer.get(name) {
                out.extend(s.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        out.into_iter().filter_map(|(k, v)| Some((k, v?))).collect()
    }

    fn merged(&self) -> Sections {
        let mut all = Layer::new();
        for layer in self.layers().into_iter().rev() {
            merge(&mut all, layer.clone());
        }
        all.into_iter()
            .map(|(name, s)| {
                let live = s.into_iter().filter_map(|(k, v)| Some((k, v?))).collect();
                (name, live)
            })
            .filter(|(_, s): &(String, Section)| !s.is_empty())
            .collect()
    }

    /// Whether a layer below the writable one still sets the key (so that deleting it
    /// must be persisted as an empty value).
    fn base_has(&self, section: &str, key: &str) -> bool {
        [&self.base, &self.defaults]
            .into_iter()
            .find_map(|l| l.get(section).and_then(|m| m.get(key)))
            .is_some_and(Option::is_some)
    }
}

fn remove(layer: &mut Layer, section: &str, key: &str) {
    if let Some(s) = layer.get_mut(section) {
        s.remove(key);
        if s.is_empty() {
            layer.remove(section);
        }
    }
}

fn insert(layer: &mut Layer, section: &str, key: &str, value: Option<String>) {
    layer
        .entry(section.to_string())
        .or_default()
        .insert(key.to_string(), value);
}

fn merge(into: &mut Layer, from: Layer) {
    for (name, section) in from {
        into.entry(name).or_default().extend(section);
    }
}

fn read_ini(path: &Path) -> Result<Layer, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::Io(format!("cannot read {}: {e}", path.display())))?;
    Ok(parse_ini(&text))
}

/// CouchDB's ini dialect (`config:parse_ini_file`): `[section]` headers, `;` comment
/// lines, `key = value` split at the first `=` (so keys such as `hmac:_default` keep
/// their colon), lines starting with whitespace continuing the previous value, and an
/// empty value deleting the key.
fn parse_ini(text: &str) -> Layer {
    let mut out = Layer::new();
    let mut section: Option<String> = None;
    let mut last_key: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with(';') {
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            section = Some(name.trim().to_string());
            last_key = None;
            continue;
        }
        let Some(sec) = &section else { continue };
        if line.starts_with([' ', '\t']) {
            if let Some(key) = &last_key {
                let prev = out
                    .get(sec)
                    .and_then(|m| m.get(key))
                    .cloned()
                    .flatten()
                    .unwrap_or_default();
                let joined = format!("{prev} {}", strip_comment(trimmed))
                    .trim()
                    .to_string();
                insert(&mut out, sec, key, (!joined.is_empty()).then_some(joined));
            }
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let (k, v) = (k.trim(), strip_comment(v.trim()));
        insert(&mut out, sec, k, (!v.is_empty()).then(|| v.to_string()));
        last_key = Some(k.to_string());
    }
    out
}

fn render_ini(layer: &Layer) -> String {
    let mut out = String::new();
    for (name, section) in layer {
        out.push_str(&format!("[{name}]\n"));
        for (k, v) in section {
            out.push_str(&format!("{k} = {}\n", v.as_deref().unwrap_or("")));
        }
        out.push('\n');
    }
    out
}

/// CouchDB's inline comments: a `;` after a space or tab ends the value.
fn strip_comment(value: &str) -> &str {
    let end = [" ;", "\t;"]
        .iter()
        .filter_map(|c| value.find(c))
        .min()
        .unwrap_or(value.len());
    value[..end].trim_end()
}

fn read_files(files: &[PathBuf]) -> Result<Layer, ConfigError> {
    let mut base = Layer::new();
    for f in files {
        merge(&mut base, read_ini(f)?);
    }
    Ok(base)
}

fn read_local(path: &Path) -> Result<Layer, ConfigError> {
    if path.exists() {
        read_ini(path)
    } else {
        Ok(Layer::new())
    }
}

/// CouchDB's check before a change: sections, keys and values are printable single lines
/// (tabs allowed), and sections and keys hold no `[` or `]`.
pub fn validate(section: &str, key: &str, value: &str) -> Result<(), ConfigError> {
    let printable = |s: &str| s.chars().all(|c| c == '\t' || !c.is_control());
    let bracketless = |s: &str| !s.contains(['[', ']']);
    // Beyond CouchDB's rules: what the ini reader would split (`=` in keys) or cut as a
    // comment (` ;`) cannot be stored faithfully.
    if !printable(section) || !bracketless(section) {
        Err(ConfigError::Invalid("Invalid configuration section"))
    } else if !printable(key) || !bracketless(key) || key.contains('=') {
        Err(ConfigError::Invalid("Invalid configuration key"))
    } else if !printable(value) || strip_comment(value) != value {
        Err(ConfigError::Invalid("Invalid configuration value"))
    } else {
        Ok(())
    }
}

/// Settee's `default.ini`: the lowest configuration layer, which `_config` shows as
/// CouchDB shows its own `default.ini` values. It lists only settings Settee honours, at
/// the values Settee uses when nothing else sets them (where Settee's default differs
/// from CouchDB's, as `max_http_request_size`, Settee's is shown). Settings read from
/// either of two sections (`[chttpd_auth]` or CouchDB 2's `[couch_httpd_auth]`) are left
/// out, since a default in the first would hide a value set in the second.
pub fn builtin_defaults() -> Sections {
    let limits = settee_views::Limits::default();
    let entries: Vec<(&str, &str, String)> = vec![
        ("vendor", "name", "Settee".into()),
        ("vendor", "version", env!("CARGO_PKG_VERSION").into()),
        ("couchdb", "database_dir", "./settee-data".into()),
        ("couchdb", "default_security", "admin_only".into()),
        (
            "couchdb",
            "max_document_size",
            settee_core::MAX_DOCUMENT_SIZE.to_string(),
        ),
        (
            "couchdb",
            "os_process_timeout",
            limits.timeout.as_millis().to_string(),
        ),
        ("couchdb", "users_db_security_editable", "false".into()),
        ("chttpd", "bind_address", "127.0.0.1".into()),
        ("chttpd", "port", "5984".into()),
        (
            "chttpd",
            "max_http_request_size",
            MAX_HTTP_REQUEST_SIZE.to_string(),
        ),
        ("chttpd", "require_valid_user", "false".into()),
        ("chttpd", "admin_only_all_dbs", "true".into()),
        ("chttpd", "enable_cors", "false".into()),
        ("chttpd", "changes_timeout", "60000".into()),
        ("chttpd", "max_db_number_for_dbs_info_req", "100".into()),
        (
            "chttpd",
            "authentication_handlers",
            "{chttpd_auth, cookie_authentication_handler}, {chttpd_auth, default_authentication_handler}".into(),
        ),
        ("httpd", "allow_jsonp", "false".into()),
        ("httpd", "rewrite_limit", "100".into()),
        ("httpd", "secure_rewrites", "true".into()),
        ("cors", "credentials", "false".into()),
        ("uuids", "algorithm", "sequential".into()),
        ("uuids", "max_count", "1000".into()),
        (
            "attachments",
            "compressible_types",
            "text/*, application/javascript, application/json, application/xml".into(),
        ),
        ("attachments", "compression_level", "8".into()),
        ("query_server_config", "reduce_limit", "true".into()),
        ("query_server_config", "os_process_idle_limit", "300".into()),
        (
            "query_server_config",
            "os_process_limit",
            settee_views::queryserver::Settings::default()
                .max_processes
                .to_string(),
        ),
        // The replication scheduler (CouchDB's defaults; `retry_base` is Settee's, in
        // seconds: the first crash's backoff, fixed at 30 in CouchDB).
        ("replicator", "max_jobs", "500".into()),
        ("replicator", "interval", "60000".into()),
        ("replicator", "max_churn", "20".into()),
        ("replicator", "max_history", "20".into()),
        ("replicator", "health_threshold", "120".into()),
        ("replicator", "retry_base", "30".into()),
        // Resharding (CouchDB's defaults, commented out in its default.ini).
        ("reshard", "max_jobs", "48".into()),
        ("reshard", "max_history", "20".into()),
        ("reshard", "max_retries", "5".into()),
        ("reshard", "retry_interval_sec", "10".into()),
        ("reshard", "require_node_param", "false".into()),
        ("reshard", "require_range_param", "false".into()),
        ("settee", "js_memory_limit", limits.memory_limit.to_string()),
        ("settee", "view_index_workers", "0".into()),
        (
            "settee",
            "storage_cache_size",
            settee_storage::StoreOptions::default()
                .block_cache_bytes
                .to_string(),
        ),
    ];
    let mut out = Sections::new();
    for (section, key, value) in entries {
        out.entry(section.to_string())
            .or_default()
            .insert(key.to_string(), value);
    }
    out
}

impl NodeConfig {
    /// Reads `files` (read-only, in order) and then `local` (created when first written).
    pub fn load(files: &[PathBuf], local: PathBuf) -> Result<NodeConfig, ConfigError> {
        let state = State {
            base: read_files(files)?,
            local: read_local(&local)?,
            ..State::default()
        };
        Ok(NodeConfig {
            files: files.to_vec(),
            local_path: Some(local),
            state: RwLock::new(state),
        })
    }

    /// A configuration that is never persisted.
    pub fn in_memory(sections: Sections) -> NodeConfig {
        let local = sections
            .into_iter()
            .map(|(n, s)| (n, s.into_iter().map(|(k, v)| (k, Some(v))).collect()))
            .collect();
        NodeConfig {
            files: Vec::new(),
            local_path: None,
            state: RwLock::new(State {
                local,
                ..State::default()
            }),
        }
    }

    /// Installs the built-in defaults, the lowest layer (kept by `_reload`).
    pub fn set_defaults(&self, defaults: Sections) {
        let layer = defaults
            .into_iter()
            .map(|(n, s)| (n, s.into_iter().map(|(k, v)| (k, Some(v))).collect()))
            .collect();
        self.state.write().unwrap().defaults = layer;
    }

    pub fn get(&self, section: &str, key: &str) -> Option<String> {
        self.state.read().unwrap().get(section, key).cloned()
    }

    pub fn get_or(&self, section: &str, key: &str, default: &str) -> String {
        self.get(section, key)
            .unwrap_or_else(|| default.to_string())
    }

    /// A `[chttpd]` setting, or the `[httpd]` one where CouchDB 2 kept it (`allow_jsonp`,
    /// `rewrite_limit`, `secure_rewrites`), as `chttpd_util:get_chttpd_config` reads them.
    pub fn chttpd(&self, key: &str) -> Option<String> {
        self.get("chttpd", key).or_else(|| self.get("httpd", key))
    }

    /// `true`/`false` values; anything else (or nothing) is `default`.
    pub fn get_bool(&self, section: &str, key: &str, default: bool) -> bool {
        match self.get(section, key).as_deref().map(str::trim) {
            Some("true") => true,
            Some("false") => false,
            _ => default,
        }
    }

    /// Integer values; unparsable ones are `default`.
    pub fn get_u64(&self, section: &str, key: &str, default: u64) -> u64 {
        self.get(section, key)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default)
    }

    /// Positive integer values; missing, unparsable or zero ones are `default`.
    pub fn get_positive(&self, section: &str, key: &str, default: u32) -> u32 {
        self.get(section, key)
            .and_then(|v| v.trim().parse::<u32>().ok().filter(|n| *n > 0))
            .unwrap_or(default)
    }

    pub fn section(&self, section: &str) -> Section {
        self.state.read().unwrap().section(section)
    }

    pub fn all(&self) -> Sections {
        self.state.read().unwrap().merged()
    }

    /// Sets a value in the writable layer and persists it; returns the previous value.
    pub fn set(
        &self,
        section: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>, ConfigError> {
        validate(section, key, value)?;
        let mut state = self.state.write().unwrap();
        let old = state.get(section, key).cloned();
        let mut local = state.local.clone();
        insert(&mut local, section, key, Some(value.to_string()));
        self.persist(&local)?;
        state.local = local;
        remove(&mut state.startup, section, key);
        remove(&mut state.unpersisted, section, key);
        Ok(old)
    }

    /// Sets a value until the next `_reload` or restart (`X-Couch-Persist: false`).
    pub fn set_unpersisted(
        &self,
        section: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>, ConfigError> {
        validate(section, key, value)?;
        let mut state = self.state.write().unwrap();
        let old = state.get(section, key).cloned();
        insert(
            &mut state.unpersisted,
            section,
            key,
            Some(value.to_string()),
        );
        Ok(old)
    }

    /// Sets a value for this run only, never persisted, kept by `_reload`.
    pub fn set_transient(&self, section: &str, key: &str, value: &str) {
        let mut state = self.state.write().unwrap();
        insert(&mut state.startup, section, key, Some(value.to_string()));
    }

    /// Removes a value and persists that (as an empty value in `local.ini` when a
    /// read-only file sets it); returns the value it had.
    pub fn delete(&self, section: &str, key: &str) -> Result<Option<String>, ConfigError> {
        let mut state = self.state.write().unwrap();
        let old = state.get(section, key).cloned();
        let mut local = state.local.clone();
        if state.base_has(section, key) {
            insert(&mut local, section, key, None);
        } else {
            remove(&mut local, section, key);
        }
        self.persist(&local)?;
        state.local = local;
        remove(&mut state.startup, section, key);
        remove(&mut state.unpersisted, section, key);
        Ok(old)
    }

    /// Removes a value until the next `_reload` or restart; returns the value it had.
    pub fn delete_unpersisted(&self, section: &str, key: &str) -> Option<String> {
        let mut state = self.state.write().unwrap();
        let old = state.get(section, key).cloned();
        insert(&mut state.unpersisted, section, key, None);
        old
    }

    /// Re-reads every file and drops unpersisted changes (`POST _config/_reload`).
    pub fn reload(&self) -> Result<(), ConfigError> {
        let base = read_files(&self.files)?;
        let local = match &self.local_path {
            Some(p) => read_local(p)?,
            None => self.state.read().unwrap().local.clone(),
        };
        let mut state = self.state.write().unwrap();
        state.base = base;
        state.local = local;
        state.unpersisted.clear();
        Ok(())
    }

    fn persist(&self, local: &Layer) -> Result<(), ConfigError> {
        let Some(path) = &self.local_path else {
            return Ok(());
        };
        let tmp = path.with_extension("ini.tmp");
        std::fs::write(&tmp, render_ini(local))
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| ConfigError::Io(format!("cannot write {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_and_persistence() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.ini");
        std::fs::write(&base, "[a]\nx = 1\ny = 2\n").unwrap();
        let local = dir.path().join("local.ini");
        std::fs::write(&local, "[a]\ny = 3\n").unwrap();
        let c = NodeConfig::load(std::slice::from_ref(&base), local.clone()).unwrap();
        assert_eq!(c.get("a", "x").as_deref(), Some("1"));
        assert_eq!(c.get("a", "y").as_deref(), Some("3"));
        assert_eq!(c.set("b", "z", "4").unwrap(), None);
        assert_eq!(c.delete("a", "y").unwrap().as_deref(), Some("3"));
        assert_eq!(
            c.get("a", "y"),
            None,
            "deleting hides the read-only value too"
        );
        let again = NodeConfig::load(std::slice::from_ref(&base), local.clone()).unwrap();
        assert_eq!(again.get("b", "z").as_deref(), Some("4"));
        assert_eq!(again.get("a", "y"), None);
        assert_eq!(again.section("a").len(), 1);
        // a value only local.ini had leaves no trace when deleted
        again.delete("b", "z").unwrap();
        let text = std::fs::read_to_string(&local).unwrap();
        assert!(!text.contains('z') && !text.contains("[b]"), "{text}");
    }

    #[test]
    fn values_round_trip_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("local.ini");
        let c = NodeConfig::load(&[], local.clone()).unwrap();
        let odd = r#"'q' "d" a;b #c x=y C:\dir\n *"#;
        c.set("s", "k", odd).unwrap();
        let again = NodeConfig::load(&[], local).unwrap();
        assert_eq!(again.get("s", "k").as_deref(), Some(odd));
    }

    #[test]
    fn couchdb_ini_dialect() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("local.ini");
        std::fs::write(&local, "[s]\na:b=v\nc=x\\\nd=y\ne = v ; note\nf =;v\n").unwrap();
        let c = NodeConfig::load(&[], local).unwrap();
        assert_eq!(
            c.get("s", "e").as_deref(),
            Some("v"),
            "comments, as CouchDB reads them"
        );
        assert_eq!(c.get("s", "f").as_deref(), Some(";v"));
        assert_eq!(c.get("s", "a:b").as_deref(), Some("v"), "keys keep colons");
        assert_eq!(c.get("s", "c").as_deref(), Some("x\\"));
    }

    #[test]
    fn unpersisted_changes_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("local.ini");
        let c = NodeConfig::load(&[], local).unwrap();
        c.set("a", "x", "1").unwrap();
        c.set_transient("admins", "cli", "hash");
        assert_eq!(
            c.set_unpersisted("a", "x", "2").unwrap().as_deref(),
            Some("1")
        );
        assert_eq!(c.delete_unpersisted("a", "x").as_deref(), Some("2"));
        assert_eq!(c.get("a", "x"), None);
        c.reload().unwrap();
        assert_eq!(c.get("a", "x").as_deref(), Some("1"));
        assert_eq!(c.get("admins", "cli").as_deref(), Some("hash"));
        // a persisted change replaces a startup value
        c.set("admins", "cli", "new").unwrap();
        c.reload().unwrap();
        assert_eq!(c.get("admins", "cli").as_deref(), Some("new"));
    }

    #[test]
    fn defaults_are_the_lowest_layer() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.ini");
        std::fs::write(&base, "[uuids]\nmax_count = 7\n").unwrap();
        let local = dir.path().join("local.ini");
        let c = NodeConfig::load(std::slice::from_ref(&base), local.clone()).unwrap();
        c.set_defaults(builtin_defaults());
        assert_eq!(c.get("uuids", "algorithm").as_deref(), Some("sequential"));
        assert_eq!(
            c.get("uuids", "max_count").as_deref(),
            Some("7"),
            "files win"
        );
        assert_eq!(c.all()["query_server_config"]["reduce_limit"], "true");
        // deleting a default is persisted as an empty value, and survives _reload
        assert_eq!(
            c.delete("uuids", "algorithm").unwrap().as_deref(),
            Some("sequential")
        );
        assert!(std::fs::read_to_string(&local)
            .unwrap()
            .contains("algorithm = \n"));
        c.reload().unwrap();
        assert_eq!(c.get("uuids", "algorithm"), None);
        assert_eq!(c.get("vendor", "name").as_deref(), Some("Settee"));
    }

    #[test]
    fn validation() {
        assert!(validate("s", "k", "v\tw [x]").is_ok());
        assert!(validate("s", "k", "").is_ok());
        let bad = |s, k, v| validate(s, k, v).unwrap_err().to_string();
        assert_eq!(bad("s[", "k", "v"), "Invalid configuration section");
        assert_eq!(bad("s\n", "k", "v"), "Invalid configuration section");
        assert_eq!(bad("s", "k]", "v"), "Invalid configuration key");
        assert_eq!(bad("s", "k\r", "v"), "Invalid configuration key");
        assert_eq!(bad("s", "k", "v\n"), "Invalid configuration value");
        assert!(validate("s", "hmac:_default", "v").is_ok());
        assert_eq!(bad("s", "a=b", "v"), "Invalid configuration key");
        assert!(validate("s", "k", "C:\\dir\\").is_ok());
        assert_eq!(bad("s", "k", "v ; w"), "Invalid configuration value");
    }
}
