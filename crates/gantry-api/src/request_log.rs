//! One line per HTTP request at info, and the span that follows a request through its handler:
//! method, route template (never the raw path or its query string, which may carry values a
//! caller did not mean to log), status, latency, the request id and who called (kind and id,
//! never a token). The principal is known only once the `Auth` extractor ran inside the
//! handler, so the middleware hands it a slot (`Caller`) in the request's extensions.
//! Requests refused unchecked during a login ban get no line each (a flood would fill the log):
//! they are counted, and one summary line per `BAN_SUMMARY_PERIOD` says how many there were.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use gantry_core::principal::Principal;
use tracing::Instrument;
use tracing::field::Empty;

/// The header that carries a request's id, taken from the caller when it sends a plain one,
/// and returned on every response.
pub const REQUEST_ID: &str = "x-request-id";
const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static(REQUEST_ID);

/// Marks a response refused unchecked because its address is banned.
#[derive(Clone, Copy)]
pub struct RefusedBanned;

/// How often, at most, the refusals during bans are summed up in a line.
const BAN_SUMMARY_PERIOD: Duration = Duration::from_secs(10);

/// Refusals not yet summed up, and when the last summary was written.
static REFUSED: AtomicU64 = AtomicU64::new(0);
static LAST_SUMMARY: Mutex<Option<Instant>> = Mutex::new(None);

/// Counts a refusal; writes the summary line when the period since the last one has passed.
fn refused_banned() {
    REFUSED.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let mut last = LAST_SUMMARY.lock().expect("ban summary lock");
    if last.is_some_and(|at| now.duration_since(at) < BAN_SUMMARY_PERIOD) {
        return;
    }
    *last = Some(now);
    let refused = REFUSED.swap(0, Ordering::Relaxed);
    tracing::info!(parent: None, refused, "HTTP requests refused unchecked from banned addresses since the last summary");
}

/// Who made the request, filled by the `Auth` extractor.
#[derive(Clone, Default)]
pub struct Caller(Arc<OnceLock<(&'static str, String)>>);

impl Caller {
    /// Records the principal, and its tenant on the request's span.
    pub fn set(&self, principal: &Principal) {
        let (kind, id) = match principal {
            Principal::Admin { system: true, tenant } => ("system_admin", tenant.to_string()),
            Principal::Admin { tenant, .. } => ("admin", tenant.to_string()),
            Principal::Application { project, .. } => ("application", project.to_string()),
            Principal::Device { device, .. } => ("device", device.to_string()),
            Principal::User { user, .. } => ("user", user.to_string()),
        };
        tracing::Span::current().record("tenant", principal.tenant().as_str());
        let _ = self.0.set((kind, id));
    }
}

/// The whole principal of a request, filled by the `Auth` extractor for the audit log
/// (`audit::record`), which records changes in its name.
#[derive(Clone, Default)]
pub struct AuditCaller(Arc<OnceLock<Principal>>);

impl AuditCaller {
    pub fn set(&self, principal: &Principal) {
        let _ = self.0.set(principal.clone());
    }

    pub fn get(&self) -> Option<&Principal> {
        self.0.get()
    }
}

/// Middleware: the request's span around the handler, its line when the answer is ready.
pub async fn log_request(mut request: Request, next: Next) -> Response {
    let log = RequestLog::start(&mut request, Instant::now());
    let response = next.run(request).instrument(log.span().clone()).await;
    log.finish(response)
}

/// A request's log while it runs: its span, and what its line says once the answer is ready.
pub struct RequestLog {
    started: Instant,
    method: Method,
    /// None for a path no route matched.
    route: Option<MatchedPath>,
    request_id: HeaderValue,
    caller: Caller,
    span: tracing::Span,
}

impl RequestLog {
    /// Opens the request's span and hands the `Auth` extractor its `Caller` slot.
    pub fn start(request: &mut Request, started: Instant) -> Self {
        let route = request.extensions().get::<MatchedPath>().cloned();
        let request_id = request_id(request.headers());
        let caller = Caller::default();
        request.extensions_mut().insert(caller.clone());
        let method = request.method().clone();
        let span = tracing::info_span!(
            "http_request",
            method = %method,
            route = route_of(route.as_ref()),
            request_id = request_id.to_str().unwrap_or_default(),
            tenant = Empty
        );
        Self {
            started,
            method,
            route,
            request_id,
            caller,
            span,
        }
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The route template the request matched, or `unmatched`.
    pub fn route(&self) -> &str {
        route_of(self.route.as_ref())
    }

    /// The span the request's handling runs in.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Writes the request's line (but for a refusal during a ban), and returns the answer with
    /// the request's id.
    pub fn finish(self, mut response: Response) -> Response {
        response
            .headers_mut()
            .insert(REQUEST_ID_HEADER, self.request_id.clone());
        if response.extensions().get::<RefusedBanned>().is_some() {
            refused_banned();
            return response;
        }
        let (principal, principal_id) = self
            .caller
            .0
            .get()
            .map(|(k, id)| (*k, id.as_str()))
            .unwrap_or(("none", ""));
        tracing::info!(
            parent: None,
            method = %self.method,
            route = route_of(self.route.as_ref()),
            status = response.status().as_u16(),
            latency_ms = self.started.elapsed().as_secs_f64() * 1000.0,
            principal,
            principal_id,
            request_id = self.request_id.to_str().unwrap_or_default(),
            "request"
        );
        response
    }
}

fn route_of(route: Option<&MatchedPath>) -> &str {
    route.map_or("unmatched", MatchedPath::as_str)
}

/// The caller's plain request id (shared with its header, not copied), else a new one.
fn request_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(id) = headers
        .get(REQUEST_ID_HEADER)
        .filter(|v| v.to_str().is_ok_and(is_plain_id))
    {
        return id.clone();
    }
    let mut text = [0; uuid::fmt::Simple::LENGTH];
    let id = uuid::Uuid::now_v7().simple().encode_lower(&mut text);
    HeaderValue::from_str(id).expect("a UUID's hex digits are a header value")
}

/// An id a caller may choose: short, and letters, digits, `-`, `_` and `.` only, so that it
/// cannot forge log lines or smuggle anything into them.
fn is_plain_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_are_taken_from_the_caller() {
        assert!(is_plain_id("req-42.a_b"));
        assert!(!is_plain_id(""));
        assert!(!is_plain_id("a b"));
        assert!(!is_plain_id("line\nforged"));
        assert!(!is_plain_id(&"x".repeat(65)));
    }

    #[test]
    fn request_ids_are_the_callers_or_new() {
        let mut headers = HeaderMap::new();
        assert_eq!(request_id(&headers).len(), 32);
        assert_ne!(request_id(&headers), request_id(&headers));
        headers.insert(REQUEST_ID_HEADER, HeaderValue::from_static("req-7"));
        assert_eq!(request_id(&headers), "req-7");
        headers.insert(REQUEST_ID_HEADER, HeaderValue::from_static("not plain"));
        assert_eq!(request_id(&headers).len(), 32);
    }
}
