//! SLA violations against the SLA target at high load (paper Fig. 14).

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use std::fmt::Write as _;

/// SLA violations against the SLA target at high load (paper Fig.
pub(super) struct Sla;

impl Experiment for Sla {
    fn name(&self) -> &'static str {
        "sla"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
        eval_jobs(MAIN, &plan.rates, plan, true, jobs);
        sla_jobs(MAIN, READINGS, plan, jobs);
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        sla(ctx)
    }
}

pub(crate) fn sla_curve(
    ctx: &Ctx,
    m: &'static str,
    pol: &str,
) -> Result<Vec<(f64, f64, f64, f64)>> {
    let r = ctx.plan.high_rate;
    let mut out = Vec::new();
    for &sla in &ctx.plan.slas {
        let runs = ctx.runs(m, pol, r, sla, COVERAGE, MAX_BATCH)?;
        let (mean, lo, hi) = spread(runs.iter().map(|x| x.violation(sla)).collect());
        out.push((sla, mean, lo, hi));
    }
    Ok(out)
}

/// Smallest SLA target from which on LazyB has no violation (mean over seeds), if any.
pub(crate) fn zero_from(curve: &[(f64, f64, f64, f64)]) -> Option<f64> {
    let mut from = None;
    for &(sla, v, _, _) in curve.iter().rev() {
        if v == 0.0 {
            from = Some(sla);
        } else {
            break;
        }
    }
    from
}

fn sla(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "policy",
        "sla_ms",
        "violation_rate",
        "violation_p25",
        "violation_p75",
    ]);
    let mut fig = Figure::default();
    let mut text = String::from("| model |");
    for r in READINGS {
        let _ = write!(text, " `{r}`: no violations from |");
    }
    let _ = writeln!(text, "\n|---|{}", "---|".repeat(READINGS.len()));
    fig.shared_legend = true;
    for &m in MAIN {
        let mut p = Panel {
            title: format!("{} at {} req/s", short(m), ctx.plan.high_rate),
            x_label: "SLA target (ms)".into(),
            y_label: "SLA violation rate".into(),
            y_range: Some((-0.02, 1.02)),
            ..Panel::default()
        };
        let mut zeros = Vec::new();
        let mut listed = policies(ctx.plan);
        listed.extend(ABLATIONS.iter().map(|a| a.to_string()));
        for pol in listed {
            let c = sla_curve(ctx, m, &pol)?;
            let drawn =
                !ABLATIONS.contains(&pol.as_str()) || DRAWN_ABLATIONS.contains(&pol.as_str());
            let mut s = Series {
                name: label(&pol),
                markers: true,
                dashed: pol.starts_with("oracle") || ABLATIONS.contains(&pol.as_str()),
                ..Series::default()
            };
            for &(sla, v, lo, hi) in &c {
                t.push(vec![
                    m.into(),
                    pol.as_str().into(),
                    sla.into(),
                    v.into(),
                    lo.into(),
                    hi.into(),
                ]);
                s.points.push((sla, v));
                s.bars.push((lo, hi));
            }
            if let Some(k) = READINGS.iter().position(|&r| r == pol) {
                zeros.push((
                    k,
                    zero_from(&c)
                        .map_or("never (in 20–100 ms)".to_string(), |z| format!("{z} ms")),
                ));
            }
            if drawn {
                p.series.push(s);
            }
        }
        zeros.sort();
        let cells: Vec<String> = zeros.into_iter().map(|(_, z)| z).collect();
        let _ = writeln!(text, "| {} | {} |", short(m), cells.join(" | "));
        fig.panels.push(p);
    }
    ctx.table(&t, "sla")?;
    ctx.figure(&fig, "sla", 520, 420)?;
    ctx.sections.push(("SLA violations vs SLA target (paper Fig. 14)".into(), format!("![sla](sla.svg)\n\nLazyB's readings and the Oracle are re-run at every target (their decisions use it); Serial and GraphB decide without it, so one run gives their violations at every target.\n\n{text}")));
    Ok(())
}
