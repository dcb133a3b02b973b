//! The NUL scan over raw JSON text agrees with a full parse and walk: on any valid JSON it finds
//! a NUL whenever a string or key of the parsed value holds one (it is never short), and finds one
//! the walk does not only when the text repeats a key, whose earlier value the parse drops. The
//! error it builds never panics.

#![no_main]

use std::fmt;

use gantry_core::text::{json_has_nul, nul_error, nul_path};
use libfuzzer_sys::fuzz_target;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

fuzz_target!(|data: &[u8]| {
    let scanned = json_has_nul(data);
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let walked = nul_path(&value);
        if walked.is_some() {
            assert!(scanned, "the scan missed a NUL the walk found at {walked:?}");
        } else if scanned {
            let repeats = serde_json::from_slice::<RepeatedKey>(data).map(|r| r.0);
            assert_eq!(
                repeats.ok(),
                Some(true),
                "the scan found a NUL that no kept value holds"
            );
        }
    }
    if scanned {
        let _ = nul_error(data).to_string();
    }
});

/// Whether any object in the text names one key twice.
struct RepeatedKey(bool);

impl<'de> Deserialize<'de> for RepeatedKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RepeatedKeyVisitor).map(RepeatedKey)
    }
}

struct RepeatedKeyVisitor;

impl<'de> Visitor<'de> for RepeatedKeyVisitor {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut keys = std::collections::HashSet::new();
        let mut repeated = false;
        while let Some(key) = map.next_key::<String>()? {
            repeated |= !keys.insert(key);
            repeated |= map.next_value::<RepeatedKey>()?.0;
        }
        Ok(repeated)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut repeated = false;
        while let Some(item) = seq.next_element::<RepeatedKey>()? {
            repeated |= item.0;
        }
        Ok(repeated)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}
