//! Reading columns of a result row into domain values; a value the domain cannot read is a store
//! error naming the column.

use gantry_core::records::RecordMeta;
use gantry_core::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::any::AnyRow;
use sqlx::{Any, Decode, Row, Type};

pub fn get<'r, T: Decode<'r, Any> + Type<Any>>(row: &'r AnyRow, column: &str) -> Result<T> {
    row.try_get(column).map_err(crate::error::db_error)
}

/// Flags are stored as 0/1, which both engines read back as integers.
pub fn flag(row: &AnyRow, column: &str) -> Result<bool> {
    Ok(get::<i64>(row, column)? != 0)
}

/// A closed-set value stored by its spelling (`DeviceType::parse` and the like).
pub fn spelled<T>(row: &AnyRow, column: &str, parse: fn(&str) -> Option<T>) -> Result<T> {
    let text: String = get(row, column)?;
    parse(&text).ok_or_else(|| bad_value(column, format!("`{text}` is not a known value").into()))
}

pub fn json<T: DeserializeOwned>(row: &AnyRow, column: &str) -> Result<T> {
    let text: String = get(row, column)?;
    serde_json::from_str(&text).map_err(|e| bad_value(column, e.into()))
}

pub fn json_opt<T: DeserializeOwned>(row: &AnyRow, column: &str) -> Result<Option<T>> {
    let text: Option<String> = get(row, column)?;
    text.map(|text| serde_json::from_str(&text).map_err(|e| bad_value(column, e.into())))
        .transpose()
}

/// The stored form of a JSON document.
pub fn to_json(value: &impl Serialize) -> Result<String> {
    serde_json::to_string(value).map_err(Error::serialization)
}

/// The record fields, from columns of the same names.
pub fn record(row: &AnyRow) -> Result<RecordMeta> {
    Ok(RecordMeta {
        tenant_id: gantry_core::ids::TenantId::from_string(get::<String>(row, "tenant_id")?),
        created_by: get(row, "created_by")?,
        created_time: get(row, "created_time")?,
        updated_by: get(row, "updated_by")?,
        updated_time: get(row, "updated_time")?,
        deleted: flag(row, "deleted")?,
    })
}

pub fn bad_value(column: &str, source: sqlx::error::BoxDynError) -> Error {
    Error::store(sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source,
    })
}
