//! The series endpoint over HTTP: every aggregate equals the one a client computes from the
//! event listing, and it answers bad parameters, other principals and other tenants as the
//! listing does.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::events::{at_plus8, event};
use crate::helpers::{TestApp, World, spawn_app, unique};

/// Epoch milliseconds of 2024-05-01T00:00:00.000+0800.
const BASE_MS: i64 = 1_714_492_800_000;
const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;

/// A wire time, `+` escaped for a query string.
fn q(ms: i64) -> String {
    at_plus8(ms).replace('+', "%2B")
}

fn series_path(world: &World, query: &str) -> String {
    format!(
        "/api/v1/devices/{}/attributeCode/series?{query}",
        world.device["id"].as_str().unwrap()
    )
}

/// Every event of the device, from its listing.
async fn listed(app: &TestApp, world: &World) -> Vec<Value> {
    let mut all = Vec::new();
    for page in 1.. {
        let listed = app
            .get(
                format!(
                    "/api/v1/devices/{}/events?pageSize=1000&pageNo={page}",
                    world.device["id"].as_str().unwrap()
                ),
                &app.admin,
            )
            .await
            .result();
        let results = listed["results"].as_array().unwrap().clone();
        if results.is_empty() {
            return all;
        }
        all.extend(results);
    }
    unreachable!()
}

/// The points a series over `events` must hold: (ts, count, numbers' count, sum, min, max,
/// first, last), first and last by the clock's time and then by id.
#[allow(clippy::type_complexity)]
fn expected(
    events: &[Value],
    code: &str,
    clock: &str,
    (start, end): (i64, i64),
    width: i64,
    offset: i64,
) -> Vec<(i64, u64, u64, Option<f64>, Option<f64>, Option<f64>, Value, Value)> {
    let mut buckets: BTreeMap<i64, Vec<&Value>> = BTreeMap::new();
    for e in events {
        let t = e[clock].as_i64().unwrap();
        if e["attributeCode"] == code && (start..=end).contains(&t) {
            buckets
                .entry((t + offset).div_euclid(width) * width - offset)
                .or_default()
                .push(e);
        }
    }
    buckets
        .into_iter()
        .map(|(ts, mut held)| {
            held.sort_by_key(|e| (e[clock].as_i64().unwrap(), e["id"].as_str().unwrap().to_owned()));
            let numbers: Vec<f64> = held
                .iter()
                .filter(|e| e["attributeType"] == "Integer" || e["attributeType"] == "Float")
                .map(|e| e["attributeData"].as_f64().unwrap())
                .collect();
            let fold = |pick: fn(f64, f64) -> f64| numbers.iter().copied().reduce(pick);
            (
                ts,
                held.len() as u64,
                numbers.len() as u64,
                (!numbers.is_empty()).then(|| numbers.iter().sum()),
                fold(f64::min),
                fold(f64::max),
                held[0]["attributeData"].clone(),
                held[held.len() - 1]["attributeData"].clone(),
            )
        })
        .collect()
}

async fn compare(app: &TestApp, world: &World, when: &str) {
    let events = listed(app, world).await;
    let ingress: Vec<i64> = events.iter().map(|e| e["ingressTimeStamp"].as_i64().unwrap()).collect();
    let (first_arrival, last_arrival) = (*ingress.iter().min().unwrap(), *ingress.iter().max().unwrap());
    let windows = [
        ("deviceTimestamp", (BASE_MS - HOUR - 17, BASE_MS + 2 * 24 * HOUR + 5)),
        ("deviceTimestamp", (BASE_MS, BASE_MS + 24 * HOUR - 1)),
        (
            "deviceTimestamp",
            (BASE_MS + 90 * MINUTE + 30_001, BASE_MS + 30 * HOUR + 59_999),
        ),
        (
            "deviceTimestamp",
            (BASE_MS + 7 * MINUTE + 1, BASE_MS + 7 * MINUTE + 50_000),
        ),
        ("ingressTimeStamp", (first_arrival - 1, last_arrival + 1)),
    ];
    let mut points = 0;
    for (clock, (start, end)) in windows {
        for (interval, width) in [("1m", MINUTE), ("15m", 15 * MINUTE), ("1h", HOUR), ("1d", 24 * HOUR)] {
            for (zone, offset) in [("%2B0000", 0), ("%2B0530", 330 * MINUTE), ("-0100", -HOUR)] {
                for code in ["temp", "count", "label"] {
                    let query = format!(
                        "attributeCode={code}&startDate={}&endDate={}&interval={interval}&timeZone={zone}\
                         &aggregates=avg,min,max,sum,count,first,last&filterBy={clock}",
                        q(start),
                        q(end)
                    );
                    let series = app.get(series_path(world, &query), &app.admin).await.result();
                    assert_eq!(series["attributeCode"], code);
                    assert_eq!(series["interval"], interval);
                    let what = format!("{when}: {query}");
                    let want = expected(&events, code, clock, (start, end), width, offset);
                    let got = series["points"].as_array().unwrap();
                    let starts: Vec<i64> = got.iter().map(|p| p["ts"].as_i64().unwrap()).collect();
                    assert_eq!(starts, want.iter().map(|w| w.0).collect::<Vec<_>>(), "{what}");
                    for (point, (ts, count, numbers, sum, min, max, first, last)) in got.iter().zip(want) {
                        let what = format!("{what} at {ts}");
                        assert_eq!(point["count"], count, "{what}");
                        assert_eq!(point["min"].as_f64(), min, "{what}");
                        assert_eq!(point["max"].as_f64(), max, "{what}");
                        assert_eq!((&point["first"], &point["last"]), (&first, &last), "{what}");
                        let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
                            (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                            (a, b) => a == b,
                        };
                        assert!(close(point["sum"].as_f64(), sum), "{what}: {point}");
                        let avg = sum.map(|s| s / numbers as f64);
                        assert!(close(point["avg"].as_f64(), avg), "{what}: {point}");
                        points += 1;
                    }
                }
            }
        }
    }
    assert!(points > 500, "{when}: {points} points compared");
}

/// Events sent over HTTP in no order of device time, some on minute and hour edges and some at
/// one instant, then some deleted: every series equals what a client computes from the listing,
/// while the events are staged and after the store has settled them.
#[tokio::test]
async fn series_equal_the_listed_events() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |below: i64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) % below as u64) as i64
    };
    let mut ids = Vec::new();
    for i in 0..240 {
        let t = match i % 4 {
            0 => BASE_MS + next(48) * HOUR,
            1 => BASE_MS + next(48 * 60) * MINUTE - 1,
            2 => BASE_MS + 7 * MINUTE + 20_000,
            _ => BASE_MS + next(48 * HOUR),
        };
        let (code, value, data_type) = match next(3) {
            0 => ("temp", json!((next(200_000) - 100_000) as f64 / 97.0), "Float"),
            1 => ("count", json!(next(1_000) - 500), "Integer"),
            _ => ("label", json!(format!("l{i}")), "String"),
        };
        let sent = app
            .post(
                "/api/v1/deviceEvents",
                &app.admin,
                event(&world.device, code, value, data_type, t),
            )
            .await
            .result();
        ids.push(sent["meta"]["id"].as_str().unwrap().to_owned());
    }
    for id in ids.iter().step_by(7) {
        app.delete(format!("/api/v1/deviceEvents/{id}"), &app.admin)
            .await
            .result_done();
    }
    compare(&app, &world, "as sent").await;
    // The embedded store moves staged events every few seconds.
    tokio::time::sleep(Duration::from_secs(7)).await;
    compare(&app, &world, "settled").await;
}

#[tokio::test]
async fn defaults_bad_parameters_and_scopes() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other = app.world().await;
    // no deviceTime: now, inside the default window (the last 24 hours)
    let mut sent = event(&world.device, "count", json!(5), "Integer", 0);
    sent.as_object_mut().unwrap().remove("deviceTime");
    app.post("/api/v1/deviceEvents", &app.admin, sent).await.result();
    let series = app
        .get(series_path(&world, "attributeCode=count"), &app.admin)
        .await
        .result();
    assert_eq!(series["interval"], "1h");
    let points = series["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{series}");
    let ts = points[0]["ts"].as_i64().unwrap();
    assert_eq!(
        points[0],
        json!({"ts": ts, "avg": 5.0, "min": 5.0, "max": 5.0, "count": 1})
    );
    assert_eq!(ts % HOUR, 0);
    let start = series["startDate"].as_str().unwrap();
    let end = series["endDate"].as_str().unwrap();
    assert!(start.ends_with("+0000") && end.ends_with("+0000"), "{series}");
    // a String attribute has no numbers; the window is written in the zone asked for
    app.post(
        "/api/v1/deviceEvents",
        &app.admin,
        event(&world.device, "label", json!("x"), "String", BASE_MS),
    )
    .await
    .result();
    let query = format!(
        "attributeCode=label&startDate={}&endDate={}&interval=1d&timeZone=%2B0800&aggregates=sum,count,last",
        q(BASE_MS - 1),
        q(BASE_MS + 1)
    );
    let series = app.get(series_path(&world, &query), &app.admin).await.result();
    assert_eq!(
        series,
        json!({"attributeCode": "label", "interval": "1d", "startDate": "2024-04-30T23:59:59.999+0800",
               "endDate": "2024-05-01T00:00:00.001+0800",
               "points": [{"ts": BASE_MS, "sum": null, "count": 1, "last": "x"}]})
    );

    let window = format!("startDate={}&endDate={}", q(BASE_MS), q(BASE_MS + HOUR));
    for (query, field) in [
        ("interval=1h".to_owned(), "attributeCode"),
        (format!("attributeCode=count&{window}&interval=2h"), "interval"),
        (
            format!("attributeCode=count&{window}&aggregates=avg,median"),
            "aggregates",
        ),
        (format!("attributeCode=count&{window}&timeZone=0800"), "timeZone"),
        (format!("attributeCode=count&{window}&timeZone=%2B2400"), "timeZone"),
        (format!("attributeCode=count&{window}&filterBy=whenever"), "filterBy"),
        ("attributeCode=count&startDate=yesterday".to_owned(), "startDate"),
        (
            format!(
                "attributeCode=count&startDate={}&endDate={}",
                q(BASE_MS),
                q(BASE_MS - 1)
            ),
            "endDate",
        ),
        (
            format!(
                "attributeCode=count&startDate={}&endDate={}&interval=1m",
                q(BASE_MS),
                q(BASE_MS + 10_000 * MINUTE)
            ),
            "interval",
        ),
        (format!("attributeCode=1bad&{window}"), "attributeCode"),
        // A well-formed code the model lacks (a typo) is no empty series.
        (format!("attributeCode=cuont&{window}"), "attributeCode"),
    ] {
        let message = app.get(series_path(&world, &query), &app.admin).await.error(400);
        assert!(message.starts_with(field), "{query}: {message}");
    }
    let most = format!(
        "attributeCode=count&startDate={}&endDate={}&interval=1m",
        q(BASE_MS),
        q(BASE_MS + 10_000 * MINUTE - 1)
    );
    app.get(series_path(&world, &most), &app.admin).await.result();

    // the principals of the event listing: the device itself and its project's application
    let path = series_path(&world, "attributeCode=count");
    app.get(&path, world.device["accessToken"].as_str().unwrap())
        .await
        .result();
    app.get(&path, world.project["applicationAccessToken"].as_str().unwrap())
        .await
        .result();
    app.get(&path, other.device["accessToken"].as_str().unwrap())
        .await
        .error(403);
    app.get(&path, other.project["applicationAccessToken"].as_str().unwrap())
        .await
        .error(403);
    app.get(&path, "not-a-token").await.error(401);
    app.call(reqwest::Method::GET, &path, None, None).await.error(401);
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("t")}))
        .await
        .result();
    app.get(&path, tenant["adminToken"].as_str().unwrap()).await.error(404);
    app.get(
        "/api/v1/devices/no-such-device/attributeCode/series?attributeCode=count",
        &app.admin,
    )
    .await
    .error(404);
}
