//! Alarms as a service: rules on a model's attributes, their evaluation around each ingest
//! commit (MQTT and REST alike) and by the no-data sweep, and what operators do with alarms.
//! Every transition goes through `AlarmStore` (one transaction with its webhook events), then
//! onto the project's push stream and into the metrics.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::alarm::{
    Alarm, AlarmFilter, AlarmHistoryEntry, AlarmQuery, AlarmSort, AlarmWrite, Raiser, Subject, Trigger,
};
use crate::alarm_rule::{AlarmRule, AlarmRuleFields, AlarmRuleView, RuleStatus};
use crate::cache::TtlCache;
use crate::catalog::CatalogService;
use crate::enums::{AlarmStatus, AlarmTransition, Channel, SortOrder};
use crate::event::DeviceEvent;
use crate::feed::Feeds;
use crate::ids::{AlarmId, AlarmRuleId, DeviceId, ModelId, ProjectId, TenantId};
use crate::paging::{Page, PageRequest};
use crate::principal::Principal;
use crate::query::DeviceQuery;
use crate::records::{Device, RecordMeta};
use crate::store::{AlarmStore, DeviceStore};
use crate::stream::StreamType;
use crate::time::{now_ms, parse_timestamp};
use crate::webhooks::WebhookService;
use crate::{Error, Result};

/// How long a model's rules stay cached. A rule write in this process drops them at once; this
/// bounds how late another node's rule write is applied.
const RULE_CACHE_TTL: Duration = Duration::from_secs(5);
/// The longest comment.
pub const MAX_COMMENT: usize = 4096;
/// A device's alarm periods read for one chart at most.
pub const MAX_PERIODS: u32 = 100;

/// Counters of alarm transitions, by kind, exported at `/metrics`.
#[derive(Debug, Default)]
pub struct AlarmStats {
    transitions: [AtomicU64; 6],
    /// Evaluations that failed (the events stay committed).
    pub failed: AtomicU64,
}

impl AlarmStats {
    fn count(&self, kind: AlarmTransition) {
        let at = AlarmTransition::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.transitions[at].fetch_add(1, Ordering::Relaxed);
    }

    /// Transitions so far, by kind.
    pub fn transitions(&self) -> Vec<(AlarmTransition, u64)> {
        AlarmTransition::ALL
            .iter()
            .zip(&self.transitions)
            .map(|(k, n)| (*k, n.load(Ordering::Relaxed)))
            .collect()
    }
}

pub struct AlarmService {
    store: Arc<dyn AlarmStore>,
    /// The devices of a model, for a rule's status.
    devices: Arc<dyn DeviceStore>,
    catalog: Arc<CatalogService>,
    webhooks: Arc<WebhookService>,
    feeds: Arc<Feeds>,
    rules: TtlCache<(TenantId, ModelId), Arc<ModelRules>>,
    /// Moved by every rule write, after its commit: rules read before it are not cached, so a
    /// rule just deleted or changed is not put back by a read that raced the write.
    rules_generation: std::sync::Mutex<u64>,
    /// States and open alarms held between evaluations (`states.rs`).
    states: states::StateCache,
    stats: AlarmStats,
    /// Writes evaluations' plans in batches.
    writer: writer::PlanWriter,
    /// One device's alarm writes on this node, one after the other (`keeping.rs`).
    locks: keeping::DeviceLocks,
    /// Rules one model may hold (`--alarm-rules-per-model`), checked before each create.
    max_rules_per_model: std::sync::atomic::AtomicU64,
}

/// Alarm rules one model may hold unless configured otherwise.
pub const DEFAULT_ALARM_RULES_PER_MODEL: u64 = 100;

impl AlarmService {
    /// The service, with its plan writer a task of `tasks` until `stop` (`PlanWriter::start`).
    pub fn new(
        (store, devices): (Arc<dyn AlarmStore>, Arc<dyn DeviceStore>),
        catalog: Arc<CatalogService>,
        webhooks: Arc<WebhookService>,
        feeds: Arc<Feeds>,
        (tasks, stop): (&tokio_util::task::TaskTracker, tokio_util::sync::CancellationToken),
    ) -> Self {
        Self {
            writer: writer::PlanWriter::start(store.clone(), tasks, stop),
            store,
            devices,
            catalog,
            webhooks,
            feeds,
            rules: TtlCache::new(RULE_CACHE_TTL),
            rules_generation: std::sync::Mutex::new(0),
            states: states::StateCache::default(),
            locks: keeping::DeviceLocks::default(),
            stats: AlarmStats::default(),
            max_rules_per_model: std::sync::atomic::AtomicU64::new(DEFAULT_ALARM_RULES_PER_MODEL),
        }
    }

    pub fn stats(&self) -> &AlarmStats {
        &self.stats
    }

    /// Alarms not cleared, by severity (of every tenant).
    pub async fn open_by_severity(&self) -> Result<Vec<(crate::enums::Severity, u64)>> {
        self.store.count_open_alarms(None).await
    }

    /// The project's alarms not cleared (ACTIVE or ACKNOWLEDGED) by severity, every severity
    /// listed (0 when none), gravest first.
    pub async fn project_open_by_severity(
        &self,
        who: &Principal,
        project: &ProjectId,
    ) -> Result<Vec<(crate::enums::Severity, u64)>> {
        self.catalog.get_project(who, project).await?;
        let open = self.store.count_open_alarms(Some((who.tenant(), project))).await?;
        Ok(crate::enums::Severity::ALL
            .iter()
            .map(|s| (*s, open.iter().find(|(o, _)| o == s).map_or(0, |(_, n)| *n)))
            .collect())
    }

    // ---- rules -------------------------------------------------------------------------------

    /// Whether evaluations keep the states and open alarms they read and wrote, instead of
    /// reading them from the store each time: only where this node alone evaluates its devices'
    /// events (the embedded broker; not with an external broker, where nodes share devices).
    pub fn hold_states(&self, on: bool) {
        self.states.set_on(on);
    }

    /// Sets the bound on rules per model (`--alarm-rules-per-model`).
    pub fn set_max_rules_per_model(&self, max: u64) {
        self.max_rules_per_model
            .store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// Creates a rule on a model: tenant administrators.
    pub async fn create_rule(&self, who: &Principal, model: &ModelId, input: AlarmRuleFields) -> Result<AlarmRuleView> {
        let tenant = who.require_admin()?;
        let model = self.catalog.load_model(tenant, model).await?;
        let record = RecordMeta::created(tenant.clone(), &who.actor(), now_ms());
        let rule = AlarmRule::parse(AlarmRuleId::generate(), &model, input, record)?;
        // Counted before the write: concurrent creates may pass the bound by as many as are in
        // flight.
        let max = self.max_rules_per_model.load(std::sync::atomic::Ordering::Relaxed);
        let held = self.store.model_alarm_rules(tenant, &model.id).await?.len() as u64;
        crate::error::within_bound(held, max, "alarm rules per model", "alarm-rules-per-model")?;
        self.store.insert_alarm_rule(&rule).await?;
        self.rules_changed(tenant, &model.id);
        self.view(rule).await
    }

    /// The model's rules, oldest first: administrators and applications (who read models).
    pub async fn list_rules(&self, who: &Principal, model: &ModelId) -> Result<Vec<AlarmRuleView>> {
        who.require_model_read()?;
        let model = self.catalog.load_model(who.tenant(), model).await?;
        let rules = self.store.model_alarm_rules(who.tenant(), &model.id).await?;
        let statuses = self.statuses(who.tenant(), &model.id, &rules).await?;
        Ok(rules
            .into_iter()
            .zip(statuses)
            .map(|(rule, status)| rule.view(Some(status)))
            .collect())
    }

    pub async fn get_rule(&self, who: &Principal, id: &AlarmRuleId) -> Result<AlarmRuleView> {
        let rule = self.load_rule(who, id).await?;
        self.view(rule).await
    }

    /// Replaces a rule (PUT takes the whole rule): administrators. Disabling it clears its open
    /// alarms, and so does a change of its conditions (their timers started under the old ones).
    pub async fn update_rule(
        &self,
        who: &Principal,
        id: &AlarmRuleId,
        input: AlarmRuleFields,
    ) -> Result<AlarmRuleView> {
        let tenant = who.require_admin()?.clone();
        let old = self.load_rule(who, id).await?;
        let model = self.catalog.load_model(&tenant, &old.model_id).await?;
        let mut record = old.record.clone();
        record.updated_by = Some(who.actor());
        record.updated_time = Some(now_ms());
        let rule = AlarmRule::parse(old.id.clone(), &model, input, record)?;
        self.store.update_alarm_rule(&rule).await?;
        self.rules_changed(&tenant, &model.id);
        let changed = old.definition_changed(&rule);
        if changed || (old.enabled && !rule.enabled) {
            let why = if rule.enabled { "changed" } else { "disabled" };
            self.clear_rule_alarms(&tenant, &rule.id, &format!("rule:{} {why}", rule.id))
                .await?;
        }
        self.view(rule).await
    }

    /// Deletes a rule and clears its open alarms: administrators.
    pub async fn delete_rule(&self, who: &Principal, id: &AlarmRuleId) -> Result<()> {
        let tenant = who.require_admin()?.clone();
        let rule = self.load_rule(who, id).await?;
        self.clear_rule_alarms(&tenant, &rule.id, &format!("rule:{} deleted", rule.id))
            .await?;
        self.store
            .delete_alarm_rule(&tenant, &rule.id, &who.actor(), now_ms())
            .await?;
        self.rules_changed(&tenant, &rule.model_id);
        self.states.forget(None, &Raiser::Rule(&rule).key());
        Ok(())
    }

    async fn clear_rule_alarms(&self, tenant: &TenantId, rule: &AlarmRuleId, by: &str) -> Result<()> {
        let webhooks = self.webhooks.subscribers_by_project(StreamType::Alarm).await?;
        let cleared = self
            .store
            .clear_rule_alarms(tenant, rule, by, now_ms(), &webhooks)
            .await?;
        self.states.forget(None, &format!("rule:{rule}"));
        for alarm in &cleared {
            self.announce(alarm, AlarmTransition::Cleared);
        }
        if !cleared.is_empty() && !webhooks.is_empty() {
            self.webhooks.wake();
        }
        Ok(())
    }

    async fn load_rule(&self, who: &Principal, id: &AlarmRuleId) -> Result<AlarmRule> {
        who.require_model_read()?;
        self.store
            .get_alarm_rule(who.tenant(), id)
            .await?
            .ok_or_else(|| Error::not_found("alarm rule", id))
    }

    /// The rule as shown, with how many of its model's devices it cannot evaluate.
    async fn view(&self, rule: AlarmRule) -> Result<AlarmRuleView> {
        let status = self
            .statuses(&rule.record.tenant_id, &rule.model_id, std::slice::from_ref(&rule))
            .await?
            .pop();
        Ok(rule.view(status))
    }

    /// The status of each of `rules` (all on `model`): one count of the model's devices, and,
    /// when a rule reads metadata keys, one read of the metadata that is not empty (a device with
    /// none lacks every key), however many rules there are.
    async fn statuses(&self, tenant: &TenantId, model: &ModelId, rules: &[AlarmRule]) -> Result<Vec<RuleStatus>> {
        if rules.is_empty() {
            return Ok(Vec::new());
        }
        let reading: Vec<&AlarmRule> = rules.iter().filter(|r| r.reads_metadata()).collect();
        let mut not_evaluated: HashMap<&AlarmRuleId, u64> = HashMap::new();
        let devices = if reading.is_empty() {
            let query = DeviceQuery {
                model: Some(model.clone()),
                ..DeviceQuery::default()
            };
            let one = PageRequest {
                page_no: 1,
                page_size: 1,
            };
            self.devices.list_devices(tenant, &query, one).await?.total
        } else {
            let (devices, metadata) = self.devices.model_device_metadata(tenant, model).await?;
            let without = devices.saturating_sub(metadata.len() as u64);
            for rule in &reading {
                let lacking = metadata.iter().filter(|m| !rule.evaluates(m)).count() as u64;
                not_evaluated.insert(&rule.id, without + lacking);
            }
            devices
        };
        Ok(rules
            .iter()
            .map(|rule| RuleStatus {
                devices,
                devices_not_evaluated: not_evaluated.get(&rule.id).copied().unwrap_or(0),
            })
            .collect())
    }

    async fn model_rules(&self, tenant: &TenantId, model: &ModelId) -> Result<Arc<ModelRules>> {
        let key = (tenant.clone(), model.clone());
        if let Some(rules) = self.rules.get(&key) {
            return Ok(rules);
        }
        let read_at = *self.lock_rules_generation();
        let rules = Arc::new(ModelRules::new(self.store.model_alarm_rules(tenant, model).await?));
        let generation = self.lock_rules_generation();
        if *generation == read_at {
            self.rules.put(key, rules.clone());
        }
        Ok(rules)
    }

    /// After a rule write is committed: the model's rules are read again.
    fn rules_changed(&self, tenant: &TenantId, model: &ModelId) {
        let mut generation = self.lock_rules_generation();
        *generation += 1;
        self.rules.remove(&(tenant.clone(), model.clone()));
    }

    fn lock_rules_generation(&self) -> std::sync::MutexGuard<'_, u64> {
        self.rules_generation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A model's rules as evaluations read them, each with the key of its alarms and states built
/// once, not for every message.
pub(super) struct ModelRules {
    rules: Vec<AlarmRule>,
    keys: Vec<String>,
}

impl ModelRules {
    fn new(rules: Vec<AlarmRule>) -> Self {
        let keys = rules.iter().map(|rule| Raiser::Rule(rule).key()).collect();
        ModelRules { rules, keys }
    }

    /// The enabled rules, each with its key.
    pub(super) fn enabled(&self) -> impl Iterator<Item = (&AlarmRule, &String)> {
        self.rules.iter().zip(&self.keys).filter(|(rule, _)| rule.enabled)
    }

    /// Whether `event` may change an alarm: a value on channel w, or of an attribute an
    /// enabled rule reads.
    pub(super) fn concern(&self, event: &DeviceEvent) -> bool {
        event.channel == Channel::W
            || self
                .enabled()
                .any(|(rule, _)| rule.attribute_code == event.attribute_code)
    }
}

impl AlarmRule {
    /// Whether `other` tests anything differently (its name, description or enabled flag aside).
    fn definition_changed(&self, other: &AlarmRule) -> bool {
        let (mut a, mut b) = (self.definition(), other.definition());
        a.description = None;
        b.description = None;
        serde_json::to_value(a).ok() != serde_json::to_value(b).ok() || self.attribute_code != other.attribute_code
    }
}

mod evaluation;
mod keeping;
mod operations;
mod states;
mod writer;

pub use evaluation::NO_DATA_SWEEP;
pub use keeping::{Concern, Evaluation};
