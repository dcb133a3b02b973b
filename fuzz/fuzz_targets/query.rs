//! The query-string and path parsers: every listing's parameters parsed from any query string,
//! the paging, sort and filter parsers, and the percent-decoding path check. None panics; a
//! path holding `%00` is always refused; paging that is taken is in range.

#![no_main]

use gantry_api::extract::{check_path, parse_query};
use gantry_api::query::*;
use gantry_core::paging::PageRequest;
use gantry_core::query::{EventLogSort, TimeField};
use libfuzzer_sys::fuzz_target;

/// The paging parameters every listing has, read as the handlers read them.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Paging {
    page_no: Option<i64>,
    page_size: Option<i64>,
}

// The input is both a query string and a request path.
fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_query::<EventParams>(text);
    let _ = parse_query::<AttributeParams>(text);
    let _ = parse_query::<LogParams>(text);
    let _ = parse_query::<ModelListParams>(text);
    let _ = parse_query::<ProjectListParams>(text);
    let _ = parse_query::<DeviceParams>(text);
    let _ = parse_query::<RouteListParams>(text);
    let _ = TimeField::parse(text);
    let _ = EventLogSort::parse(text);
    if check_path(text).is_ok() {
        assert!(!text.contains("%00"), "{text}");
    }
    if let Ok(Paging { page_no, page_size }) = parse_query::<Paging>(text)
        && let Ok(page) = PageRequest::parse(page_no, page_size, 100)
    {
        assert!(page.offset() >= 0 && (1..=1000).contains(&page.limit()), "{page:?}");
    }
});
