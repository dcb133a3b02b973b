//! The desired-state service: operators set the values a device's writable attributes should
//! hold; Gantry sends the device the values it has not applied, as one `c` message, on every
//! change and on every connect, and settles each value by the device's ack or report. At a
//! connect, controls that waited for the device go first (`ControlService::deliver_waiting`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cache::TtlCache;
use crate::catalog::CatalogService;
use crate::control::ControlService;
use crate::desired::DesiredState;
use crate::enums::{DeviceStatus, MessageType, Readable};
use crate::event_log::EventLog;
use crate::feed::Feeds;
use crate::group_commit::GroupCommit;
use crate::ids::{DeviceId, EventId, TenantId};
use crate::message::{Message, MessageMeta, Payload, PayloadAttribute};
use crate::principal::Principal;
use crate::records::{Device, DeviceModel};
use crate::store::{DesiredWrite, Store};
use crate::stream::StreamType;
use crate::time::now_ms;
use crate::webhooks::WebhookService;
use crate::{Error, Result};

/// How long the desired values a device has not applied stay cached for its reports. Changes
/// in this process drop the entry; this bounds how late one made through another node is seen.
const OUTSTANDING_TTL: Duration = Duration::from_secs(5);

/// Writes lost to another writer before one is given up (each retry reads the document again).
const SAVE_ATTEMPTS: usize = 16;

/// Counted by this process, exported at `/metrics`.
#[derive(Debug, Default)]
pub struct DesiredStats {
    /// `c` messages sent with desired values.
    pub deltas_sent: AtomicU64,
    /// Desired values the device applied (by ack or report).
    pub applied: AtomicU64,
    /// Desired values the device refused.
    pub rejected: AtomicU64,
}

pub struct DesiredStateService {
    store: Arc<dyn Store>,
    catalog: Arc<CatalogService>,
    control: Arc<ControlService>,
    /// Per device, the desired values not applied yet, for matching reports without a read.
    outstanding: TtlCache<DeviceId, Arc<BTreeMap<String, serde_json::Value>>>,
    stats: DesiredStats,
    /// Every change goes to its project's push stream,
    feeds: Arc<Feeds>,
    /// and to its webhooks (type `desired`), written with it.
    webhooks: Arc<WebhookService>,
    /// The documents' writes, group-committed: a burst of connects marks its deltas delivered,
    /// and their acks settle them, in a transaction per batch, not per device.
    saves: GroupCommit<DesiredWrite, bool>,
}

impl DesiredStateService {
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Arc<CatalogService>,
        control: Arc<ControlService>,
        (feeds, webhooks): (Arc<Feeds>, Arc<WebhookService>),
        writers: (&TaskTracker, &CancellationToken),
    ) -> Self {
        let saves = GroupCommit::start(writers, {
            let store = store.clone();
            move |writes: Vec<DesiredWrite>| {
                let store = store.clone();
                async move { store.save_desired_states(&writes).await }
            }
        });
        Self {
            store,
            catalog,
            control,
            feeds,
            webhooks,
            outstanding: TtlCache::new(OUTSTANDING_TTL),
            stats: DesiredStats::default(),
            saves,
        }
    }

    pub fn stats(&self) -> &DesiredStats {
        &self.stats
    }

    /// The device's desired state, for whoever may read the device.
    pub async fn get(&self, who: &Principal, id: &DeviceId) -> Result<DesiredState> {
        let device = self.catalog.load_device(who.tenant(), id).await?;
        who.require_device_read(&device.project_id, &device.id)?;
        Ok(self.load(who.tenant(), &device.id).await?.0)
    }

    async fn load(&self, tenant: &TenantId, device: &DeviceId) -> Result<(DesiredState, i64)> {
        Ok(self
            .store
            .desired_state(tenant, device)
            .await?
            .unwrap_or_else(|| (DesiredState::empty(tenant.clone(), device.clone()), 0)))
    }

    /// Sets (`Some`) or removes (`None`) desired values, checked against the device's model
    /// (the attribute exists, is W or RW, the value is of its type). With `if_match`, only if
    /// the document is at that version. A connected device is sent the new delta at once.
    pub async fn patch(
        &self,
        who: &Principal,
        id: &DeviceId,
        changes: BTreeMap<String, Option<serde_json::Value>>,
        if_match: Option<i64>,
    ) -> Result<DesiredState> {
        let device = self.catalog.load_device(who.tenant(), id).await?;
        who.require_desired_set(&device.project_id)?;
        if changes.is_empty() {
            return Err(Error::invalid("attributes", "must name at least one attribute"));
        }
        let model = self.catalog.load_model(who.tenant(), &device.model_id).await?;
        check_changes(&model, &changes)?;
        if device.status == DeviceStatus::Locked {
            return Err(Error::Conflict(format!("device {} is Locked", device.id)));
        }
        let by = who.actor();
        let state = self
            .update(&device, |state| {
                if let Some(expected) = if_match
                    && expected != state.version
                {
                    return Err(Error::VersionMismatch { current: state.version });
                }
                Ok(state.patch(&changes, &by, now_ms()))
            })
            .await?;
        if self.control.is_connected(&device.id).await?
            && let Err(e) = self.send_delta(&device, &by).await
        {
            // The values are stored: the next connect sends them.
            tracing::warn!(device = %device.id, error = %e, "desired state not sent");
        }
        Ok(state)
    }

    /// Reads, changes and writes the document until the write is not lost to another writer;
    /// `change` says whether it changed anything (nothing is written when not).
    async fn update(
        &self,
        device: &Device,
        mut change: impl FnMut(&mut DesiredState) -> Result<bool>,
    ) -> Result<DesiredState> {
        let tenant = &device.record.tenant_id;
        for _ in 0..SAVE_ATTEMPTS {
            let (mut state, revision) = self.load(tenant, &device.id).await?;
            if !change(&mut state)? {
                return Ok(state);
            }
            if let Some(state) = self.save(device, state, revision).await? {
                return Ok(state);
            }
        }
        Err(Error::Busy(format!(
            "the desired state of device {} changes too often",
            device.id
        )))
    }

    /// Writes `state`, read at `revision`, with the other writes that wait, and tells its
    /// followers; None when another writer changed the document since it was read.
    async fn save(&self, device: &Device, state: DesiredState, revision: i64) -> Result<Option<DesiredState>> {
        let hooks = self
            .webhooks
            .subscribers(&device.project_id, StreamType::Desired)
            .await?;
        let write = DesiredWrite {
            state,
            project: device.project_id.clone(),
            revision,
            at: now_ms(),
            webhooks: hooks,
        };
        let state = write.state.clone();
        if !self.saves.write(write).await? {
            return Ok(None);
        }
        self.outstanding.remove(&device.id);
        if !hooks.is_empty() {
            self.webhooks.wake();
        }
        self.feeds
            .publish(&device.project_id, StreamType::Desired, &device.id, || {
                serde_json::to_string(&state).unwrap_or_default()
            });
        Ok(Some(state))
    }

    /// The device connected (a new session or a reconnect, subscribed to its inbox): its
    /// waiting controls, then its desired values not applied.
    pub async fn device_connected(&self, tenant: &TenantId, id: &DeviceId) -> Result<()> {
        let device = match self.catalog.load_device(tenant, id).await {
            Ok(device) => device,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        if device.status == DeviceStatus::Locked {
            return Ok(());
        }
        self.control.deliver_waiting(&device).await?;
        self.send_delta(&device, "system").await
    }

    /// Sends the device its desired values not applied as one `c` message (recorded as a
    /// control waiting for its ack), then marks them delivered.
    async fn send_delta(&self, device: &Device, by: &str) -> Result<()> {
        let (mut state, revision) = self.load(&device.record.tenant_id, &device.id).await?;
        let delta = state.delta();
        if delta.is_empty() {
            return Ok(());
        }
        let message = delta_message(&device.id, state.version, &delta);
        self.control.send_recorded(device, &message, by).await?;
        self.stats.deltas_sent.fetch_add(1, Ordering::Relaxed);
        let sent = state.version;
        let now = now_ms();
        // Marked on the document as it was read, unless it changed since: then read again.
        if state.delivered(sent, now) && self.save(device, state, revision).await?.is_none() {
            self.update(device, |state| Ok(state.delivered(sent, now))).await?;
        }
        Ok(())
    }

    /// The device acked the control `answered` with `ack`: when that was a delta, the values it
    /// carried are applied, or rejected where the ack refused them.
    pub async fn acknowledged(&self, device: &Device, answered: &EventLog, ack: &Message) -> Result<()> {
        let Ok(sent) = serde_json::from_value::<Message>(answered.event_data.clone()) else {
            return Ok(());
        };
        let Some(sent_version) = delta_version(&sent) else {
            return Ok(());
        };
        let codes: Vec<String> = sent.payload.attrs.iter().map(|a| a.code.clone()).collect();
        let refused: Vec<(String, String)> = ack
            .payload
            .refused
            .iter()
            .map(|r| (r.code.clone(), r.reason.clone()))
            .collect();
        let now = now_ms();
        self.update(device, |state| {
            Ok(state.acknowledged(sent_version, &codes, &refused, now))
        })
        .await?;
        let refused_here = codes.iter().filter(|c| refused.iter().any(|(r, _)| r == *c)).count();
        self.stats.rejected.fetch_add(refused_here as u64, Ordering::Relaxed);
        self.stats
            .applied
            .fetch_add((codes.len() - refused_here) as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The device reported `attrs`: an RW attribute reported at its desired value is applied.
    pub async fn reported(&self, device: &Device, model: &DeviceModel, attrs: &[PayloadAttribute]) -> Result<()> {
        let rw = |code: &str| {
            model
                .attributes_map
                .get(code)
                .is_some_and(|a| a.readable == Readable::Rw)
        };
        if !attrs.iter().any(|a| rw(&a.code)) {
            return Ok(());
        }
        let outstanding = match self.outstanding.get(&device.id) {
            Some(outstanding) => outstanding,
            None => {
                let (state, _) = self.load(&device.record.tenant_id, &device.id).await?;
                let values: BTreeMap<String, serde_json::Value> = state
                    .delta()
                    .into_iter()
                    .map(|(c, v)| (c.to_owned(), v.clone()))
                    .collect();
                let values = Arc::new(values);
                self.outstanding.put(device.id.clone(), values.clone());
                values
            }
        };
        let matched: Vec<&PayloadAttribute> = attrs
            .iter()
            .filter(|a| rw(&a.code) && outstanding.get(&a.code) == Some(&a.value))
            .collect();
        if matched.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        self.update(device, |state| {
            let mut changed = false;
            for attr in &matched {
                changed |= state.reported(&attr.code, &attr.value, now);
            }
            Ok(changed)
        })
        .await?;
        self.stats.applied.fetch_add(matched.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Each change names an attribute of the model that may be written, with a value of its type
/// (or null, to remove it).
fn check_changes(model: &DeviceModel, changes: &BTreeMap<String, Option<serde_json::Value>>) -> Result<()> {
    for (code, value) in changes {
        let field = format!("attributes.{code}");
        let defined = model
            .attributes_map
            .get(code)
            .ok_or_else(|| Error::invalid(&field, format!("`{code}` is not an attribute of model {}", model.name)))?;
        if !defined.readable.writable() {
            return Err(Error::invalid(
                &field,
                format!("`{code}` is read-only (R): it has no desired value"),
            ));
        }
        if let Some(value) = value {
            defined.data_type.check(&field, value)?;
        }
    }
    Ok(())
}

/// The `c` message of a delta: `meta.version` is the document's version.
fn delta_message(device: &DeviceId, version: i64, delta: &[(&str, &serde_json::Value)]) -> Message {
    Message {
        meta: MessageMeta {
            id: EventId::generate().to_string(),
            message_type: MessageType::C,
            deviceid: Some(device.to_string()),
            version: Some(serde_json::Value::from(version)),
            ts: Some(now_ms().div_euclid(1000)),
            needack: true,
            correlation_id: None,
        },
        payload: Payload {
            attrs: delta
                .iter()
                .map(|(code, value)| PayloadAttribute {
                    code: (*code).to_owned(),
                    value: (*value).clone(),
                    channel: crate::enums::Channel::M,
                })
                .collect(),
            ..Payload::default()
        },
    }
}

/// The document version a sent `c` message carried, if it was a delta.
fn delta_version(message: &Message) -> Option<i64> {
    if message.meta.message_type != MessageType::C {
        return None;
    }
    message.meta.version.as_ref().and_then(serde_json::Value::as_i64)
}
