//! Settings other components hold, read from the live configuration: pushed into them at
//! startup and after every `/_config` change ([`Node::apply_settings`]), or read where a
//! write is checked ([`Node::write_settings`]).

use crate::config::{NodeConfig, Section};
use crate::{Error, Node, Result};
use settee_auth::password::PasswordHash;
use settee_auth::password::DEFAULT_ITERATIONS;
use settee_auth::password_rules::PasswordRules;
use settee_auth::users::USERS_DB;
use std::time::Duration;

/// `[chttpd_auth]` with CouchDB's fallback to the legacy `[couch_httpd_auth]` section.
pub fn auth_section(config: &NodeConfig) -> Section {
    let mut s = config.section("couch_httpd_auth");
    s.extend(config.section("chttpd_auth"));
    s
}

/// The authentication database: `[chttpd_auth] authentication_db` (default `_users`).
pub fn auth_db(config: &NodeConfig) -> String {
    config
        .get("chttpd_auth", "authentication_db")
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| USERS_DB.to_string())
}

/// `[chttpd_auth]` (or legacy `[couch_httpd_auth]`) `password_scheme`, `pbkdf2_prf`,
/// `iterations` and `password_regexp`: how new `_users` passwords are hashed.
pub fn password_rules(config: &NodeConfig) -> PasswordRules {
    let section = auth_section(config);
    let get = |k: &str| section.get(k).map(|v| v.trim().to_string());
    PasswordRules {
        scheme: get("password_scheme").unwrap_or_else(|| "pbkdf2".into()),
        prf: get("pbkdf2_prf").unwrap_or_else(|| "sha256".into()),
        iterations: get("iterations")
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_ITERATIONS),
        regexp: get("password_regexp"),
    }
}

/// `[couchdb] max_attachment_size` (bytes; `infinity` or unset: no limit).
pub fn max_attachment_size(config: &NodeConfig) -> u64 {
    config
        .get("couchdb", "max_attachment_size")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(u64::MAX)
}

/// `[disk_monitor]` as CouchDB reads it: `enable` a boolean, the thresholds integers
/// (percentages; an unparsable value is the default, one past 100 never blocks).
fn disk_thresholds(config: &NodeConfig) -> settee_db::disk::Thresholds {
    let d = settee_db::disk::Thresholds::default();
    let percent = |key: &str, default: u8| {
        config
            .get("disk_monitor", key)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map_or(default, |v| v.clamp(0, 100) as u8)
    };
    settee_db::disk::Thresholds {
        enable: config.get_bool("disk_monitor", "enable", d.enable),
        background_view_indexing: percent(
            "background_view_indexing_threshold",
            d.background_view_indexing,
        ),
        interactive_view_indexing: percent(
            "interactive_view_indexing_threshold",
            d.interactive_view_indexing,
        ),
        interactive_database_writes: percent(
            "interactive_database_writes_threshold",
            d.interactive_database_writes,
        ),
    }
}

impl Node {
    /// The write checks' settings, from the live configuration.
    pub fn write_settings(&self) -> settee_docs::Settings {
        let config = &self.config;
        settee_docs::Settings {
            limits: self.views.limits(),
            att_limit: max_attachment_size(config),
            compression: std::sync::Arc::new(settee_docs::Compression::new(
                &config.get_or(
                    "attachments",
                    "compressible_types",
                    settee_docs::Compression::DEFAULT_TYPES,
                ),
                config.get_u64(
                    "attachments",
                    "compression_level",
                    settee_docs::Compression::DEFAULT_LEVEL,
                ),
            )),
            passwords: password_rules(config),
            auth_db: auth_db(config),
            query_servers: self.views.query_servers.clone(),
            cluster_designs: self.cluster_designs.get().cloned(),
        }
    }

    /// Pushes the settings other components hold into them, from the live configuration:
    /// at startup and after every `/_config` change, so they apply without a restart.
    pub fn apply_settings(&self) {
        let config = &self.config;
        if let Some(log) = self.log.get() {
            let level = config.get("log", "level");
            let mut applied = log.applied.lock().unwrap();
            if *applied != level {
                (log.set)(level.as_deref());
                *applied = level;
            }
        }
        self.couch.set_max_document_size(config.get_u64(
            "couchdb",
            "max_document_size",
            settee_core::MAX_DOCUMENT_SIZE as u64,
        ) as usize);
        // CouchDB disables the check for a value of 0 or less.
        let max_partition = config
            .get("couchdb", "max_partition_size")
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(settee_core::MAX_PARTITION_SIZE as i64);
        self.couch
            .set_max_partition_size(u64::try_from(max_partition).unwrap_or(0));
        self.couch.disk().set_thresholds(disk_thresholds(config));
        let defaults = settee_views::Limits::default();
        let limits = settee_views::Limits {
            timeout: Duration::from_millis(config.get_u64(
                "couchdb",
                "os_process_timeout",
                defaults.timeout.as_millis() as u64,
            )),
            memory_limit: config.get_u64("settee", "js_memory_limit", defaults.memory_limit as u64)
                as usize,
        };
        let reduce_limit = settee_views::ReduceLimit::from_setting(
            &config
                .get("query_server_config", "reduce_limit")
                .unwrap_or_else(|| "true".into()),
        );
        self.views.set_limits(limits, reduce_limit);
        let qs_defaults = settee_views::queryserver::Settings::default();
        self.views
            .query_servers
            .set_settings(settee_views::queryserver::Settings {
                timeout: limits.timeout,
                max_processes: config.get_u64(
                    "query_server_config",
                    "os_process_limit",
                    qs_defaults.max_processes as u64,
                ) as usize,
                reduce_limit: reduce_limit != settee_views::ReduceLimit::Off,
                idle_limit: Duration::from_secs(config.get_u64(
                    "query_server_config",
                    "os_process_idle_limit",
                    qs_defaults.idle_limit.as_secs(),
                )),
            });
    }
}

/// Sections CouchDB refuses to change over HTTP (they name programs to run).
const BLACKLISTED_SECTIONS: &[&str] = &[
    "daemons",
    "external",
    "httpd_design_handlers",
    "httpd_db_handlers",
    "httpd_global_handlers",
    "native_query_servers",
    "os_daemons",
    "query_servers",
    "feature_flags",
];

/// CouchDB's 403 for a section it does not change over HTTP (checked before the body is
/// read).
pub fn check_writable(section: &str) -> Result<()> {
    if BLACKLISTED_SECTIONS.contains(&section) {
        return Err(Error::Forbidden(
            "Config section blacklisted for modification over HTTP API.".into(),
        ));
    }
    Ok(())
}

fn unknown_value() -> Error {
    Error::NotFound("unknown_config_value".into())
}

/// The live configuration as `/_node/{node}/_config` changes it: each change is applied
/// to the components at once ([`Node::apply_settings`]); `persist: false`
/// (`X-Couch-Persist: false`) keeps it in memory only.
impl Node {
    /// `[section] key`'s value.
    pub fn config_value(&self, section: &str, key: &str) -> Result<String> {
        self.config.get(section, key).ok_or_else(unknown_value)
    }

    /// Sets `[section] key` to `value` (trimmed; an admin's password is stored hashed):
    /// the old value, `""` when there was none.
    pub fn set_config(
        &self,
        section: &str,
        key: &str,
        value: &str,
        persist: bool,
    ) -> Result<String> {
        check_writable(section)?;
        let value = value.trim();
        let value = if section == "admins" {
            self.hash_admin_password(value)
        } else {
            value.to_string()
        };
        let old = if persist {
            self.config.set(section, key, &value)?
        } else {
            self.config.set_unpersisted(section, key, &value)?
        };
        self.apply_settings();
        Ok(old.unwrap_or_default())
    }

    /// Deletes `[section] key`: its old value.
    pub fn delete_config(&self, section: &str, key: &str, persist: bool) -> Result<String> {
        check_writable(section)?;
        if self.config.get(section, key).is_none() {
            return Err(unknown_value());
        }
        let old = if persist {
            self.config.delete(section, key)?
        } else {
            self.config.delete_unpersisted(section, key)
        };
        self.apply_settings();
        old.ok_or_else(unknown_value)
    }

    /// Reads the ini files again (`POST /_node/{node}/_config/_reload`).
    pub fn reload_config(&self) -> Result<()> {
        self.config.reload()?;
        self.apply_settings();
        Ok(())
    }

    /// CouchDB stores admin passwords hashed: a plaintext value becomes a PBKDF2 hash with
    /// `[chttpd_auth] iterations`; a value that already is a hash is kept.
    fn hash_admin_password(&self, value: &str) -> String {
        if value.is_empty() || PasswordHash::parse(value).is_some() {
            return value.to_string();
        }
        let iterations = (self.config)
            .get_u64("chttpd_auth", "iterations", DEFAULT_ITERATIONS.into())
            .clamp(1, u32::MAX.into()) as u32;
        PasswordHash::new(value, iterations).stored()
    }
}
