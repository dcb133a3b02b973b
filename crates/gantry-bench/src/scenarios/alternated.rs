//! Same-run comparisons measured in the order A B B A: a measurement without the change, two
//! with it, one without again. A drift over the run (a store that grows with every
//! measurement, a machine that warms or tires) then weighs on both sides alike, where A then B
//! would put all of it on B. Each side is reported as one row, its two halves merged
//! (`merged`); the halves' own rates go into its note, so the drift stays visible.

use super::Measurement;
use crate::load::Latency;
use crate::server::Usage;

/// One side's two measurements as one: rates and CPU per request averaged over the two (each
/// weighted by its answers), counts added, and each latency percentile the higher of the two,
/// so the merged row never reports a better tail than either half had.
pub fn merged(first: Measurement, second: Measurement) -> Measurement {
    let (a, b) = (first.ok.max(1) as f64, second.ok.max(1) as f64);
    let weighted = |x: Option<f64>, y: Option<f64>| Some((x? * a + y? * b) / (a + b));
    let mean = |x: Option<f64>, y: Option<f64>| Some((x? + y?) / 2.0);
    let mut failed_by_status = first.failed_by_status.clone();
    for (status, count) in &second.failed_by_status {
        *failed_by_status.entry(*status).or_default() += count;
    }
    let note = format!(
        "A B B A: {:.0} /s then {:.0} /s",
        first.requests_per_second, second.requests_per_second
    );
    Measurement {
        scenario: first.scenario,
        variant: first.variant,
        connections: first.connections,
        requests_per_second: (first.requests_per_second + second.requests_per_second) / 2.0,
        ok: first.ok + second.ok,
        failed: first.failed + second.failed,
        failed_by_status,
        latency: worse(first.latency, second.latency),
        baseline_ratio: None,
        usage: added(first.usage, second.usage),
        server_cpu_us_per_request: weighted(first.server_cpu_us_per_request, second.server_cpu_us_per_request),
        client_cpu_us_per_request: weighted(first.client_cpu_us_per_request, second.client_cpu_us_per_request),
        server_cores_busy: mean(first.server_cores_busy, second.server_cores_busy),
        postgres_cores_busy: mean(first.postgres_cores_busy, second.postgres_cores_busy),
        other_cores_busy: mean(first.other_cores_busy, second.other_cores_busy),
        server_written_kib_per_request: weighted(
            first.server_written_kib_per_request,
            second.server_written_kib_per_request,
        ),
        note: Some(note),
    }
}

/// Each percentile the higher of the two; the mean their mean.
fn worse(a: Latency, b: Latency) -> Latency {
    Latency {
        p50_ms: a.p50_ms.max(b.p50_ms),
        p90_ms: a.p90_ms.max(b.p90_ms),
        p99_ms: a.p99_ms.max(b.p99_ms),
        p999_ms: a.p999_ms.max(b.p999_ms),
        max_ms: a.max_ms.max(b.max_ms),
        mean_ms: (a.mean_ms + b.mean_ms) / 2.0,
    }
}

/// What both measurements cost together; the peak memory the higher of the two.
fn added(a: Usage, b: Usage) -> Usage {
    let sum = |x: Option<f64>, y: Option<f64>| Some(x? + y?);
    Usage {
        server_cpu_seconds: sum(a.server_cpu_seconds, b.server_cpu_seconds),
        server_rss_max_mib: match (a.server_rss_max_mib, b.server_rss_max_mib) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        },
        client_cpu_seconds: sum(a.client_cpu_seconds, b.client_cpu_seconds),
        other_cpu_seconds: sum(a.other_cpu_seconds, b.other_cpu_seconds),
        server_written_bytes: a.server_written_bytes.zip(b.server_written_bytes).map(|(x, y)| x + y),
        postgres_cpu_seconds: sum(a.postgres_cpu_seconds, b.postgres_cpu_seconds),
    }
}

/// The two rows of a comparison measured `[A, B, B, A]`: the side without the change, and the
/// side with it, whose note gives its ratio to the other (`over` names the other's rate, `target`
/// the least ratio asked), each pair's, `remark` and its halves' rates. Logs the ratio, `label`
/// saying what B had.
pub fn sides(measured: [Measurement; 4], label: &str, over: &str, target: f64, remark: &str) -> Vec<Measurement> {
    let [first, second, third, fourth] = measured;
    let (ratio, before, after) = ratios([&first, &fourth], [&second, &third]);
    let alone = merged(first, fourth);
    let mut with = merged(second, third);
    let halves = with.note.take().unwrap_or_default();
    with.note = Some(format!(
        "{ratio:.2} x {over} (same run, A B B A: {before:.2} x, then {after:.2} x; target >= {target:.2}){remark}; {halves}"
    ));
    eprintln!(
        "  {}: {label} {ratio:.2} x the rate with none ({before:.2}, {after:.2})",
        with.scenario
    );
    vec![alone, with]
}

/// The ratio of the side with the change to the side without, and the same per pair of
/// neighbours (A1 to B1, B2 to A2).
fn ratios(alone: [&Measurement; 2], with: [&Measurement; 2]) -> (f64, f64, f64) {
    let rate = |m: &Measurement| m.requests_per_second.max(f64::EPSILON);
    let whole = (with[0].requests_per_second + with[1].requests_per_second) / (rate(alone[0]) + rate(alone[1]));
    (
        whole,
        with[0].requests_per_second / rate(alone[0]),
        with[1].requests_per_second / rate(alone[1]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(rate: f64, ok: u64, p99: f64) -> Measurement {
        let latency = Latency {
            p50_ms: 1.0,
            p90_ms: 2.0,
            p99_ms: p99,
            p999_ms: p99,
            max_ms: p99,
            mean_ms: 1.0,
        };
        let usage = Usage {
            server_cpu_seconds: Some(1.0),
            ..Usage::default()
        };
        Measurement::new(
            "s",
            "v".into(),
            4,
            rate,
            ok,
            0,
            latency,
            usage,
            ok,
            std::time::Duration::from_secs(1),
        )
    }

    #[test]
    fn halves_merge_into_one_row_whose_tail_is_the_worse() {
        let m = merged(measured(100.0, 100, 5.0), measured(300.0, 300, 3.0));
        assert_eq!(m.requests_per_second, 200.0);
        assert_eq!(m.ok, 400);
        assert_eq!(m.latency.p99_ms, 5.0);
        assert_eq!(m.usage.server_cpu_seconds, Some(2.0));
        // The half with three times the answers weighs three times as much: not the plain mean.
        let cpu = m.server_cpu_us_per_request.expect("measured");
        assert!((cpu - 5_000.0).abs() < 1.0, "{cpu}");
        assert_eq!(m.note.as_deref(), Some("A B B A: 100 /s then 300 /s"));
    }

    #[test]
    fn the_side_with_the_change_says_its_ratio() {
        let [alone, with]: [Measurement; 2] = sides(
            [
                measured(100.0, 1, 1.0),
                measured(90.0, 1, 1.0),
                measured(60.0, 1, 1.0),
                measured(80.0, 1, 1.0),
            ],
            "with 3 rules",
            "the rate with no rule",
            0.9,
            "; each alarm stored first",
        )
        .try_into()
        .expect("two rows");
        assert_eq!((alone.requests_per_second, with.requests_per_second), (90.0, 75.0));
        assert_eq!(
            with.note.as_deref(),
            Some(
                "0.83 x the rate with no rule (same run, A B B A: 0.90 x, then 0.75 x; target >= 0.90); \
                 each alarm stored first; A B B A: 90 /s then 60 /s"
            )
        );
        assert_eq!(alone.note.as_deref(), Some("A B B A: 100 /s then 80 /s"));
    }

    #[test]
    fn the_ratio_weighs_both_pairs() {
        let (a1, b1, b2, a2) = (
            measured(100.0, 1, 1.0),
            measured(90.0, 1, 1.0),
            measured(60.0, 1, 1.0),
            measured(80.0, 1, 1.0),
        );
        let (whole, first, second) = ratios([&a1, &a2], [&b1, &b2]);
        assert!((whole - 150.0 / 180.0).abs() < 1e-9);
        assert!((first - 0.9).abs() < 1e-9);
        assert!((second - 0.75).abs() < 1e-9);
    }
}
