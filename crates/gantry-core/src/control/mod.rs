//! Control messages sent down to devices, their acks, and the event logs that record both. A
//! control is recorded before it is published, so every message a device receives has its log.
//!
//! The service and what its parts share are here; sending (`send`), controls that wait for
//! their device (`waiting`), what becomes of a control once sent (`outcome`: acks and ack
//! timeouts) and the rules of a control's payload (`validate`) have files of their own.

mod outcome;
mod send;
mod validate;
mod waiting;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Result;
use crate::audit::PendingAudit;
use crate::catalog::CatalogService;
use crate::downlink::Downlink;
use crate::enums::{Classification, EventLogStatus};
use crate::event_log::EventLog;
use crate::feed::Feeds;
use crate::group_commit::GroupCommit;
use crate::ids::EventId;
use crate::message::Message;
use crate::paging::{Page, PageRequest};
use crate::principal::Principal;
use crate::query::EventLogQuery;
use crate::records::Device;
use crate::store::{AckOutcome, AckRecord, NewEventLog, Store};
use crate::stream::StreamType;
use crate::webhook::Audience;
use crate::webhooks::WebhookService;

pub use validate::validate_control;

/// The audit record a control commits with its event log, and who made the change.
type Audited<'a> = Option<(&'a PendingAudit, &'a Principal)>;

pub struct ControlService {
    store: Arc<dyn Store>,
    catalog: Arc<CatalogService>,
    downlink: Arc<dyn Downlink>,
    ack_timeout: Duration,
    stats: ControlStats,
    /// Event logs go to their project's push stream.
    feeds: Arc<Feeds>,
    /// And to its webhooks, written with them.
    webhooks: Arc<WebhookService>,
    /// Controls one device may have waiting (`--waiting-controls-per-device`).
    max_waiting: AtomicU64,
    /// The event logs' inserts and the acks, each group-committed: a burst of connects and of
    /// their acks writes a transaction per batch, not per device.
    inserts: GroupCommit<NewEventLog, ()>,
    acks: GroupCommit<AckRecord, AckOutcome>,
}

/// Controls one device may have waiting unless configured otherwise.
pub const DEFAULT_WAITING_CONTROLS_PER_DEVICE: u64 = 100;

/// What became of the controls that wait for an ack, counted by this process (exported at
/// `/metrics`; how many are pending now is the store's figure, which every node shares).
#[derive(Debug, Default)]
pub struct ControlStats {
    /// Controls sent (or relayed along a route) that wait for an ack.
    pub awaiting_ack: AtomicU64,
    /// Controls completed by their first ack.
    pub completed: AtomicU64,
    /// Controls ended in `exception` by the ack sweep (or expired while waiting).
    pub exception: AtomicU64,
    /// Controls stored to wait for a device not connected.
    pub waiting: AtomicU64,
    /// Waiting controls delivered at a connect.
    pub delivered_waiting: AtomicU64,
}

/// The longest a control may wait for its device: a week.
pub const MAX_TTL_SECONDS: i64 = 604_800;

impl ControlService {
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Arc<CatalogService>,
        downlink: Arc<dyn Downlink>,
        ack_timeout: Duration,
        (feeds, webhooks): (Arc<Feeds>, Arc<WebhookService>),
        writers: (&TaskTracker, &CancellationToken),
    ) -> Self {
        let inserts = GroupCommit::start(writers, {
            let store = store.clone();
            move |logs: Vec<NewEventLog>| {
                let store = store.clone();
                async move {
                    store.insert_event_logs(&logs).await?;
                    Ok(vec![(); logs.len()])
                }
            }
        });
        let acks = GroupCommit::start(writers, {
            let store = store.clone();
            move |acks: Vec<AckRecord>| {
                let store = store.clone();
                async move { store.record_acks(&acks).await }
            }
        });
        Self {
            store,
            catalog,
            downlink,
            ack_timeout,
            stats: ControlStats::default(),
            feeds,
            webhooks,
            max_waiting: AtomicU64::new(DEFAULT_WAITING_CONTROLS_PER_DEVICE),
            inserts,
            acks,
        }
    }

    /// Stores `log` (`EventLogStore::insert_event_logs`) with the others written meanwhile.
    async fn insert_log(
        &self,
        log: &EventLog,
        ack_deadline: Option<i64>,
        webhooks: Audience,
        audit: Audited<'_>,
    ) -> Result<()> {
        let new = NewEventLog {
            log: log.clone(),
            ack_deadline,
            webhooks,
            audit: audit.map(|(pending, who)| pending.record_for(who)),
        };
        self.inserts.write(new).await?;
        if let Some((pending, _)) = audit {
            pending.set_committed();
        }
        Ok(())
    }

    /// The webhooks of `project` that want event logs.
    async fn hooks(&self, project: &crate::ids::ProjectId) -> Result<Audience> {
        self.webhooks.subscribers(project, StreamType::EventLog).await
    }

    /// Sends a stored (or updated) event log to its project's push stream, and wakes the
    /// deliveries when webhooks got it.
    fn pushed(&self, log: &EventLog, hooks: Audience) {
        if !hooks.is_empty() {
            self.webhooks.wake();
        }
        self.push(log);
    }

    /// Sends a stored (or updated) event log to its project's push stream.
    fn push(&self, log: &EventLog) {
        self.feeds
            .publish(&log.project_id, StreamType::EventLog, &log.device_id, || {
                serde_json::to_string(log).unwrap_or_default()
            });
    }

    pub fn stats(&self) -> &ControlStats {
        &self.stats
    }

    /// Sets the bound on controls waiting per device (`--waiting-controls-per-device`).
    pub fn set_max_waiting(&self, max: u64) {
        self.max_waiting.store(max, Ordering::Relaxed);
    }

    pub fn ack_timeout(&self) -> Duration {
        self.ack_timeout
    }

    pub async fn list_logs(&self, who: &Principal, query: EventLogQuery, page: PageRequest) -> Result<Page<EventLog>> {
        self.catalog.get_project(who, &query.project).await?;
        self.store.list_event_logs(who.tenant(), &query, page).await
    }
}

/// A new event log of `message`, sent to or received from `device`, created by `by`.
fn new_log(
    device: &Device,
    classification: Classification,
    status: EventLogStatus,
    message: &Message,
    context_id: Option<String>,
    by: &str,
    now: i64,
) -> EventLog {
    EventLog {
        id: EventId::generate().to_string(),
        tenant_id: device.record.tenant_id.clone(),
        project_id: device.project_id.clone(),
        status,
        classification,
        device_id: device.id.clone(),
        device_name: device.device_name.clone(),
        event_data: serde_json::to_value(message).unwrap_or_default(),
        context_id,
        responses: Vec::new(),
        event_id: message.meta.id.clone(),
        created_by: by.to_owned(),
        created_time: now,
        updated_by: None,
        updated_time: None,
        deleted: false,
        expires_time: None,
        delivered_time: None,
        reason: None,
        reply_to: None,
    }
}
