//! Aggregated history of one attribute of a device: the request as parsed (interval, aggregates,
//! time zone, window) and the buckets a store answers with. A bucket of interval `I` in a time
//! zone `+HHmm` starts where the local clock reads a multiple of `I` since the epoch; every
//! offset is a whole number of minutes, so every minute lies in one bucket of any interval.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::ids::DeviceId;
use crate::query::TimeField;
use crate::{Error, Result};

/// The most buckets one request may span.
pub const MAX_BUCKETS: i64 = 10_000;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

/// The width of a series' buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    Minute,
    FiveMinutes,
    FifteenMinutes,
    Hour,
    SixHours,
    Day,
}

impl Interval {
    pub const NAMES: &'static [&'static str] = &["1m", "5m", "15m", "1h", "6h", "1d"];

    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "1m" => Ok(Self::Minute),
            "5m" => Ok(Self::FiveMinutes),
            "15m" => Ok(Self::FifteenMinutes),
            "1h" => Ok(Self::Hour),
            "6h" => Ok(Self::SixHours),
            "1d" => Ok(Self::Day),
            _ => Err(Error::invalid(
                "interval",
                format!("`{text}` is not one of {}", Self::NAMES.join(", ")),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minute => "1m",
            Self::FiveMinutes => "5m",
            Self::FifteenMinutes => "15m",
            Self::Hour => "1h",
            Self::SixHours => "6h",
            Self::Day => "1d",
        }
    }

    /// The width in milliseconds.
    pub fn ms(self) -> i64 {
        match self {
            Self::Minute => MINUTE_MS,
            Self::FiveMinutes => 5 * MINUTE_MS,
            Self::FifteenMinutes => 15 * MINUTE_MS,
            Self::Hour => HOUR_MS,
            Self::SixHours => 6 * HOUR_MS,
            Self::Day => 24 * HOUR_MS,
        }
    }
}

/// One aggregate a point may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Aggregate {
    Avg,
    Min,
    Max,
    Sum,
    Count,
    First,
    Last,
}

impl Aggregate {
    pub const ALL: [Aggregate; 7] = [
        Self::Avg,
        Self::Min,
        Self::Max,
        Self::Sum,
        Self::Count,
        Self::First,
        Self::Last,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Avg => "avg",
            Self::Min => "min",
            Self::Max => "max",
            Self::Sum => "sum",
            Self::Count => "count",
            Self::First => "first",
            Self::Last => "last",
        }
    }
}

/// The aggregates a request asks for, each once, in `Aggregate::ALL`'s order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregates(Vec<Aggregate>);

impl Default for Aggregates {
    /// `avg,min,max,count`.
    fn default() -> Self {
        Aggregates(vec![Aggregate::Avg, Aggregate::Min, Aggregate::Max, Aggregate::Count])
    }
}

impl Aggregates {
    /// A comma list of aggregate names (repeats allowed, at least one).
    pub fn parse(text: &str) -> Result<Self> {
        let mut asked = Vec::new();
        for name in text.split(',') {
            let name = name.trim();
            let aggregate = Aggregate::ALL.into_iter().find(|a| a.as_str() == name).ok_or_else(|| {
                let names: Vec<&str> = Aggregate::ALL.iter().map(|a| a.as_str()).collect();
                Error::invalid("aggregates", format!("`{name}` is not one of {}", names.join(", ")))
            })?;
            asked.push(aggregate);
        }
        asked.sort();
        asked.dedup();
        Ok(Aggregates(asked))
    }

    pub fn contains(&self, aggregate: Aggregate) -> bool {
        self.0.contains(&aggregate)
    }

    pub fn iter(&self) -> impl Iterator<Item = Aggregate> + '_ {
        self.0.iter().copied()
    }
}

/// A fixed offset from UTC, `+HHmm` or `-HHmm` (hours up to 23, minutes up to 59), as the
/// request's `timeZone` spells it; in milliseconds.
pub fn parse_offset(text: &str) -> Result<i64> {
    let bad = || {
        Error::invalid(
            "timeZone",
            format!("`{text}` is not an offset of the form +HHmm or -HHmm (write + as %2B)"),
        )
    };
    let b = text.as_bytes();
    if b.len() != 5 || !b[1..].iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let sign = match b[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return Err(bad()),
    };
    let digits = |from: usize| i64::from(b[from] - b'0') * 10 + i64::from(b[from + 1] - b'0');
    let (hours, minutes) = (digits(1), digits(3));
    if hours > 23 || minutes > 59 {
        return Err(bad());
    }
    Ok(sign * (hours * HOUR_MS + minutes * MINUTE_MS))
}

/// The raw series parameters, as the API receives them.
#[derive(Debug, Clone, Default)]
pub struct SeriesFilter {
    pub attribute_code: Option<String>,
    pub start_date: Option<String>,
    pub end_date: Option<String>,
    pub interval: Option<String>,
    pub aggregates: Option<String>,
    pub filter_by: Option<String>,
    pub time_zone: Option<String>,
}

/// What a store is asked for: one attribute of one device, its events whose `clock` time lies
/// in `start..=end`, in buckets of `interval` in the zone `offset_ms` from UTC.
#[derive(Debug, Clone)]
pub struct SeriesQuery {
    pub device: DeviceId,
    pub attribute_code: String,
    pub clock: TimeField,
    pub start: i64,
    pub end: i64,
    pub interval: Interval,
    /// The zone's offset from UTC, a whole number of minutes.
    pub offset_ms: i64,
    /// Whether the buckets need their first and last values (they cost the store a sort).
    pub first_last: bool,
}

impl SeriesQuery {
    /// The query, when its window is in order and spans at most `MAX_BUCKETS` buckets.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: DeviceId,
        attribute_code: String,
        clock: TimeField,
        (start, end): (i64, i64),
        interval: Interval,
        offset_ms: i64,
        aggregates: &Aggregates,
    ) -> Result<Self> {
        if start > end {
            return Err(Error::invalid("endDate", "is before startDate"));
        }
        let query = SeriesQuery {
            device,
            attribute_code,
            clock,
            start,
            end,
            interval,
            offset_ms,
            first_last: aggregates.contains(Aggregate::First) || aggregates.contains(Aggregate::Last),
        };
        let buckets = (query.bucket_of(end) - query.bucket_of(start)) / interval.ms() + 1;
        if buckets > MAX_BUCKETS {
            return Err(Error::invalid(
                "interval",
                format!(
                    "{} from startDate to endDate is {buckets} buckets, more than {MAX_BUCKETS}: \
                     ask for a longer interval or a shorter range",
                    interval.as_str()
                ),
            ));
        }
        Ok(query)
    }

    /// The start of the bucket that holds `ts` (epoch ms).
    pub fn bucket_of(&self, ts: i64) -> i64 {
        let width = self.interval.ms();
        (ts + self.offset_ms).div_euclid(width) * width - self.offset_ms
    }
}

/// One non-empty bucket as a store sums it up.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// The bucket's start, epoch ms.
    pub start: i64,
    /// Every event in the bucket.
    pub events: u64,
    /// Its Integer and Float events: sum, min and max are over these (None when there are none).
    pub numbers: u64,
    pub sum: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// The values of its first and last event, by the bucket's clock and then by event id (the
    /// arrival order); None unless the query asked for them.
    pub first: Option<serde_json::Value>,
    pub last: Option<serde_json::Value>,
}

impl Bucket {
    pub fn avg(&self) -> Option<f64> {
        self.sum
            .filter(|_| self.numbers > 0)
            .map(|sum| sum / self.numbers as f64)
    }
}

/// A series as the API answers it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    pub attribute_code: String,
    pub interval: &'static str,
    /// The window, in the wire format, in the request's time zone.
    pub start_date: String,
    pub end_date: String,
    pub points: Vec<SeriesPoint>,
}

/// One point: `ts` and the aggregates asked for, in `Aggregate::ALL`'s order. avg, min, max and
/// sum are null for a bucket without Integer or Float events.
#[derive(Debug, Clone)]
pub struct SeriesPoint {
    pub bucket: Bucket,
    pub aggregates: std::sync::Arc<Aggregates>,
}

impl Serialize for SeriesPoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let b = &self.bucket;
        let mut map = serializer.serialize_map(Some(self.aggregates.0.len() + 1))?;
        map.serialize_entry("ts", &b.start)?;
        for aggregate in self.aggregates.iter() {
            let name = aggregate.as_str();
            match aggregate {
                Aggregate::Avg => map.serialize_entry(name, &b.avg())?,
                Aggregate::Min => map.serialize_entry(name, &b.min)?,
                Aggregate::Max => map.serialize_entry(name, &b.max)?,
                Aggregate::Sum => map.serialize_entry(name, &b.sum)?,
                Aggregate::Count => map.serialize_entry(name, &b.events)?,
                Aggregate::First => map.serialize_entry(name, &b.first)?,
                Aggregate::Last => map.serialize_entry(name, &b.last)?,
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(start: i64, end: i64, interval: Interval, offset_ms: i64) -> Result<SeriesQuery> {
        SeriesQuery::new(
            DeviceId::from_string("d".to_owned()),
            "temp".to_owned(),
            TimeField::Device,
            (start, end),
            interval,
            offset_ms,
            &Aggregates::default(),
        )
    }

    #[test]
    fn names_parse_and_bad_ones_name_their_field() {
        assert_eq!(Interval::parse("15m").unwrap().ms(), 900_000);
        assert!(Interval::parse("2h").unwrap_err().to_string().starts_with("interval:"));
        let asked = Aggregates::parse("last,count,last, min").unwrap();
        assert_eq!(
            asked.iter().collect::<Vec<_>>(),
            vec![Aggregate::Min, Aggregate::Count, Aggregate::Last]
        );
        assert!(
            Aggregates::parse("avg,median")
                .unwrap_err()
                .to_string()
                .starts_with("aggregates:")
        );
        assert!(Aggregates::parse("").is_err());
        assert_eq!(parse_offset("+0530").unwrap(), 19_800_000);
        assert_eq!(parse_offset("-0100").unwrap(), -3_600_000);
        assert_eq!(parse_offset("+0000").unwrap(), 0);
        for bad in [
            "0530", " 0530", "+530", "+2400", "+0060", "+05:30", "Z", "+ 530", "+05٣0",
        ] {
            assert!(
                parse_offset(bad).unwrap_err().to_string().starts_with("timeZone:"),
                "{bad}"
            );
        }
    }

    #[test]
    fn buckets_start_at_the_local_clocks_multiples() {
        let hour = HOUR_MS;
        let q = query(0, 1, Interval::Day, 2 * hour).unwrap();
        // +0200: a day starts at 22:00 UTC the day before
        assert_eq!(q.bucket_of(0), -2 * hour);
        assert_eq!(q.bucket_of(22 * hour - 1), -2 * hour);
        assert_eq!(q.bucket_of(22 * hour), 22 * hour);
        let q = query(0, 1, Interval::FifteenMinutes, -(5 * hour + 30 * MINUTE_MS)).unwrap();
        assert_eq!(q.bucket_of(0), 0);
        assert_eq!(q.bucket_of(-1), -15 * MINUTE_MS);
        let q = query(0, 1, Interval::Hour, 30 * MINUTE_MS).unwrap();
        assert_eq!(q.bucket_of(0), -30 * MINUTE_MS);
    }

    #[test]
    fn at_most_ten_thousand_buckets() {
        let minute = MINUTE_MS;
        assert!(query(0, MAX_BUCKETS * minute - 1, Interval::Minute, 0).is_ok());
        let err = query(0, MAX_BUCKETS * minute, Interval::Minute, 0).unwrap_err();
        assert!(err.to_string().starts_with("interval:"), "{err}");
        // a window off the bucket edges touches one more
        assert!(query(1, MAX_BUCKETS * minute - 1, Interval::Minute, 0).is_ok());
        assert!(query(-1, MAX_BUCKETS * minute - 2, Interval::Minute, 0).is_err());
        let err = query(5, 4, Interval::Day, 0).unwrap_err();
        assert!(err.to_string().starts_with("endDate:"));
    }

    #[test]
    fn points_carry_what_was_asked() {
        let bucket = Bucket {
            start: 60_000,
            events: 3,
            numbers: 2,
            sum: Some(5.0),
            min: Some(1.5),
            max: Some(3.5),
            first: Some(serde_json::json!(1.5)),
            last: Some(serde_json::json!("x")),
        };
        let point = |text: &str| SeriesPoint {
            bucket: bucket.clone(),
            aggregates: std::sync::Arc::new(Aggregates::parse(text).unwrap()),
        };
        assert_eq!(
            serde_json::to_value(point("count,avg,last")).unwrap(),
            serde_json::json!({"ts": 60_000, "avg": 2.5, "count": 3, "last": "x"})
        );
        let strings = SeriesPoint {
            bucket: Bucket {
                numbers: 0,
                sum: None,
                min: None,
                max: None,
                ..bucket.clone()
            },
            aggregates: std::sync::Arc::new(Aggregates::default()),
        };
        assert_eq!(
            serde_json::to_value(strings).unwrap(),
            serde_json::json!({"ts": 60_000, "avg": null, "min": null, "max": null, "count": 3})
        );
    }
}
