//! Aggregated history of a device's attribute: `/api/v1/devices/{id}/attributeCode/series`.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use gantry_core::ids::DeviceId;
use gantry_core::series::{Series, SeriesFilter};
use serde::Deserialize;

use crate::AppState;
use crate::envelope::{Envelope, ok};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppQuery, Auth};

pub fn routes() -> Router<AppState> {
    Router::new().route("/api/v1/devices/{deviceId}/attributeCode/series", get(series))
}

/// Parameters of a series.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct SeriesParams {
    /// The attribute code (required).
    #[param(required = true)]
    attribute_code: Option<String>,
    /// Inclusive start, yyyy-MM-dd'T'HH:mm:ss.SSS+HHmm (write + as %2B); default 24 hours
    /// before endDate.
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}$")]
    start_date: Option<String>,
    /// Inclusive end, same format; default now.
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}$")]
    end_date: Option<String>,
    /// The buckets' width (default 1h). The window may span at most 10,000 buckets.
    #[param(schema_with = crate::param_schemas::series_interval)]
    interval: Option<String>,
    /// Comma list of avg, min, max, sum, count, first, last (default avg,min,max,count).
    #[param(pattern = r"^(avg|min|max|sum|count|first|last)(,(avg|min|max|sum|count|first|last))*$")]
    aggregates: Option<String>,
    /// deviceTimestamp (default) or ingressTimeStamp: which time the window and the buckets go
    /// by. By arrival time the events themselves are summed up (no rollups are kept for that
    /// clock), which takes longer over long windows.
    #[param(schema_with = crate::param_schemas::filter_by)]
    filter_by: Option<String>,
    /// The zone whose clock the buckets follow, +HHmm or -HHmm (write + as %2B; default +0000):
    /// a day starts at its midnight.
    #[param(pattern = r"^[+-][0-9]{4}$")]
    time_zone: Option<String>,
}

/// A series as answered.
#[derive(utoipa::ToSchema)]
#[schema(as = Series)]
#[allow(dead_code)]
struct SeriesSchema {
    attribute_code: String,
    /// The interval asked for.
    interval: String,
    /// The window, in the request's time zone.
    start_date: String,
    end_date: String,
    /// One per bucket holding at least one event, oldest first.
    points: Vec<PointSchema>,
}

/// One bucket: `ts` and the aggregates asked for.
#[derive(utoipa::ToSchema)]
#[schema(as = SeriesPoint)]
#[allow(dead_code)]
struct PointSchema {
    /// The bucket's start, epoch milliseconds.
    ts: i64,
    /// Mean of the bucket's Integer and Float values; null when it holds none (so for min, max
    /// and sum).
    avg: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    sum: Option<f64>,
    /// Events in the bucket, of every type.
    count: Option<u64>,
    /// The value of the bucket's first event by its clock (ties: the one that arrived first).
    #[schema(value_type = serde_json::Value)]
    first: Option<serde_json::Value>,
    /// The value of its last event (ties: the one that arrived last).
    #[schema(value_type = serde_json::Value)]
    last: Option<serde_json::Value>,
}

/// Sums up one attribute's events of a device per bucket of `interval`: one point per bucket
/// holding events, `ts` its start, oldest first. avg, min, max and sum are over the Integer and
/// Float events (null in a bucket with none); count, first and last over every event. Deleted
/// events are not counted. Exact: answered from the minute and hour rollups kept as events are
/// stored, and the events themselves at the window's edges.
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}/attributeCode/series", operation_id = "getAttributeSeries", tag = "Device events",
    params(("deviceId" = String, Path), SeriesParams),
    responses((status = 200, body = Envelope<SeriesSchema>),
              (status = 400, description = "a parameter is invalid, or the window spans more than 10,000 buckets (40000)", body = ErrorBody),
              (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getAttributeSeries", skip_all, fields(device = %id))]
pub async fn series(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<SeriesParams>,
) -> ApiResult<Json<Envelope<Series>>> {
    let filter = SeriesFilter {
        attribute_code: q.attribute_code,
        start_date: q.start_date,
        end_date: q.end_date,
        interval: q.interval,
        aggregates: q.aggregates,
        filter_by: q.filter_by,
        time_zone: q.time_zone,
    };
    Ok(ok(s
        .services
        .telemetry
        .series(&who, &DeviceId::from_string(id), filter)
        .await?))
}
