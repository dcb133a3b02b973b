//! Text the stores cannot keep. PostgreSQL's text and jsonb types refuse the NUL character, so
//! JSON holding one is refused where it enters (REST bodies, query strings, MQTT messages), on
//! both engines alike, and is never mistaken for a store failure.

use serde_json::Value;

/// Whether JSON text holds an escaped NUL (`\u0000`) in a string or key. A raw NUL byte is not
/// valid JSON, so the parser refuses that one.
pub fn json_has_nul(json: &[u8]) -> bool {
    let mut rest = json;
    while let Some(at) = rest.iter().position(|&b| b == b'\\') {
        let escape = &rest[at + 1..];
        if escape.starts_with(b"u0000") {
            return true;
        }
        // Skip the escaped character, so `\\u0000` (a backslash, then text) is not taken for one.
        rest = escape.get(1..).unwrap_or_default();
    }
    false
}

/// Where in `value` the first NUL is, as a field path (`meta.id`, `payload.attrs[0].value`).
pub fn nul_path(value: &Value) -> Option<String> {
    fn walk(value: &Value, path: &mut String) -> bool {
        match value {
            Value::String(s) => s.contains('\0'),
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let found = walk(item, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            Value::Object(map) => map.iter().any(|(key, item)| {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key.replace('\0', "\\u0000"));
                let found = key.contains('\0') || walk(item, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            _ => false,
        }
    }
    let mut path = String::new();
    walk(value, &mut path).then(|| if path.is_empty() { ".".to_owned() } else { path })
}

/// The error for JSON text holding a NUL: 400 naming the field.
pub fn nul_error(json: &[u8]) -> crate::Error {
    let field = serde_json::from_slice::<Value>(json)
        .ok()
        .and_then(|v| nul_path(&v))
        .unwrap_or_else(|| "body".to_owned());
    crate::Error::invalid(field, "holds a NUL character (\\u0000), which cannot be stored")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_nuls_are_found_and_escaped_backslashes_are_not() {
        assert!(json_has_nul(br#"{"a": "x\u0000y"}"#));
        assert!(json_has_nul(br#"{"a\u0000": 1}"#));
        assert!(json_has_nul(br#"["\\\u0000"]"#));
        assert!(!json_has_nul(br#"{"a": "\\u0000"}"#));
        assert!(!json_has_nul(br#"{"a": "\u0001 \n \" \\"}"#));
        assert!(!json_has_nul(br#"{"a": "trailing \\"}"#));
        assert!(!json_has_nul(b"\\"));
    }

    #[test]
    fn a_nul_in_a_repeated_key_is_refused_though_the_parse_drops_it() {
        // The parse keeps the last value of a repeated key, but which one counts is the parser's
        // choice: a NUL in any of them is bad input, named as the body since no kept field has it.
        let text = br#"{"a": "\u0000", "a": "x"}"#;
        assert!(json_has_nul(text));
        assert_eq!(
            nul_error(text).to_string(),
            "body: holds a NUL character (\\u0000), which cannot be stored"
        );
    }

    #[test]
    fn the_path_names_the_field() {
        let v: Value = serde_json::from_str(r#"{"meta": {"id": "a\u0000"}}"#).unwrap();
        assert_eq!(nul_path(&v).as_deref(), Some("meta.id"));
        let v: Value = serde_json::from_str(r#"{"payload": {"attrs": [{"value": 1}, {"value": "\u0000"}]}}"#).unwrap();
        assert_eq!(nul_path(&v).as_deref(), Some("payload.attrs[1].value"));
        let v: Value = serde_json::from_str(r#"{"ok": "fine"}"#).unwrap();
        assert_eq!(nul_path(&v), None);
        assert_eq!(
            nul_error(br#"{"deviceName": "\u0000"}"#).to_string(),
            "deviceName: holds a NUL character (\\u0000), which cannot be stored"
        );
    }
}
