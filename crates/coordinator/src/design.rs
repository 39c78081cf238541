//! Show, list and update functions of a clustered database, run here, at the coordinator,
//! as CouchDB's `chttpd_show` and `chttpd_list` run them: the design document and the
//! document are read through the cluster (newest revision of every copy, as any read),
//! the function runs in this member's JavaScript runtime or query server, an update's
//! document is written through the cluster (every copy of its range, the write quorum:
//! 202 below it), and a list reads its rows from the clustered view query (or
//! `_all_docs`), merged here. The functions see the clustered database: its name in
//! `userCtx.db`, its security object, its information as `GET /{db}` gives it.
//! (Rewrites are `http`'s: it reads the design document through the fabric and runs the
//! function with [`FnDb::via`].)

use crate::Coordinator;
use serde_json::Value;
use settee_auth::UserCtx;
use settee_cluster::ShardMap;
use settee_node::all_docs::{Namespace, Query};
use settee_node::list::{ListCall, Piece, RowQuery};
use settee_node::read::{ReadOpts, Rendered};
use settee_node::render::{
    show_with, update_with, updated, DesignDoc, FnCall, FnDb, FnReads, Shown, Updated,
};
use settee_node::views::ViewArgs;
use settee_node::write::WriteOpts;
use settee_node::{DocOpts, Error, Fabric, Result};
use std::sync::Arc;

/// A clustered database, as design functions read it.
struct ClusterReads<'a> {
    coordinator: &'a Coordinator,
    db: &'a str,
    map: &'a ShardMap,
    user: &'a UserCtx,
    fn_db: FnDb,
}

impl<'a> ClusterReads<'a> {
    /// Blocks (the security object is read from the copies).
    fn new(
        coordinator: &'a Coordinator,
        db: &'a str,
        map: &'a ShardMap,
        user: &'a UserCtx,
    ) -> Result<Self> {
        let fabric: Arc<dyn Fabric> = Arc::new(coordinator.clone());
        Ok(ClusterReads {
            coordinator,
            db,
            map,
            user,
            fn_db: FnDb::via(fabric, db)?,
        })
    }
}

impl FnReads for ClusterReads<'_> {
    fn design(&self, name: &str) -> Result<DesignDoc> {
        let c = self.coordinator;
        let design = c.design(self.db, self.map, self.user, name)?;
        DesignDoc::given(Value::Object(design))
    }

    fn doc(&self, id: &str) -> Result<Value> {
        let opts = ReadOpts {
            doc: DocOpts {
                revs: true,
                conflicts: true,
                ..DocOpts::default()
            },
            ..ReadOpts::default()
        };
        let read = match (self.coordinator).read_clustered(self.db, self.map, self.user, id, &opts)
        {
            Ok(read) => read,
            Err(Error::Db(settee_db::Error::NotFound(_)) | Error::NotFound(_)) => {
                return Ok(Value::Null)
            }
            Err(e) => return Err(e),
        };
        let text = match &read.body {
            Rendered::Json(text) => text,
            Rendered::Multipart { doc, .. } => doc,
        };
        serde_json::from_slice(text).map_err(|e| Error::internal(e.to_string()))
    }

    fn db(&self) -> &FnDb {
        &self.fn_db
    }
}

impl Coordinator {
    /// `_show` of a clustered database (blocks).
    pub(crate) fn show_clustered(
        &self,
        db: &str,
        map: Arc<ShardMap>,
        call: &FnCall,
        accept: Option<&str>,
        matches: &dyn Fn(&str) -> bool,
    ) -> Result<Shown> {
        let reads = ClusterReads::new(self, db, &map, &call.req.user)?;
        show_with(&self.node, &reads, call, accept, matches)
    }

    /// `_update` of a clustered database: the function runs on a blocking thread, its
    /// document is written through the cluster with the request's `w`.
    pub(crate) async fn update_clustered(
        &self,
        db: &str,
        map: Arc<ShardMap>,
        user: &UserCtx,
        call: FnCall,
        refused: bool,
    ) -> Result<Updated> {
        let w = (call.req.query.iter().rev())
            .find(|(k, _)| k == "w")
            .and_then(|(_, v)| v.parse::<u32>().ok())
            .filter(|w| *w > 0);
        let (me, name, m, u) = (self.clone(), db.to_owned(), map.clone(), user.clone());
        let (resp, doc) = settee_node::blocking::<_, Error>(move || {
            let reads = ClusterReads::new(&me, &name, &m, &u)?;
            update_with(&me.node, &reads, &call, refused)
        })
        .await?;
        let Some(doc) = doc else {
            return updated(resp, None);
        };
        let id = doc.id.clone().unwrap_or_default();
        let opts = WriteOpts {
            w,
            ..WriteOpts::default()
        };
        let written = self.write_clustered(db, &map, user, doc, opts).await?;
        self.after_write(db, std::iter::once(id.as_str())).await;
        updated(resp, Some((id, written.rev, written.accepted)))
    }

    /// `_list` of a clustered database: the list function and its view (or `_all_docs`)
    /// are checked before it starts, then it runs over the clustered query's rows.
    pub(crate) async fn list_clustered(
        &self,
        db: &str,
        map: Arc<ShardMap>,
        user: &UserCtx,
        call: ListCall,
    ) -> Result<tokio::sync::mpsc::Receiver<Piece>> {
        let (me, name, u) = (self.clone(), db.to_owned(), user.clone());
        let ListCall {
            ddoc,
            name: fun,
            view_ddoc,
            view,
            args,
            req,
            csp,
        } = call;
        let fun2 = fun.clone();
        let (list_ddoc, fn_db, query) = settee_node::blocking::<_, Error>(move || {
            let reads = ClusterReads::new(&me, &name, &map, &u)?;
            let list_ddoc = reads.design(&ddoc)?;
            list_ddoc.require_function("lists", &fun2)?;
            settee_node::render::require_runner(&me.node, &list_ddoc)?;
            let fn_db = reads.fn_db.clone();
            let query: RowQuery = if view == "_all_docs" {
                let q = Query::from_args(args)?;
                Box::new(move |out| me.all_docs_clustered(&name, &map, &u, q, Namespace::All, out))
            } else {
                let vname = view_ddoc.unwrap_or(ddoc);
                // The view and the arguments are checked before the list starts.
                let design = me.design(&name, &map, &u, &vname)?;
                let def = settee_core::design::ViewGroupDef::from_ddoc(&design)
                    .map_err(|e| Error::Views(e.into()))?;
                let n = (def.views.iter().position(|v| v.name == view))
                    .ok_or_else(|| Error::NotFound("missing_named_view".into()))?;
                ViewArgs::for_def(args.clone(), &def, n, map.partitioned, &me.node.config)?;
                Box::new(move |out| me.view_clustered(&name, &map, &u, &vname, &view, args, out))
            };
            Ok((list_ddoc, fn_db, query))
        })
        .await?;
        Ok((self.node).run_list(fn_db, list_ddoc, fun, query, req, csp))
    }
}
