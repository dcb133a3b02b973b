//! Time: epoch milliseconds inside, `yyyy-MM-dd'T'HH:mm:ss.SSSZ` (Z as +HHmm) on the wire.

use chrono::{FixedOffset, NaiveDate, TimeZone};

use crate::{Error, Result};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The instants the wire format can write: years 0000 to 9999 in UTC.
const FIRST_MS: i64 = -62_167_219_200_000;
const LAST_MS: i64 = 253_402_300_799_999;

/// Parses `yyyy-MM-dd'T'HH:mm:ss.SSSZ` with Z written `+HHmm` or `-HHmm` into epoch
/// milliseconds. Anything else, including an impossible date or an instant whose UTC year has
/// not four digits (so `format_timestamp` writes back every time it takes), is an error
/// naming `field`.
pub fn parse_timestamp(field: &str, text: &str) -> Result<i64> {
    parse(text).ok_or_else(|| {
        Error::invalid(
            field,
            format!("`{text}` is not a time of the form yyyy-MM-dd'T'HH:mm:ss.SSS+HHmm"),
        )
    })
}

fn parse(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 28 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'.'
    {
        return None;
    }
    // Digits are read from bytes: a multi-byte character may sit across any field's edge.
    let num = |from: usize, to: usize| -> Option<u32> {
        b[from..to]
            .iter()
            .try_fold(0, |n, &c| c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0')))
    };
    let sign = match b[23] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (off_h, off_m) = (num(24, 26)?, num(26, 28)?);
    if off_h > 23 || off_m > 59 {
        return None;
    }
    let offset = FixedOffset::east_opt(sign * (off_h * 3600 + off_m * 60) as i32)?;
    let date = NaiveDate::from_ymd_opt(num(0, 4)? as i32, num(5, 7)?, num(8, 10)?)?;
    let datetime = date.and_hms_milli_opt(num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?)?;
    let ms = offset.from_local_datetime(&datetime).single()?.timestamp_millis();
    (FIRST_MS..=LAST_MS).contains(&ms).then_some(ms)
}

/// Formats epoch milliseconds in the wire format, in UTC (`+0000`).
pub fn format_timestamp(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3f+0000").to_string())
        .unwrap_or_default()
}

/// Formats epoch milliseconds in the wire format, in the zone `offset_ms` from UTC (a whole
/// number of minutes, less than a day).
pub fn format_timestamp_in(ms: i64, offset_ms: i64) -> String {
    let Some(zone) = i32::try_from(offset_ms / 1000).ok().and_then(FixedOffset::east_opt) else {
        return format_timestamp(ms);
    };
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.with_timezone(&zone).format("%Y-%m-%dT%H:%M:%S%.3f%z").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_offsets_to_the_same_instant() {
        let a = parse_timestamp("t", "2024-05-01T08:00:00.000+0800").unwrap();
        let b = parse_timestamp("t", "2024-05-01T00:00:00.000+0000").unwrap();
        let c = parse_timestamp("t", "2024-04-30T19:30:00.000-0430").unwrap();
        assert_eq!(a, 1_714_521_600_000);
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(parse_timestamp("t", "2024-05-01T00:00:00.123+0000").unwrap(), a + 123);
    }

    #[test]
    fn rejects_other_shapes() {
        for bad in [
            "yesterday",
            "2024-05-01",
            "2024-13-01T00:00:00.000+0800",
            "2024-02-30T00:00:00.000+0800",
            "2024-05-01T24:00:00.000+0800",
            "2024-05-01T00:00:00.000+08:00",
            "2024-05-01T00:00:00.000Z",
            "2024-05-01T00:00:00+0800",
            "2024-05-01 00:00:00.000+0800",
            "2024-05-01T00:00:00.000 0800",
            // Found by fuzzing: in UTC these fall in the years 10000 and -1.
            "9999-12-31T23:59:59.999-2359",
            "0000-01-01T00:00:00.000+0001",
            // Found by fuzzing: 28 bytes with a two-byte character across the offset's digits.
            "0008-01-01T00:02:00.000+\0ʚ;",
            "2024-05-01T00:00:00.000+0ʚ0",
        ] {
            let err = parse_timestamp("startDate", bad).unwrap_err();
            assert!(err.to_string().starts_with("startDate:"), "{bad}");
        }
    }

    #[test]
    fn formats_back() {
        let ms = parse_timestamp("t", "2024-05-01T08:00:00.250+0800").unwrap();
        assert_eq!(format_timestamp(ms), "2024-05-01T00:00:00.250+0000");
        assert_eq!(parse_timestamp("t", &format_timestamp(ms)).unwrap(), ms);
    }

    #[test]
    fn formats_in_a_zone() {
        let ms = parse_timestamp("t", "2024-05-01T08:00:00.250+0000").unwrap();
        assert_eq!(format_timestamp_in(ms, 0), "2024-05-01T08:00:00.250+0000");
        assert_eq!(format_timestamp_in(ms, 19_800_000), "2024-05-01T13:30:00.250+0530");
        assert_eq!(format_timestamp_in(ms, -36_000_000), "2024-04-30T22:00:00.250-1000");
        assert_eq!(parse_timestamp("t", &format_timestamp_in(ms, -36_000_000)).unwrap(), ms);
    }

    #[test]
    fn the_first_and_last_instants_round_trip() {
        for (text, ms) in [
            ("0000-01-01T00:00:00.000+0000", FIRST_MS),
            ("9999-12-31T23:59:59.999+0000", LAST_MS),
            ("9999-12-31T23:59:59.999+2359", LAST_MS - (23 * 60 + 59) * 60_000),
        ] {
            assert_eq!(parse_timestamp("t", text).unwrap(), ms, "{text}");
            assert_eq!(parse_timestamp("t", &format_timestamp(ms)).unwrap(), ms, "{text}");
        }
    }
}
