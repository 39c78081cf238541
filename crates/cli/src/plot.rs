//! The throughput plot of `settee bench`: operations per second over the run's time, one
//! line per phase on a log scale (phases differ by orders of magnitude), as SVG (plotters' SVG backend needs no font or image library).

use crate::bench::Phase;
use crate::Error;
use plotters::prelude::*;
use std::path::Path;

/// Completed operations by time `t`, interpolated linearly between completions.
fn cumulative(points: &[(f64, f64)], t: f64) -> f64 {
    match points.iter().position(|&(pt, _)| pt >= t) {
        None => points.last().map_or(0.0, |p| p.1),
        Some(0) => points[0].1,
        Some(i) => {
            let ((t0, c0), (t1, c1)) = (points[i - 1], points[i]);
            if t1 > t0 {
                c0 + (c1 - c0) * (t - t0) / (t1 - t0)
            } else {
                c1
            }
        }
    }
}

/// A phase's rate in intervals of about `width` seconds: (interval middle, ops/s).
pub fn rate_series(phase: &Phase, width: f64) -> Vec<(f64, f64)> {
    let mut events = phase.events.clone();
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut points = vec![(phase.start, 0.0)];
    let mut total = 0.0;
    for (t, n) in events {
        total += n as f64;
        points.push((t, total));
    }
    let end = phase.start + phase.secs;
    if phase.secs <= 0.0 {
        return Vec::new();
    }
    let n = (phase.secs / width).ceil().max(1.0) as usize;
    let step = phase.secs / n as f64;
    (0..n)
        .map(|i| {
            let a = phase.start + i as f64 * step;
            let b = (a + step).min(end);
            let rate = (cumulative(&points, b) - cumulative(&points, a)) / (b - a);
            ((a + b) / 2.0, rate)
        })
        .collect()
}

pub fn throughput(path: &Path, phases: &[Phase]) -> Result<(), Error> {
    draw(path, phases).map_err(|e| Error::Format(format!("{}: {e}", path.display())))
}

fn draw(path: &Path, phases: &[Phase]) -> Result<(), Box<dyn std::error::Error>> {
    let end = phases
        .iter()
        .map(|p| p.start + p.secs)
        .fold(0.0, f64::max)
        .max(0.001);
    let width = (end / 150.0).max(0.02);
    let series: Vec<(String, Vec<(f64, f64)>)> = phases
        .iter()
        .map(|p| (format!("{} ({}/s)", p.name, p.unit), rate_series(p, width)))
        .filter(|(_, s)| !s.is_empty())
        .collect();
    let top = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1.0);

    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("settee bench: throughput over time", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..end * 1.02, (1.0..top * 2.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds since the start")
        .y_desc("operations per second (log scale)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    for (i, (name, points)) in series.into_iter().enumerate() {
        // The log scale starts at 1 op/s: slower intervals sit on the axis.
        let points: Vec<(f64, f64)> = points.into_iter().map(|(t, r)| (t, r.max(1.0))).collect();
        let color = Palette99::pick(i).mix(0.9);
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 2, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(start: f64, secs: f64, events: Vec<(f64, u64)>) -> Phase {
        Phase {
            name: "p".into(),
            unit: "docs",
            ops: events.iter().map(|e| e.1).sum(),
            start,
            secs,
            latencies_ms: vec![],
            events,
        }
    }

    #[test]
    fn rates_follow_completions() {
        // 100 ops per second for 2 s, completions every half second.
        let p = phase(
            1.0,
            2.0,
            (1..=4).map(|i| (1.0 + i as f64 * 0.5, 50)).collect(),
        );
        let s = rate_series(&p, 0.5);
        assert_eq!(s.len(), 4);
        for (t, r) in &s {
            assert!((r - 100.0).abs() < 1e-9, "{t}: {r}");
        }
        assert!((s[0].0 - 1.25).abs() < 1e-9);
        // One completion at the end spreads over the whole phase.
        let one = rate_series(&phase(0.0, 1.0, vec![(1.0, 10)]), 0.25);
        assert!(one.iter().all(|(_, r)| (r - 10.0).abs() < 1e-9));
    }

    #[test]
    fn writes_an_svg() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.svg");
        let phases = [
            phase(0.0, 2.0, vec![(1.0, 100), (2.0, 300)]),
            phase(2.0, 1.0, vec![(3.0, 5)]),
        ];
        throughput(&path, &phases).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("throughput over time"));
    }
}
