//! SVG charts (plotters, SVG backend only: no system libraries). One [`Figure`] is a row of
//! [`Panel`]s; a panel holds line [`Series`] with optional error bars and marks, on linear or
//! logarithmic axes with labels and units. No line hides another: a panel's headline series is
//! drawn last, a series that repeats an earlier one point for point is drawn dashed over it
//! and its legend says which it equals, and mark labels stay inside their panel.

use crate::error::{Error, Result};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::path::Path;

/// One line of points (x, y) with an optional (low, high) error bar per point.
#[derive(Clone, Debug, Default)]
pub(crate) struct Series {
    /// Legend label.
    pub name: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
    /// Error bars, aligned with `points` (empty: none).
    pub bars: Vec<(f64, f64)>,
    /// Dashed style (a reference or a bound rather than a measurement).
    pub dashed: bool,
    /// Draw markers at the points.
    pub markers: bool,
}

impl Series {
    /// Adds a point at `x` with its error bar: `(mean, low, high)`, as
    /// [`spread`](crate::metrics::spread) gives it.
    pub(crate) fn push_spread(&mut self, x: f64, (y, lo, hi): (f64, f64, f64)) {
        self.points.push((x, y));
        self.bars.push((lo, hi));
    }
}

/// A labelled point drawn on a panel (e.g. "p99").
#[derive(Clone, Debug)]
pub(crate) struct Mark {
    /// Position.
    pub at: (f64, f64),
    /// Y of the label text (data coordinates), so that labels of close marks do not overlap.
    pub text_y: f64,
    /// Text.
    pub label: String,
    /// Index of the series whose colour it takes.
    pub series: usize,
}

/// One chart.
#[derive(Clone, Debug, Default)]
pub(crate) struct Panel {
    /// Caption.
    pub title: String,
    /// X axis label with unit.
    pub x_label: String,
    /// Y axis label with unit.
    pub y_label: String,
    /// Log-scale x.
    pub log_x: bool,
    /// Log-scale y.
    pub log_y: bool,
    /// Lines.
    pub series: Vec<Series>,
    /// Marks.
    pub marks: Vec<Mark>,
    /// Fixed y range (else from the data).
    pub y_range: Option<(f64, f64)>,
    /// Legend inside the panel, lower right (else upper left); unused with a shared legend.
    pub legend_lower_right: bool,
    /// The x values are 1/(1−p) of percentiles p (HdrHistogram's percentile-spectrum axis,
    /// on a log scale): labelled as percentiles (10 → "90%", 1000 → "99.9%").
    pub x_percentile: bool,
    /// The series the figure is about (by name): drawn last, on top of the others [default:
    /// the series named `lazy` or `LazyB`, the policy this project is about].
    pub headline: Option<String>,
}

impl Panel {
    /// The index of the series the panel is about ([`Panel::headline`]), if it has one.
    fn head(&self) -> Option<usize> {
        match &self.headline {
            Some(h) => self.series.iter().position(|s| &s.name == h),
            None => self
                .series
                .iter()
                .position(|s| s.name == "lazy" || s.name == "LazyB"),
        }
    }

    /// The order the series are drawn in: as listed, the headline last.
    fn draw_order(&self) -> Vec<usize> {
        let head = self.head();
        let mut order: Vec<usize> = (0..self.series.len())
            .filter(|&i| Some(i) != head)
            .collect();
        order.extend(head);
        order
    }

    /// Each series' colour: the headline in [`HEADLINE`], the others through [`PALETTE`] in
    /// their order, so that no other line takes the headline's colour.
    fn colors(&self) -> Vec<RGBColor> {
        let head = self.head();
        (0..self.series.len())
            .map(|i| match head {
                Some(h) if h == i => HEADLINE,
                Some(h) if h < i => PALETTE[(i - 1) % PALETTE.len()],
                _ => PALETTE[i % PALETTE.len()],
            })
            .collect()
    }

    /// For each series, the one drawn before it whose points it repeats exactly (it is then
    /// drawn dashed, so that both show), or None.
    fn repeats(&self) -> Vec<Option<usize>> {
        let order = self.draw_order();
        let mut of = vec![None; self.series.len()];
        for (k, &i) in order.iter().enumerate() {
            let s = &self.series[i];
            of[i] = order[..k]
                .iter()
                .copied()
                .find(|&j| !s.points.is_empty() && self.series[j].points == s.points);
        }
        of
    }
}

/// The legend entry of series `i` of a shared legend: its name, and which series it equals in
/// the panels where it repeats one ("oracle (= lazy)", or "(= lazy in 2 of 3 panels)").
fn shared_label(panels: &[Panel], i: usize) -> String {
    let name = panels[0].series[i].name.clone();
    let same: Vec<Option<usize>> = panels
        .iter()
        .map(|p| p.repeats().get(i).copied().flatten())
        .collect();
    let hits = same.iter().flatten().count();
    let Some(&Some(j)) = same.iter().find(|s| s.is_some()) else {
        return name;
    };
    let other = &panels[0].series[j].name;
    if hits == panels.len() {
        format!("{name} (= {other})")
    } else {
        format!("{name} (= {other} in {hits} of {} panels)", panels.len())
    }
}

/// Several panels side by side, written as one SVG.
#[derive(Clone, Debug, Default)]
pub(crate) struct Figure {
    /// Panels, left to right.
    pub panels: Vec<Panel>,
    /// One legend for all panels, in a column on the right (the panels' series share names and
    /// colours); otherwise each panel draws its own.
    pub shared_legend: bool,
}

/// Width of the shared legend column in pixels (at least; wider for long entries).
const LEGEND_W: u32 = 205;

/// The headline series' colour (LazyB's, unless a panel names another): a strong red, drawn
/// wider than the rest, that no other series takes.
const HEADLINE: RGBColor = RGBColor(214, 39, 40);

/// The other series' colours, in order (the Tableau palette without its red, then black, navy
/// and teal, so that a dozen lines never share a colour).
const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(0, 0, 128),
    RGBColor(0, 128, 128),
];

/// The size asked of plotters for a figure's smallest text (tick labels, legends, marks). Its
/// SVG backend writes 0.806 of the size asked (16 → 12.9 px).
pub(crate) const TEXT: u32 = 16;

/// The widest a figure is drawn, legend included. A README shows a figure at most 830 px
/// wide, scaled down when it is wider: at this width the smallest text (12.9 px, [`TEXT`])
/// still shows at 11.2 px, over the 11 px a reader needs (checked on every README figure by
/// `tests/it/figures.rs`). Rows of panels that would be wider wrap onto further rows.
pub(crate) const MAX_WIDTH: u32 = 960;

fn bounds(vals: impl Iterator<Item = f64>, log: bool, include_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (lo / 1.3, hi * 1.3)
    } else {
        let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.05).max(1e-9);
        let lo = if include_zero && lo >= 0.0 {
            0.0
        } else {
            lo - pad
        };
        (lo, hi + pad)
    }
}

impl Figure {
    /// Writes the figure to `path` (SVG), `width_per_panel` × `height` pixels per panel: the
    /// panels left to right, wrapped onto further rows where a row would make the figure
    /// wider than [`MAX_WIDTH`].
    pub(crate) fn write_svg(&self, path: &Path, width_per_panel: u32, height: u32) -> Result<()> {
        let n = self.panels.len().max(1) as u32;
        let labels: Vec<String> = match (self.shared_legend, self.panels.first()) {
            (true, Some(first)) => (0..first.series.len())
                .map(|i| shared_label(&self.panels, i))
                .collect(),
            _ => Vec::new(),
        };
        // wide enough for the longest entry (about 9 px a character at TEXT)
        let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u32;
        let extra = if self.shared_legend {
            LEGEND_W.max(48 + 9 * longest)
        } else {
            0
        };
        let cols = (MAX_WIDTH.saturating_sub(extra) / width_per_panel.max(1)).clamp(1, n);
        let rows = n.div_ceil(cols);
        let root = SVGBackend::new(path, (width_per_panel * cols + extra, height * rows))
            .into_drawing_area();
        let err = |e: String| Error::Internal(format!("drawing {}: {e}", path.display()));
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let (plots, legend) = root.split_horizontally(width_per_panel * cols);
        let areas = plots.split_evenly((rows as usize, cols as usize));
        for (p, area) in self.panels.iter().zip(areas.iter()) {
            draw_panel(area, p, !self.shared_legend)?;
        }
        let colors = self.panels.first().map(Panel::colors).unwrap_or_default();
        for ((i, label), c) in labels.into_iter().enumerate().zip(colors) {
            let y = 50 + 24 * i as i32;
            let line = vec![(8, y), (34, y)];
            let dashed = self.panels[0].series[i].dashed;
            if dashed {
                legend.draw(&DashedPathElement::new(line, 5, 4, c.stroke_width(2)))
            } else {
                legend.draw(&PathElement::new(line, c.stroke_width(3)))
            }
            .map_err(|e| err(e.to_string()))?;
            legend
                .draw(&Text::new(label, (40, y - 8), ("sans-serif", TEXT)))
                .map_err(|e| err(e.to_string()))?;
        }
        root.present().map_err(|e| err(e.to_string()))?;
        Ok(())
    }
}

fn draw_panel(area: &DrawingArea<SVGBackend, Shift>, p: &Panel, legend: bool) -> Result<()> {
    let xs = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0));
    let ys = p.series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|q| q.1)
            .chain(s.bars.iter().flat_map(|b| [b.0, b.1]))
    });
    let (x0, x1) = bounds(xs, p.log_x, false);
    let (y0, y1) = p.y_range.unwrap_or_else(|| bounds(ys, p.log_y, true));
    match (p.log_x, p.log_y) {
        (false, false) => inner(area, p, legend, x0..x1, y0..y1),
        (true, false) => inner(area, p, legend, (x0..x1).log_scale(), y0..y1),
        (false, true) => inner(area, p, legend, x0..x1, (y0..y1).log_scale()),
        (true, true) => inner(area, p, legend, (x0..x1).log_scale(), (y0..y1).log_scale()),
    }
}

/// An axis tick's label: whole numbers from 100, one decimal from 1, two below.
fn tick_label(v: &f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{}", (v * 10.0).round() / 10.0)
    } else {
        format!("{v:.2}")
    }
}

/// A tick on a percentile axis plotted as 1/(1−q): the percentile it stands for.
fn percentile_label(v: &f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / v.max(1.0));
    let s = format!("{p:.4}");
    format!("{}%", s.trim_end_matches('0').trim_end_matches('.'))
}

fn inner<XR, YR>(
    area: &DrawingArea<SVGBackend, Shift>,
    p: &Panel,
    legend: bool,
    xr: XR,
    yr: YR,
) -> Result<()>
where
    XR: AsRangedCoord<Value = f64>,
    YR: AsRangedCoord<Value = f64>,
    XR::CoordDescType: ValueFormatter<f64>,
    YR::CoordDescType: ValueFormatter<f64>,
{
    let e = |x: &dyn std::fmt::Display| Error::Internal(format!("drawing a figure: {x}"));
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", TEXT + 4))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(62)
        .build_cartesian_2d(xr, yr)
        .map_err(|x| e(&x))?;
    // log axes get few labels: plotters otherwise labels every minor tick and they overlap
    let (nx, ny) = (if p.log_x { 4 } else { 10 }, if p.log_y { 5 } else { 10 });
    let xfmt: fn(&f64) -> String = if p.x_percentile {
        percentile_label
    } else {
        tick_label
    };
    chart
        .configure_mesh()
        .x_labels(nx)
        .y_labels(ny)
        .x_label_formatter(&xfmt)
        .y_label_formatter(&tick_label)
        .x_desc(&p.x_label)
        .y_desc(&p.y_label)
        .label_style(("sans-serif", TEXT))
        .axis_desc_style(("sans-serif", TEXT + 1))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|x| e(&x))?;
    let repeats = p.repeats();
    let colors = p.colors();
    let head = p.head();
    for i in p.draw_order() {
        let s = &p.series[i];
        let c = colors[i];
        // the headline a little wider than the rest
        let w = if head == Some(i) { 3 } else { 2 };
        // a repeat of an earlier line: dashed and wider, so that the line under it shows
        let (dashed, style, name) = match repeats[i] {
            Some(j) => (
                true,
                c.stroke_width(w + 1),
                format!("{} (= {})", s.name, p.series[j].name),
            ),
            None if s.dashed => (true, c.stroke_width(w - 1), s.name.clone()),
            None => (false, c.stroke_width(w), s.name.clone()),
        };
        let pts = s.points.clone();
        if dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 6, 6, style))
                .map_err(|x| e(&x))?
                .label(name)
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 18, y)], 4, 3, c.stroke_width(2))
                });
        } else {
            chart
                .draw_series(LineSeries::new(pts, style))
                .map_err(|x| e(&x))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        if s.markers {
            chart
                .draw_series(s.points.iter().map(|&q| Circle::new(q, 3, c.filled())))
                .map_err(|x| e(&x))?;
        }
        if !s.bars.is_empty() {
            chart
                .draw_series(s.points.iter().zip(&s.bars).map(|(&(x, y), &(lo, hi))| {
                    ErrorBar::new_vertical(x, lo, y, hi, c.stroke_width(1), 6)
                }))
                .map_err(|x| e(&x))?;
        }
    }
    // a label right of the panel's middle ends at its mark's x, so that it stays inside
    let (px, _) = chart.plotting_area().get_pixel_range();
    let middle = (px.start + px.end) / 2;
    for m in &p.marks {
        let c = colors[m.series];
        chart
            .draw_series(std::iter::once(Cross::new(m.at, 6, c.stroke_width(2))))
            .map_err(|x| e(&x))?;
        let right = chart.backend_coord(&m.at).0 > middle;
        let anchor = plotters::style::text_anchor::Pos::new(
            if right {
                plotters::style::text_anchor::HPos::Right
            } else {
                plotters::style::text_anchor::HPos::Left
            },
            plotters::style::text_anchor::VPos::Center,
        );
        chart
            .draw_series(std::iter::once(Text::new(
                m.label.clone(),
                (m.at.0, m.text_y),
                ("sans-serif", TEXT).into_font().color(&c).pos(anchor),
            )))
            .map_err(|x| e(&x))?;
    }
    if legend {
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .label_font(("sans-serif", TEXT))
            .position(if p.legend_lower_right {
                SeriesLabelPosition::LowerRight
            } else {
                SeriesLabelPosition::UpperLeft
            })
            .draw()
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, ys: &[f64]) -> Series {
        Series {
            name: name.into(),
            points: ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
            ..Series::default()
        }
    }

    fn panel(series: Vec<Series>) -> Panel {
        Panel {
            series,
            ..Panel::default()
        }
    }

    #[test]
    fn lazy_is_drawn_last_and_a_repeat_names_what_it_repeats() {
        let p = panel(vec![
            series("serial", &[1.0, 2.0]),
            series("lazy", &[1.0, 1.5]),
            series("oracle", &[1.0, 1.5]),
            series("graph:5", &[2.0, 3.0]),
        ]);
        assert_eq!(p.draw_order(), [0, 2, 3, 1]);
        // oracle is drawn before lazy now, so lazy is the repeat, dashed over it
        assert_eq!(p.repeats(), [None, Some(2), None, None]);
        let named = Panel {
            headline: Some("graph:5".into()),
            ..p.clone()
        };
        assert_eq!(named.draw_order(), [0, 1, 2, 3]);
        assert_eq!(named.repeats(), [None, None, Some(1), None]);
    }

    #[test]
    fn a_shared_legend_says_in_how_many_panels_two_lines_coincide() {
        let same = panel(vec![series("lazy", &[1.0]), series("oracle", &[1.0])]);
        let apart = panel(vec![series("lazy", &[1.0]), series("oracle", &[2.0])]);
        let both = [same.clone(), same.clone()];
        assert_eq!(shared_label(&both, 0), "lazy (= oracle)");
        assert_eq!(shared_label(&both, 1), "oracle");
        let one = [same, apart];
        assert_eq!(shared_label(&one, 0), "lazy (= oracle in 1 of 2 panels)");
    }

    #[test]
    fn a_figure_with_coinciding_lines_draws_both_and_says_so() {
        let path = std::env::temp_dir().join(format!("lazybatch-plot-{}.svg", std::process::id()));
        let fig = Figure {
            panels: vec![panel(vec![
                series("oracle", &[1.0, 2.0, 3.0]),
                series("lazy", &[1.0, 2.0, 3.0]),
            ])],
            shared_legend: false,
        };
        fig.write_svg(&path, 400, 300).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(
            svg.contains("lazy (= oracle)"),
            "the legend says they coincide"
        );
        assert!(svg.contains("\noracle\n"), "oracle keeps its own entry");
    }
}
