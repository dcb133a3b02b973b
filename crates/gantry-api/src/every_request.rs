//! The one middleware every request of the API passes. It does, in this order, what the request
//! log (`request_log`), the request metrics (`metrics`), the path check (`extract::check_path`)
//! and, for a change alone, the audit log (`audit::record`) need. One middleware rather than
//! one each: axum wraps every route in every layer, and on each request each layer clones the
//! stack beneath it and boxes a future of its own, a cost every request would pay per layer.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::AppState;
use crate::audit::{self, Target};
use crate::error::ApiError;
use crate::extract::check_path;
use crate::request_log::RequestLog;

/// What the middleware works with.
#[derive(Clone)]
pub struct Shared {
    pub state: AppState,
    /// The largest body a change's audit record reads its field names from.
    pub body_limit: usize,
}

/// Middleware: the request's log span and line, its count and latency, the refusal of a path
/// that holds a NUL or is not UTF-8, and a change's audit record.
pub async fn around(State(shared): State<Shared>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let log = RequestLog::start(&mut request, started);
    let handled = async {
        let response = match check_path(request.uri().path()) {
            Err(error) => ApiError::Core(error).into_response(),
            Ok(()) => match Target::of(request.method(), request.uri().path()) {
                None => next.run(request).await,
                Some(target) => audit::record(&shared.state, shared.body_limit, target, request, next).await,
            },
        };
        shared.state.metrics.observe(
            log.method().as_str(),
            log.route(),
            response.status().as_u16(),
            started.elapsed().as_secs_f64(),
        );
        response
    };
    let response = handled.instrument(log.span().clone()).await;
    log.finish(response)
}
