//! Map functions of languages served by an external query server (CouchDB's
//! `couch_os_process`), seen by the indexer through the [`NativeMap`] seam: a chunk of
//! documents goes through one process in one pipelined exchange.

use crate::{Error, NativeMap};
use settee_core::design::ViewGroupDef;
use settee_queryserver::{Emits, QueryServers, Setup};
use std::sync::Arc;

pub(crate) struct ExternalMap {
    qs: Arc<QueryServers>,
    language: String,
    setup: Setup,
}

impl ExternalMap {
    /// `None` when `def`'s language has no query server (or runs in-process).
    pub(crate) fn new(qs: &Arc<QueryServers>, def: &ViewGroupDef) -> Option<ExternalMap> {
        if settee_js::Dialect::of(Some(&def.language)).is_some() || !qs.knows(&def.language) {
            return None;
        }
        let maps: Vec<&str> = def.views.iter().map(|v| v.map.as_str()).collect();
        Some(ExternalMap {
            qs: qs.clone(),
            language: def.language.clone(),
            setup: Setup::views(def.lib.as_ref(), &maps),
        })
    }
}

impl NativeMap for ExternalMap {
    fn map_doc(&self, doc: &[u8]) -> Result<Vec<Emits>, String> {
        let mut p = self
            .qs
            .checkout(&self.language, &self.setup)
            .map_err(|e| e.to_string())?;
        let mut out = p.map_docs(&[doc]).map_err(|e| e.to_string())?;
        Ok(out.pop().unwrap_or_default())
    }

    fn map_docs(&self, docs: &[&[u8]]) -> crate::Result<Vec<Vec<Emits>>> {
        let mut p = self
            .qs
            .checkout(&self.language, &self.setup)
            .map_err(Error::QueryServer)?;
        p.map_docs(docs).map_err(Error::QueryServer)
    }

    /// Twice the cores, so that while one worker's process maps a chunk another worker
    /// reads and encodes the next: the processes keep every core busy. Never more than
    /// the pool's cap, past which workers would only wait for processes.
    fn workers(&self, cores: usize) -> usize {
        (2 * cores).min(self.qs.settings().max_processes).max(1)
    }
}
