//! The pictures `compare --out DIR` draws: per arrival rate, every policy's latency percentile
//! spectrum on HdrHistogram's 1/(1−p) axis (the picture people draw from `.hgrm` files), and,
//! with several rates, mean and p99 latency against the rate.

use crate::error::Result;
use crate::plot::{Figure, Panel, Series};
use hdrhistogram::Histogram;
use std::path::{Path, PathBuf};

/// One policy's result at one rate: its latency histogram (µs) and its mean and p99 (ms).
pub struct Point<'a> {
    /// Policy string.
    pub policy: &'a str,
    /// Arrival rate (req/s).
    pub rate: f64,
    /// Latencies of one run, in µs.
    pub histogram: &'a Histogram<u64>,
    /// Mean latency over seeds (ms).
    pub mean_ms: f64,
    /// p99 latency over seeds (ms).
    pub p99_ms: f64,
}

/// The spectrum of one histogram: (1/(1−p), latency in ms) at HdrHistogram's percentile steps.
pub fn spectrum(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    h.iter_quantiles(5)
        .map(|v| (v.quantile_iterated_to(), v.value_iterated_to() as f64 / 1e3))
        .filter(|&(q, _)| q < 1.0)
        .map(|(q, ms)| (1.0 / (1.0 - q), ms.max(1e-3)))
        .collect()
}

/// Writes `<stem>_<rate>rps_spectrum.svg` per rate and, with several rates,
/// `<stem>_vs_rate.svg` into `dir`. Returns the paths written.
pub fn write(dir: &Path, stem: &str, title: &str, points: &[Point]) -> Result<Vec<PathBuf>> {
    let mut rates: Vec<f64> = Vec::new();
    let mut policies: Vec<&str> = Vec::new();
    for p in points {
        if !rates.contains(&p.rate) {
            rates.push(p.rate);
        }
        if !policies.contains(&p.policy) {
            policies.push(p.policy);
        }
    }
    let mut written = Vec::new();
    for &r in &rates {
        let panel = Panel {
            title: format!("{title} at {r} req/s: latency by percentile"),
            x_label: "percentile".into(),
            y_label: "latency (ms)".into(),
            log_x: true,
            log_y: true,
            x_percentile: true,
            series: points
                .iter()
                .filter(|p| p.rate == r)
                .map(|p| Series {
                    name: p.policy.to_string(),
                    points: spectrum(p.histogram),
                    ..Series::default()
                })
                .collect(),
            ..Panel::default()
        };
        let path = dir.join(format!("{stem}_{}rps_spectrum.svg", r.round()));
        Figure {
            panels: vec![panel],
            shared_legend: true,
        }
        .write_svg(&path, 620, 420)?;
        written.push(path);
    }
    if rates.len() > 1 {
        let by_rate = |pick: fn(&Point) -> f64| -> Vec<Series> {
            policies
                .iter()
                .map(|&pol| Series {
                    name: pol.to_string(),
                    markers: true,
                    points: points
                        .iter()
                        .filter(|p| p.policy == pol)
                        .map(|p| (p.rate, pick(p)))
                        .collect(),
                    ..Series::default()
                })
                .collect()
        };
        let panel = |what: &str, series| Panel {
            title: format!("{title}: {what} latency"),
            x_label: "arrival rate (req/s)".into(),
            y_label: format!("{what} latency (ms)"),
            log_x: true,
            log_y: true,
            series,
            ..Panel::default()
        };
        let path = dir.join(format!("{stem}_vs_rate.svg"));
        Figure {
            panels: vec![
                panel("mean", by_rate(|p| p.mean_ms)),
                panel("p99", by_rate(|p| p.p99_ms)),
            ],
            shared_legend: true,
        }
        .write_svg(&path, 460, 400)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spectrum_runs_up_the_percentiles() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v).unwrap();
        }
        let s = spectrum(&h);
        assert!(s.len() > 10);
        // x = 1/(1-p) and the latency both grow; the median sits at x = 2 near 5 ms
        assert!(s.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let med = s.iter().find(|p| p.0 >= 2.0).unwrap();
        assert!((med.1 - 5.0).abs() < 0.1, "{med:?}");
    }
}
