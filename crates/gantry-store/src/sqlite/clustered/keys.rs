//! The devices' integer keys (migration 0019's event_devices), which the clustered table and its
//! indexes hold instead of the device id. A device gets its key in the ingest commit that writes
//! its first events; the keys known are kept in memory, so that a commit asks the database only
//! for the devices it has not met.
//!
//! Invariant: a key in memory is committed (one is learned only after its transaction commits),
//! and a device's key never changes (keys are not deleted with events).

use std::collections::HashMap;
use std::sync::Mutex;

use gantry_core::Result;
use gantry_core::event::DeviceEvent;
use sqlx::AnyConnection;

use crate::sql::values_clause;

/// Device ids per statement that looks up or gives keys.
const DEVICES_PER_STATEMENT: usize = 500;

#[derive(Debug, Default)]
pub(super) struct DeviceKeys {
    known: Mutex<HashMap<String, i64>>,
}

/// The keys of a commit's devices, and those it met first, to learn once it has committed.
pub(super) struct Keys<'e> {
    by_device: HashMap<&'e str, i64>,
    met: Vec<(String, i64)>,
}

impl Keys<'_> {
    pub(super) fn of(&self, device: &str) -> i64 {
        self.by_device[device]
    }
}

impl DeviceKeys {
    /// The keys of the devices of `events`, giving one in the transaction on `conn` to each
    /// device that has none yet.
    pub(super) async fn of<'e>(&self, conn: &mut AnyConnection, events: &[&'e DeviceEvent]) -> Result<Keys<'e>> {
        let mut by_device = HashMap::new();
        let mut unknown = Vec::new();
        {
            let known = self.known.lock().expect("not poisoned");
            for event in events {
                let device = event.device_id.as_str();
                if by_device.contains_key(device) || unknown.last() == Some(&device) {
                    continue;
                }
                match known.get(device) {
                    Some(key) => {
                        by_device.insert(device, *key);
                    }
                    None => unknown.push(device),
                }
            }
        }
        unknown.sort_unstable();
        unknown.dedup();
        let mut met = Vec::with_capacity(unknown.len());
        for chunk in unknown.chunks(DEVICES_PER_STATEMENT) {
            let values = values_clause(chunk.len(), 1, true);
            let insert =
                format!("INSERT INTO event_devices (device_id) VALUES {values} ON CONFLICT (device_id) DO NOTHING");
            let mut query = sqlx::query(&insert);
            for device in chunk {
                query = query.bind(*device);
            }
            query.execute(&mut *conn).await.map_err(crate::error::db_error)?;
            let select = format!(
                "SELECT device_id, device_key FROM event_devices WHERE device_id IN ({})",
                vec!["?"; chunk.len()].join(", ")
            );
            let mut query = sqlx::query_as::<_, (String, i64)>(&select);
            for device in chunk {
                query = query.bind(*device);
            }
            met.extend(query.fetch_all(&mut *conn).await.map_err(crate::error::db_error)?);
        }
        for (device, key) in &met {
            if let Ok(i) = unknown.binary_search(&device.as_str()) {
                by_device.insert(unknown[i], *key);
            }
        }
        Ok(Keys { by_device, met })
    }

    /// The keys `keys` met, once their transaction has committed.
    pub(super) fn learn(&self, keys: Keys<'_>) {
        if keys.met.is_empty() {
            return;
        }
        self.known.lock().expect("not poisoned").extend(keys.met);
    }
}
