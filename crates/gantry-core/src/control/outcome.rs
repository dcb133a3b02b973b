//! What becomes of a control once sent: the device's ack completes it (and is recorded as a
//! Response log), or its ack timeout ends it in `exception`.

use std::sync::atomic::Ordering;

use super::{ControlService, new_log};
use crate::enums::{Classification, EventLogStatus};
use crate::event_log::EventLog;
use crate::message::Message;
use crate::records::Device;
use crate::store::AckRecord;
use crate::stream::StreamType;
use crate::time::now_ms;
use crate::{Error, Result};

impl ControlService {
    /// A device's ack (`type` ack with `correlationId`): completes the control it answers and
    /// records a Response log, in one transaction.
    /// Returns the control it answered, if any.
    pub async fn handle_ack(&self, device: &Device, ack: &Message) -> Result<Option<EventLog>> {
        let now = now_ms();
        let ack_json = serde_json::to_value(ack).map_err(Error::serialization)?;
        let hooks = self.hooks(&device.project_id).await?;
        // Its context is the answered control's, filled in when the ack is recorded.
        let response = new_log(
            device,
            Classification::Response,
            EventLogStatus::Completed,
            ack,
            None,
            "DEVICE",
            now,
        );
        let (answered, response) = match ack.meta.correlation_id.as_deref() {
            Some(correlation) => {
                let ack = AckRecord {
                    tenant: device.record.tenant_id.clone(),
                    device: device.id.clone(),
                    correlation_id: correlation.to_owned(),
                    response: ack_json,
                    at: now,
                    webhooks: hooks,
                    reply: Some(response.clone()),
                };
                let outcome = self.acks.write(ack).await?;
                (outcome.answered, outcome.reply.unwrap_or(response))
            }
            None => {
                self.insert_log(&response, None, hooks, None).await?;
                (None, response)
            }
        };
        if let Some(log) = &answered {
            self.pushed(log, hooks);
        }
        // The first response completes a control still processing; a later one, or one after
        // the `exception`, leaves its status as it was.
        if let Some(log) = &answered
            && log.status == EventLogStatus::Completed
            && log.responses.len() == 1
        {
            self.stats.completed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(owner) = answered.as_ref().and_then(|log| log.reply_to.as_deref())
            && let Err(e) = self.downlink.send(owner, ack).await
        {
            tracing::warn!(error = %e, "could not forward an ack along its route");
        }
        self.pushed(&response, hooks);
        Ok(answered)
    }

    /// Marks controls whose ack did not come in time as `exception`, hands them to their
    /// projects' webhooks (in the same transaction) and pushes them to their streams; returns
    /// how many.
    pub async fn expire_overdue(&self) -> Result<u64> {
        let hooks = self.webhooks.subscribers_by_project(StreamType::EventLog).await?;
        let expired = self.store.expire_event_logs(now_ms(), &hooks).await?;
        if expired.iter().any(|log| hooks.contains_key(&log.project_id)) {
            self.webhooks.wake();
        }
        for log in &expired {
            self.push(log);
        }
        let count = expired.len() as u64;
        self.stats.exception.fetch_add(count, Ordering::Relaxed);
        Ok(count)
    }
}
