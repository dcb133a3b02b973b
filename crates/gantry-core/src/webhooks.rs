//! Webhooks: their management (the project's administrators and its application token; device
//! tokens never), and which webhook gets which event. Writes that cause events ask
//! `subscribers` which webhooks want them and hand their store write those ids (or the events,
//! `outbox_for`), so that the events enter the outbox in the cause's own transaction. The answer
//! comes from a snapshot of the enabled webhooks, reloaded after a few seconds or at once after a
//! webhook write here: a project without webhooks pays a map lookup per write. One caller at a
//! time reloads it; the others go on with the expired one meanwhile, so that every message in
//! flight when it expires does not read the store at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex as AsyncMutex, Notify};

use crate::catalog::CatalogService;
use crate::event::{DeviceEvent, ShadowAttribute};
use crate::ids::{ProjectId, WebhookId};
use crate::paging::{Page, PageRequest};
use crate::principal::Principal;
use crate::store::Store;
use crate::stream::StreamType;
use crate::time::now_ms;
use crate::token::generate_token;
use crate::webhook::{
    Audience, CreatedWebhook, Delivery, MAX_DESCRIPTION, RetryPolicy, Webhook, WebhookEvent, WebhookFields, WebhookUrl,
    parse_secret, parse_types,
};
use crate::{Error, Result};

/// How late a webhook written through another node (or by hand) is seen by this node's writes.
const SNAPSHOT_TTL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Receivers may be at loopback, private, link-local and metadata addresses.
    pub allow_private: bool,
    pub retry: RetryPolicy,
    /// Events in one delivery at most, but for a store's row of events committed together
    /// (up to 100), which goes whole.
    pub batch: usize,
    /// How often a delivery worker looks for events written by another node.
    pub poll: Duration,
    /// This node among the nodes on one database: the owner of the webhook leases it takes
    /// (`WebhookStore::lease_webhook`). Stable across restarts (the data dir's node id), so a
    /// node that restarts takes its leases back at once instead of waiting for them to end.
    pub node: String,
    /// Webhooks a project may hold: each one is a delivery worker and a reader of the outbox.
    pub per_project: u64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            allow_private: false,
            retry: RetryPolicy::default(),
            batch: 100,
            poll: Duration::from_secs(1),
            node: uuid::Uuid::now_v7().to_string(),
            per_project: 20,
        }
    }
}

/// Counters of the deliveries, exported at `/metrics`.
#[derive(Debug, Default)]
pub struct WebhookStats {
    pub delivered: AtomicU64,
    pub retried: AtomicU64,
    pub failed: AtomicU64,
}

/// The enabled webhooks by project: each one's slot and types.
type Snapshot = HashMap<ProjectId, Vec<(u8, Vec<StreamType>)>>;

/// The snapshot and when it was loaded (None after a webhook write here), and how many webhook
/// writes here have dropped it.
#[derive(Default)]
struct Cached {
    loaded: Option<(Instant, Arc<Snapshot>)>,
    generation: u64,
}

/// Those of a project's `hooks` that want events of `kind`.
fn wanting(hooks: &[(u8, Vec<StreamType>)], kind: StreamType) -> Audience {
    hooks
        .iter()
        .filter(|(_, types)| types.contains(&kind))
        .fold(Audience::default(), |audience, (slot, _)| audience.with(*slot))
}

pub struct WebhookService {
    store: Arc<dyn Store>,
    catalog: Arc<CatalogService>,
    config: WebhookConfig,
    snapshot: Mutex<Cached>,
    /// Held by the one caller that reloads the snapshot.
    reloading: AsyncMutex<()>,
    /// Woken when events enter the outbox, so deliveries start without waiting for the poll.
    pub(crate) written: Notify,
    stats: WebhookStats,
}

impl WebhookService {
    pub fn new(store: Arc<dyn Store>, catalog: Arc<CatalogService>, config: WebhookConfig) -> Self {
        Self {
            store,
            catalog,
            config,
            snapshot: Mutex::default(),
            reloading: AsyncMutex::new(()),
            written: Notify::new(),
            stats: WebhookStats::default(),
        }
    }

    pub fn config(&self) -> &WebhookConfig {
        &self.config
    }

    pub fn stats(&self) -> &WebhookStats {
        &self.stats
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    async fn snapshot(&self) -> Result<Arc<Snapshot>> {
        let expired = match self.cached() {
            Ok(fresh) => return Ok(fresh),
            Err(expired) => expired,
        };
        // With an expired snapshot at hand, a caller that finds another reloading uses it; after
        // a webhook write here there is none, and every caller waits for a snapshot read after it.
        let _reloading = match expired {
            Some(expired) => match self.reloading.try_lock() {
                Ok(reloading) => reloading,
                Err(_) => return Ok(expired),
            },
            None => self.reloading.lock().await,
        };
        if let Ok(fresh) = self.cached() {
            return Ok(fresh);
        }
        let generation = self.snapshot.lock().expect("webhook snapshot lock").generation;
        let mut snapshot = Snapshot::new();
        for webhook in self.store.enabled_webhooks().await? {
            snapshot
                .entry(webhook.project_id)
                .or_default()
                .push((webhook.slot, webhook.types));
        }
        let snapshot = Arc::new(snapshot);
        let mut cached = self.snapshot.lock().expect("webhook snapshot lock");
        // A webhook write during the read may be missing from it: kept only if none came.
        if cached.generation == generation {
            cached.loaded = Some((Instant::now(), snapshot.clone()));
        }
        Ok(snapshot)
    }

    /// The snapshot if it is fresh; otherwise the expired one, if any.
    fn cached(&self) -> std::result::Result<Arc<Snapshot>, Option<Arc<Snapshot>>> {
        match &self.snapshot.lock().expect("webhook snapshot lock").loaded {
            Some((at, snapshot)) if at.elapsed() < SNAPSHOT_TTL => Ok(snapshot.clone()),
            Some((_, snapshot)) => Err(Some(snapshot.clone())),
            None => Err(None),
        }
    }

    fn invalidate(&self) {
        let mut cached = self.snapshot.lock().expect("webhook snapshot lock");
        cached.loaded = None;
        cached.generation += 1;
    }

    /// The enabled webhooks of the project that want events of `kind`.
    pub async fn subscribers(&self, project: &ProjectId, kind: StreamType) -> Result<Audience> {
        let snapshot = self.snapshot().await?;
        Ok(snapshot
            .get(project)
            .map(|hooks| wanting(hooks, kind))
            .unwrap_or_default())
    }

    /// The enabled webhooks that want events of `kind`, by project (projects with none left out).
    pub async fn subscribers_by_project(&self, kind: StreamType) -> Result<HashMap<ProjectId, Audience>> {
        let snapshot = self.snapshot().await?;
        Ok(snapshot
            .iter()
            .map(|(project, hooks)| (project.clone(), wanting(hooks, kind)))
            .filter(|(_, audience)| !audience.is_empty())
            .collect())
    }

    /// Whether any enabled webhook of any project wants events of `kind`.
    pub async fn any_subscriber(&self, kind: StreamType) -> Result<bool> {
        let snapshot = self.snapshot().await?;
        Ok(snapshot
            .values()
            .any(|hooks| hooks.iter().any(|(_, types)| types.contains(&kind))))
    }

    /// Events entered the outbox: wakes the delivery workers.
    pub fn wake(&self) {
        self.written.notify_waiters();
    }

    /// The webhook events a commit of `events` (one device's) causes: a `telemetry` event for
    /// each, and one `shadow` event with the newest value (by device time) the commit offers of
    /// each attribute. Unlike the stream's, a webhook's `shadow` event is decided with the commit,
    /// before the shadow is read: an attribute whose stored value is newer by device time is in
    /// it too (its `timestamp` tells).
    pub async fn outbox_for(&self, events: &[DeviceEvent]) -> Result<Vec<WebhookEvent>> {
        let Some(first) = events.first() else {
            return Ok(Vec::new());
        };
        let telemetry = self.subscribers(&first.project_id, StreamType::Telemetry).await?;
        let shadow = self.subscribers(&first.project_id, StreamType::Shadow).await?;
        if telemetry.is_empty() && shadow.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_ms();
        let mut outbox = Vec::with_capacity(events.len() + 1);
        if !telemetry.is_empty() {
            for event in events {
                outbox.push(WebhookEvent {
                    id: WebhookEvent::new_id(),
                    project_id: first.project_id.clone(),
                    pending: telemetry,
                    device_id: event.device_id.clone(),
                    kind: StreamType::Telemetry,
                    time: now,
                    data: serde_json::to_string(event).map_err(Error::serialization)?,
                });
            }
        }
        if !shadow.is_empty() {
            let mut newest: BTreeMap<&str, &DeviceEvent> = BTreeMap::new();
            for event in events {
                let entry = newest.entry(event.attribute_code.as_str()).or_insert(event);
                if event.device_timestamp >= entry.device_timestamp {
                    *entry = event;
                }
            }
            let map: serde_json::Map<String, serde_json::Value> = newest
                .into_iter()
                .map(|(code, e)| {
                    let attribute = ShadowAttribute {
                        code: code.to_owned(),
                        value: e.attribute_data.clone(),
                        timestamp: e.device_timestamp,
                    };
                    (code.to_owned(), serde_json::to_value(attribute).unwrap_or_default())
                })
                .collect();
            let data = serde_json::json!({"deviceId": first.device_id, "attributeMap": map}).to_string();
            outbox.push(WebhookEvent {
                id: WebhookEvent::new_id(),
                project_id: first.project_id.clone(),
                pending: shadow,
                device_id: first.device_id.clone(),
                kind: StreamType::Shadow,
                time: now,
                data,
            });
        }
        Ok(outbox)
    }

    pub async fn create(&self, who: &Principal, project: &ProjectId, input: WebhookFields) -> Result<CreatedWebhook> {
        let project = self.catalog.get_project(who, project).await?;
        who.require_webhook_manage(&project.id)?;
        let url = input.url.ok_or_else(|| Error::invalid("url", "is required"))?;
        let url = WebhookUrl::parse(&url, self.config.allow_private)?;
        let types = parse_types(&input.types.ok_or_else(|| Error::invalid("types", "is required"))?)?;
        let secret = match input.secret {
            Some(secret) => parse_secret(&secret)?,
            None => generate_token(),
        };
        let webhook = Webhook {
            id: WebhookId::generate(),
            tenant_id: project.record.tenant_id.clone(),
            project_id: project.id.clone(),
            url: url.as_str().to_owned(),
            types,
            description: description(input.description)?,
            enabled: input.enabled.unwrap_or(true),
            secret: secret.clone(),
            created_by: who.actor(),
            created_time: now_ms(),
            updated_by: None,
            updated_time: None,
            // The store gives it its place.
            slot: 0,
        };
        let max = self.config.per_project.min(Audience::MAX_WEBHOOKS);
        self.store.insert_webhook(&webhook, max).await?;
        self.invalidate();
        Ok(CreatedWebhook { webhook, secret })
    }

    /// The webhook, if the caller may read its project (its secret is never shown).
    pub async fn get(&self, who: &Principal, id: &WebhookId) -> Result<Webhook> {
        let webhook = self
            .store
            .get_webhook(who.tenant(), id)
            .await?
            .ok_or_else(|| Error::not_found("webhook", id))?;
        if let Principal::Device { .. } = who {
            return Err(Error::forbidden("a device token cannot read webhooks"));
        }
        who.require_project(&webhook.project_id)?;
        Ok(webhook)
    }

    /// The webhook, if the caller may change it.
    async fn get_managed(&self, who: &Principal, id: &WebhookId) -> Result<Webhook> {
        let webhook = self.get(who, id).await?;
        who.require_webhook_manage(&webhook.project_id)?;
        Ok(webhook)
    }

    pub async fn list(&self, who: &Principal, project: &ProjectId, page: PageRequest) -> Result<Page<Webhook>> {
        let project = self.catalog.get_project(who, project).await?;
        if let Principal::Device { .. } = who {
            return Err(Error::forbidden("a device token cannot read webhooks"));
        }
        self.store.list_webhooks(who.tenant(), &project.id, page).await
    }

    pub async fn update(&self, who: &Principal, id: &WebhookId, input: WebhookFields) -> Result<Webhook> {
        let mut webhook = self.get_managed(who, id).await?;
        if let Some(url) = input.url {
            webhook.url = WebhookUrl::parse(&url, self.config.allow_private)?.as_str().to_owned();
        }
        if let Some(types) = input.types {
            webhook.types = parse_types(&types)?;
        }
        if let Some(secret) = input.secret {
            webhook.secret = parse_secret(&secret)?;
        }
        if input.description.is_some() {
            webhook.description = description(input.description)?;
        }
        if let Some(enabled) = input.enabled {
            webhook.enabled = enabled;
        }
        webhook.updated_by = Some(who.actor());
        webhook.updated_time = Some(now_ms());
        self.store.update_webhook(&webhook).await?;
        self.invalidate();
        Ok(webhook)
    }

    /// Deletes the webhook; its deliveries stop, and the events waiting for it are dropped.
    pub async fn delete(&self, who: &Principal, id: &WebhookId) -> Result<()> {
        let webhook = self.get_managed(who, id).await?;
        self.store.delete_webhook(who.tenant(), &webhook.id).await?;
        self.invalidate();
        Ok(())
    }

    pub async fn deliveries(&self, who: &Principal, id: &WebhookId, page: PageRequest) -> Result<Page<Delivery>> {
        let webhook = self.get(who, id).await?;
        self.store.list_deliveries(who.tenant(), &webhook.id, page).await
    }

    pub(crate) fn count(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Delivered => &self.stats.delivered,
            Outcome::Retried => &self.stats.retried,
            Outcome::Failed => &self.stats.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What became of one delivery attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Delivered,
    Retried,
    Failed,
}

/// An empty description is none.
fn description(text: Option<String>) -> Result<Option<String>> {
    let text = text.filter(|t| !t.trim().is_empty());
    if text.as_ref().is_some_and(|t| t.chars().count() > MAX_DESCRIPTION) {
        return Err(Error::invalid(
            "description",
            format!("is longer than {MAX_DESCRIPTION} characters"),
        ));
    }
    Ok(text)
}
