//! What `gantry admin` prints: tables for people, the API's JSON with `--json` for scripts.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use serde_json::Value;

/// A column of a listing: its heading and the record field it shows.
pub type Column = (&'static str, &'static str);

pub const PROJECT_COLUMNS: &[Column] = &[
    ("ID", "id"),
    ("NAME", "name"),
    ("STATUS", "status"),
    ("CREATED", "createdTime"),
];
pub const MODEL_COLUMNS: &[Column] = &[
    ("ID", "id"),
    ("NAME", "name"),
    ("TYPE", "deviceType"),
    ("ATTRIBUTES", "attributesMap"),
    ("ACTIONS", "actionsMap"),
];
pub const USER_COLUMNS: &[Column] = &[
    ("ID", "id"),
    ("USERNAME", "username"),
    ("ROLE", "role"),
    ("PROJECTS", "projectIds"),
    ("STATUS", "status"),
    ("LAST LOGIN", "lastLoginTime"),
];
pub const TENANT_COLUMNS: &[Column] = &[("ID", "id"), ("NAME", "name"), ("CREATED", "createdTime")];
pub const DEVICE_COLUMNS: &[Column] = &[
    ("ID", "id"),
    ("NAME", "deviceName"),
    ("STATUS", "status"),
    ("MODEL", "deviceModelName"),
    ("PROJECT", "projectName"),
    ("VIRTUAL", "virtual"),
];

#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// One record: as JSON, or a two-column table of its fields.
    pub fn record(&self, record: &Value) {
        if self.json {
            println!("{}", pretty(record));
            return;
        }
        let mut table = table();
        table.set_header(["FIELD", "VALUE"]);
        if let Value::Object(fields) = record {
            for (name, value) in fields {
                table.add_row([name.as_str(), &cell(name, value)]);
            }
        }
        println!("{table}");
    }

    /// A listing: as a JSON array, or a table of `columns` and a count line.
    pub fn list(&self, records: &[Value], columns: &[Column]) {
        if self.json {
            println!("{}", pretty(&Value::Array(records.to_vec())));
            return;
        }
        let mut table = table();
        table.set_header(columns.iter().map(|(heading, _)| *heading));
        for record in records {
            table.add_row(columns.iter().map(|(_, field)| cell(field, &record[*field])));
        }
        println!("{table}");
        println!("{} record{}", records.len(), if records.len() == 1 { "" } else { "s" });
    }

    /// A confirmation such as "locked device X": the record as JSON, or the line.
    pub fn done(&self, line: &str, record: &Value) {
        if self.json {
            println!("{}", pretty(record));
        } else {
            println!("{line}");
        }
    }
}

fn table() -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    if let Some(width) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        table.set_width(width);
    }
    table
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// A field as a table cell: strings bare, times readable, maps of a model by their keys.
fn cell(field: &str, value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) if field.ends_with("Time") => n
            .as_i64()
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_else(|| n.to_string()),
        Value::Object(map) if field.ends_with("sMap") => map.keys().cloned().collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cells_show_times_and_map_keys_readably() {
        assert_eq!(cell("createdTime", &json!(0)), "1970-01-01 00:00:00 UTC");
        assert_eq!(cell("attributesMap", &json!({"temp": {}, "hum": {}})), "hum, temp");
        assert_eq!(cell("name", &json!("x")), "x");
        assert_eq!(cell("virtual", &json!(false)), "false");
        assert_eq!(cell("comments", &Value::Null), "");
    }
}
