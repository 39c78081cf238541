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
    #[error("Invalid field name: {0}")]
    InvalidFieldName(String),
    #[error("Missing required key: {0}")]
    MissingRequiredKey(String),
    #[error("Invalid key {0} for this request.")]
    InvalidKey(String),
    #[error("Selector must be a JSON object, not: {}", w(.0))]
    InvalidSelectorJson(Value),
    #[error("Invalid index name: {}", w(.0))]
    InvalidIndexName(Value),
    #[error("{} is not an integer greater than or equal to zero", w(.0))]
    InvalidNonNegInteger(Value),
    #[error("{} is not an integer greater than zero", w(.0))]
    InvalidPosInteger(Value),
    #[error("Invalid boolean value: {}", w(.0))]
    InvalidBoolean(Value),
    #[error("Invalid string: {}", w(.0))]
    InvalidString(Value),
    #[error("Index name or ddoc cannot be empty string")]
    InvalidEmptyString,
    #[error("Sort must be an array of sort specs, not: {}", w(.0))]
    InvalidSortJson(Value),
    #[error("Invalid sort field: {}", w(.0))]
    InvalidSortField(Value),
    #[error("Sorts currently only support a single direction for all fields.")]
    MixedSort,
    #[error("Fields must be an array of strings, not: {}", w(.0))]
    InvalidFieldsJson(Value),
    #[error("Invalid JSON for field spec: {}", w(.0))]
    InvalidFieldJson(Value),
    /// The bookmark as sent (a string).
    #[error("Invalid bookmark value: {}", Value::String(.0.clone()))]
    InvalidBookmark(String),
    #[error("No index exists for this sort, try indexing by the sort fields.")]
    NoUsableSortIndex,
    /// `allow_fallback: false` and the index asked for (or any but `_all_docs`) cannot
    /// answer; the text names what `use_index` asked for.
    #[error("{0}")]
    NoFallback(String),
    #[error("Invalid type for index: {0}")]
    InvalidIndexType(String),
    #[error("JSON indexes must be an object, not: {}", w(.0))]
    InvalidIndexJson(Value),
    /// `text` or `nouveau`: a CouchDB without those services answers 503.
    #[error("{0}")]
    IndexServiceUnavailable(String),
    /// The `~w` text of what CouchDB found in the design document's `language`.
    #[error("Existing design doc has an invalid language: {0}")]
    InvalidDdocLang(String),
    #[error("Index parameter ranges: limit > 1, skip > 0")]
    InvalidListIndexParams,
    #[error("Bulk Delete requires an array of non-null docids. Docids: {}", w(.0))]
    InvalidBulkDocs(Value),
    #[error("Requested partitioned option does not match existing value on design document {0}")]
    PartitionedOptionMismatch(String),
    /// An error CouchDB's Mango has no entry for in its error table: its catch-all 500
    /// with the module and the `~w` text of the reason.
    #[error("Unknown Error: {module} :: {reason}")]
    Unknown {
        module: &'static str,
        reason: String,
    },
}

impl Error {
    /// The HTTP status CouchDB answers with.
    pub fn status(&self) -> u16 {
        match self {
            Error::Unknown { .. } | Error::InvalidListIndexParams => 500,
            Error::IndexServiceUnavailable(_) => 503,
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
            Error::InvalidFieldName(_) => "invalid_field_name",
            Error::MissingRequiredKey(_) => "missing_required_key",
            Error::InvalidKey(_) => "invalid_key",
            Error::InvalidSelectorJson(_) => "invalid_selector_json",
            Error::InvalidIndexName(_) => "invalid_index_name",
            Error::InvalidNonNegInteger(_) => "invalid_non_neg_integer",
            Error::InvalidPosInteger(_) => "invalid_pos_integer",
            Error::InvalidBoolean(_) => "invalid_boolean",
            Error::InvalidString(_) => "invalid_string",
            Error::InvalidEmptyString => "invalid_empty_string",
            Error::InvalidSortJson(_) => "invalid_sort_json",
            Error::InvalidSortField(_) => "invalid_sort_field",
            Error::MixedSort => "unsupported_mixed_sort",
            Error::InvalidFieldsJson(_) => "invalid_fields",
            Error::InvalidFieldJson(_) => "invalid_field",
            Error::InvalidBookmark(_) => "invalid_bookmark",
            Error::NoUsableSortIndex => "no_usable_index",
            Error::NoFallback(_) => "no_usable_index",
            Error::InvalidIndexType(_) | Error::InvalidIndexJson(_) => "invalid_index",
            Error::IndexServiceUnavailable(_) => "required index service unavailable",
            Error::InvalidDdocLang(_) => "invalid_ddoc_lang",
            Error::InvalidListIndexParams => "invalid_list_index_params",
            Error::InvalidBulkDocs(_) => "invalid_bulk_docs",
            Error::PartitionedOptionMismatch(_) => "invalid_partitioned_option",
            Error::Unknown { .. } => "unknown_error",
        }
    }

    /// CouchDB's catch-all for a reason term `{Tag, Value}` it has no entry for.
    pub(crate) fn unknown(module: &'static str, tag: &str, value: &Value) -> Error {
        Error::Unknown {
            module,
            reason: format!("{{{tag},{}}}", w(value)),
        }
    }
}
