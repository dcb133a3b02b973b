//! What callers do with alarms: list, read, acknowledge, clear, comment and read the history.
//! Administrators and the project's applications read and act; a device token reads its own
//! device's alarms.

use super::*;

impl AlarmService {
    /// A project's alarms, newest `updatedTime` first by default. A device token lists only with
    /// `deviceId` set to its own device.
    pub async fn list_alarms(
        &self,
        who: &Principal,
        project: &ProjectId,
        filter: AlarmFilter,
        page: PageRequest,
    ) -> Result<Page<Alarm>> {
        let device = match filter.device_id.as_deref() {
            Some(id) => {
                let device = self
                    .catalog
                    .load_device(who.tenant(), &DeviceId::from_string(id))
                    .await?;
                who.require_device_read(&device.project_id, &device.id)?;
                if device.project_id != *project {
                    return Err(Error::invalid(
                        "deviceId",
                        format!("device {id} is not in project {project}"),
                    ));
                }
                Some(device.id.clone())
            }
            None => {
                self.catalog.get_project(who, project).await?;
                None
            }
        };
        let query = parse_query(project, device, filter)?;
        self.store.list_alarms(who.tenant(), &query, page).await
    }

    /// Open alarms (not CLEARED) of each of a project's `devices` that has any: one read for a
    /// page of a device listing, whatever its size.
    pub async fn open_by_device(
        &self,
        who: &Principal,
        project: &ProjectId,
        devices: &[DeviceId],
    ) -> Result<HashMap<DeviceId, u64>> {
        who.require_project(project)?;
        let counts = self
            .store
            .count_open_device_alarms(who.tenant(), project, devices)
            .await?;
        Ok(counts.into_iter().collect())
    }

    /// A device's alarms on `attribute` raised by `end` and not cleared before `start` (epoch
    /// ms), earliest first, at most `MAX_PERIODS`: the periods a chart of that window marks.
    pub async fn alarm_periods(
        &self,
        who: &Principal,
        device: &DeviceId,
        attribute: &str,
        window: (i64, i64),
    ) -> Result<Vec<Alarm>> {
        let device = self.catalog.load_device(who.tenant(), device).await?;
        who.require_device_read(&device.project_id, &device.id)?;
        self.store
            .device_alarm_periods(who.tenant(), &device.id, attribute, window, MAX_PERIODS)
            .await
    }

    pub async fn get_alarm(&self, who: &Principal, id: &AlarmId) -> Result<Alarm> {
        let alarm = self
            .store
            .get_alarm(who.tenant(), id)
            .await?
            .ok_or_else(|| Error::not_found("alarm", id))?;
        who.require_device_read(&alarm.project_id, &alarm.device_id)?;
        Ok(alarm)
    }

    /// Every transition of the alarm, oldest first.
    pub async fn history(&self, who: &Principal, id: &AlarmId) -> Result<Vec<AlarmHistoryEntry>> {
        let alarm = self.get_alarm(who, id).await?;
        self.store.alarm_history(who.tenant(), &alarm.id).await
    }

    /// ACTIVE to ACKNOWLEDGED; 409 when it is acknowledged or cleared already.
    pub async fn acknowledge(&self, who: &Principal, id: &AlarmId) -> Result<Alarm> {
        let by = who.actor();
        let change = |alarm: &Alarm| {
            match alarm.status {
                AlarmStatus::Active => {}
                AlarmStatus::Acknowledged => {
                    return Err(Error::Conflict(format!("alarm {id} is acknowledged already")));
                }
                AlarmStatus::Cleared => return Err(Error::Conflict(format!("alarm {id} is cleared"))),
            }
            let mut alarm = alarm.clone();
            let now = now_ms();
            alarm.status = AlarmStatus::Acknowledged;
            alarm.acknowledged_by = Some(by.clone());
            alarm.acknowledged_time = Some(now);
            alarm.updated_time = now;
            let entry = AlarmHistoryEntry::of(&alarm, AlarmTransition::Acknowledged, &by, now, None);
            Ok((alarm, entry))
        };
        Ok(self.change(who, id, &change).await?.0)
    }

    /// Clears an alarm that is not cleared (409 otherwise). A rule's condition starts over: if it
    /// still holds, the rule raises a new alarm (after its `forSeconds`).
    pub async fn clear(&self, who: &Principal, id: &AlarmId) -> Result<Alarm> {
        let by = who.actor();
        let change = |alarm: &Alarm| {
            if alarm.status == AlarmStatus::Cleared {
                return Err(Error::Conflict(format!("alarm {id} is cleared already")));
            }
            let mut alarm = alarm.clone();
            let now = now_ms();
            alarm.status = AlarmStatus::Cleared;
            alarm.cleared_by = Some(by.clone());
            alarm.cleared_time = Some(now);
            alarm.updated_time = now;
            let entry = AlarmHistoryEntry::of(&alarm, AlarmTransition::Cleared, &by, now, None);
            Ok((alarm, entry))
        };
        Ok(self.change(who, id, &change).await?.0)
    }

    /// Adds a comment to the alarm's history (cleared alarms too).
    pub async fn comment(&self, who: &Principal, id: &AlarmId, text: Option<String>) -> Result<AlarmHistoryEntry> {
        let text = text.ok_or_else(|| Error::invalid("text", "is required"))?;
        if text.trim().is_empty() {
            return Err(Error::invalid("text", "must not be empty"));
        }
        if text.chars().count() > MAX_COMMENT {
            return Err(Error::invalid(
                "text",
                format!("must be at most {MAX_COMMENT} characters"),
            ));
        }
        let by = who.actor();
        let change = |alarm: &Alarm| {
            let mut alarm = alarm.clone();
            let now = now_ms();
            alarm.updated_time = now;
            let entry = AlarmHistoryEntry::of(&alarm, AlarmTransition::Commented, &by, now, Some(text.clone()));
            Ok((alarm, entry))
        };
        Ok(self.change(who, id, &change).await?.1)
    }

    /// Checks that `who` may act on the alarm, then runs `change` in the store and announces it.
    async fn change(
        &self,
        who: &Principal,
        id: &AlarmId,
        change: &crate::store::AlarmChange<'_>,
    ) -> Result<(Alarm, AlarmHistoryEntry)> {
        let alarm = self.get_alarm(who, id).await?;
        who.require_alarm_act(&alarm.project_id)?;
        let audience = self.webhooks.subscribers(&alarm.project_id, StreamType::Alarm).await?;
        let webhooks = HashMap::from([(alarm.project_id.clone(), audience)]);
        let _held = self.locks.hold(&alarm.device_id).await;
        let (changed, entry) = self.store.change_alarm(who.tenant(), id, change, &webhooks).await?;
        self.states.forget(Some(&changed.device_id), &changed.alarm_key);
        self.announce(&changed, entry.kind);
        if !audience.is_empty() {
            self.webhooks.wake();
        }
        Ok((changed, entry))
    }
}

fn parse_query(project: &ProjectId, device: Option<DeviceId>, filter: AlarmFilter) -> Result<AlarmQuery> {
    fn list<T>(text: Option<&str>, field: &str, parse: fn(&str, &str) -> Result<T>) -> Result<Vec<T>> {
        text.filter(|t| !t.trim().is_empty())
            .map(|t| t.split(',').map(|item| parse(item.trim(), field)).collect())
            .transpose()
            .map(Option::unwrap_or_default)
    }
    let time = |field: &str, text: Option<&str>| text.map(|t| parse_timestamp(field, t)).transpose();
    let start = time("startDate", filter.start_date.as_deref())?;
    let end = time("endDate", filter.end_date.as_deref())?;
    if let (Some(start), Some(end)) = (start, end)
        && start > end
    {
        return Err(Error::invalid("endDate", "is before startDate"));
    }
    Ok(AlarmQuery {
        project: project.clone(),
        device,
        statuses: list(filter.status.as_deref(), "status", AlarmStatus::parse_field)?,
        severities: list(
            filter.severity.as_deref(),
            "severity",
            crate::enums::Severity::parse_field,
        )?,
        start,
        end,
        sort_by: filter
            .sort_by
            .as_deref()
            .map(AlarmSort::parse)
            .transpose()?
            .unwrap_or(AlarmSort::UpdatedTime),
        sort_order: filter
            .sort_order
            .as_deref()
            .map(|o| SortOrder::parse_field(o, "sortOrder"))
            .transpose()?
            .unwrap_or(SortOrder::Desc),
    })
}
