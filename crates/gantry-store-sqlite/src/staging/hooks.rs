//! Webhook events of ingest commits, kept on the staged rows themselves: a commit writes who
//! wants each event as `telemetry` (`hooks`, a bit per webhook slot) and, on the last row of a
//! submission, its `shadow` event (`shadow_hooks`, `shadow_id`, `shadow`), so that webhooks add
//! no row and no page to an ingest commit. The mover writes them into the main file's outbox in
//! the transaction that moves their events (`into_outbox`): from then on they wait there like
//! every other webhook event. An event reaches its webhooks once it is moved, within a round
//! (`mover::MOVE_EVERY`).

use std::iter::Peekable;
use std::slice::Iter;

use gantry_core::Result;
use gantry_core::webhook::{IngestHooks, WebhookEvent};
use gantry_store::events::{COLUMNS, EVENT_FIELDS, values_clause};
use gantry_store::sql::Sql;
use sqlx::AnyConnection;
use sqlx::any::AnyArguments;
use sqlx::query::Query;

use super::table::STAGING;

/// The staged row's webhook columns, after `COLUMNS`, in `bind_hooks`' order.
const HOOK_COLUMNS: &str = "hooks, shadow_hooks, shadow_id, shadow";

/// The INSERT of `rows` staged events (with their webhook columns when `hooked`), and the query
/// of the last number it gave.
pub(super) fn insert_text(rows: usize, hooked: bool) -> String {
    if hooked {
        format!(
            "INSERT INTO {STAGING} ({COLUMNS}, {HOOK_COLUMNS}) VALUES {}; SELECT last_insert_rowid()",
            values_clause(rows, EVENT_FIELDS + 4, true),
        )
    } else {
        format!(
            "INSERT INTO {STAGING} ({COLUMNS}) VALUES {}; SELECT last_insert_rowid()",
            values_clause(rows, EVENT_FIELDS, true),
        )
    }
}

/// `query` with the webhook columns of the commit's event at `index`: its telemetry bits, and
/// the shadow event that `shadows` (the commit's, in order) holds for it, if any.
pub(super) fn bind_hooks<'q, 'h: 'q>(
    query: Query<'q, sqlx::Any, AnyArguments<'q>>,
    hooks: &IngestHooks,
    index: usize,
    shadows: &mut Peekable<Iter<'h, (usize, WebhookEvent)>>,
) -> Query<'q, sqlx::Any, AnyArguments<'q>> {
    let query = query.bind(hooks.telemetry_of(index).0 as i64);
    match shadows.next_if(|(at, _)| *at == index) {
        Some((_, shadow)) => query
            .bind(shadow.pending.0 as i64)
            .bind(shadow.id.as_str())
            .bind(shadow.data.as_str()),
        None => query.bind(0_i64).bind(None::<&str>).bind(None::<&str>),
    }
}

/// The webhooks of the staged row's project that may take its webhook events: those that exist
/// when it moves and existed when it was stored. A webhook deleted meanwhile takes nothing, and
/// one created later in its slot is not given what was meant for the one before.
const LIVE: &str = "(SELECT COALESCE(SUM(1 << hook.slot), 0) FROM main.webhooks AS hook \
     WHERE hook.project_id = staged.project_id AND hook.created_time <= staged.created_time)";

/// A staged event as its `telemetry` webhook event's data: the event as the stream sends it
/// (`DeviceEvent`'s JSON, `correlationId` and `context` left out when absent).
const EVENT_JSON: &str = "json_remove(json_object(\
     'id', id, 'tenantId', tenant_id, 'projectId', project_id, 'modelId', model_id, \
     'deviceId', device_id, 'attributeCode', attribute_code, 'attributeType', attribute_type, \
     'attributeData', json(attribute_data), 'channel', channel, 'ingressTimeStamp', ingress_ts, \
     'deviceTimestamp', device_ts, 'correlationId', correlation_id, 'context', json(context), \
     'createdBy', created_by, 'createdTime', created_time, 'deleted', json('false')), \
     CASE WHEN correlation_id IS NULL THEN '$.correlationId' ELSE '$.none' END, \
     CASE WHEN context IS NULL THEN '$.context' ELSE '$.none' END)";

/// Writes the webhook events of the staged rows `staged` selects (a filter of the staging
/// table) into the main file's outbox, in their numbers' order: the telemetry events, then the
/// shadow events. Run in the transaction that moves the rows.
pub(super) async fn into_outbox(conn: &mut AnyConnection, staged: &Sql) -> Result<()> {
    let kinds = [
        ("hooks", "id", "'telemetry'", EVENT_JSON),
        ("shadow_hooks", "shadow_id", "'shadow'", "shadow"),
    ];
    for (bits, id, kind, data) in kinds {
        let mut insert = staged.prefixed(&format!(
            "INSERT INTO main.webhook_outbox (id, kind, data, project_id, device_id, time, pending) \
             SELECT hook_id, kind, data, project_id, device_id, created_time, pending FROM (\
             SELECT seq, {id} AS hook_id, {kind} AS kind, {data} AS data, project_id, device_id, created_time, \
             {bits} & {LIVE} AS pending FROM {STAGING} AS staged WHERE {bits} != 0 AND "
        ));
        insert.push(") WHERE pending != 0 ORDER BY seq");
        insert
            .query()
            .execute(&mut *conn)
            .await
            .map_err(gantry_store::error::db_error)?;
    }
    Ok(())
}
