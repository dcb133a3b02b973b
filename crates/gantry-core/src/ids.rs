//! Identifier newtypes: one type per kind of record, so a device id is never passed as a project id.

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($($(#[$meta:meta])* $name:ident),+ $(,)?) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(transparent)]
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        pub struct $name(String);

        impl $name {
            /// A fresh identifier: a UUID whose leading bits are the creation time, so new
            /// records land at the end of their index.
            pub fn generate() -> Self {
                Self(uuid::Uuid::now_v7().to_string())
            }
            /// Wraps an identifier read from a path, a body or the store. Unknown ids are not an
            /// input error: they simply find nothing.
            pub fn from_string(s: impl Into<String>) -> Self {
                Self(s.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        /// Maps keyed by an id are looked up by the text a broker names a client with.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    )+};
}

id_type!(
    /// A tenant: the unit of isolation between customers.
    TenantId,
    /// A project.
    ProjectId,
    /// A device model.
    ModelId,
    /// A device.
    DeviceId,
    /// A stored device event.
    EventId,
    /// A project's webhook.
    WebhookId,
    /// One POST of a batch of events to a webhook, with its retries.
    DeliveryId,
    /// An alarm rule on a device model.
    AlarmRuleId,
    /// An alarm, from its raise to its clear.
    AlarmId,
);

/// The tenant every fresh store starts with; the system administrator administers it.
pub const DEFAULT_TENANT: &str = "00000000-0000-0000-0000-000000000000";

impl TenantId {
    pub fn default_tenant() -> Self {
        Self::from_string(DEFAULT_TENANT)
    }
}

impl EventId {
    /// The smallest id an event stored at `ms` (epoch milliseconds) or later can have: ids are
    /// UUIDv7, whose text orders by creation time.
    pub fn lower_bound_at(ms: i64) -> Self {
        let ms = ms.clamp(0, (1 << 48) - 1) as u64;
        Self(format!("{:08x}-{:04x}-7000-8000-000000000000", ms >> 16, ms & 0xffff))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_order_by_creation_time() {
        let before = EventId::lower_bound_at(chrono::Utc::now().timestamp_millis());
        let id = EventId::generate();
        let after = EventId::lower_bound_at(chrono::Utc::now().timestamp_millis() + 1);
        assert!(before <= id && id < after, "{before} {id} {after}");
        assert_eq!(
            EventId::lower_bound_at(0).as_str(),
            "00000000-0000-7000-8000-000000000000"
        );
    }
}
