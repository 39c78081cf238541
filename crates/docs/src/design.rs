//! Design documents as a write checks them.

use crate::{Error, Result};
use serde_json::{Map, Value};
use settee_core::design::ViewGroupDef;
use settee_core::ParsedDoc;
use settee_views::queryserver::{Error as QsError, Setup};
use settee_views::{Group, QueryServers};

/// Loads each map function into a process of the group's language, one at a time so that
/// a failure names its view.
fn compile_external(qs: &QueryServers, def: &ViewGroupDef) -> Result<()> {
    if !qs.knows(&def.language) {
        return Ok(());
    }
    let mut maps = Vec::new();
    for view in &def.views {
        maps.push(view.map.as_str());
        let failure = match qs.checkout(&def.language, &Setup::views(def.lib.as_ref(), &maps)) {
            Ok(_) => continue,
            Err(e) => e,
        };
        let reason = match failure {
            QsError::Spawn { .. } => {
                tracing::warn!(language = %def.language, error = %failure,
                    "design document saved without compiling its views");
                return Ok(());
            }
            QsError::Server { reason, .. } | QsError::Fatal { reason, .. } => format!(
                "Compilation of the map function in the '{}' view failed: {reason}",
                view.name
            ),
            QsError::Exited(Some(status)) => format!(
                "Compilation of the map function in the '{}' view failed with exit status: {status}",
                view.name
            ),
            other => return Err(settee_views::Error::QueryServer(other).into()),
        };
        return Err(Error::Rejected {
            error: "compilation_error".into(),
            reason,
        });
    }
    Ok(())
}

/// CouchDB's check of a design document on save: its members must have the right types
/// and its views maps and known built-in reduces (`400 invalid_design_doc`), and map
/// functions must compile (`compilation_error`): JavaScript in QuickJS, other languages in
/// their query server (`add_fun`, as CouchDB's `try_compile`). A language without a server
/// (or whose server cannot be started) is saved unchecked, as CouchDB saves it: only the
/// members' types and the views' maps are checked, not even the built-in reduce names
/// (CouchDB checks those with the language's process in hand).
///
/// `options.partitioned: true` is refused in a database that is not partitioned.
pub fn validate_design(
    id: &str,
    doc: &ParsedDoc,
    qs: &QueryServers,
    db_partitioned: bool,
) -> Result<()> {
    if !id.starts_with("_design/") || doc.deleted {
        return Ok(());
    }
    let Ok(body) =
        serde_json::from_slice::<Map<String, Value>>(settee_core::split_stored(&doc.body).0)
    else {
        return Ok(());
    };
    let language = body.get("language").and_then(Value::as_str);
    let dialect = settee_js::Dialect::of(language);
    let served = match language {
        _ if dialect.is_some() => true,
        // Mango's indexes (`query`) are mapped natively.
        Some(l) => qs.knows(l) || settee_js::lookup_name(l) == "query",
        None => true,
    };
    let checked = if served {
        settee_core::design::check_members(&body)
    } else {
        settee_core::design::check_members(&without_reduce_names(&body))
    };
    checked.map_err(settee_views::Error::from)?;
    let def = ViewGroupDef::from_ddoc(&body).map_err(settee_views::Error::from)?;
    if def.partitioned == Some(true) && !db_partitioned {
        return Err(settee_views::Error::from(settee_core::design::DesignError(
            "partitioned option cannot be true in a non-partitioned database.".into(),
        ))
        .into());
    }
    if def.views.is_empty() {
        return Ok(());
    }
    if dialect.is_none() {
        return compile_external(qs, &def);
    }
    let g = Group::new(0, id, def);
    settee_js::ViewRuntime::new(&g.fns, settee_js::Limits::default())
        .map(|_| ())
        .map_err(|e| settee_views::Error::Js(e).into())
}

/// The design document with its views' string `reduce` members removed (their types are
/// all that is checked of them when no query server serves the language).
fn without_reduce_names(body: &Map<String, Value>) -> Map<String, Value> {
    let mut body = body.clone();
    if let Some(Value::Object(views)) = body.get_mut("views") {
        for view in views.values_mut() {
            if let Value::Object(v) = view {
                if matches!(v.get("reduce"), Some(Value::String(_))) {
                    v.remove("reduce");
                }
            }
        }
    }
    body
}
