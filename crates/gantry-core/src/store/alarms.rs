//! The alarms' part of storage: rules, alarms with their history, the state each rule keeps per
//! device, and the ways evaluation writes them (plans, keeps, locked steps).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::Result;
use crate::alarm::{Alarm, AlarmHistoryEntry, AlarmQuery, AlarmState, AlarmWrite, Transition};
use crate::alarm_rule::AlarmRule;
use crate::enums::Severity;
use crate::ids::{AlarmId, AlarmRuleId, DeviceId, ModelId, ProjectId, TenantId};
use crate::paging::{Page, PageRequest};
use crate::webhook::Audience;

/// A transition of a rule's (or device alarm's) state, computed from the state and the open
/// alarm as the store holds them (`alarm::step`).
pub type AlarmStep<'a> = dyn Fn(&AlarmState, Option<&Alarm>) -> Option<Transition> + Send + Sync + 'a;

/// One device's alarm transitions computed outside any transaction, from a snapshot
/// (`AlarmStore::alarm_snapshot`): each is written only over the state version it read
/// (`Transition::state.version`) and, for an alarm that was open, only while it is still open.
#[derive(Debug, Clone)]
pub struct AlarmPlan {
    pub tenant: TenantId,
    pub device: DeviceId,
    /// Per key (`Raiser::key`), its transition.
    pub steps: Vec<(String, Transition)>,
    pub webhooks: Audience,
}

/// A step of one device's rule (or device alarm) that raises, escalates, de-escalates and clears
/// nothing: it counts events into the open alarm (its count, value and times) or moves the
/// state's timers and remembered message ids. Computed like a plan's step, over the state version
/// it read (one before `after`'s), while the device's alarm writes wait (`AlarmService`); written with
/// the events it counts (`EventStore::commit_events_keeping`).
#[derive(Debug, Clone)]
pub struct AlarmKeep {
    pub device: DeviceId,
    pub key: String,
    /// What the store holds of the key once the keep is written: the state after the step, its
    /// `version` one past the one the step was computed over, and the alarm open then (counted
    /// into by the step, or left as it was). Shared with the evaluation, which holds it next.
    pub after: Arc<(AlarmState, Option<Alarm>)>,
    /// The messages the step remembered (`state.recent` less the state's before it), oldest
    /// first: a store may write these instead of all of `state.recent` and replay them.
    pub remembered: Vec<crate::alarm::MessageKey>,
}

/// An operator's change of an alarm, computed from the alarm as the store holds it: the alarm
/// after it and its history entry, or why it cannot be done.
pub type AlarmChange<'a> = dyn Fn(&Alarm) -> Result<(Alarm, AlarmHistoryEntry)> + Send + Sync + 'a;

/// Alarm rules, alarms with their history, and the state each rule keeps per device. Every
/// alarm write goes with its webhook events (`webhooks`), in its transaction.
#[async_trait]
pub trait AlarmStore: Send + Sync {
    async fn insert_alarm_rule(&self, rule: &AlarmRule) -> Result<()>;
    /// Stores everything but the id, model and creation fields; `NotFound` when missing.
    async fn update_alarm_rule(&self, rule: &AlarmRule) -> Result<()>;
    async fn get_alarm_rule(&self, tenant: &TenantId, id: &AlarmRuleId) -> Result<Option<AlarmRule>>;
    /// The model's rules, oldest first, then by id.
    async fn model_alarm_rules(&self, tenant: &TenantId, model: &ModelId) -> Result<Vec<AlarmRule>>;
    /// Soft-deletes the rule and forgets its states; `NotFound` when missing.
    async fn delete_alarm_rule(&self, tenant: &TenantId, id: &AlarmRuleId, by: &str, at: i64) -> Result<()>;
    /// The enabled rules with a `noDataSeconds`, of every tenant.
    async fn no_data_rules(&self) -> Result<Vec<AlarmRule>>;
    /// The devices whose state for `rule` had its last value before `before` (arrival time) and
    /// holds no no-data alarm.
    async fn silent_devices(&self, rule: &AlarmRule, before: i64) -> Result<Vec<DeviceId>>;
    /// Runs `step` over the state of `key` (`Raiser::key`) for `device` and its alarm not
    /// cleared, and writes what it returns in one transaction: the state only over the version
    /// it was computed from (else the step runs again over the newer one), a new alarm through
    /// the unique index of open alarms. Returns the alarms written.
    async fn apply_alarm_step(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        key: &str,
        step: &AlarmStep<'_>,
        webhooks: Audience,
    ) -> Result<Vec<AlarmWrite>>;
    /// The state and the open alarm of each of `keys` for `device`, read in one snapshot; a key
    /// with no stored state has the default one (version 0).
    async fn alarm_snapshot(&self, device: &DeviceId, keys: &[String]) -> Result<Vec<(AlarmState, Option<Alarm>)>>;
    /// Writes `plans` in one transaction, each wholly or not at all: a plan whose snapshot is
    /// out of date (a state version moved, an open alarm was cleared) writes nothing and is
    /// None, and its caller runs it through `apply_alarm_step`. Per plan, the alarms written.
    async fn commit_alarm_plans(&self, plans: Vec<AlarmPlan>) -> Result<Vec<Option<Vec<AlarmWrite>>>>;
    /// Runs `change` over the alarm and writes its result with its history entry; a cleared
    /// alarm's rule state is forgotten, so its condition starts over. `NotFound` when missing.
    async fn change_alarm(
        &self,
        tenant: &TenantId,
        id: &AlarmId,
        change: &AlarmChange<'_>,
        webhooks: &HashMap<ProjectId, Audience>,
    ) -> Result<(Alarm, AlarmHistoryEntry)>;
    /// Clears every alarm of the rule that is not cleared, by `by`, and forgets its states;
    /// returns them cleared.
    async fn clear_rule_alarms(
        &self,
        tenant: &TenantId,
        rule: &AlarmRuleId,
        by: &str,
        at: i64,
        webhooks: &HashMap<ProjectId, Audience>,
    ) -> Result<Vec<Alarm>>;
    async fn get_alarm(&self, tenant: &TenantId, id: &AlarmId) -> Result<Option<Alarm>>;
    async fn list_alarms(&self, tenant: &TenantId, query: &AlarmQuery, page: PageRequest) -> Result<Page<Alarm>>;
    /// Every transition of the alarm, oldest first.
    async fn alarm_history(&self, tenant: &TenantId, id: &AlarmId) -> Result<Vec<AlarmHistoryEntry>>;
    /// Alarms not cleared, by severity: of `project` (of its tenant) when given, else of every tenant.
    async fn count_open_alarms(&self, project: Option<(&TenantId, &ProjectId)>) -> Result<Vec<(Severity, u64)>>;
    /// Alarms not cleared of each of `devices` (of `project`) that has any, in one read.
    async fn count_open_device_alarms(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        devices: &[DeviceId],
    ) -> Result<Vec<(DeviceId, u64)>>;
    /// The device's alarms on `attribute` whose time raised overlaps `start..=end` (raised by
    /// `end`, not cleared before `start`), earliest raised first, at most `limit`.
    async fn device_alarm_periods(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        attribute: &str,
        (start, end): (i64, i64),
        limit: u32,
    ) -> Result<Vec<Alarm>>;
}
