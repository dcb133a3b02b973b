//! The NUL scan over raw JSON text agrees with a full parse and walk: on any valid JSON it finds
//! a NUL exactly when a string or key holds one. The error it builds never panics.

#![no_main]

use gantry_core::text::{json_has_nul, nul_error, nul_path};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let scanned = json_has_nul(data);
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let walked = nul_path(&value);
        assert_eq!(scanned, walked.is_some(), "scan and walk disagree: {walked:?}");
    }
    if scanned {
        let _ = nul_error(data).to_string();
    }
});
