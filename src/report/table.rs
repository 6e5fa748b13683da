//! A small table type that every experiment fills and writes as CSV and JSON, so that the data
//! behind each figure is plain and diffable.

use crate::error::{Error, Result};
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::path::Path;

/// One cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// Text.
    S(String),
    /// A number.
    F(f64),
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::S(s.to_string())
    }
}
impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::S(s)
    }
}
impl From<f64> for Cell {
    fn from(x: f64) -> Cell {
        Cell::F(x)
    }
}
impl From<u32> for Cell {
    fn from(x: u32) -> Cell {
        Cell::F(f64::from(x))
    }
}

/// Columns and rows.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Column names.
    pub columns: Vec<&'static str>,
    /// Rows (each as long as `columns`).
    pub rows: Vec<Vec<Cell>>,
}

/// 1234567 -> "1,234,567" (a table's counts and rates, `lazybatch models`' sizes).
pub fn grouped(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn fmt_f(x: f64) -> String {
    if x.is_finite() {
        // six significant digits keep the files small and stable
        let s = format!("{:.6e}", x);
        let v: f64 = s.parse().unwrap_or(x);
        format!("{v}")
    } else {
        String::new()
    }
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[&'static str]) -> Self {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// CSV text.
    pub(crate) fn to_csv(&self) -> String {
        let mut s = self.columns.join(",");
        s.push('\n');
        for r in &self.rows {
            let cells: Vec<String> = r
                .iter()
                .map(|c| match c {
                    Cell::S(t) => t.replace(',', ";"),
                    Cell::F(x) => fmt_f(*x),
                })
                .collect();
            let _ = writeln!(s, "{}", cells.join(","));
        }
        s
    }

    /// JSON array of objects.
    pub(crate) fn to_json(&self) -> Value {
        Value::Array(
            self.rows
                .iter()
                .map(|r| {
                    let mut m = Map::new();
                    for (k, c) in self.columns.iter().zip(r) {
                        let v = match c {
                            Cell::S(t) => Value::String(t.clone()),
                            Cell::F(x) => fmt_f(*x)
                                .parse::<f64>()
                                .ok()
                                .map_or(Value::Null, Value::from),
                        };
                        m.insert((*k).to_string(), v);
                    }
                    Value::Object(m)
                })
                .collect(),
        )
    }

    /// Writes `<dir>/<name>.csv` and `<dir>/<name>.json`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<()> {
        let csv = dir.join(format!("{name}.csv"));
        std::fs::write(&csv, self.to_csv()).map_err(|e| Error::io(&csv, e))?;
        let js = dir.join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(&self.to_json())
            .map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(&js, text + "\n").map_err(|e| Error::io(&js, e))?;
        Ok(())
    }
}
