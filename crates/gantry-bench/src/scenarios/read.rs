//! Reads: one device and its shadow at many connections and at one, then a device's event
//! listing on a device holding many events in a store holding many more: the first page, a deep
//! page (OFFSET-based, so the server walks every row before it), both with and without a date
//! range, and the first page of one attribute's events.

use std::sync::Arc;

use hyper::Method;

use super::{Ctx, Measurement, measure};
use crate::load::RequestFn;
use crate::seed::{LISTED_ATTRIBUTE, device_ts};

pub const SCENARIO: &str = "read";
pub const SHADOW_VARIANT: &str = "GET /devices/{id}/shadows";
pub const DEVICE_VARIANT: &str = "GET /devices/{id}";
pub const FIRST_PAGE_VARIANT: &str = "events, first page";
/// The listings' page size (the API's default for /events).
const PAGE_SIZE: u64 = 100;
/// The deep page asked for, when the listing has that many pages.
const DEEP_PAGE: u64 = 1000;
/// Listings are measured at 1 connection (latency) and at this many (throughput). Not at 64: a
/// listing costs the server milliseconds of CPU, and 64 of them queued would measure the queue.
pub const LISTING_CONNECTIONS: usize = 8;

/// The devices to read: `devices` round-robin for device and shadow reads; `listed` holds
/// `listed_events` events seeded one second apart from `seed::FIRST_DEVICE_TS`.
pub async fn run(
    ctx: &Ctx<'_>,
    devices: &[String],
    listed: &str,
    listed_events: u64,
) -> anyhow::Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let device_paths: Arc<Vec<String>> = Arc::new(devices.iter().map(|id| format!("/api/v1/devices/{id}")).collect());
    let shadow_paths: Arc<Vec<String>> = Arc::new(
        devices
            .iter()
            .map(|id| format!("/api/v1/devices/{id}/shadows"))
            .collect(),
    );
    for connections in [ctx.connections, 1] {
        for (variant, paths) in [(DEVICE_VARIANT, &device_paths), (SHADOW_VARIANT, &shadow_paths)] {
            let make = round_robin(ctx, paths.clone(), connections);
            out.push(measure(ctx, SCENARIO, variant, connections, make).await?.0);
        }
    }

    for listing in listings(ctx, listed, listed_events).await? {
        for connections in [1, LISTING_CONNECTIONS.min(ctx.connections)] {
            let target = ctx.target.clone();
            let path = listing.path.clone();
            let make: RequestFn = Arc::new(move |_, _| target.request(Method::GET, &path, None));
            let (mut m, _) = measure(ctx, SCENARIO, &listing.name, connections, make).await?;
            m.note = Some(listing.note.clone());
            out.push(m);
        }
    }
    Ok(out)
}

fn round_robin(ctx: &Ctx<'_>, paths: Arc<Vec<String>>, connections: usize) -> RequestFn {
    let target = ctx.target.clone();
    Arc::new(move |worker, seq| {
        // Workers start at different devices and stride by the worker count, so concurrent
        // requests go to different devices.
        let i = (seq as usize * connections + worker) % paths.len();
        target.request(Method::GET, &paths[i], None)
    })
}

struct Listing {
    name: String,
    path: String,
    note: String,
}

/// The listing variants, each probed once: the probe checks the request is valid and tells how
/// many rows the listing holds (its `totalResults`), which picks the deep page.
async fn listings(ctx: &Ctx<'_>, listed: &str, listed_events: u64) -> anyhow::Result<Vec<Listing>> {
    let events = format!("/api/v1/devices/{listed}/events");
    // The middle quarter of the device's time span.
    let range = format!(
        "startDate={}&endDate={}",
        wire_time(device_ts(listed_events * 3 / 8)),
        wire_time(device_ts(listed_events * 5 / 8))
    );
    let mut out = Vec::new();
    for (name, base, query) in [
        (FIRST_PAGE_VARIANT, events.clone(), String::new()),
        ("events, deep page", events.clone(), String::new()),
        ("events, first page, date range", events.clone(), range.clone()),
        ("events, deep page, date range", events.clone(), range.clone()),
        (
            "attributeCode, first page",
            format!("/api/v1/devices/{listed}/attributeCode"),
            format!("attributeCode={LISTED_ATTRIBUTE}"),
        ),
    ] {
        let probe = join(&base, &query);
        let total = ctx.api.get(&probe).await?["totalResults"].as_u64().unwrap_or(0);
        let (path, note) = if name.contains("deep page") {
            let page = deep_page(total, PAGE_SIZE);
            (
                join(
                    &base,
                    &join_query(&query, &format!("pageNo={page}&pageSize={PAGE_SIZE}")),
                ),
                format!("{total} rows match; pageNo {page} (OFFSET {})", (page - 1) * PAGE_SIZE),
            )
        } else {
            (probe, format!("{total} rows match"))
        };
        out.push(Listing {
            name: name.to_owned(),
            path,
            note,
        });
    }
    Ok(out)
}

/// Page 1000 of 100, or the last page when the listing is shorter.
pub fn deep_page(total: u64, page_size: u64) -> u64 {
    total.div_ceil(page_size).clamp(1, DEEP_PAGE)
}

/// The API's time format with `+` escaped for a query string.
pub fn wire_time(ms: i64) -> String {
    gantry_core::time::format_timestamp(ms).replace('+', "%2B")
}

fn join_query(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
        _ => format!("{a}&{b}"),
    }
}

fn join(path: &str, query: &str) -> String {
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_pages() {
        assert_eq!(deep_page(1_000_000, 100), 1000);
        assert_eq!(deep_page(25_000, 100), 250);
        assert_eq!(deep_page(25_001, 100), 251);
        assert_eq!(deep_page(0, 100), 1);
    }

    #[test]
    fn times_are_escaped_for_queries() {
        assert_eq!(wire_time(1_704_067_200_000), "2024-01-01T00:00:00.000%2B0000");
        assert_eq!(join_query("a=1", "b=2"), "a=1&b=2");
        assert_eq!(join("/x", ""), "/x");
        assert_eq!(join("/x", "a=1"), "/x?a=1");
    }
}
