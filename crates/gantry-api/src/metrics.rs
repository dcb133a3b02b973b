//! Request counts and latencies per route, rendered as Prometheus text at `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

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

/// The statistics of each route, by method, then by route template; looked up by borrowed
/// names, so that a request allocates nothing once its route has been seen.
type ByRoute = BTreeMap<String, BTreeMap<String, RouteStats>>;

#[derive(Default)]
pub struct Metrics {
    routes: Mutex<ByRoute>,
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

    /// Counts a request of `method` on the route template `route`.
    pub fn observe(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut routes = self.routes.lock().expect("metrics lock");
        let stats = stats_of(&mut routes, method, route);
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
        for (method, route, stats) in each_route(&routes) {
            for (status, n) in &stats.by_status {
                let _ = writeln!(
                    out,
                    "gantry_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP gantry_http_request_duration_seconds HTTP request latency by route.\n");
        out.push_str("# TYPE gantry_http_request_duration_seconds histogram\n");
        for (method, route, stats) in each_route(&routes) {
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

/// The statistics of `method` on `route`, added when first asked for.
fn stats_of<'a>(routes: &'a mut ByRoute, method: &str, route: &str) -> &'a mut RouteStats {
    if !routes.contains_key(method) {
        routes.insert(method.to_owned(), BTreeMap::new());
    }
    let by_route = routes.get_mut(method).expect("inserted above");
    if !by_route.contains_key(route) {
        by_route.insert(route.to_owned(), RouteStats::default());
    }
    by_route.get_mut(route).expect("inserted above")
}

/// Every route's statistics, ordered by method, then route.
fn each_route(routes: &ByRoute) -> impl Iterator<Item = (&str, &str, &RouteStats)> {
    routes.iter().flat_map(|(method, by_route)| {
        by_route
            .iter()
            .map(move |(route, stats)| (method.as_str(), route.as_str(), stats))
    })
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
