//! The device page's chart: a numeric attribute over a window, from the series service, drawn
//! as inline SVG, with the device's alarm periods on that attribute shaded under it. The
//! window's interval keeps the points below the chart's width in pixels. And the overview's
//! chart of a project's events per minute, a bar per minute.

use gantry_core::alarm::Alarm;
use gantry_core::event_rate::EventRate;
use gantry_core::series::{Series, SeriesFilter};
use gantry_core::time::format_timestamp;
use maud::{Markup, html};

/// The chart's width and height in SVG units (pixels at 1:1).
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 200.0;
const PAD: f64 = 36.0;
/// The narrowest an alarm period is drawn, so that one just raised can be seen.
const MIN_MARK: f64 = 4.0;

/// The windows offered, each with an interval that gives at most a few hundred points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Hour,
    Day,
    Week,
}

impl Window {
    pub const ALL: [Window; 3] = [Window::Hour, Window::Day, Window::Week];

    pub fn parse(text: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|w| w.as_str() == text)
            .unwrap_or(Window::Day)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Week => "week",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Window::Hour => "Last hour",
            Window::Day => "Last day",
            Window::Week => "Last week",
        }
    }

    fn span_ms(self) -> i64 {
        match self {
            Window::Hour => 3_600_000,
            Window::Day => 86_400_000,
            Window::Week => 7 * 86_400_000,
        }
    }

    /// 60, 288 and 168 buckets: never more than the chart's pixels.
    fn interval(self) -> &'static str {
        match self {
            Window::Hour => "1m",
            Window::Day => "5m",
            Window::Week => "1h",
        }
    }

    /// The window that ends at `end` (epoch ms), both ends included.
    pub fn bounds(self, end: i64) -> (i64, i64) {
        (end - self.span_ms(), end)
    }

    /// The series the chart asks for, of the window that ends at `end`.
    pub fn filter(self, code: &str, end: i64) -> SeriesFilter {
        SeriesFilter {
            attribute_code: Some(code.to_owned()),
            start_date: Some(format_timestamp(end - self.span_ms())),
            end_date: Some(format_timestamp(end)),
            interval: Some(self.interval().to_owned()),
            aggregates: Some("avg,min,max".to_owned()),
            ..Default::default()
        }
    }
}

/// The series as an SVG line of averages over the min..max band, in the window that ends at
/// `end`, the alarm `periods` shaded under it.
pub fn svg(series: &Series, window: Window, end: i64, periods: &[Alarm]) -> Markup {
    let points: Vec<(i64, f64, f64, f64)> = series
        .points
        .iter()
        .filter_map(|p| Some((p.bucket.start, p.bucket.avg()?, p.bucket.min?, p.bucket.max?)))
        .collect();
    if points.is_empty() {
        return html! { p.empty { "No values in this window." } };
    }
    let (start, end) = window.bounds(end);
    let low = points.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
    let high = points.iter().map(|p| p.3).fold(f64::NEG_INFINITY, f64::max);
    let (low, high) = if high > low {
        (low, high)
    } else {
        (low - 1.0, high + 1.0)
    };
    let x = |t: i64| PAD + (t - start) as f64 / (end - start) as f64 * (WIDTH - 2.0 * PAD);
    let y = |v: f64| HEIGHT - PAD / 2.0 - (v - low) / (high - low) * (HEIGHT - PAD);
    let line: Vec<String> = points.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1))).collect();
    let band_top = points.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(p.3)));
    let band_bottom = points.iter().rev().map(|p| format!("{:.1},{:.1}", x(p.0), y(p.2)));
    let band: Vec<String> = band_top.chain(band_bottom).collect();
    let label = format!(
        "{} over the {}: from {low} to {high}; {} alarm periods shaded",
        series.attribute_code,
        window.label().to_lowercase(),
        periods.len()
    );
    html! {
        svg.chart viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(label) {
            @for (alarm, (from, to)) in periods.iter().filter_map(|a| Some((a, span(a.first_event_time, a.cleared_time, (start, end))?))) {
                rect class={ "period sev-" (alarm.severity.as_str().to_lowercase()) }
                    x=(format!("{:.1}", x(from))) y="0" width=(format!("{:.1}", (x(to) - x(from)).max(MIN_MARK))) height=(HEIGHT - PAD / 2.0) {
                    title { (alarm.name) " (" (alarm.severity.as_str()) ")" }
                }
            }
            line.axis x1=(PAD) y1=(HEIGHT - PAD / 2.0) x2=(WIDTH - PAD) y2=(HEIGHT - PAD / 2.0) {}
            text.tick x="2" y=(y(high) + 4.0) { (short(high)) }
            text.tick x="2" y=(y(low)) { (short(low)) }
            polygon.band points=(band.join(" ")) {}
            polyline.line points=(line.join(" ")) {}
            @for p in &points {
                circle.dot cx=(format!("{:.1}", x(p.0))) cy=(format!("{:.1}", y(p.1))) r="2.5" {}
            }
        }
    }
}

/// A project's events per minute as SVG bars, oldest on the left, the current minute last;
/// a minute without events has no bar. The caller shows an empty state instead when there
/// were none in the window.
pub fn rate_svg(rate: &EventRate) -> Markup {
    let high = rate.minutes.iter().copied().max().unwrap_or(0).max(1);
    let slot = (WIDTH - 2.0 * PAD) / rate.minutes.len().max(1) as f64;
    let base = HEIGHT - PAD / 2.0;
    let height = |n: u64| n as f64 / high as f64 * (HEIGHT - PAD);
    let label = format!(
        "Events per minute over the last hour: {} in all, at most {high} in a minute",
        rate.total()
    );
    html! {
        svg.chart.rate viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(label) {
            line.axis x1=(PAD) y1=(base) x2=(WIDTH - PAD) y2=(base) {}
            text.tick x="2" y=(base - height(high) + 4.0) { (high) }
            text.tick x="2" y=(base) { "0" }
            text.tick x=(PAD) y=(HEIGHT - 2.0) { "60 min ago" }
            text.tick x=(WIDTH - PAD) y=(HEIGHT - 2.0) text-anchor="end" { "now" }
            @for (i, n) in rate.minutes.iter().enumerate().filter(|(_, n)| **n > 0) {
                rect.bar x=(format!("{:.1}", PAD + i as f64 * slot + 1.0)) y=(format!("{:.1}", base - height(*n)))
                    width=(format!("{:.1}", (slot - 2.0).max(1.0))) height=(format!("{:.1}", height(*n))) {
                    title { (n) " events, " (format_timestamp(rate.start + i as i64 * 60_000)) }
                }
            }
        }
    }
}

/// The part of an alarm's time raised (its first event to its clear, or `end` while it is open)
/// inside `start..=end`; None when they do not overlap.
fn span(first: i64, cleared: Option<i64>, (start, end): (i64, i64)) -> Option<(i64, i64)> {
    let from = first.max(start);
    let to = cleared.unwrap_or(end).min(end);
    (from <= to).then_some((from, to))
}

fn short(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_cut_to_the_window() {
        let window = (1_000, 2_000);
        assert_eq!(span(500, Some(1_500), window), Some((1_000, 1_500)));
        assert_eq!(span(1_200, None, window), Some((1_200, 2_000)), "open: to the end");
        assert_eq!(span(1_200, Some(1_300), window), Some((1_200, 1_300)));
        assert_eq!(span(500, Some(900), window), None, "cleared before");
        assert_eq!(span(2_500, None, window), None, "raised after");
    }
}
