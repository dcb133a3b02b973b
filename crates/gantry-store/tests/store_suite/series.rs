//! Series from the kept rollups against the raw events: `EventStore::series`.

use super::*;

/// The buckets of `query` computed from `events` (the raw events a store holds), as a series
/// must answer them: first and last by the clock's time, then by id.
pub(crate) fn series_from_raw(events: &[DeviceEvent], query: &SeriesQuery) -> Vec<Bucket> {
    let time = |e: &DeviceEvent| match query.clock {
        TimeField::Device => e.device_timestamp,
        TimeField::Ingress => e.ingress_time_stamp,
    };
    let mut buckets: BTreeMap<i64, Vec<&DeviceEvent>> = BTreeMap::new();
    for e in events {
        let t = time(e);
        if e.device_id == query.device
            && e.attribute_code == query.attribute_code
            && (query.start..=query.end).contains(&t)
        {
            buckets.entry(query.bucket_of(t)).or_default().push(e);
        }
    }
    buckets
        .into_iter()
        .map(|(start, mut held)| {
            held.sort_by(|a, b| (time(a), a.id.as_str()).cmp(&(time(b), b.id.as_str())));
            let numbers: Vec<f64> = held
                .iter()
                .filter(|e| matches!(e.attribute_type, DataType::Integer | DataType::Float))
                .map(|e| e.attribute_data.as_f64().unwrap())
                .collect();
            let fold = |pick: fn(f64, f64) -> f64| numbers.iter().copied().reduce(pick);
            Bucket {
                start,
                events: held.len() as u64,
                numbers: numbers.len() as u64,
                sum: (!numbers.is_empty()).then(|| numbers.iter().sum()),
                min: fold(f64::min),
                max: fold(f64::max),
                first: query.first_last.then(|| held[0].attribute_data.clone()),
                last: query.first_last.then(|| held[held.len() - 1].attribute_data.clone()),
            }
        })
        .collect()
}

/// Asserts that every query's series equals the one computed from `events`, exactly but for sums
/// (and so averages), whose last bits depend on the order of addition; returns how many points
/// were compared.
pub(crate) async fn assert_series_match(
    store: &SqlStore,
    queries: &[SeriesQuery],
    events: &[DeviceEvent],
    when: &str,
) -> usize {
    let mut points = 0;
    for query in queries {
        let what = format!(
            "{when}: {:?} {} {}..={} {} {:+}",
            query.clock,
            query.attribute_code,
            query.start,
            query.end,
            query.interval.as_str(),
            query.offset_ms
        );
        let expected = series_from_raw(events, query);
        let got = store.series(query).await.unwrap();
        let starts = |b: &[Bucket]| b.iter().map(|b| b.start).collect::<Vec<_>>();
        assert_eq!(starts(&got), starts(&expected), "{what}");
        for (got, expected) in got.iter().zip(&expected) {
            let what = format!("{what}, bucket {}", got.start);
            let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                (a, b) => a == b,
            };
            assert!(
                close(got.sum, expected.sum),
                "{what}: sum {:?} {:?}",
                got.sum,
                expected.sum
            );
            assert!(close(got.avg(), expected.avg()), "{what}: avg");
            let exact = |b: &Bucket| (b.events, b.numbers, b.min, b.max, b.first.clone(), b.last.clone());
            assert_eq!(exact(got), exact(expected), "{what}");
            points += 1;
        }
    }
    points
}

/// Every aggregate of the series a store answers equals the one computed from the raw events:
/// exactly, but for sums (and so averages), whose last bits depend on the order of addition.
/// Events come late (older device times after newer ones), some on minute and hour edges and
/// before 1970, others are deleted by id and by retention, and windows start and end off the
/// edges, in zones of whole hours and of half hours, by device and by arrival time. On SQLite
/// the series are read with events staged, moved, and both.
pub(crate) async fn series_match_the_raw_events(store: SqlStore) {
    let tenant = new_tenant(&store, "series").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let other = new_device(&store, &tenant, "e", &project, &model).await;
    let (minute, hour, day) = (60_000_i64, 3_600_000_i64, 86_400_000_i64);
    let now = chrono_now();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: i64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) % below as u64) as i64
    };
    // Over three days from a day before 1970; arrival times over a day of their own.
    let mut events = Vec::new();
    for i in 0..2_400 {
        let device_ts = match i % 6 {
            0 => (next(72) - 24) * hour,
            1 => (next(72 * 60) - 24 * 60) * minute - 1,
            2 if i > 0 => events.last().map_or(0, |e: &DeviceEvent| e.device_timestamp),
            _ => next(3 * day) - day,
        };
        let (code, data_type, value) = match next(4) {
            0 => (
                "temp",
                DataType::Float,
                json!((next(2_000_000) - 1_000_000) as f64 / 997.0),
            ),
            1 => ("temp", DataType::Float, json!(next(100) as f64 / 10.0)),
            2 => ("load", DataType::Integer, json!(next(1_000) - 500)),
            _ if i % 2 == 0 => ("temp", DataType::String, json!(format!("s{i}"))),
            _ => ("state", DataType::Boolean, json!(i % 3 == 0)),
        };
        let id = if i % 9 == 0 {
            EventId::lower_bound_at(now - 10 * day + i)
                .as_str()
                .replace("-8000-000000000000", &format!("-8000-{i:012}"))
        } else {
            EventId::generate().as_str().to_owned()
        };
        let mut event = event_at(&device, EventId::from_string(id), code, value, device_ts);
        event.attribute_type = data_type;
        event.ingress_time_stamp = 1_000 * day + next(day);
        events.push(event);
    }
    let (first_part, late_part) = events.split_at(1_700);
    let (first_part, late_part) = (first_part.to_vec(), late_part.to_vec());

    let all_aggregates = Aggregates::parse("avg,min,max,sum,count,first,last").unwrap();
    let mut queries = Vec::new();
    let intervals = [
        Interval::Minute,
        Interval::FiveMinutes,
        Interval::FifteenMinutes,
        Interval::Hour,
        Interval::SixHours,
        Interval::Day,
    ];
    let offsets = [0, 2 * hour, -hour, 5 * hour + 30 * minute, -(9 * hour + 45 * minute)];
    let span = (-day - 1, 2 * day + 7);
    for interval in intervals {
        for offset in offsets {
            // the whole span, one aligned to hours, one off every edge
            for window in [span, (-2 * hour, 20 * hour - 1), (-hour - 12_345, 30 * hour + 777)] {
                queries.push((TimeField::Device, "temp", window, interval, offset));
            }
        }
    }
    for _ in 0..120 {
        let start = next(3 * day + 2 * hour) - day - hour;
        let length = [next(minute), next(hour), next(7 * hour), next(3 * day)][next(4) as usize];
        let interval = intervals[next(6) as usize];
        let offset = offsets[next(5) as usize];
        let code = ["temp", "load", "state"][next(3) as usize];
        let clock = if next(5) == 0 {
            TimeField::Ingress
        } else {
            TimeField::Device
        };
        let shift = if clock == TimeField::Ingress {
            1_000 * day + day
        } else {
            0
        };
        queries.push((clock, code, (start + shift, start + shift + length), interval, offset));
    }
    let queries: Vec<SeriesQuery> = queries
        .into_iter()
        .enumerate()
        .filter_map(|(i, (clock, code, window, interval, offset))| {
            let aggregates = if i % 4 == 3 {
                Aggregates::default()
            } else {
                all_aggregates.clone()
            };
            SeriesQuery::new(
                device.id.clone(),
                code.to_owned(),
                clock,
                window,
                interval,
                offset,
                &aggregates,
            )
            .ok()
        })
        .collect();
    assert!(queries.len() > 200, "{} queries within the bucket limit", queries.len());

    let check = |events: Vec<DeviceEvent>, when: &'static str| {
        let (store, queries) = (store.clone(), queries.clone());
        async move {
            let points = assert_series_match(&store, &queries, &events, when).await;
            assert!(points > 2_000, "{when}: {points} points compared");
        }
    };

    append_beside(&store, &first_part, &other, 50).await;
    let mut held = first_part.clone();
    check(held.clone(), "as committed").await;
    // Deletes before the move (SQLite) or the fold (PostgreSQL).
    for _ in 0..20 {
        let id = held[next(held.len() as i64) as usize].id.clone();
        assert!(store.delete_event(&tenant, &id).await.unwrap());
        held.retain(|e| e.id != id);
    }
    check(held.clone(), "deleted as committed").await;
    store.catch_up().await.unwrap();
    check(held.clone(), "moved").await;

    // Deletes by id take away some buckets' first, last, least and greatest; retention the events
    // stored long ago.
    let mut gone = Vec::new();
    for _ in 0..150 {
        gone.push(held[next(held.len() as i64) as usize].id.clone());
    }
    for id in &gone {
        let existed = held.iter().any(|e| &e.id == id);
        assert_eq!(store.delete_event(&tenant, id).await.unwrap(), existed);
        held.retain(|e| &e.id != id);
    }
    let cutoff = EventId::lower_bound_at(now - 5 * day);
    let old = held.iter().filter(|e| e.id.as_str() < cutoff.as_str()).count();
    assert!(old > 100, "{old} old events");
    let mut deleted = 0;
    while let n @ 1.. = store.delete_events_before(now - 5 * day, 70).await.unwrap() {
        deleted += n;
    }
    assert_eq!(deleted, old as u64);
    held.retain(|e| e.id.as_str() >= cutoff.as_str());
    check(held.clone(), "after deletes").await;

    // Late events land in minutes and hours kept already; some are deleted while staged.
    append_beside(&store, &late_part, &other, 40).await;
    held.extend(late_part.iter().cloned());
    check(held.clone(), "late events").await;
    for e in late_part.iter().step_by(17) {
        assert!(store.delete_event(&tenant, &e.id).await.unwrap());
        held.retain(|h| h.id != e.id);
    }
    store.catch_up().await.unwrap();
    check(held.clone(), "late events, moved").await;
}

/// Series read the same while the rollups are folded (PostgreSQL's folds, SQLite's moves) beside
/// arriving batches, some of them late (arrived before the events folded already, with old device
/// times): after each round of concurrent appends and folds, every series equals the raw events.
pub(crate) async fn series_hold_while_rollups_fold(store: SqlStore) {
    let tenant = new_tenant(&store, "folds").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let (minute, hour) = (60_000_i64, 3_600_000_i64);
    // Arriving ahead of the clock, where no background fold reaches: only `catch_up` folds
    // them.
    let base = (chrono_now() + 24 * hour) / hour * hour;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |below: i64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as i64
    };
    let aggregates = Aggregates::parse("avg,min,max,sum,count,first,last").unwrap();
    let queries: Vec<SeriesQuery> = [Interval::Minute, Interval::Hour, Interval::SixHours, Interval::Day]
        .into_iter()
        .flat_map(|interval| [0, 5 * hour + 30 * minute].map(move |offset| (interval, offset)))
        .map(|(interval, offset)| {
            let window = (base - 3 * hour - 1, base + 5 * hour + 12_345);
            SeriesQuery::new(
                device.id.clone(),
                "temp".to_owned(),
                TimeField::Device,
                window,
                interval,
                offset,
                &aggregates,
            )
            .unwrap()
        })
        .collect();
    let mut held = Vec::new();
    for round in 0..12 {
        let now = base + round * 25 * minute;
        // The two writers' times interleave and move on a minute every four events, so that
        // folds keep moving the mark past minutes a writer is still writing into; every tenth
        // event arrived long ago (late) with an old device time.
        let batch: Vec<DeviceEvent> = (0..200)
            .map(|i| {
                let (part, n) = (i / 100, i % 100);
                let ts = if i % 10 == 0 {
                    now - next(2 * hour)
                } else {
                    now + (n * 2 + part) * 7_500 + next(7_500)
                };
                let mut e = event_at(
                    &device,
                    EventId::generate(),
                    "temp",
                    json!(next(10_000) as f64 / 8.0),
                    ts,
                );
                if i % 10 != 0 {
                    e.ingress_time_stamp = ts;
                }
                e
            })
            .collect();
        // Two writers of small batches, and folds one after the other until they are done.
        let appending: Vec<_> = batch
            .chunks(100)
            .map(|part| {
                let (store, part) = (store.clone(), part.to_vec());
                tokio::spawn(async move {
                    for chunk in part.chunks(4) {
                        store.append_events(chunk).await.unwrap();
                    }
                })
            })
            .collect();
        let done = Arc::new(AtomicBool::new(false));
        let folding = {
            let (store, done) = (store.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    store.catch_up().await.unwrap();
                }
            })
        };
        for task in appending {
            task.await.unwrap();
        }
        done.store(true, Ordering::Relaxed);
        folding.await.unwrap();
        held.extend(batch);
        let points = assert_series_match(&store, &queries, &held, &format!("round {round}")).await;
        assert!(points >= 8, "round {round}: {points} points compared");
    }
    // Deletes recompute folded hours and unfolded minutes alike.
    for _ in 0..30 {
        let id = held[next(held.len() as i64) as usize].id.clone();
        assert!(store.delete_event(&tenant, &id).await.unwrap());
        held.retain(|e| e.id != id);
    }
    assert_series_match(&store, &queries, &held, "deleted").await;
    store.catch_up().await.unwrap();
    let points = assert_series_match(&store, &queries, &held, "folded").await;
    assert!(points > 100, "folded: {points} points compared");
}
