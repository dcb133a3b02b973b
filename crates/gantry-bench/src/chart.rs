//! The ingest chart: p50 and p99 latency per second (upper panel) and answers per second (lower
//! panel) for each store, drawn into a PNG with plotters' bitmap backend. Text uses DejaVu Sans
//! from the `dejavu` crate, so no system font is needed.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::anyhow;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::load::WindowPoint;

const COLORS: [RGBColor; 4] = [RGBColor(31, 119, 180), RGBColor(214, 39, 40), GREEN, MAGENTA];

fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(anyhow!("the embedded font could not be loaded"))
    }
}

/// Draws one line per store and percentile. `series` pairs a store's name with its timeline.
pub fn render(path: &Path, title: &str, series: &[(String, Vec<WindowPoint>)]) -> anyhow::Result<()> {
    register_font()?;
    let seconds = series.iter().map(|(_, p)| p.len()).max().unwrap_or(0).max(1) as f64;
    let max_ms = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|w| w.p99_ms))
        .fold(1.0_f64, f64::max)
        * 1.15;
    let max_rate = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|w| w.answers as f64))
        .fold(1.0_f64, f64::max)
        * 1.15;

    let root = BitMapBackend::new(path, (1200, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let (upper, lower) = root.split_vertically(470);

    let mut latency = ChartBuilder::on(&upper)
        .caption(format!("{title}: latency per second"), ("sans-serif", 24))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..seconds, 0f64..max_ms)
        .map_err(plot_error)?;
    latency
        .configure_mesh()
        .x_desc("seconds into the measured run")
        .y_desc("latency (ms)")
        .draw()
        .map_err(plot_error)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        for (label, width, pick) in [
            ("p99", 3, (|w: &WindowPoint| w.p99_ms) as fn(&WindowPoint) -> f64),
            ("p50", 1, |w: &WindowPoint| w.p50_ms),
        ] {
            let style = color.stroke_width(width);
            latency
                .draw_series(LineSeries::new(
                    points.iter().map(|w| (w.second as f64 + 0.5, pick(w))),
                    style,
                ))
                .map_err(plot_error)?
                .label(format!("{name} {label}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        }
    }
    latency
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;

    let mut rate = ChartBuilder::on(&lower)
        .caption(format!("{title}: answers per second"), ("sans-serif", 24))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..seconds, 0f64..max_rate)
        .map_err(plot_error)?;
    rate.configure_mesh()
        .x_desc("seconds into the measured run")
        .y_desc("answers / s")
        .draw()
        .map_err(plot_error)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let style = COLORS[i % COLORS.len()].stroke_width(2);
        rate.draw_series(LineSeries::new(
            points.iter().map(|w| (w.second as f64 + 0.5, w.answers as f64)),
            style,
        ))
        .map_err(plot_error)?
        .label(name.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
    }
    rate.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    Ok(())
}

fn plot_error(e: impl std::fmt::Debug) -> anyhow::Error {
    anyhow!("drawing the chart: {e:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.png");
        let points: Vec<WindowPoint> = (0..5)
            .map(|s| WindowPoint {
                second: s,
                answers: 1000 + s as u64 * 10,
                p50_ms: 2.0,
                p99_ms: 8.0 + s as f64,
            })
            .collect();
        render(
            &path,
            "ingest-rest",
            &[("sqlite".into(), points.clone()), ("postgres".into(), points)],
        )
        .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
    }
}
