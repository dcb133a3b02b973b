//! Sending: a control a caller asks for, a message Gantry sends itself, and one relayed along
//! a route; each recorded as an event log before it is published.

use std::sync::atomic::Ordering;

use super::{ControlService, MAX_TTL_SECONDS, new_log, validate_control};
use crate::audit::PendingAudit;
use crate::enums::{Classification, DeviceStatus, EventLogStatus, MessageType};
use crate::event_log::EventLog;
use crate::fields::ControlFields;
use crate::ids::{DeviceId, EventId};
use crate::message::{MESSAGE_VERSION, Message, MessageMeta, Payload};
use crate::principal::Principal;
use crate::records::Device;
use crate::time::now_ms;
use crate::{Error, Result};

impl ControlService {
    /// Validates a control message against the device's model, records it as an event log and
    /// publishes it to the device's inbox with a new `meta.id`.
    /// Returns the message sent and the id of its event log, by which the caller follows it.
    pub async fn send_control(
        &self,
        who: &Principal,
        device_id: &DeviceId,
        input: ControlFields,
    ) -> Result<(Message, String)> {
        self.send_control_audited(who, device_id, input, None).await
    }

    /// `send_control`, with `audit`'s record committed in the event log's own transaction
    /// (`PendingAudit::is_committed` says whether it was: not when the control was refused).
    pub async fn send_control_audited(
        &self,
        who: &Principal,
        device_id: &DeviceId,
        input: ControlFields,
        audit: Option<&PendingAudit>,
    ) -> Result<(Message, String)> {
        let device = self.catalog.load_device(who.tenant(), device_id).await?;
        who.require_device_control(&device.project_id)?;
        let message_type = input.message_type.unwrap_or(MessageType::M);
        if message_type == MessageType::Log {
            return Err(Error::invalid("type", "a control message is of type m, ack or c"));
        }
        if message_type == MessageType::Ack && input.correlation_id.as_deref().is_none_or(str::is_empty) {
            return Err(Error::invalid("correlationId", "is required for a message of type ack"));
        }
        let payload = input.payload.unwrap_or_default();
        let model = self.catalog.load_model(who.tenant(), &device.model_id).await?;
        validate_control(&model, &payload)?;
        if device.status == DeviceStatus::Locked {
            return Err(Error::Conflict(format!("device {} is Locked", device.id)));
        }
        let now = now_ms();
        let message = Message {
            meta: MessageMeta {
                id: EventId::generate().to_string(),
                message_type,
                deviceid: Some(device.id.to_string()),
                version: Some(MESSAGE_VERSION.into()),
                ts: Some(now.div_euclid(1000)),
                needack: input.needack,
                correlation_id: input.correlation_id,
            },
            payload: Payload {
                refused: Vec::new(),
                ..payload
            },
        };
        let ttl = input.ttl_seconds.unwrap_or(0);
        if !(0..=MAX_TTL_SECONDS).contains(&ttl) {
            return Err(Error::invalid("ttlSeconds", format!("must be 0 to {MAX_TTL_SECONDS}")));
        }
        let waits = ttl > 0 && !self.is_connected(&device.id).await?;
        let status = if input.needack || waits {
            EventLogStatus::Processing
        } else {
            EventLogStatus::Completed
        };
        let mut log = new_log(
            &device,
            Classification::DeviceControll,
            status,
            &message,
            input.context_id,
            &who.actor(),
            now,
        );
        if waits {
            log.expires_time = Some(now + ttl * 1000);
            self.wait(&device, &log, audit.map(|a| (a, who))).await?;
            return Ok((message, log.id));
        }
        let deadline = input.needack.then(|| now + self.ack_timeout.as_millis() as i64);
        let hooks = self.hooks(&log.project_id).await?;
        self.insert_log(&log, deadline, hooks, audit.map(|a| (a, who))).await?;
        self.pushed(&log, hooks);
        if input.needack {
            self.stats.awaiting_ack.fetch_add(1, Ordering::Relaxed);
        }
        // The log stays as stored: a control awaiting its ack ends in `exception` at its ack
        // timeout, as one the device never answered; the caller is told which log it is.
        if let Err(e) = self.downlink.send(device.id.as_str(), &message).await {
            return Err(e.for_stored_control(&log.id));
        }
        Ok((message, log.id))
    }

    /// Records a message Gantry itself sends the device (a desired-state delta) as a control
    /// waiting for its ack, and publishes it.
    pub async fn send_recorded(&self, device: &Device, message: &Message, by: &str) -> Result<EventLog> {
        let now = now_ms();
        let log = new_log(
            device,
            Classification::DeviceControll,
            EventLogStatus::Processing,
            message,
            None,
            by,
            now,
        );
        let deadline = now + self.ack_timeout.as_millis() as i64;
        let hooks = self.hooks(&log.project_id).await?;
        self.insert_log(&log, Some(deadline), hooks, None).await?;
        self.pushed(&log, hooks);
        self.stats.awaiting_ack.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.downlink.send(device.id.as_str(), message).await {
            return Err(e.for_stored_control(&log.id));
        }
        Ok(log)
    }

    /// Records a message a route's caller sent to `device` (rmqtt delivers it): a DeviceControll
    /// log like a control's, whose ack goes back to `reply_to`'s inbox.
    pub async fn record_relayed(
        &self,
        device: &Device,
        message: &Message,
        by: &str,
        reply_to: Option<String>,
    ) -> Result<()> {
        let now = now_ms();
        let needack = message.meta.needack;
        let status = if needack {
            EventLogStatus::Processing
        } else {
            EventLogStatus::Completed
        };
        let mut log = new_log(device, Classification::DeviceControll, status, message, None, by, now);
        log.reply_to = reply_to;
        let deadline = needack.then(|| now + self.ack_timeout.as_millis() as i64);
        let hooks = self.hooks(&log.project_id).await?;
        self.insert_log(&log, deadline, hooks, None).await?;
        self.pushed(&log, hooks);
        if needack {
            self.stats.awaiting_ack.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}
