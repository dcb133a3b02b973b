//! Series: one attribute's aggregated history on a device holding a reading a minute (a year's
//! worth in the full run) in the read scenario's store: the whole span at `interval=1d`
//! (answered from the hour rollups) and its last week at `interval=1h`, each at one connection.

use std::sync::Arc;

use anyhow::ensure;
use hyper::Method;

use super::{Ctx, Measurement, measure};
use crate::load::RequestFn;
use crate::scenarios::read::wire_time;
use crate::seed::{FIRST_DEVICE_TS, SERIES_ATTRIBUTE, SERIES_SPACING_MS};

pub const SCENARIO: &str = "series";
pub const SPAN_DAILY_VARIANT: &str = "series, whole span at 1d";
pub const WEEK_HOURLY_VARIANT: &str = "series, last week at 1h";

const WEEK_MS: i64 = 7 * 86_400_000;

/// `device` holds `events` readings of `SERIES_ATTRIBUTE`, `SERIES_SPACING_MS` apart from
/// `FIRST_DEVICE_TS`.
pub async fn run(ctx: &Ctx<'_>, device: &str, events: u64) -> anyhow::Result<Vec<Measurement>> {
    let end = FIRST_DEVICE_TS + events.saturating_sub(1) as i64 * SERIES_SPACING_MS;
    let week_start = (end - WEEK_MS + 1).max(FIRST_DEVICE_TS);
    let mut out = Vec::new();
    for (variant, start, interval) in [
        (SPAN_DAILY_VARIANT, FIRST_DEVICE_TS, "1d"),
        (WEEK_HOURLY_VARIANT, week_start, "1h"),
    ] {
        let path = format!(
            "/api/v1/devices/{device}/attributeCode/series?attributeCode={SERIES_ATTRIBUTE}&interval={interval}\
             &startDate={}&endDate={}",
            wire_time(start),
            wire_time(end)
        );
        // The probe checks the request is valid and that every reading is counted.
        let series = ctx.api.get(&path).await?;
        let points = series["points"].as_array().map_or(0, Vec::len);
        let counted: u64 = series["points"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["count"].as_u64())
            .sum();
        let expected = ((end - start) / SERIES_SPACING_MS + 1) as u64;
        ensure!(
            counted == expected,
            "{variant}: the series counts {counted} readings, the window holds {expected}"
        );
        let target = ctx.target.clone();
        let make: RequestFn = Arc::new(move |_, _| target.request(Method::GET, &path, None));
        let (mut m, _) = measure(ctx, SCENARIO, variant, 1, make).await?;
        m.note = Some(format!("{counted} readings, {points} points"));
        out.push(m);
    }
    Ok(out)
}
