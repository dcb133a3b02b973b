//! The time parser (yyyy-MM-dd'T'HH:mm:ss.SSS+HHmm): never panics, and what it takes formats
//! back to text that parses to the same instant; formatted instants parse back.

#![no_main]

use gantry_core::time::{format_timestamp, parse_timestamp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(parsed) = parse_timestamp("t", text)
    {
        let formatted = format_timestamp(parsed);
        assert_eq!(
            parse_timestamp("t", &formatted).ok(),
            Some(parsed),
            "{text} -> {formatted}"
        );
    }
    // The first eight bytes, read as epoch milliseconds.
    let Some(first) = data.first_chunk::<8>() else {
        return;
    };
    let ms = i64::from_le_bytes(*first);
    let formatted = format_timestamp(ms);
    // Years 0 to 9999 have the wire format's four digits; others are out of its range.
    if formatted.len() == 28 && !formatted.starts_with('-') {
        assert_eq!(parse_timestamp("t", &formatted).ok(), Some(ms), "{ms} -> {formatted}");
    }
});
