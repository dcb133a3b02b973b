//! Controls that wait for their device: stored while it is not connected (`ttlSeconds`),
//! delivered at its connect, listed and cancelled.

use std::sync::atomic::Ordering;

use super::ControlService;
use crate::enums::EventLogStatus;
use crate::event_log::EventLog;
use crate::ids::DeviceId;
use crate::message::Message;
use crate::paging::{Page, PageRequest};
use crate::principal::Principal;
use crate::records::Device;
use crate::time::now_ms;
use crate::{Error, Result};

impl ControlService {
    /// Stores a control for a device not connected, to wait for its connect. A device that
    /// connected meanwhile may have looked for waiting controls before this one was stored:
    /// it is delivered now, by the same claim a connect makes.
    pub(super) async fn wait(&self, device: &Device, log: &EventLog, audit: super::Audited<'_>) -> Result<()> {
        // Counted before the write: concurrent sends may pass the bound by as many as are in
        // flight.
        let max = self.max_waiting.load(Ordering::Relaxed);
        let one = PageRequest::parse(None, Some(1), 1)?;
        let held = self
            .store
            .list_waiting_controls(&device.record.tenant_id, &device.id, one)
            .await?;
        crate::error::within_bound(
            held.total,
            max,
            "waiting controls per device",
            "waiting-controls-per-device",
        )?;
        let hooks = self.hooks(&log.project_id).await?;
        self.insert_log(log, None, hooks, audit).await?;
        self.pushed(log, hooks);
        self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        if self.is_connected(&device.id).await? {
            self.deliver_waiting(device).await?;
        }
        Ok(())
    }

    /// Whether the device holds an MQTT session now, as presence recorded it or, on a broker
    /// that tells no sessions, as its recent messages show (`Downlink::recently_heard`).
    pub async fn is_connected(&self, device: &DeviceId) -> Result<bool> {
        if self.downlink.recently_heard(device) {
            return Ok(true);
        }
        Ok(self.store.connection(device).await?.is_some_and(|c| c.connected))
    }

    /// Publishes the device's waiting controls, in the order they were sent: each is claimed
    /// in the store first, so that of two nodes seeing one connect only one sends it. Its ack
    /// deadline counts from now; one that asked no ack is completed once sent.
    pub async fn deliver_waiting(&self, device: &Device) -> Result<()> {
        let now = now_ms();
        let deadline = now + self.ack_timeout.as_millis() as i64;
        let claimed = self.store.claim_waiting_controls(&device.id, now, deadline).await?;
        for log in claimed {
            self.stats.delivered_waiting.fetch_add(1, Ordering::Relaxed);
            let message: Message = serde_json::from_value(log.event_data.clone()).map_err(Error::serialization)?;
            if let Err(e) = self.downlink.send(device.id.as_str(), &message).await {
                tracing::warn!(device = %device.id, event_log = %log.id, error = %e, "waiting control not published");
            }
            let log = if message.meta.needack {
                self.stats.awaiting_ack.fetch_add(1, Ordering::Relaxed);
                log
            } else {
                let hooks = self.hooks(&log.project_id).await?;
                let done = (EventLogStatus::Completed, None);
                match self
                    .store
                    .finish_waiting_control(&log.tenant_id, &log.id, done, now, hooks)
                    .await?
                {
                    Some(done) => done,
                    None => log,
                }
            };
            let hooks = self.hooks(&log.project_id).await?;
            self.pushed(&log, hooks);
        }
        Ok(())
    }

    /// Cancels a waiting control: its log turns `exception` with reason `cancelled`. One
    /// delivered already (or not waiting at all) is 409.
    pub async fn cancel_waiting(&self, who: &Principal, id: &str) -> Result<EventLog> {
        let log = self
            .store
            .get_event_log(who.tenant(), id)
            .await?
            .ok_or_else(|| Error::not_found("event log", id))?;
        who.require_device_control(&log.project_id)?;
        if !log.is_waiting() {
            return Err(Error::Conflict(format!(
                "event log {id} is not a control waiting for its device (delivered, finished, or sent at once)"
            )));
        }
        let hooks = self.hooks(&log.project_id).await?;
        let cancelled = (EventLogStatus::Exception, Some("cancelled"));
        let Some(log) = self
            .store
            .finish_waiting_control(who.tenant(), id, cancelled, now_ms(), hooks)
            .await?
        else {
            return Err(Error::Conflict(format!("event log {id} was delivered meanwhile")));
        };
        self.pushed(&log, hooks);
        Ok(log)
    }

    /// The controls waiting for the device, oldest first.
    pub async fn waiting_controls(
        &self,
        who: &Principal,
        device: &DeviceId,
        page: PageRequest,
    ) -> Result<Page<EventLog>> {
        let device = self.catalog.load_device(who.tenant(), device).await?;
        who.require_device_manage(&device.project_id)?;
        self.store.list_waiting_controls(who.tenant(), &device.id, page).await
    }
}
