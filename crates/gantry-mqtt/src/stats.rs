//! The MQTT side's counters, exported at `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::connections::Connections;

/// Counters of the MQTT side, exported at `/metrics`.
#[derive(Debug, Default)]
pub struct MqttStats {
    pub logins_refused: AtomicU64,
    pub messages_in: AtomicU64,
    pub events_stored: AtomicU64,
    pub entries_refused: AtomicU64,
    pub acls_denied: AtomicU64,
    pub ingest_failures: AtomicU64,
    pub messages_out: AtomicU64,
    pub publishes_over_rate: AtomicU64,
    /// The embedded broker's connected clients (an external broker counts its own).
    pub(crate) connections: Option<Connections>,
}

impl MqttStats {
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        for (name, help, value) in [
            (
                "gantry_mqtt_logins_refused_total",
                "CONNECTs refused (unknown, Locked or wrong password).",
                &self.logins_refused,
            ),
            (
                "gantry_mqtt_messages_in_total",
                "Messages devices published upstream.",
                &self.messages_in,
            ),
            (
                "gantry_mqtt_events_stored_total",
                "Events stored from upstream messages.",
                &self.events_stored,
            ),
            (
                "gantry_mqtt_entries_refused_total",
                "Upstream entries not stored (bad JSON, unknown code, wrong type).",
                &self.entries_refused,
            ),
            (
                "gantry_mqtt_acl_denied_total",
                "Publishes and subscriptions refused by the ACL.",
                &self.acls_denied,
            ),
            (
                "gantry_mqtt_ingest_failures_total",
                "Upstream messages not acknowledged because the store failed.",
                &self.ingest_failures,
            ),
            (
                "gantry_mqtt_publishes_over_rate_total",
                "Publishes over a connection's --mqtt-publish-rate (the connection was closed).",
                &self.publishes_over_rate,
            ),
            (
                "gantry_mqtt_messages_out_total",
                "Messages published to device inboxes.",
                &self.messages_out,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        if let Some(connections) = &self.connections {
            connections.render(out);
        }
    }
}

impl MqttStats {
    /// Counts what became of an upstream message the services took, and logs the entries they refused.
    pub(crate) fn count_upstream(&self, device: &str, outcome: &gantry_core::telemetry::Upstream) {
        self.events_stored.fetch_add(outcome.stored as u64, Ordering::Relaxed);
        if !outcome.refused.is_empty() {
            self.entries_refused
                .fetch_add(outcome.refused.len() as u64, Ordering::Relaxed);
            let refused: Vec<String> = outcome
                .refused
                .iter()
                .map(|r| match r.code.is_empty() {
                    true => r.reason.clone(),
                    false => format!("{}: {}", r.code, r.reason),
                })
                .collect();
            tracing::info!(device, refused = %refused.join("; "), "upstream entries refused");
        }
    }
}
