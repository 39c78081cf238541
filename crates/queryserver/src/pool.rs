//! Processes kept ready between uses, per language (CouchDB's `couch_proc_manager`).
//!
//! A process remembers the setup it last loaded (`reset`, `add_lib`, `add_fun`s, keyed by
//! a hash of their text) and the design documents it was taught, so that a checkout asking
//! for the same functions gets a process that has them without reloading. At most
//! `max_processes` live per language; a checkout beyond that waits for a return. A broken
//! process is killed and reaped when its lease drops, and its slot is freed for a new one.

use crate::{Command, Error, Languages, Process, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `[couchdb] os_process_timeout`: how long one answer may take.
    pub timeout: Duration,
    /// Most live processes per language (`[query_server_config] os_process_limit`).
    pub max_processes: usize,
    /// `[query_server_config] reduce_limit`, passed to servers in `reset`.
    pub reduce_limit: bool,
    /// `[query_server_config] os_process_idle_limit`: an idle process older than this is
    /// stopped at the pool's next checkout or return.
    pub idle_limit: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Settings {
            timeout: Duration::from_millis(5000),
            max_processes: 4 * cores,
            reduce_limit: true,
            idle_limit: Duration::from_secs(300),
        }
    }
}

/// The commands that load a group's functions into a process after `reset`.
#[derive(Clone, Debug)]
pub struct Setup {
    lines: Vec<Vec<u8>>,
    key: u64,
}

impl Setup {
    pub fn new(commands: &[Value]) -> Setup {
        let lines: Vec<Vec<u8>> = commands
            .iter()
            .map(|c| serde_json::to_vec(c).expect("json"))
            .collect();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        lines.hash(&mut h);
        Setup {
            lines,
            key: h.finish(),
        }
    }

    /// A view group's map functions: `add_lib` when the group has `views.lib`, then one
    /// `add_fun` per view, as CouchDB loads them.
    pub fn views(lib: Option<&Value>, maps: &[&str]) -> Setup {
        let mut commands = Vec::with_capacity(maps.len() + 1);
        if let Some(lib) = lib.filter(|l| l.as_object().is_some_and(|o| !o.is_empty())) {
            commands.push(json!(["add_lib", lib]));
        }
        commands.extend(maps.iter().map(|m| json!(["add_fun", m])));
        Setup::new(&commands)
    }
}

struct LangPool {
    command: Command,
    state: Mutex<State>,
    freed: Condvar,
}

impl State {
    /// Takes the processes idle for longer than `limit` out of the pool (the caller drops
    /// them, which stops them, outside the lock).
    fn cull(&mut self, limit: Duration) -> Vec<Process> {
        let now = std::time::Instant::now();
        let (old, keep): (Vec<Process>, Vec<Process>) = std::mem::take(&mut self.idle)
            .into_iter()
            .partition(|p| now.duration_since(p.returned) > limit);
        self.idle = keep;
        self.live -= old.len();
        old
    }
}

#[derive(Default)]
struct State {
    idle: Vec<Process>,
    live: usize,
    /// Bumped by [`QueryServers::reload`]: processes of older generations are not reused.
    generation: u64,
}

/// Every configured language's pool.
pub struct QueryServers {
    pools: BTreeMap<String, Arc<LangPool>>,
    settings: RwLock<Settings>,
}

impl QueryServers {
    pub fn new(languages: Languages, settings: Settings) -> QueryServers {
        let pools = languages
            .0
            .into_iter()
            .map(|(lang, command)| {
                let pool = LangPool {
                    command,
                    state: Mutex::default(),
                    freed: Condvar::new(),
                };
                (lang, Arc::new(pool))
            })
            .collect();
        QueryServers {
            pools,
            settings: RwLock::new(settings),
        }
    }

    /// Whether `language` has a configured query server. Names are compared without
    /// regard to case, as CouchDB compares them (upper-cased).
    pub fn knows(&self, language: &str) -> bool {
        self.pools.contains_key(&language.to_ascii_lowercase())
    }

    pub fn languages(&self) -> impl Iterator<Item = (&str, &Command)> {
        self.pools.iter().map(|(l, p)| (l.as_str(), &p.command))
    }

    pub fn settings(&self) -> Settings {
        *self.settings.read().expect("settings")
    }

    /// Applies to checkouts from now on.
    pub fn set_settings(&self, settings: Settings) {
        *self.settings.write().expect("settings") = settings;
        for pool in self.pools.values() {
            pool.freed.notify_all();
        }
    }

    /// Stops every idle process, and every busy one when it is returned
    /// (`POST /_reload_query_servers`).
    pub fn reload(&self) {
        for pool in self.pools.values() {
            let idle = {
                let mut st = pool.state.lock().expect("pool");
                st.generation += 1;
                st.live -= st.idle.len();
                std::mem::take(&mut st.idle)
            };
            drop(idle);
            pool.freed.notify_all();
        }
    }

    /// (live, idle) processes of `language`.
    pub fn counts(&self, language: &str) -> (usize, usize) {
        self.pools.get(language).map_or((0, 0), |p| {
            let st = p.state.lock().expect("pool");
            (st.live, st.idle.len())
        })
    }

    /// A process with `setup` loaded (reused when one has it, loaded otherwise). The
    /// settings `reset` passes are part of what is loaded: after a change, processes are
    /// reset again.
    pub fn checkout(&self, language: &str, setup: &Setup) -> Result<Lease> {
        let settings = self.settings();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (setup.key, settings.timeout, settings.reduce_limit).hash(&mut h);
        let key = h.finish();
        let mut lease = self.take(language, &|p| p.loaded == Some(key))?;
        if lease.loaded != Some(key) {
            lease.loaded = None;
            lease.reset(settings)?;
            for line in &setup.lines {
                lease.prompt_true(line)?;
            }
            lease.loaded = Some(key);
        }
        Ok(lease)
    }

    /// Any process of `language`, for self-contained commands (`reduce`, `rereduce`).
    pub fn checkout_any(&self, language: &str) -> Result<Lease> {
        self.take(language, &|_| true)
    }

    /// A process that knows design document `ddoc` (taught here if needed).
    pub fn checkout_ddoc(&self, language: &str, ddoc: &crate::DdocRef<'_>) -> Result<Lease> {
        let key = (ddoc.id.to_owned(), ddoc.rev.to_owned());
        let mut lease = self.take(language, &|p| p.ddocs.contains(&key))?;
        if !lease.ddocs.contains(&key) {
            let line =
                serde_json::to_vec(&json!(["ddoc", "new", ddoc.id, ddoc.body])).expect("json");
            lease.prompt_true(&line)?;
            lease.ddocs.retain(|(id, _)| id != ddoc.id);
            lease.ddocs.push(key);
        }
        Ok(lease)
    }

    /// Order of preference: an idle process `fits`, a new process (below the cap), any
    /// idle process, waiting for one to come back.
    fn take(&self, language: &str, fits: &dyn Fn(&Process) -> bool) -> Result<Lease> {
        let pool = self
            .pools
            .get(&language.to_ascii_lowercase())
            .ok_or_else(|| Error::UnknownLanguage(language.to_owned()))?;
        let settings = self.settings();
        let stale = pool.state.lock().expect("pool").cull(settings.idle_limit);
        drop(stale);
        let mut st = pool.state.lock().expect("pool");
        loop {
            let generation = st.generation;
            let lease = |mut p: Process| {
                p.set_timeout(settings.timeout);
                Lease {
                    pool: pool.clone(),
                    proc: Some(p),
                    generation,
                }
            };
            if let Some(i) = st.idle.iter().rposition(fits) {
                return Ok(lease(st.idle.swap_remove(i)));
            }
            if st.live < settings.max_processes.max(1) {
                st.live += 1;
                drop(st);
                return match Process::spawn(&pool.command, settings.timeout) {
                    Ok(p) => {
                        let mut l = lease(p);
                        l.reset(settings)?;
                        Ok(l)
                    }
                    Err(e) => {
                        pool.state.lock().expect("pool").live -= 1;
                        pool.freed.notify_one();
                        Err(e)
                    }
                };
            }
            if let Some(p) = st.idle.pop() {
                return Ok(lease(p));
            }
            st = pool.freed.wait(st).expect("pool");
        }
    }
}

impl std::fmt::Debug for QueryServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.languages()).finish()
    }
}

/// One thread's use of one process; returned to its pool on drop.
pub struct Lease {
    pool: Arc<LangPool>,
    proc: Option<Process>,
    generation: u64,
}

impl Lease {
    fn reset(&mut self, settings: Settings) -> Result<()> {
        let line = serde_json::to_vec(&json!(["reset", {
            "reduce_limit": settings.reduce_limit,
            "timeout": settings.timeout.as_millis() as u64,
        }]))
        .expect("json");
        self.prompt_true(&line)
    }
}

impl std::ops::Deref for Lease {
    type Target = Process;
    fn deref(&self) -> &Process {
        self.proc.as_ref().expect("leased")
    }
}

impl std::ops::DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut Process {
        self.proc.as_mut().expect("leased")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(p) = self.proc.take() else { return };
        let mut st = self.pool.state.lock().expect("pool");
        if p.is_broken() || st.generation != self.generation {
            st.live -= 1;
            drop(st);
            drop(p); // killed and reaped
        } else {
            let mut p = p;
            p.returned = std::time::Instant::now();
            st.idle.push(p);
            drop(st);
        }
        self.pool.freed.notify_one();
    }
}
