//! The one way an upstream message goes, whichever broker carried it. The transport says who
//! sent it; the telemetry service takes it (a device's ack completes its control, type m and
//! log become events); what became of it is counted; the device is sent the ack it asked for;
//! and the transport gets an `UpstreamAnswer` to turn into a PUBACK, an MQTT 5 reason code or
//! the external broker's manual ack.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use gantry_core::Services;
use gantry_core::downlink::Downlink;
use gantry_core::ids::{DeviceId, TenantId};
use gantry_core::message::Message;
use gantry_core::telemetry::Rejection;
use tracing::instrument;

use crate::stats::MqttStats;

/// What the transport answers an upstream message with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamAnswer {
    /// Taken, whole or in part: acknowledge it.
    Taken,
    /// Nothing of it was taken, for this reason; sending it again would change nothing.
    Rejected(Rejection),
    /// Not from a device Gantry knows: nothing stored, and nothing to send again.
    Dropped,
    /// Not stored because the store failed: left unacknowledged, so that it is sent again.
    NotStored,
}

/// The sender of an upstream message as the transport found it: the device, and its tenant
/// (none for a device the store does not know; an error when looking it up failed).
pub(crate) struct UpstreamSender {
    pub device: DeviceId,
    pub tenant: gantry_core::Result<Option<TenantId>>,
}

/// Hands upstream messages to the services; shared by the embedded and the external broker.
#[derive(Clone)]
pub(crate) struct UpstreamPath {
    downlink: Arc<dyn Downlink>,
    stats: Arc<MqttStats>,
}

impl UpstreamPath {
    pub(crate) fn new(downlink: Arc<dyn Downlink>, stats: Arc<MqttStats>) -> Self {
        Self { downlink, stats }
    }

    /// Takes one upstream message. What it says is stored before this returns, so a transport
    /// that acknowledges on `Taken` acknowledges only what is durable.
    #[instrument(level = "debug", name = "mqtt_ingest", skip_all, fields(device = %sender.device))]
    pub(crate) async fn handle(&self, services: &Services, sender: UpstreamSender, payload: &[u8]) -> UpstreamAnswer {
        self.stats.messages_in.fetch_add(1, Ordering::Relaxed);
        let UpstreamSender { device, tenant } = sender;
        let outcome = match tenant {
            Ok(Some(tenant)) => services.telemetry.handle_upstream(&tenant, &device, payload).await,
            Ok(None) => {
                self.stats.entries_refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(device = %device, "message for an unknown device dropped");
                return UpstreamAnswer::Dropped;
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(outcome) => {
                self.stats.count_upstream(device.as_str(), &outcome);
                if let Some(reply) = &outcome.reply {
                    self.reply(&device, reply).await;
                }
                outcome.rejected.map_or(UpstreamAnswer::Taken, UpstreamAnswer::Rejected)
            }
            Err(e) => {
                self.stats.ingest_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(device = %device, error = %e, "upstream message not stored; not acknowledged");
                UpstreamAnswer::NotStored
            }
        }
    }

    /// Sends the device the ack its message asked for; a failure is logged, the message stays taken.
    async fn reply(&self, device: &DeviceId, reply: &Message) {
        if let Err(e) = self.downlink.send(device.as_str(), reply).await {
            tracing::warn!(device = %device, error = %e, "could not send the ack");
        }
    }
}
