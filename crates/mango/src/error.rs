//! Mango's errors, each with CouchDB's status, error name and reason text
//! (`mango_error:info/2`).

use serde_json::Value;

use crate::erlfmt::w;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("Invalid operator: {0}")]
    InvalidOperator(String),
    #[error("Bad argument for operator {op}: {}", w(.arg))]
    BadArg { op: String, arg: Value },
    #[error("Unsupported operator: {0}")]
    NotSupported(String),
    #[error("One or more conditions is missing a field name.")]
    MissingFieldName,
    #[error("Invalid field normalization on selector: {}", w(.0))]
    BadField(Value),
    /// CouchDB has no entry for this one in its error table, so it answers with its
    /// catch-all 500.
    #[error("Unknown Error: mango_util :: {{invalid_field_name,{}}}", w(&Value::String(.0.clone())))]
    InvalidFieldName(String),
}

impl Error {
    /// The HTTP status CouchDB answers with.
    pub fn status(&self) -> u16 {
        match self {
            Error::InvalidFieldName(_) => 500,
            _ => 400,
        }
    }

    /// The `error` member of CouchDB's answer.
    pub fn name(&self) -> &'static str {
        match self {
            Error::InvalidOperator(_) => "invalid_operator",
            Error::BadArg { .. } => "bad_arg",
            Error::NotSupported(_) => "not_supported",
            Error::MissingFieldName => "invalid_selector",
            Error::BadField(_) => "bad_field",
            Error::InvalidFieldName(_) => "unknown_error",
        }
    }
}
