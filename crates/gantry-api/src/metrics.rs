//! Request counts and latencies per route, rendered as Prometheus text at `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::AppState;

const BUCKETS: [f64; 11] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

#[derive(Default)]
struct RouteStats {
    by_status: BTreeMap<u16, u64>,
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum_seconds: f64,
}

/// Something else in the process that adds its own lines to `/metrics`.
pub type Collector = Box<dyn Fn(&mut String) + Send + Sync>;

/// A collector that has to wait for its figures (a database query, say): its lines, read
/// afresh at each scrape.
pub type AsyncCollector = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

#[derive(Default)]
pub struct Metrics {
    routes: Mutex<BTreeMap<(String, String), RouteStats>>,
    collectors: Mutex<Vec<Collector>>,
    async_collectors: Mutex<Vec<AsyncCollector>>,
}

impl Metrics {
    pub fn add_collector(&self, collector: Collector) {
        self.collectors.lock().expect("metrics lock").push(collector);
    }

    pub fn add_async_collector(&self, collector: AsyncCollector) {
        self.async_collectors.lock().expect("metrics lock").push(collector);
    }

    fn observe(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut routes = self.routes.lock().expect("metrics lock");
        let stats = routes.entry((method.to_owned(), route.to_owned())).or_default();
        *stats.by_status.entry(status).or_default() += 1;
        stats.count += 1;
        stats.sum_seconds += seconds;
        if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
            stats.buckets[i] += 1;
        }
    }

    pub async fn render(&self) -> String {
        let mut out = self.render_now();
        let waiting: Vec<AsyncCollector> = self.async_collectors.lock().expect("metrics lock").clone();
        for collector in waiting {
            out.push_str(&collector().await);
        }
        out
    }

    /// Everything but the async collectors' lines.
    fn render_now(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP gantry_http_requests_total HTTP requests by route and status.\n");
        out.push_str("# TYPE gantry_http_requests_total counter\n");
        let routes = self.routes.lock().expect("metrics lock");
        for ((method, route), stats) in routes.iter() {
            for (status, n) in &stats.by_status {
                let _ = writeln!(
                    out,
                    "gantry_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP gantry_http_request_duration_seconds HTTP request latency by route.\n");
        out.push_str("# TYPE gantry_http_request_duration_seconds histogram\n");
        for ((method, route), stats) in routes.iter() {
            let labels = format!("method=\"{method}\",route=\"{route}\"");
            let mut cumulative = 0;
            for (bound, n) in BUCKETS.iter().zip(stats.buckets) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "gantry_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "gantry_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                stats.count
            );
            let _ = writeln!(
                out,
                "gantry_http_request_duration_seconds_sum{{{labels}}} {}",
                stats.sum_seconds
            );
            let _ = writeln!(
                out,
                "gantry_http_request_duration_seconds_count{{{labels}}} {}",
                stats.count
            );
        }
        drop(routes);
        for collector in self.collectors.lock().expect("metrics lock").iter() {
            collector(&mut out);
        }
        out
    }
}

/// Middleware: times every request and counts it under its route template (not the raw
/// path, so ids do not explode the label set).
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let response = next.run(request).await;
    state.metrics.observe(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn renders_counts_and_cumulative_buckets() {
        let m = Metrics::default();
        m.observe("GET", "/api/v1/devices/{deviceId}", 200, 0.002);
        m.observe("GET", "/api/v1/devices/{deviceId}", 404, 0.2);
        m.add_collector(Box::new(|out| out.push_str("gantry_extra 1\n")));
        m.add_async_collector(Arc::new(|| Box::pin(async { "gantry_later 2\n".to_owned() })));
        let text = m.render().await;
        assert!(text.contains(
            "gantry_http_requests_total{method=\"GET\",route=\"/api/v1/devices/{deviceId}\",status=\"404\"} 1"
        ));
        assert!(text.contains("le=\"0.0025\"} 1"));
        assert!(text.contains("le=\"0.25\"} 2"));
        assert!(text.contains(
            "gantry_http_request_duration_seconds_count{method=\"GET\",route=\"/api/v1/devices/{deviceId}\"} 2"
        ));
        assert!(text.ends_with("gantry_extra 1\ngantry_later 2\n"));
    }
}
