//! Design documents as a write checks them.

use crate::Result;
use serde_json::{json, Map, Value};
use settee_core::design::ViewGroupDef;
use settee_core::ParsedDoc;
use settee_views::Group;

/// CouchDB's check of a design document on save: its members must have the right types
/// and its views maps and known built-in reduces (`400 invalid_design_doc`), and JavaScript
/// functions must compile (`compilation_error`). Functions of other languages (such as
/// Mango's `query`) are not compiled.
pub fn validate_design(id: &str, doc: &ParsedDoc) -> Result<()> {
    if !id.starts_with("_design/") || doc.deleted {
        return Ok(());
    }
    let Ok(body) =
        serde_json::from_slice::<Map<String, Value>>(settee_core::split_stored(&doc.body).0)
    else {
        return Ok(());
    };
    settee_core::design::check_members(&body).map_err(settee_views::Error::from)?;
    let js = matches!(body.get("language"), None | Some(Value::Null))
        || body.get("language") == Some(&json!("javascript"));
    if !js {
        return Ok(());
    }
    let def = ViewGroupDef::from_ddoc(&body).map_err(settee_views::Error::from)?;
    if def.views.is_empty() {
        return Ok(());
    }
    let g = Group::new(0, id, def);
    settee_js::ViewRuntime::new(&g.fns, settee_js::Limits::default())
        .map(|_| ())
        .map_err(|e| settee_views::Error::Js(e).into())
}
