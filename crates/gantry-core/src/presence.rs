//! Device presence: which devices hold an MQTT session, since when, and when each was last
//! heard from. The broker (embedded hooks, or an external broker's connect/disconnect events)
//! reports sessions starting and ending; each is written to the store at once and published as
//! a `ConnectionChange` to in-process subscribers (the push stream, webhooks).
//!
//! The last-seen time moves with every packet, so it is kept in memory and written in batches
//! (`flush`, every `FLUSH_PERIOD`) and when the session ends: a crash loses at most the last
//! period's movement of it, never whether a device is connected (an embedded broker's start
//! ends every recorded session, `end_all_sessions`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Result;
use crate::catalog::CatalogService;
use crate::connection::{Connection, ConnectionChange, SessionEnd, SessionStart};
use crate::feed::Feeds;
use crate::group_commit::GroupCommit;
use crate::ids::{DeviceId, ProjectId, TenantId};
use crate::principal::Principal;
use crate::store::Store;
use crate::stream::StreamType;
use crate::webhook::Audience;
use crate::webhooks::WebhookService;

/// How often the last-seen times are written: what a crash may lose of them.
pub const FLUSH_PERIOD: Duration = Duration::from_secs(5);

/// Changes a slow subscriber may fall behind by before it misses some (it is told, by
/// `broadcast::error::RecvError::Lagged`).
const CHANGES_BUFFER: usize = 4096;

/// A session this process has seen start and not end.
struct Live {
    tenant: TenantId,
    project: ProjectId,
    started: i64,
    last_seen: i64,
    /// `last_seen` moved since the last flush.
    dirty: bool,
}

pub struct PresenceService {
    store: Arc<dyn Store>,
    catalog: Arc<CatalogService>,
    live: Mutex<HashMap<DeviceId, Live>>,
    changes: broadcast::Sender<ConnectionChange>,
    feeds: Arc<Feeds>,
    /// Connection changes go to the project's webhooks, written with them.
    webhooks: Arc<WebhookService>,
    /// Sessions' starts and ends, group-committed: a burst of connects is written in a
    /// transaction per batch, not per device.
    starts: GroupCommit<(TenantId, SessionStart, Audience), ()>,
    ends: GroupCommit<(SessionEnd, Audience), bool>,
}

impl PresenceService {
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Arc<CatalogService>,
        (feeds, webhooks): (Arc<Feeds>, Arc<WebhookService>),
        writers: (&TaskTracker, &CancellationToken),
    ) -> Self {
        let starts = GroupCommit::start(writers, {
            let store = store.clone();
            move |starts: Vec<(TenantId, SessionStart, Audience)>| {
                let store = store.clone();
                async move {
                    store.sessions_started(&starts).await?;
                    Ok(vec![(); starts.len()])
                }
            }
        });
        let ends = GroupCommit::start(writers, {
            let store = store.clone();
            move |ends: Vec<(SessionEnd, Audience)>| {
                let store = store.clone();
                async move { store.sessions_ended(&ends).await }
            }
        });
        Self {
            store,
            catalog,
            feeds,
            webhooks,
            live: Mutex::default(),
            changes: broadcast::channel(CHANGES_BUFFER).0,
            starts,
            ends,
        }
    }

    /// Every connect and disconnect from now on, in the order they were recorded.
    pub fn subscribe(&self) -> broadcast::Receiver<ConnectionChange> {
        self.changes.subscribe()
    }

    /// A device's session began. A device that is gone (deleted since it logged in) is ignored.
    pub async fn connected(&self, tenant: &TenantId, start: SessionStart) -> Result<()> {
        let project = match self.catalog.load_device(tenant, &start.device).await {
            Ok(device) => device.project_id.clone(),
            Err(crate::Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let hooks = self.webhooks.subscribers(&project, StreamType::Connection).await?;
        self.starts.write((tenant.clone(), start.clone(), hooks)).await?;
        if !hooks.is_empty() {
            self.webhooks.wake();
        }
        {
            let mut live = self.live.lock().expect("presence lock");
            let newer = live.get(&start.device).is_some_and(|l| l.started > start.at);
            if !newer {
                live.insert(
                    start.device.clone(),
                    Live {
                        tenant: tenant.clone(),
                        project: project.clone(),
                        started: start.at,
                        last_seen: start.at,
                        dirty: false,
                    },
                );
            }
        }
        self.publish(tenant, project, &start.device).await
    }

    /// A packet from the device: moves its last-seen time, in memory. Nothing for a client
    /// without a live session here (a route's identity, an unknown client).
    pub fn seen(&self, device: &str) {
        let mut live = self.live.lock().expect("presence lock");
        if let Some(session) = live.get_mut(device) {
            session.last_seen = crate::time::now_ms();
            session.dirty = true;
        }
    }

    /// A device's session ended. `tenant`, when the caller knows it, saves a lookup.
    pub async fn disconnected(&self, tenant: Option<&TenantId>, mut end: SessionEnd) -> Result<()> {
        let known = {
            let mut live = self.live.lock().expect("presence lock");
            match live.get(&end.device) {
                Some(session) if session.started <= end.started_by => {
                    let session = live.remove(&end.device).expect("present");
                    end.last_seen = end.last_seen.max(Some(session.last_seen));
                    Some((session.tenant, session.project))
                }
                _ => None,
            }
        };
        // A session this process did not see start: its project is looked up before the write
        // only when some webhook wants connection changes (the write carries their events).
        let known = match known {
            None if self.webhooks.any_subscriber(StreamType::Connection).await? => {
                self.project_of(tenant, &end.device).await?
            }
            known => known,
        };
        let hooks = match &known {
            Some((_, project)) => self.webhooks.subscribers(project, StreamType::Connection).await?,
            None => Default::default(),
        };
        if !self.ends.write((end.clone(), hooks)).await? {
            return Ok(());
        }
        if !hooks.is_empty() {
            self.webhooks.wake();
        }
        let (tenant, project) = match known {
            Some(known) => known,
            None => match self.project_of(tenant, &end.device).await? {
                Some(known) => known,
                None => return Ok(()),
            },
        };
        self.publish(&tenant, project, &end.device).await
    }

    /// The tenant and project of a live device; None for one that is gone.
    async fn project_of(&self, tenant: Option<&TenantId>, device: &DeviceId) -> Result<Option<(TenantId, ProjectId)>> {
        let tenant = match tenant {
            Some(tenant) => tenant.clone(),
            None => match self.store.device_tenant(device).await? {
                Some(tenant) => tenant,
                None => return Ok(None),
            },
        };
        match self.catalog.load_device(&tenant, device).await {
            Ok(device) => Ok(Some((tenant, device.project_id.clone()))),
            Err(crate::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sends the device's record as it is now to the subscribers and the project's push
    /// stream, if anyone follows.
    async fn publish(&self, tenant: &TenantId, project: ProjectId, device: &DeviceId) -> Result<()> {
        let streamed = self.feeds.follows(&project);
        if self.changes.receiver_count() == 0 && !streamed {
            return Ok(());
        }
        let connection = self.current(device).await?;
        if streamed {
            self.feeds.publish(&project, StreamType::Connection, device, || {
                serde_json::to_string(&connection).unwrap_or_default()
            });
        }
        let _ = self.changes.send(ConnectionChange {
            tenant_id: tenant.clone(),
            project_id: project,
            connection,
        });
        Ok(())
    }

    /// Writes the last-seen times that moved since the last flush.
    pub async fn flush(&self) -> Result<()> {
        let seen: Vec<(DeviceId, i64)> = {
            let mut live = self.live.lock().expect("presence lock");
            live.iter_mut()
                .filter(|(_, s)| s.dirty)
                .map(|(device, s)| {
                    s.dirty = false;
                    (device.clone(), s.last_seen)
                })
                .collect()
        };
        self.store.record_last_seen(&seen).await
    }

    /// For a broker that has just started and so holds no session: every session recorded as
    /// on ended at its last-seen time. Returns how many.
    pub async fn end_all_sessions(&self) -> Result<u64> {
        self.store.end_all_sessions().await
    }

    /// For a broker that stops: ends every session this process knows of now.
    pub async fn end_live_sessions(&self) -> Result<()> {
        let now = crate::time::now_ms();
        let live: Vec<(DeviceId, Live)> = self.live.lock().expect("presence lock").drain().collect();
        let mut ends = Vec::with_capacity(live.len());
        for (device, session) in live {
            let end = SessionEnd {
                device,
                started_by: session.started,
                at: now,
                last_seen: Some(session.last_seen),
            };
            let hooks = self
                .webhooks
                .subscribers(&session.project, StreamType::Connection)
                .await?;
            ends.push((end, hooks));
        }
        for chunk in ends.chunks(crate::group_commit::MAX_BATCH) {
            self.store.sessions_ended(chunk).await?;
        }
        Ok(())
    }

    /// The device's connection record for `who` (who may read the device: its tenant's
    /// administrator, its project's application, the device itself).
    pub async fn connection(&self, who: &Principal, id: &DeviceId) -> Result<Connection> {
        self.catalog.get_device(who, id).await?;
        self.current(id).await
    }

    /// The connection record of each of the project's `devices`, in their order, in one read: for
    /// a page of a device listing. A device not of the project reads as never connected.
    pub async fn project_connections(
        &self,
        who: &Principal,
        project: &ProjectId,
        devices: &[DeviceId],
    ) -> Result<Vec<Connection>> {
        who.require_project(project)?;
        let mut stored: HashMap<DeviceId, Connection> = self
            .store
            .project_connections(who.tenant(), project, devices)
            .await?
            .into_iter()
            .map(|c| (c.device_id.clone(), c))
            .collect();
        let live = self.live.lock().expect("presence lock");
        Ok(devices
            .iter()
            .map(|id| with_pending(stored.remove(id), id, &live))
            .collect())
    }

    /// The stored record with the last-seen time not yet written.
    async fn current(&self, id: &DeviceId) -> Result<Connection> {
        let stored = self.store.connection(id).await?;
        Ok(with_pending(stored, id, &self.live.lock().expect("presence lock")))
    }
}

/// The device's stored record (never connected when none), with the last-seen time `live` holds
/// and has not written yet while it is connected.
fn with_pending(stored: Option<Connection>, id: &DeviceId, live: &HashMap<DeviceId, Live>) -> Connection {
    let mut connection = stored.unwrap_or_else(|| Connection::never(id.clone()));
    if connection.connected {
        connection.last_seen_time = connection.last_seen_time.max(live.get(id).map(|s| s.last_seen));
    }
    connection
}
