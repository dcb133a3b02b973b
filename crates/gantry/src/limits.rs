//! The process's open-file limit: every device connection, HTTP client and store file is a
//! descriptor, and the soft limit a shell hands down (often 1,024) is far below what a fleet needs.

/// Descriptors kept back from MQTT for the store, HTTP clients and the process itself.
const RESERVED_FILES: u64 = 1024;

/// Raises the soft open-file limit to the hard limit (once per process).
pub fn raise_open_files() {
    static RAISED: std::sync::Once = std::sync::Once::new();
    RAISED.call_once(|| match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    });
}

/// MQTT connections a listener holds by default: the open-file limit less the reserve.
pub fn default_max_connections() -> usize {
    let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap_or((RESERVED_FILES * 2, 0));
    soft.saturating_sub(RESERVED_FILES).max(RESERVED_FILES) as usize
}
