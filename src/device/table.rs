//! A device in virtual time whose node latencies come from a saved latency table
//! (`--device profile:FILE`, a table written by `profile --device cpu|cuda|npu --save FILE`):
//! the bridge between a device measured once and whole runs predicted from it, the method the
//! paper's Algorithm 1 rests on, and what `validate` holds against real runs.
//!
//! How it prices a node for a sub-batch of `b` members:
//!
//! * A node whose cost depends on the batch size only (every node of a CNN; LSTM cells, linear
//!   layers of a decoder step): the table's entry at `b`, exactly. A table measured on a real
//!   device holds the median of its runs at 1, 2, 4, … and the maximum batch, and the straight
//!   line between two of them for the sizes in between (`Profile::measure_sampled`); the
//!   device reads what the file holds.
//! * A node whose cost depends on the lengths (a Transformer encoder's rows, attention over the
//!   source, a decoder's self-attention over its cache): a curve of latency against the
//!   model's device-independent work proxy (multiply-accumulates, vector operations and
//!   elements moved: `NodeCost::work_proxy`) through every point the table measured — its entry
//!   at each batch size, at the table's lengths (a decoder node at its middle step), and, for a
//!   node that depends on the encoder length, its latency alone at every encoder length — and
//!   the sub-batch priced at its own work on that curve: straight lines between the two nearest
//!   points, beyond the last two extended. A sub-batch mixing lengths, or timesteps (cellular
//!   batching), is priced by its total work.
//! * Attention over the source sequence (an encoder's self-attention, a decoder's attention to
//!   the encoder): the table's entry at `b` plus, for each member, the difference between its
//!   latency alone at its own encoder length and at the table's. Its cost has a part per member
//!   (the array's fill, the keys' passes) that a curve of total work cannot tell from more
//!   members of shorter sequences; with the per-member rule, GraphB's padded batches of the
//!   Transformer on the NPU model's table came within 0.4% of the NPU model, against 1.5% on
//!   the work curve (`tests/it/table.rs`).
//!
//! A real device's time also varies, and its table says how (`profile --profile-variation on`,
//! the default; a virtual device's table has neither part, and is priced as above exactly):
//!
//! * **After idling**: each node's first run after the device sat idle at least 1, 4, 16 or
//!   64 ms costs that row's measured extra (`Profile::after_idle`: a request's pass after such
//!   a gap against one back to back; the engine says how long the device idled,
//!   [`Device::resume`]). On the CPU device a pass after 16+ ms idle took 1.2–1.5 ms longer
//!   than back to back (MobileNet's 8 ms, ResNet-50's at half width and resolution 4.5 ms):
//!   helper threads parked, caches and clocks cooled.
//! * **Spread**: device time runs in stretches as long as the median pass, each at the speed
//!   of one pass of `Profile::passes_ns` (up to 101 timed back to back) drawn at random with a
//!   fixed seed, so that a table and a seed of arrivals still give one run. The table's
//!   medians hide a real device's tail (MobileNet's passes on this project's VM: 7.4 ms at
//!   the median, 12.4 ms at the 99th percentile, 37 ms at most), and the mean, which a queue
//!   feels, is above the median.
//!
//! * **Level** (off unless the table sets `level`): the table's nodes are medians, each of a
//!   few runs, and a right-skewed time (a GPU's sync) has its median under its mean; a
//!   request's pass adds hundreds of node times, so it runs near the sum of their means, above
//!   the sum of their medians. A table's `level` prices every node at a factor; `"level":
//!   "passes"` at the one its own passes give ([`TableDevice::passes_level`]: the median pass
//!   over the same pass priced from the nodes), which `validate` prints. On an H200 the passes ran
//!   4.0–5.8% above the nodes' sum (ResNet-50, GNMT, the Transformer), and that level cut
//!   GNMT's median error on the mean from 6.4% to 1.9% on the same recorded runs while its p99
//!   error rose from 5.9% to 8.9%; on this project's CPU VM, where the speed drifts between the
//!   table and its passes, it raised the pooled errors (15.4% → 16.6% on the mean, 32.3% →
//!   37.1% on the p99 over 60 points): hence not by default (`docs/validate.md`).
//!
//! With a table measured on the NPU model, a CNN's runs are the NPU model's to the nanosecond,
//! and a sequence model's within 0.5% in mean latency (`tests/it/table.rs`): they differ where
//! the NPU's cost of a length-dependent node is neither a function of its total work nor
//! additive over members (the array's folds round up).

use super::{Device, Member, Timing};
use crate::error::{Error, Result};
use crate::graph::{Class, Lengths, Model, NodeId, NodeStep};
use crate::profile::{Level, Profile};
use crate::time::Nanos;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The table device.
#[derive(Clone, Debug)]
pub struct TableDevice {
    table: Arc<Profile>,
    /// The file it was read from.
    path: PathBuf,
    /// Per node, for the length-dependent ones (empty for the others): (work proxy, latency in
    /// ns) of every point the table measured, by ascending work; made at prepare.
    curves: Arc<Vec<Vec<(f64, f64)>>>,
    /// After an idle gap: the table's after-idle row it falls in, and per node whether its
    /// first run since has been charged that row's extra.
    woken: Option<usize>,
    charged: Vec<bool>,
    /// The table's spread ([`Profile::passes_ns`]): the stretch of device time now running,
    /// its speed (a measured pass over the median pass) and what is left of it, and the draws.
    spread: Box<Spread>,
    /// The table's level: its median pass over the same pass priced from its nodes (1 without
    /// passes); made at prepare.
    level: f64,
}

/// The seed of the table device's draws from its table's spread: fixed, so that a table and a
/// seed of arrivals give one run to the nanosecond.
const SPREAD_SEED: u64 = 0x5eed_7ab1e;

/// Draws of a real device's spread: stretches of device time, each as long as the median pass,
/// each running at the speed of one pass of the table's drawn at random.
#[derive(Clone, Debug)]
struct Spread {
    rng: rand::rngs::StdRng,
    factor: f64,
    left: f64,
}

impl Spread {
    fn new() -> Spread {
        use rand::SeedableRng;
        Spread {
            rng: rand::rngs::StdRng::seed_from_u64(SPREAD_SEED),
            factor: 1.0,
            left: 0.0,
        }
    }

    /// `t` ns of the table's time as the device spends it: at the current stretch's speed,
    /// a new stretch drawn first when the last one ran out. No spread: `t`.
    fn apply(&mut self, passes: &[u64], t: f64) -> f64 {
        use rand::Rng;
        let Some(&median) = passes.get(passes.len() / 2) else {
            return t;
        };
        if median == 0 {
            return t;
        }
        if self.left <= 0.0 {
            let k = self.rng.random_range(0..passes.len());
            self.factor = passes[k] as f64 / median as f64;
            self.left += median as f64;
        }
        self.left -= t;
        t * self.factor
    }
}

impl TableDevice {
    /// The device of the table in `path` (read and parsed; checked against a model at
    /// [`Device::prepare`] and by [`TableDevice::check_for`]).
    pub fn load(path: &Path) -> Result<TableDevice> {
        Ok(TableDevice {
            table: Arc::new(Profile::load(path)?),
            path: path.to_path_buf(),
            curves: Arc::new(Vec::new()),
            woken: None,
            charged: Vec::new(),
            spread: Box::new(Spread::new()),
            level: 1.0,
        })
    }

    /// The device of a table already in memory (`validate`'s prediction of a run it measures).
    pub fn from_profile(table: Profile, source: &str) -> TableDevice {
        TableDevice::from_shared(Arc::new(table), source)
    }

    /// The device of a table shared with others (a policy's simulations on the predictor's
    /// table, `auto`).
    pub(crate) fn from_shared(table: Arc<Profile>, source: &str) -> TableDevice {
        TableDevice {
            table,
            path: PathBuf::from(source),
            curves: Arc::new(Vec::new()),
            woken: None,
            charged: Vec::new(),
            spread: Box::new(Spread::new()),
            level: 1.0,
        }
    }

    /// Back to the state of a run's start (not woken, the spread's draws from their seed),
    /// keeping what [`Device::prepare`] derived from the model: a prepared device serving
    /// another run of the same model (`auto`'s candidates, one after another).
    pub(crate) fn restart(&mut self) {
        self.woken = None;
        self.charged.clear();
        *self.spread = Spread::new();
    }

    /// The table.
    pub fn table(&self) -> &Profile {
        &self.table
    }

    /// The level every node is priced at (the module's rules): the table's `level`, else 1.
    pub fn level(&self) -> f64 {
        self.level
    }

    /// Refuses a table that does not fit `model` at `max_batch`, naming the file, the field and
    /// what was expected.
    pub fn check_for(&self, model: &Model, max_batch: u32) -> Result<()> {
        self.table.check_for(model, max_batch, &self.path)
    }
}

impl Device for TableDevice {
    fn name(&self) -> &'static str {
        "profile"
    }

    fn description(&self) -> String {
        format!("profile ({}: {})", self.path.display(), self.table.device)
    }

    fn is_virtual(&self) -> bool {
        true
    }

    fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()> {
        self.check_for(model, max_batch)?;
        self.restart();
        self.curves = Arc::new(
            model
                .nodes
                .iter()
                .map(|n| {
                    if model.node_is_length_free(n.id) {
                        Vec::new()
                    } else {
                        curve(&self.table, model, n.id)
                    }
                })
                .collect(),
        );
        self.level = match self.table.level {
            None => 1.0,
            Some(Level::Factor(f)) => f,
            Some(Level::Passes) => self.passes_level(model)?.ok_or_else(|| Error::ProfileFile {
                file: self.path.clone(),
                field: "level".into(),
                msg: "\"passes\", but the table has no passes_ns (a virtual device's table, or one measured with --profile-variation off)".into(),
            })?,
        };
        Ok(())
    }

    fn resume(&mut self, idle: Nanos) {
        // the longest measured gap the idle time reaches; shorter than every gap: no change
        let rows = &self.table.after_idle;
        let Some(k) = rows.iter().rposition(|r| Nanos(r.gap_ns) <= idle) else {
            return;
        };
        self.woken = Some(k);
        self.charged.clear();
        self.charged.resize(rows[k].extra_ns.len(), false);
    }

    fn execute(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
        let t = self.priced(model, at, members)? * self.level;
        // a node's first run since the device woke costs its measured extra
        let extra = match (self.woken, self.charged.get_mut(at.node.idx())) {
            (Some(k), Some(charged)) if !*charged => {
                *charged = true;
                self.table.after_idle[k].extra_ns[at.node.idx()] as f64
            }
            _ => 0.0,
        };
        let t = self
            .spread
            .apply(&self.table.passes_ns, (t + extra).max(0.0));
        Ok(Timing {
            time: Nanos(t.round() as u64),
            ..Timing::default()
        })
    }
}

impl TableDevice {
    /// The level the table's passes give (the module's rules): its median pass over a
    /// request's pass alone at the table's lengths as the prepared device prices its nodes (at
    /// level 1); none without passes (a virtual device's table, or one saved before them).
    pub fn passes_level(&self, model: &Model) -> Result<Option<f64>> {
        let passes = &self.table.passes_ns;
        let Some(&median) = passes.get(passes.len() / 2) else {
            return Ok(None);
        };
        let len = self.table.lengths;
        let mut sum = 0.0;
        for u in model.unrolled(len) {
            sum += self.priced(model, u, &[Member::alone(len, u.step)])?;
        }
        Ok((median > 0 && sum > 0.0).then(|| median as f64 / sum))
    }

    /// Node `at` for `members` as the table prices it, in nanoseconds (the module's rules).
    fn priced(&self, model: &Model, at: NodeStep, members: &[Member]) -> Result<f64> {
        if members.is_empty() {
            return Err(Error::Internal("execute on an empty sub-batch".into()));
        }
        let b = members.len() as u32;
        let points = match self.curves.get(at.node.idx()) {
            Some(p) if !p.is_empty() => p,
            // length-free (or not prepared for this model: then a plain table read)
            _ => return Ok(self.table.latency(at.node, b).0 as f64),
        };
        let row = &self.table.nodes[at.node.idx()];
        let t = if model.node(at.node).cost.attn.is_some() && !row.enc_latency_ns.is_empty() {
            // attention over the source: the table's entry at `b` (every member at the table's
            // encoder length), plus each member's own difference alone
            let alone = |enc: u32| {
                let n = row.enc_latency_ns.len();
                row.enc_latency_ns[(enc.max(1) as usize).min(n) - 1] as f64
            };
            let at_ref = alone(self.table.lengths.enc);
            let listed = self.table.latency(at.node, b).0 as f64;
            listed
                + members
                    .iter()
                    .map(|m| alone(m.len.enc) - at_ref)
                    .sum::<f64>()
        } else {
            let w = model.work(at.node, members.iter().map(|m| (m.len, m.step)));
            on_curve(points, model.node(at.node).cost.work_proxy(&w))
        };
        Ok(t)
    }
}

/// The measured points of length-dependent node `id`: (work proxy, latency) at every batch size
/// at the table's lengths, and alone at every encoder length where the table has that curve;
/// by ascending work, one point per work (the later measurement of equal work dropped).
fn curve(table: &Profile, model: &Model, id: NodeId) -> Vec<(f64, f64)> {
    let node = model.node(id);
    let len = table.lengths;
    let step = if node.class == Class::Decoder {
        len.dec.saturating_sub(1) / 2
    } else {
        0
    };
    let at = NodeStep { node: id, step };
    let row = &table.nodes[id.idx()];
    let mut pts: Vec<(f64, f64)> = row
        .latency_ns
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let w = model.work_uniform(at, len, i as u32 + 1);
            (node.cost.work_proxy(&w), t as f64)
        })
        .collect();
    for (i, &t) in row.enc_latency_ns.iter().enumerate() {
        let l = Lengths {
            enc: i as u32 + 1,
            dec: len.dec,
        };
        let w = model.work_uniform(at, l, 1);
        pts.push((node.cost.work_proxy(&w), t as f64));
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|later, earlier| later.0 == earlier.0);
    pts
}

/// The latency at work `w` on `points` (ascending work): the straight line through the two
/// nearest points, the first or last two beyond the ends; a single point scales in proportion.
fn on_curve(points: &[(f64, f64)], w: f64) -> f64 {
    match points {
        [] => 0.0,
        [(w0, t0)] => {
            if *w0 > 0.0 {
                t0 * w / w0
            } else {
                *t0
            }
        }
        _ => {
            let j = points
                .partition_point(|p| p.0 < w)
                .clamp(1, points.len() - 1);
            let ((w0, t0), (w1, t1)) = (points[j - 1], points[j]);
            t0 + (t1 - t0) * (w - w0) / (w1 - w0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::AfterIdle;

    #[test]
    fn after_a_gap_each_nodes_first_run_costs_its_rows_extra_once() {
        let model = crate::graph::zoo::load("mobilenet").unwrap();
        let mut table = Profile::uniform(&model, 4, Nanos(10_000));
        let n = model.nodes.len();
        table.after_idle = vec![
            AfterIdle {
                gap_ns: 1_000_000,
                extra_ns: vec![500; n],
            },
            AfterIdle {
                gap_ns: 16_000_000,
                extra_ns: vec![2_000; n],
            },
        ];
        let mut dev = TableDevice::from_profile(table, "test");
        dev.prepare(&model, 4).unwrap();
        let m = Member::alone(model.ref_lengths(), 0);
        let time = |dev: &mut TableDevice, k: u32| {
            let at = NodeStep {
                node: NodeId(k),
                step: 0,
            };
            dev.execute(&model, at, &[m]).unwrap().time.0
        };
        // never idle yet: the plain table
        assert_eq!(time(&mut dev, 0), 10_000);
        // shorter than the first row's gap: no charge
        dev.resume(Nanos(999_999));
        assert_eq!(time(&mut dev, 0), 10_000);
        // 5 ms: the 1 ms row, once per node
        dev.resume(Nanos(5_000_000));
        assert_eq!(time(&mut dev, 0), 10_500);
        assert_eq!(time(&mut dev, 0), 10_000);
        assert_eq!(time(&mut dev, 1), 10_500);
        // a gap of exactly 16 ms: the longer row, every node charged anew
        dev.resume(Nanos(16_000_000));
        assert_eq!(time(&mut dev, 0), 12_000);
        assert_eq!(time(&mut dev, 1), 12_000);
        assert_eq!(time(&mut dev, 1), 10_000);
    }

    #[test]
    fn the_spread_runs_stretches_a_median_pass_long_at_measured_speeds() {
        // no passes, or passes all alike: the table's time itself
        let mut s = Spread::new();
        assert_eq!(s.apply(&[], 1234.0), 1234.0);
        assert_eq!(s.apply(&[500, 500, 500], 1234.0), 1234.0);
        // passes of 50, 100 and 200 (median 100): each stretch of 100 ns of the table's time
        // runs at half, the same or twice the time, drawn per stretch
        let passes = [50, 100, 200];
        let mut s = Spread::new();
        let runs: Vec<f64> = (0..400).map(|_| s.apply(&passes, 25.0)).collect();
        for stretch in runs.chunks(4) {
            // four nodes of 25 ns fill one stretch: one speed each
            assert!(stretch.iter().all(|&t| t == stretch[0]), "{stretch:?}");
            assert!([12.5, 25.0, 50.0].contains(&stretch[0]), "{stretch:?}");
        }
        // every speed drawn, and the same draws again from a fresh start (a fixed seed)
        for t in [12.5, 25.0, 50.0] {
            assert!(runs.contains(&t), "{t} never drawn");
        }
        let mut again = Spread::new();
        let rerun: Vec<f64> = (0..400).map(|_| again.apply(&passes, 25.0)).collect();
        assert_eq!(runs, rerun);
    }

    #[test]
    fn every_node_is_priced_at_the_tables_level_which_its_passes_give() {
        use crate::device::measure::alone_latency;
        // a sequence model: a pass runs its encoder and decoder nodes once a step
        let model = crate::graph::zoo::load("gnmt").unwrap();
        let mut table = Profile::uniform(&model, 4, Nanos(10_000));
        let len = table.lengths;
        let mut plain = TableDevice::from_profile(table.clone(), "no passes");
        plain.prepare(&model, 4).unwrap();
        assert_eq!(
            (plain.level(), plain.passes_level(&model).unwrap()),
            (1.0, None)
        );
        let pass = alone_latency(&mut plain, &model, len).unwrap().0;
        // passes 10% above the nodes' sum, all alike (no spread): they give a level of 1.1,
        // which is not charged until the table sets it
        table.passes_ns = vec![pass * 11 / 10; 3];
        let mut dev = TableDevice::from_profile(table.clone(), "passes 10% above");
        dev.prepare(&model, 4).unwrap();
        let level = dev.passes_level(&model).unwrap().unwrap();
        assert!((level - 1.1).abs() < 1e-9, "{level}");
        let m = Member::alone(len, 0);
        let first = NodeStep {
            node: NodeId(0),
            step: 0,
        };
        assert_eq!(dev.execute(&model, first, &[m]).unwrap().time.0, 10_000);
        table.level = Some(Level::Passes);
        let mut dev = TableDevice::from_profile(table, "level set");
        dev.prepare(&model, 4).unwrap();
        assert_eq!(dev.level(), level);
        assert_eq!(dev.execute(&model, first, &[m]).unwrap().time.0, 11_000);
        // a request's pass alone then costs the median pass (each node rounded to the ns)
        let priced = alone_latency(&mut dev, &model, len).unwrap().0;
        assert!(
            priced.abs_diff(pass * 11 / 10) < 1_000,
            "{priced} vs {}",
            pass * 11 / 10
        );
        // the level the passes give does not depend on the level charged
        assert_eq!(dev.passes_level(&model).unwrap(), Some(level));
        // a factor is charged as it stands; "passes" without passes is refused, naming both
        let mut set = dev.table().clone();
        set.level = Some(Level::Factor(1.0));
        let mut dev = TableDevice::from_profile(set.clone(), "level 1");
        dev.prepare(&model, 4).unwrap();
        assert_eq!(dev.execute(&model, first, &[m]).unwrap().time.0, 10_000);
        set.passes_ns.clear();
        set.level = Some(Level::Passes);
        let e = TableDevice::from_profile(set, "no passes")
            .prepare(&model, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("level") && e.contains("no passes_ns"), "{e}");
    }

    #[test]
    fn the_curve_interpolates_between_its_points_and_extends_beyond_them() {
        let pts = [(10.0, 100.0), (20.0, 150.0), (40.0, 190.0)];
        assert_eq!(on_curve(&pts, 10.0), 100.0);
        assert_eq!(on_curve(&pts, 15.0), 125.0);
        assert_eq!(on_curve(&pts, 30.0), 170.0);
        // beyond the ends: the first and the last two points' line
        assert_eq!(on_curve(&pts, 5.0), 75.0);
        assert_eq!(on_curve(&pts, 60.0), 230.0);
        assert_eq!(on_curve(&[(10.0, 100.0)], 30.0), 300.0);
    }
}
