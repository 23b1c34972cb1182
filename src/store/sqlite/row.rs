//! Turning columns back into domain values. Stored ids and JSON were written by this program, so
//! a failure here means a damaged file, reported as a conversion error (a 500, never a panic).

use rusqlite::Row;
use rusqlite::types::Type;
use serde_json::value::RawValue;

use crate::domain::IdError;

fn conversion(idx: usize, e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e))
}

/// A stored id column.
pub fn id<T>(row: &Row<'_>, idx: usize, parse: fn(&str) -> Result<T, IdError>) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    parse(&text).map_err(|e| conversion(idx, e))
}

/// A stored JSON column, kept as raw text to be served verbatim.
pub fn raw_json(row: &Row<'_>, idx: usize) -> rusqlite::Result<Box<RawValue>> {
    json_text(idx, row.get(idx)?)
}

/// Stored JSON text (from column `idx`), kept raw to be served verbatim.
pub fn json_text(idx: usize, text: String) -> rusqlite::Result<Box<RawValue>> {
    RawValue::from_string(text).map_err(|e| conversion(idx, e))
}

/// A nullable stored JSON column.
pub fn raw_json_opt(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Box<RawValue>>> {
    row.get::<_, Option<String>>(idx)?.map(|text| json_text(idx, text)).transpose()
}
