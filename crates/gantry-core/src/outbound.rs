//! The way out to webhook receivers, as the delivery sees it: the binary implements it over
//! HTTP (redirects off, a timeout, every resolved address checked before it is connected to).

use async_trait::async_trait;

/// One POST of a delivery.
#[async_trait]
pub trait Outbound: Send + Sync {
    /// POSTs `body` (JSON) to `url` with `headers`: the receiver's HTTP status, or why there was
    /// none (a timeout, a refused address, a connection error).
    async fn post(&self, url: &str, headers: &[(&'static str, String)], body: String) -> Result<u16, String>;
}
