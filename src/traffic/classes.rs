//! SLA classes (`--classes NAME:SLA_MS:SHARE,...`): each generated request belongs to one
//! class, drawn by share from a seeded stream of its own (so the arrival times are those of the
//! same run without classes), and carries that class's deadline. LazyB's slack reads each
//! request's own deadline; the run reports every class apart.

use crate::error::{num, Error, Result};
use crate::time::Nanos;
use crate::traffic::Weighted;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The most classes a run takes.
pub const MAX_CLASSES: usize = 16;

/// A run's SLA classes.
#[derive(Clone, Debug, PartialEq)]
pub struct Classes {
    /// Names, as written.
    pub names: Vec<String>,
    /// Each class's SLA.
    pub slas: Vec<Nanos>,
    /// Each class's share of the requests (summing to 1).
    pub shares: Vec<f64>,
}

impl std::str::FromStr for Classes {
    type Err = Error;

    /// Parses `NAME:SLA_MS:SHARE[,NAME:SLA_MS:SHARE...]`; shares are normalised to sum to 1.
    fn from_str(s: &str) -> Result<Classes> {
        let bad = |msg: String| Error::invalid("classes", msg);
        let mut c = Classes {
            names: Vec::new(),
            slas: Vec::new(),
            shares: Vec::new(),
        };
        for item in s.split(',') {
            let f: Vec<&str> = item.trim().split(':').collect();
            let [name, sla, share] = f.as_slice() else {
                return Err(bad(format!("expected NAME:SLA_MS:SHARE, got '{item}'")));
            };
            let ok_name = !name.is_empty()
                && name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-');
            if !ok_name || c.names.iter().any(|n| n == name) {
                return Err(bad(format!(
                    "class names are distinct, non-empty letters, digits, '_' or '-', got '{name}'"
                )));
            }
            let sla_ns = sla
                .parse()
                .ok()
                .and_then(crate::time::sla_from_ms)
                .ok_or_else(|| {
                    bad(format!(
                        "{name}'s SLA must be in {}, got '{sla}'",
                        crate::time::SLA_RANGE
                    ))
                })?;
            let w: f64 = share
                .parse()
                .ok()
                .filter(|x: &f64| *x > 0.0 && x.is_finite())
                .ok_or_else(|| {
                    bad(format!(
                        "{name}'s share must be a positive number, got '{share}'"
                    ))
                })?;
            c.names.push((*name).to_string());
            c.slas.push(sla_ns);
            c.shares.push(w);
        }
        if c.names.len() > MAX_CLASSES {
            return Err(bad(format!(
                "at most {MAX_CLASSES} classes, got {}",
                c.names.len()
            )));
        }
        // scaled by the largest first, so that shares near f64's limit do not sum to infinity
        let largest = c.shares.iter().copied().fold(0.0, f64::max);
        c.shares.iter_mut().for_each(|w| *w /= largest);
        let total: f64 = c.shares.iter().sum();
        c.shares.iter_mut().for_each(|w| *w /= total);
        Ok(c)
    }
}

impl std::fmt::Display for Classes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let items: Vec<String> = (0..self.names.len())
            .map(|k| {
                format!(
                    "{}:{}:{}",
                    self.names[k],
                    num(self.slas[k].as_ms()),
                    num(self.shares[k])
                )
            })
            .collect();
        write!(f, "{}", items.join(","))
    }
}

/// Draws each request's class by share, from its own seeded stream.
pub(crate) struct ClassPicker {
    slas: Vec<Nanos>,
    shares: Weighted,
    rng: StdRng,
}

impl ClassPicker {
    /// A picker for `classes`, deterministic for `seed`.
    pub(crate) fn new(classes: &Classes, seed: u64) -> ClassPicker {
        ClassPicker {
            slas: classes.slas.clone(),
            shares: Weighted::new(&classes.shares),
            rng: StdRng::seed_from_u64(seed ^ 0x6c62_272e_07bb_0142),
        }
    }

    /// The next request's class and SLA.
    pub(crate) fn pick(&mut self) -> (u8, Nanos) {
        let k = self.shares.pick(self.rng.random_range(0.0..1.0));
        (k as u8, self.slas[k])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_parse_normalise_and_say_what_is_wrong() {
        let c: Classes = "gold:50:1, bronze:500:3".parse().unwrap();
        assert_eq!(c.names, ["gold", "bronze"]);
        assert_eq!(c.slas, [Nanos::from_ms(50.0), Nanos::from_ms(500.0)]);
        assert_eq!(c.shares, [0.25, 0.75]);
        assert_eq!(c.to_string(), "gold:50:0.25,bronze:500:0.75");
        for (s, says) in [
            ("gold:50", "expected NAME:SLA_MS:SHARE"),
            ("gold:0:1", "gold's SLA must be in (0"),
            ("gold:50:0", "gold's share must be a positive number"),
            ("gold:50:1,gold:60:1", "distinct"),
            (":50:1", "non-empty"),
            ("g@ld:50:1", "letters, digits, '_' or '-', got 'g@ld'"),
            ("gold.1:50:1", "got 'gold.1'"),
        ] {
            let e = s.parse::<Classes>().unwrap_err().to_string();
            assert!(
                e.starts_with("invalid classes: ") && e.contains(says),
                "{s}: {e}"
            );
        }
        // a name takes letters, digits, '_' and '-'
        let c: Classes = "gold_1:50:1,bronze-2:500:1".parse().unwrap();
        assert_eq!(c.names, ["gold_1", "bronze-2"]);
        // at most 16 classes: 16 taken, 17 refused
        let many: Vec<String> = (0..17).map(|k| format!("c{k}:10:1")).collect();
        assert_eq!(
            many[..16].join(",").parse::<Classes>().unwrap().names.len(),
            16
        );
        let e = many.join(",").parse::<Classes>().unwrap_err().to_string();
        assert!(e.contains("at most 16 classes, got 17"), "{e}");
        // shares near f64's limit: equal shares, not every request to the last class
        let c: Classes = "a:50:1e308,b:50:1e308".parse().unwrap();
        assert_eq!(c.shares, [0.5, 0.5]);
        let mut p = ClassPicker::new(&c, 5);
        let a = (0..10_000).filter(|_| p.pick().0 == 0).count();
        assert!((4_500..5_500).contains(&a), "{a}");
    }

    #[test]
    fn classes_are_drawn_by_share() {
        let c: Classes = "a:10:1,b:20:3".parse().unwrap();
        let mut p = ClassPicker::new(&c, 5);
        let n = 100_000;
        let b = (0..n).filter(|_| p.pick().0 == 1).count();
        assert!((b as f64 / n as f64 - 0.75).abs() < 0.01, "{b}");
        let (k, sla) = p.pick();
        assert_eq!(sla, c.slas[usize::from(k)]);
    }
}
