//! SVG heat maps (plotters, SVG backend only): a grid of ratios, one row per model and one
//! column per setting, each cell coloured by how far its ratio is from a goal and labelled
//! with its value. `reproduce --figures adaptive` draws `lazy:adaptive`'s ratio to the best
//! baseline this way.

use crate::error::{Error, Result};
use plotters::prelude::*;
use plotters::style::text_anchor;
use std::path::Path;

/// One panel: `values[r][c]` is row `r`'s ratio at column `c` (NaN: no value).
#[derive(Clone, Debug, Default)]
pub(crate) struct HeatMap {
    /// Title above the grid.
    pub title: String,
    /// Row labels (left).
    pub rows: Vec<String>,
    /// Column labels (below).
    pub cols: Vec<String>,
    /// The column axis' name.
    pub x_label: String,
    /// The ratios, one vector per row.
    pub values: Vec<Vec<f64>>,
    /// Ratios up to this are on goal (green); above it, cells shade to red at `worst`.
    pub goal: f64,
    /// The ratio drawn fully red.
    pub worst: f64,
    /// Ratios at or above `goal` are on goal (capacities), instead of at or under it.
    pub higher_is_better: bool,
    /// Each cell's text, instead of its ratio (empty: the ratios).
    pub labels: Vec<Vec<String>>,
    /// Cell width in pixels (0: [`CELL_W`]).
    pub cell_w: i32,
    /// Width of the row labels' margin in pixels (0: [`LEFT`]).
    pub left: i32,
    /// What the colours mean, under the grid (empty: the goal and the worst ratio, in words).
    pub key: String,
}

/// Cell size and margins in pixels.
const CELL_W: i32 = 62;
const CELL_H: i32 = 32;
const LEFT: i32 = 175;
const TOP: i32 = 40;
const BOTTOM: i32 = 80;

/// The colour of `v` (`higher`: on goal at or above `goal`, as the reciprocals are under
/// theirs).
fn shade_of(v: f64, goal: f64, worst: f64, higher: bool) -> RGBColor {
    if higher {
        shade(1.0 / v, 1.0 / goal, 1.0 / worst)
    } else {
        shade(v, goal, worst)
    }
}

/// The colour of `v`: green at or under `goal`, white just above it, red at `worst`.
fn shade(v: f64, goal: f64, worst: f64) -> RGBColor {
    if !v.is_finite() {
        return RGBColor(230, 230, 230);
    }
    if v <= goal {
        // greener the further under 1
        let t = ((goal - v) / 0.3).clamp(0.0, 1.0);
        let g = |a: f64, b: f64| (a + (b - a) * t) as u8;
        return RGBColor(g(210.0, 90.0), g(240.0, 190.0), g(210.0, 90.0));
    }
    let t = ((v - goal) / (worst - goal).max(1e-9)).clamp(0.0, 1.0);
    let g = |a: f64, b: f64| (a + (b - a) * t) as u8;
    RGBColor(g(255.0, 215.0), g(235.0, 60.0), g(200.0, 50.0))
}

/// A cell's text: two decimals, or as many more as it takes (up to six) for a value on the
/// other side of the goal than its two-decimal rounding ("1.053" for a miss of 1.0525, not
/// "1.05", which reads as on goal).
fn cell_label(v: f64, goal: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let miss = v > goal;
    for digits in 2..=6 {
        let s = format!("{v:.digits$}");
        let shown: f64 = s.parse().unwrap_or(v);
        if (shown > goal) == miss {
            return s;
        }
    }
    format!("{v:.6}")
}

impl HeatMap {
    fn left(&self) -> i32 {
        if self.left > 0 {
            self.left
        } else {
            LEFT
        }
    }

    fn cell_w(&self) -> i32 {
        if self.cell_w > 0 {
            self.cell_w
        } else {
            CELL_W
        }
    }

    fn size(&self) -> (u32, u32) {
        let w = self.left() + self.cell_w() * self.cols.len() as i32 + 20;
        let h = TOP + CELL_H * self.rows.len() as i32 + BOTTOM;
        (w as u32, h as u32)
    }

    /// Writes the panels side by side to `path` (SVG), wrapped onto further rows where a row
    /// would be wider than [`crate::plot::MAX_WIDTH`].
    pub(crate) fn write_svg(panels: &[HeatMap], path: &Path) -> Result<()> {
        let err = |e: String| Error::Internal(format!("drawing {}: {e}", path.display()));
        // each panel's top left corner, row by row
        let (mut at, mut x, mut y, mut row_h, mut w) = (Vec::new(), 0u32, 0u32, 0u32, 0u32);
        for p in panels {
            let (pw, ph) = p.size();
            if x > 0 && x + pw > crate::plot::MAX_WIDTH {
                (x, y, row_h) = (0, y + row_h, 0);
            }
            at.push((x, y));
            x += pw;
            w = w.max(x);
            row_h = row_h.max(ph);
        }
        let h = y + row_h;
        let root = SVGBackend::new(path, (w.max(1), h.max(1))).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        for (p, &(x, y)) in panels.iter().zip(&at) {
            let area = root.clone().shrink((x, y), p.size());
            p.draw(&area, 0).map_err(err)?;
        }
        root.present().map_err(|e| err(e.to_string()))
    }

    fn draw(
        &self,
        root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
        x0: i32,
    ) -> std::result::Result<(), String> {
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        let font = ("sans-serif", crate::plot::TEXT);
        let centred = TextStyle::from(font).pos(text_anchor::Pos::new(
            text_anchor::HPos::Center,
            text_anchor::VPos::Center,
        ));
        let right = TextStyle::from(font).pos(text_anchor::Pos::new(
            text_anchor::HPos::Right,
            text_anchor::VPos::Center,
        ));
        let cell_w = self.cell_w();
        let grid_w = cell_w * self.cols.len() as i32;
        root.draw(&Text::new(
            self.title.clone(),
            (x0 + self.left() + grid_w / 2, TOP / 2),
            TextStyle::from(("sans-serif", crate::plot::TEXT + 2)).pos(text_anchor::Pos::new(
                text_anchor::HPos::Center,
                text_anchor::VPos::Center,
            )),
        ))
        .map_err(e)?;
        for (r, name) in self.rows.iter().enumerate() {
            let y = TOP + CELL_H * r as i32;
            root.draw(&Text::new(
                name.clone(),
                (x0 + self.left() - 6, y + CELL_H / 2),
                right.clone(),
            ))
            .map_err(e)?;
            for c in 0..self.cols.len() {
                let v = self.values.get(r).and_then(|row| row.get(c)).copied();
                let v = v.unwrap_or(f64::NAN);
                let x = x0 + self.left() + cell_w * c as i32;
                let corners = [(x, y), (x + cell_w, y + CELL_H)];
                let colour = shade_of(v, self.goal, self.worst, self.higher_is_better);
                root.draw(&Rectangle::new(corners, colour.filled()))
                    .map_err(e)?;
                root.draw(&Rectangle::new(corners, WHITE.stroke_width(1)))
                    .map_err(e)?;
                let label = match self.labels.get(r).and_then(|row| row.get(c)) {
                    Some(text) => text.clone(),
                    None => cell_label(v, self.goal),
                };
                let mid = (x + cell_w / 2, y + CELL_H / 2);
                root.draw(&Text::new(label, mid, centred.clone()))
                    .map_err(e)?;
            }
        }
        let below = TOP + CELL_H * self.rows.len() as i32;
        for (c, name) in self.cols.iter().enumerate() {
            let x = x0 + self.left() + cell_w * c as i32 + cell_w / 2;
            root.draw(&Text::new(name.clone(), (x, below + 14), centred.clone()))
                .map_err(e)?;
        }
        root.draw(&Text::new(
            self.x_label.clone(),
            (x0 + self.left() + grid_w / 2, below + 40),
            centred.clone(),
        ))
        .map_err(e)?;
        // the colour key, in the figure itself
        let key = if !self.key.is_empty() {
            self.key.clone()
        } else if self.higher_is_better {
            format!(
                "green: ≥ {} (goal); orange to red: under it (red at {})",
                self.goal, self.worst
            )
        } else {
            format!(
                "green: ≤ {} (goal); orange to red: over it (red at {})",
                self.goal, self.worst
            )
        };
        root.draw(&Text::new(
            key,
            (x0 + self.left() + grid_w / 2, below + 66),
            TextStyle::from(("sans-serif", crate::plot::TEXT)).pos(text_anchor::Pos::new(
                text_anchor::HPos::Center,
                text_anchor::VPos::Center,
            )),
        ))
        .map_err(e)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_goal_cells_are_green_and_misses_red() {
        let on = shade(1.0, 1.05, 1.3);
        let miss = shade(1.3, 1.05, 1.3);
        assert!(on.1 > on.0, "green dominates on goal: {on:?}");
        assert!(
            miss.0 > miss.1,
            "red dominates at the worst ratio: {miss:?}"
        );
        assert_eq!(shade(f64::NAN, 1.05, 1.3), RGBColor(230, 230, 230));
        // where more is better (capacities), the sides swap
        let more = shade_of(2.0, 1.0, 0.5, true);
        let less = shade_of(0.5, 1.0, 0.5, true);
        assert!(more.1 > more.0, "green above the goal: {more:?}");
        assert!(less.0 > less.1, "red at the worst: {less:?}");
    }

    #[test]
    fn given_labels_replace_the_ratios() {
        let path =
            std::env::temp_dir().join(format!("lazybatch-heat-l-{}.svg", std::process::id()));
        let h = HeatMap {
            rows: vec!["a".into()],
            cols: vec!["x".into(), "y".into()],
            values: vec![vec![2.0, 0.5]],
            labels: vec![vec!["1,234".into(), "56".into()]],
            goal: 1.0,
            worst: 0.5,
            higher_is_better: true,
            cell_w: 90,
            ..HeatMap::default()
        };
        HeatMap::write_svg(&[h], &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let texts: Vec<&str> = svg.lines().map(str::trim).collect();
        assert!(texts.contains(&"1,234") && texts.contains(&"56"), "{svg}");
        assert!(!svg.contains("2.00"), "the ratio is not printed");
        assert!(
            svg.contains("green: ≥ 1 (goal)"),
            "the key says which side is good"
        );
    }

    #[test]
    fn a_cell_never_reads_as_the_other_side_of_the_goal() {
        assert_eq!(cell_label(1.0526, 1.05), "1.053");
        assert_eq!(cell_label(1.0501, 1.05), "1.0501");
        assert_eq!(cell_label(1.05, 1.05), "1.05");
        assert_eq!(cell_label(1.049, 1.05), "1.05");
        assert_eq!(cell_label(0.98, 1.05), "0.98");
        assert_eq!(cell_label(1.2, 1.05), "1.20");
        assert_eq!(cell_label(f64::NAN, 1.05), "–");
    }

    #[test]
    fn a_heat_map_writes_every_cell() {
        let path = std::env::temp_dir().join(format!("lazybatch-heat-{}.svg", std::process::id()));
        let h = HeatMap {
            title: "t".into(),
            rows: vec!["a".into(), "b".into()],
            cols: vec!["0.1".into(), "0.5".into(), "0.9".into()],
            x_label: "load".into(),
            values: vec![vec![0.98, 1.02, 1.2], vec![1.0, f64::NAN, 1.07]],
            goal: 1.05,
            worst: 1.3,
            ..HeatMap::default()
        };
        HeatMap::write_svg(&[h.clone(), h], &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        for label in ["0.98", "1.02", "1.20", "1.07", "–"] {
            assert_eq!(svg.matches(label).count(), 2, "{label} once per panel");
        }
    }
}
