//! The HdrHistogram percentile-distribution text format (`.hgrm`), as the Java tools and the
//! online plotter read it.

use hdrhistogram::Histogram;
use std::io::Write;

/// Writes `h` (recorded in µs) in HdrHistogram's `outputPercentileDistribution` text format with
/// values in milliseconds, as the Java tools and the online plotter read it.
pub fn write_hgrm<W: Write>(h: &Histogram<u64>, w: &mut W) -> std::io::Result<()> {
    let scale = 1000.0;
    let p = h.sigfig() as usize;
    writeln!(
        w,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    )?;
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let value = v.value_iterated_to() as f64 / scale;
        if q < 1.0 {
            writeln!(
                w,
                "{:>12.p$} {:>2.12} {:>10} {:>14.2}",
                value,
                q,
                total,
                1.0 / (1.0 - q),
                p = p
            )?;
        } else {
            writeln!(w, "{:>12.p$} {:>2.12} {:>10}", value, q, total, p = p)?;
        }
    }
    let sub_buckets = (2.0 * 10f64.powi(p as i32)).log2().ceil().exp2() as u64;
    writeln!(
        w,
        "#[Mean    = {:>12.p$}, StdDeviation   = {:>12.p$}]",
        h.mean() / scale,
        h.stdev() / scale,
        p = p
    )?;
    writeln!(
        w,
        "#[Max     = {:>12.p$}, Total count    = {:>12}]",
        h.max() as f64 / scale,
        h.len(),
        p = p
    )?;
    writeln!(
        w,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        sub_buckets
    )?;
    Ok(())
}
