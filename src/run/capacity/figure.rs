//! The capacity figure: latency (or the share over the SLA) against throughput, one line per
//! policy through its probes in rate order, each capacity marked, the bound dashed.

use super::{violation_share, Bound, Capacity, Probe};
use crate::error::Result;
use crate::metrics::Stats;

/// Draws `caps` as latency (or violation share) against throughput: one line per policy through
/// its probes in rate order, each capacity marked, the bound dashed (SVG at `path`).
pub fn write_figure(
    path: &std::path::Path,
    title: &str,
    caps: &[Capacity],
    bound: Bound,
) -> Result<()> {
    crate::plot::Figure {
        panels: vec![panel(title, caps, bound)],
        shared_legend: true,
    }
    .write_svg(path, 720, 460)
}

/// The figure's one panel: each policy's probes in rate order as (throughput, bounded figure),
/// its capacity marked, and the bound as a dashed line across them.
fn panel(title: &str, caps: &[Capacity], bound: Bound) -> crate::plot::Panel {
    use crate::plot::{Mark, Panel, Series};
    let y_of = |st: &Stats| match bound {
        Bound::P99Ms(_) | Bound::TtftP99Ms(_) | Bound::TpotP99Ms(_) | Bound::TokenSlo { .. } => {
            bound.value(st)
        }
        Bound::Violations(_) => 100.0 * violation_share(st),
    };
    let mut panel = Panel {
        title: title.to_string(),
        x_label: "throughput (req/s)".into(),
        y_label: match bound {
            Bound::P99Ms(_) => "p99 latency (ms)".into(),
            Bound::Violations(_) => "requests over their SLA (%)".into(),
            Bound::TtftP99Ms(_) => "p99 time to first token (ms)".into(),
            Bound::TpotP99Ms(_) => "p99 time per output token (ms)".into(),
            Bound::TokenSlo { .. } => "p99 TTFT or TPOT over its bound (the larger)".into(),
        },
        log_y: !matches!(bound, Bound::Violations(_)),
        ..Panel::default()
    };
    let mut max_x: f64 = 0.0;
    for (i, c) in caps.iter().enumerate() {
        let mut probes: Vec<&Probe> = c.probes.iter().collect();
        probes.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        let points: Vec<(f64, f64)> = probes
            .iter()
            .map(|p| (p.stats.throughput_rps, y_of(&p.stats).max(1e-3)))
            .collect();
        max_x = points.iter().fold(max_x, |m, p| m.max(p.0));
        panel.series.push(Series {
            name: c.policy.clone(),
            points,
            markers: true,
            ..Series::default()
        });
        if let Some(cap) = c.capacity_rps {
            let at = (c.at.throughput_rps, y_of(&c.at).max(1e-3));
            panel.marks.push(Mark {
                at,
                text_y: at.1,
                label: format!("{cap:.0}/s"),
                series: i,
            });
        }
    }
    let limit = match bound {
        Bound::P99Ms(x) | Bound::TtftP99Ms(x) | Bound::TpotP99Ms(x) => x,
        Bound::Violations(v) => 100.0 * v,
        Bound::TokenSlo { .. } => 1.0,
    };
    panel.series.push(Series {
        name: "the bound".into(),
        points: vec![(0.0, limit), (max_x, limit)],
        dashed: true,
        ..Series::default()
    });
    panel
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::capacity::tests::stats;

    #[test]
    fn the_figure_draws_each_policys_probes_in_rate_order_its_capacity_and_the_bound() {
        let probe = |rate: f64, p99: f64, viol: f64, ok| Probe {
            rate,
            stats: Stats {
                throughput_rps: rate * 0.9,
                ..stats(p99, viol, 0)
            },
            ok,
        };
        let lazy = Capacity {
            policy: "lazy".into(),
            capacity_rps: Some(150.0),
            note: None,
            at: probe(150.0, 8.0, 0.01, true).stats,
            // in the order tried: 100, 200, 150
            probes: vec![
                probe(100.0, 5.0, 0.0, true),
                probe(200.0, 50.0, 0.2, false),
                probe(150.0, 8.0, 0.01, true),
            ],
        };
        let none = Capacity {
            policy: "serial".into(),
            capacity_rps: None,
            note: Some("meets the bound at no rate tried".into()),
            at: Stats::default(),
            probes: vec![probe(100.0, 0.0, 0.5, false)],
        };
        let caps = [lazy, none];
        let p = panel("ResNet-50 at p99 ≤ 10 ms", &caps, Bound::P99Ms(10.0));
        assert_eq!(p.title, "ResNet-50 at p99 ≤ 10 ms");
        assert_eq!(p.x_label, "throughput (req/s)");
        assert_eq!(p.y_label, "p99 latency (ms)");
        assert!(p.log_y);
        let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["lazy", "serial", "the bound"]);
        assert!(p.series[0].markers && !p.series[0].dashed);
        // sorted by rate; a zero p99 is drawn at 1e-3 on the log axis
        assert_eq!(
            p.series[0].points,
            [(90.0, 5.0), (135.0, 8.0), (180.0, 50.0)]
        );
        assert_eq!(p.series[1].points, [(90.0, 1e-3)]);
        let bound = &p.series[2];
        assert!(bound.dashed && !bound.markers);
        assert_eq!(bound.points, [(0.0, 10.0), (180.0, 10.0)]);
        // one mark, on the policy with a capacity
        assert_eq!(p.marks.len(), 1);
        let m = &p.marks[0];
        assert_eq!(
            (m.at, m.text_y, m.label.as_str(), m.series),
            ((135.0, 8.0), 8.0, "150/s", 0)
        );

        // the share over the SLA is drawn in %, on a linear axis
        let p = panel("t", &caps, Bound::Violations(0.05));
        assert_eq!(p.y_label, "requests over their SLA (%)");
        assert!(!p.log_y);
        assert_eq!(p.series[0].points[2], (180.0, 20.0));
        assert_eq!(p.series[2].points, [(0.0, 5.0), (180.0, 5.0)]);
        for (b, label) in [
            (Bound::TtftP99Ms(1.0), "p99 time to first token (ms)"),
            (Bound::TpotP99Ms(1.0), "p99 time per output token (ms)"),
            (
                Bound::TokenSlo {
                    ttft_ms: 1.0,
                    tpot_ms: 1.0,
                },
                "p99 TTFT or TPOT over its bound (the larger)",
            ),
        ] {
            let p = panel("t", &caps, b);
            assert_eq!(p.y_label, label);
            assert!(p.log_y);
            assert_eq!(p.series[2].points[0], (0.0, 1.0));
        }
    }
}
