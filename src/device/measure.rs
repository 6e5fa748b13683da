//! Measuring a [`Profile`] on a device: every node at every batch size (a virtual device), or
//! at batch sizes 1, 2, 4, … with the median of several runs (a real device); each node that
//! depends on the encoder length also over every encoder length; and the latency of one request
//! served alone, also averaged over WMT 2019's lengths.

use super::{Device, Member, Timing};
use crate::error::{Error, Result};
use crate::graph::{Class, Lengths, Model, NodeStep};
use crate::profile::{NodeProfile, Profile};
use crate::progress::Mode;
use crate::time::Nanos;

/// The order in which [`Profile::measure_sampled`] runs a real device's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// A node's runs one after another: the node measured with its own data in the caches.
    Isolated,
    /// Whole passes over the model, each node after the one before it, as a request runs them:
    /// a loop's nodes at every step, one step after another, each node timed at its middle
    /// step (for a decoder node, the step the table records).
    InModelOrder,
}

/// The batch sizes a real device's table times: 1, 2, 4, … below `max_batch`, then `max_batch`.
pub fn sampled_sizes(max_batch: u32) -> Vec<u32> {
    let mut sizes: Vec<u32> = std::iter::successors(Some(1u32), |b| b.checked_mul(2))
        .take_while(|&b| b < max_batch)
        .collect();
    sizes.push(max_batch);
    sizes
}

/// How a real device's table is measured ([`Profile::measure_sampled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampling {
    /// Timed runs per point (their median), after one untimed run; at least 1.
    pub reps: u32,
    /// The order the runs take.
    pub order: Order,
    /// How progress is shown (a full table on a CPU takes minutes).
    pub progress: Mode,
    /// Also measure how a real device's time varies: what a pass costs more after the device
    /// idled ([`after_idle`]) and how long passes back to back take ([`pass_times`]).
    pub variation: bool,
}

impl Default for Sampling {
    /// One run per point, node by node, nothing shown, no variation measured.
    fn default() -> Self {
        Sampling {
            reps: 1,
            order: Order::Isolated,
            progress: Mode::Off,
            variation: false,
        }
    }
}

/// Node `id` as a table measures it at `b` members: at its part's lengths (a decoder node at
/// its middle step), members in slots 0..b.
fn unit(
    model: &Model,
    lens: &[Lengths],
    id: crate::graph::NodeId,
    b: u32,
) -> (NodeStep, Vec<Member>) {
    let first = lens.first().copied().unwrap_or_default();
    let len = lens.get(model.part_of(id)).copied().unwrap_or(first);
    let step = table_step(model, len, id);
    (NodeStep { node: id, step }, members(b, len, step))
}

/// `b` members as a table times them: slots 0..b, each its slot's generated input, all at
/// lengths `len` and step `step`.
fn members(b: u32, len: Lengths, step: u32) -> Vec<Member> {
    (0..b)
        .map(|slot| Member {
            slot,
            len,
            input: u64::from(slot),
            step,
        })
        .collect()
}

/// The step at which a table times node `id` of a request at lengths `len`: a decoder node's
/// middle step, every other node's first.
fn table_step(model: &Model, len: Lengths, id: crate::graph::NodeId) -> u32 {
    if model.node(id).class == Class::Decoder {
        len.dec.saturating_sub(1) / 2
    } else {
        0
    }
}

/// Every unit a request of each part of `model` executes, part after part, each part's
/// request at its lengths (`lens[p]`, the first for parts beyond): the order of
/// [`Order::InModelOrder`]'s passes.
fn request_paths<'a>(
    model: &'a Model,
    lens: &'a [Lengths],
) -> impl Iterator<Item = (NodeStep, Lengths)> + 'a {
    let first = lens.first().copied().unwrap_or_default();
    (0..model.parts.len()).flat_map(move |p| {
        let len = lens.get(p).copied().unwrap_or(first);
        std::iter::successors(Some(model.first_step_of(p)), move |&at| {
            model.next_step(at, len)
        })
        .map(move |at| (at, len))
    })
}

/// Runs every node of `model` once at each batch size a table samples ([`sampled_sizes`]: 1,
/// 2, 4, … and `max_batch`), untimed, at the lengths a table measures: what a device builds or
/// loads on a shape's first use (CUDA's lazily loaded kernel modules, a library's per-shape
/// plans, buffers' first touch) is paid here for those shapes instead of by the first requests
/// a run serves; sizes in between and other lengths stay as cold as they were. Measuring a
/// table in the same process ran at least these shapes; a table loaded from a file
/// (`--profile`) ran none (on an H200 the
/// first run of `compare --profile`, BERT under Serial at 30% load, twice had 5% of its
/// requests over 80 ms, and none of its later runs).
pub fn warm_up(
    device: &mut dyn Device,
    model: &Model,
    max_batch: u32,
    lens: &[Lengths],
) -> Result<()> {
    for b in sampled_sizes(max_batch) {
        for n in &model.nodes {
            let (at, members) = unit(model, lens, n.id, b);
            device.execute(model, at, &members)?;
        }
    }
    Ok(())
}

impl Profile {
    /// Measures every node at every batch size 1..=`max_batch` on `device`, at lengths `len`.
    pub fn measure(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        len: Lengths,
    ) -> Result<Profile> {
        Self::measure_parts(device, model, max_batch, &vec![len; model.parts.len()])
    }

    /// [`Profile::measure`] for co-located models: each model's nodes at its own lengths.
    pub(crate) fn measure_parts(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        lens: &[Lengths],
    ) -> Result<Profile> {
        if max_batch == 0 {
            return Err(Error::invalid("max batch", "must be at least 1"));
        }
        let sizes: Vec<u32> = (1..=max_batch).collect();
        // every member alike: a virtual device times each size in O(1), so the table costs
        // O(nodes × max_batch)
        Self::measure_at(device, model, max_batch, lens, &sizes, |d, at, members| {
            d.execute_uniform(model, at, members[0], members.len() as u32)
        })
    }

    /// Measures a real device: every node at batch sizes 1, 2, 4, … and `max_batch`, the median
    /// of `how.reps` runs each after one warm-up run, with the sizes in between interpolated
    /// linearly (measuring all 64 sizes of a full network would take minutes for little
    /// information). Nodes of part `p` run at `lens[p]` (the first length for parts beyond).
    /// `how.order` says whether a node's runs follow one another ([`Order::Isolated`]) or whole
    /// passes over the model in its order ([`Order::InModelOrder`]: each node after the one
    /// before it, as a request runs them). Progress counts inputs through nodes (a run at
    /// batch `b` is `b` of them), so its estimate follows the work.
    pub fn measure_sampled(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        lens: &[Lengths],
        how: Sampling,
    ) -> Result<Profile> {
        let Sampling { reps, order, .. } = how;
        if max_batch == 0 || reps == 0 {
            return Err(Error::invalid(
                "max batch / repetitions",
                "must be at least 1",
            ));
        }
        let sizes = sampled_sizes(max_batch);
        let inputs: u64 = sizes.iter().map(|&b| u64::from(b)).sum::<u64>()
            * model.nodes.len() as u64
            * u64::from(reps + 1);
        let shown = how.progress.start(
            &format!("profiling {} on {}", model.name, device.name()),
            inputs,
            "node inputs",
        );
        let median = |runs: &mut Vec<u64>| {
            runs.sort_unstable();
            Timing {
                time: Nanos(runs[runs.len() / 2]),
                ..Timing::default()
            }
        };
        let table = match order {
            Order::Isolated => {
                let mut runs = Vec::with_capacity(reps as usize);
                Self::measure_at(device, model, max_batch, lens, &sizes, |d, at, members| {
                    // one untimed run first: the first touch of fresh buffers faults pages in
                    d.execute(model, at, members)?;
                    runs.clear();
                    for _ in 0..reps {
                        runs.push(d.execute(model, at, members)?.time.0);
                    }
                    shown.inc(members.len() as u64 * u64::from(reps + 1));
                    Ok(median(&mut runs))
                })
            }
            Order::InModelOrder => {
                // every size: one untimed pass, then `reps` timed passes, each a request's
                // path through every part unrolled (a decoder's steps one after another, as a
                // request runs them: a node's weights are as warm as in a run), each node
                // timed at its middle step (a decoder node's is the step a table records; an
                // encoder loop's cost does not depend on the step, but its first step follows
                // the whole model's other nodes); then each node's median, read back in the
                // node-by-node walk below
                device.prepare(model, max_batch)?;
                let mut times: Vec<Vec<Timing>> = vec![Vec::new(); model.nodes.len()];
                let mut runs: Vec<Vec<u64>> =
                    vec![Vec::with_capacity(reps as usize); model.nodes.len()];
                for &b in &sizes {
                    for r in runs.iter_mut() {
                        r.clear();
                    }
                    for pass in 0..=reps {
                        for (at, len) in request_paths(model, lens) {
                            let members = members(b, len, at.step);
                            let t = device.execute(model, at, &members)?.time.0;
                            if at.step == model.repeats(at.node, len).saturating_sub(1) / 2 {
                                shown.inc(u64::from(b));
                                if pass > 0 {
                                    runs[at.node.idx()].push(t);
                                }
                            }
                        }
                    }
                    for (k, r) in runs.iter_mut().enumerate() {
                        times[k].push(median(r));
                    }
                }
                let mut next = vec![0usize; model.nodes.len()];
                Self::measure_at(device, model, max_batch, lens, &sizes, |_, at, _| {
                    let k = at.node.idx();
                    next[k] += 1;
                    Ok(times[k][next[k] - 1])
                })
            }
        };
        let mut table = table?;
        if how.variation {
            let first = lens.first().copied().unwrap_or_default();
            table.after_idle = after_idle(device, model, first, IDLE_PASSES, IDLE_GAPS_MS)?;
            table.passes_ns = pass_times(device, model, first, PASSES, PASSES_BUDGET)?;
        }
        shown.finish();
        Ok(table)
    }

    /// Prepares `device` and times every node of `model` with `time` at the batch sizes `sizes`
    /// (ascending, the last `max_batch`), each node of part `p` at lengths `lens[p]` (its
    /// middle decoder step for decoder nodes); sizes in between are interpolated linearly. A
    /// virtual device measured at every size also records its cycle counts.
    fn measure_at(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        lens: &[Lengths],
        sizes: &[u32],
        mut time: impl FnMut(&mut dyn Device, NodeStep, &[Member]) -> Result<Timing>,
    ) -> Result<Profile> {
        let len = lens.first().copied().unwrap_or_default();
        device.prepare(model, max_batch)?;
        let cycles = device.is_virtual() && sizes.len() == max_batch as usize;
        let mut nodes = Vec::with_capacity(model.nodes.len());
        let mut measured = Vec::with_capacity(sizes.len());
        for n in &model.nodes {
            let len = lens.get(model.part_of(n.id)).copied().unwrap_or(len);
            let step = table_step(model, len, n.id);
            let at = NodeStep { node: n.id, step };
            measured.clear();
            // one member list for the node; each size takes a prefix of it
            let members = members(max_batch, len, step);
            for &b in sizes {
                measured.push(time(&mut *device, at, &members[..b as usize])?);
            }
            let latency_ns: Vec<u64> = (1..=max_batch)
                .map(|b| {
                    let j = sizes.partition_point(|&s| s < b);
                    if sizes[j] == b || j == 0 {
                        measured[j].time.0
                    } else {
                        let (b0, b1) = (f64::from(sizes[j - 1]), f64::from(sizes[j]));
                        let (t0, t1) = (measured[j - 1].time.0 as f64, measured[j].time.0 as f64);
                        (t0 + (t1 - t0) * (f64::from(b) - b0) / (b1 - b0)).round() as u64
                    }
                })
                .collect();
            let per_size = |f: fn(&Timing) -> u64| -> Vec<u64> {
                if cycles {
                    measured.iter().map(f).collect()
                } else {
                    Vec::new()
                }
            };
            let enc_latency_ns = if model.node_depends_on_enc(n.id) {
                enc_curve(&mut *device, model, at, len, latency_ns[0])?
            } else {
                Vec::new()
            };
            nodes.push(NodeProfile {
                id: n.id.0,
                name: n.name.clone(),
                op: n.op.kind_name().to_string(),
                class: n.class.to_string(),
                latency_ns,
                compute_cycles: per_size(|t| t.compute_cycles),
                memory_cycles: per_size(|t| t.memory_cycles),
                enc_latency_ns,
            });
        }
        Ok(Profile {
            model: model.name.clone(),
            device: device.description(),
            max_batch,
            lengths: len,
            nodes,
            after_idle: Vec::new(),
            passes_ns: Vec::new(),
            level: None,
        })
    }
}

/// The batch-1 latency of a node whose cost depends on the encoder length, for every encoder
/// length 1..=max_enc of its model: executed on a virtual device (exact and cheap); on a real
/// device, the latency measured at `len` (`at_len`) scaled by the node's own work at each
/// length ([`crate::graph::NodeCost::work_proxy`]), since timing every length of every such
/// node would take minutes.
fn enc_curve(
    device: &mut dyn Device,
    model: &Model,
    at: NodeStep,
    len: Lengths,
    at_len: u64,
) -> Result<Vec<u64>> {
    let max_enc = model.max_enc_of(at.node);
    let member = |e: u32| {
        Member::alone(
            Lengths {
                enc: e,
                dec: len.dec,
            },
            at.step,
        )
    };
    if device.is_virtual() {
        return (1..=max_enc)
            .map(|e| Ok(device.execute(model, at, &[member(e)])?.time.0))
            .collect();
    }
    let cost = &model.node(at.node).cost;
    let proxy = |e: u32| cost.work_proxy(&model.work(at.node, [(member(e).len, at.step)]));
    let base = proxy(len.enc).max(1.0);
    Ok((1..=max_enc)
        .map(|e| (at_len as f64 * proxy(e) / base).round() as u64)
        .collect())
}

/// The latency of one request served alone at lengths `len`: every unit it executes, at
/// batch 1, timed by `device` (prepared for `model`). What Table II's "single-batch latency"
/// measures; Algorithm 1 over a profile estimates it.
pub fn alone_latency(device: &mut dyn Device, model: &Model, len: Lengths) -> Result<Nanos> {
    let mut t = Nanos::ZERO;
    walk_alone(device, model, len, |_, took| t += took)?;
    Ok(t)
}

/// Runs one request alone at lengths `len` through every unit it executes, at batch 1, telling
/// `each` the unit and its time.
fn walk_alone(
    device: &mut dyn Device,
    model: &Model,
    len: Lengths,
    mut each: impl FnMut(NodeStep, Nanos),
) -> Result<()> {
    for u in model.unrolled(len) {
        let member = Member::alone(len, u.step);
        each(u, device.execute(model, u, &[member])?.time);
    }
    Ok(())
}

/// [`alone_latency`] averaged over the WMT 2019 newstest En→De length pairs (each pair's
/// lengths converted to the model's steps as requests' are), with the mean source and target
/// lengths in words. For a static model: its latency alone, and no lengths.
pub fn wmt19_mean_alone_latency(
    device: &mut dyn Device,
    model: &Model,
) -> Result<(Nanos, Option<(f64, f64)>)> {
    let Some(seq) = &model.seq else {
        return Ok((alone_latency(device, model, model.ref_lengths())?, None));
    };
    let joint = crate::traffic::lengths::JointLengths::for_seq(seq)?;
    let (mut sum, mut count) = (0.0f64, 0u64);
    for (pair, n) in joint.pairs() {
        let len = crate::traffic::lengths::lengths_of(seq, pair);
        sum += alone_latency(device, model, len)?.0 as f64 * n as f64;
        count += n;
    }
    let mean = Nanos((sum / count.max(1) as f64).round() as u64);
    Ok((mean, Some(joint.mean_words())))
}

/// The idle gaps [`Profile::measure_sampled`] measures a pass after, in milliseconds: from
/// about when the CPU device's helper threads park (their linger is 0.5 ms) to a server at a
/// few requests a second, four to one.
pub const IDLE_GAPS_MS: &[u64] = &[1, 4, 16, 64];

/// Passes timed per gap (and back to back) by [`Profile::measure_sampled`]'s idle rows: their
/// median is what the row holds (a pass after a gap on this project's VM varies by ±10%).
pub const IDLE_PASSES: u32 = 11;

/// What one request's first pass costs more after the device idled: `passes` passes alone at
/// lengths `len` back to back, then, for each gap of `gaps_ms`, `passes` passes each after the
/// device sat idle that long (the calling thread asleep), and per node the median of its first
/// run after the gap minus its median back to back (a decoder node's first step). One untimed
/// pass warms up first. The passes run as a request runs alone ([`alone_latency`]'s walk).
pub fn after_idle(
    device: &mut dyn Device,
    model: &Model,
    len: Lengths,
    passes: u32,
    gaps_ms: &[u64],
) -> Result<Vec<crate::profile::AfterIdle>> {
    let reps = passes.max(1) as usize;
    let n = model.nodes.len();
    // each node's first run in one pass alone (0 for a node the pass does not reach)
    let pass = |device: &mut dyn Device| -> Result<Vec<u64>> {
        let mut first = vec![None; n];
        walk_alone(device, model, len, |u, t| {
            first[u.node.idx()].get_or_insert(t.0);
        })?;
        Ok(first.into_iter().map(|t| t.unwrap_or(0)).collect())
    };
    let medians = |runs: &mut [Vec<u64>]| -> Vec<i64> {
        runs.iter_mut()
            .map(|r| {
                r.sort_unstable();
                r[r.len() / 2] as i64
            })
            .collect()
    };
    let timed = |device: &mut dyn Device, gap_ms: u64| -> Result<Vec<i64>> {
        let mut runs = vec![Vec::with_capacity(reps); n];
        for _ in 0..reps {
            if gap_ms > 0 {
                std::thread::sleep(std::time::Duration::from_millis(gap_ms));
            }
            for (k, t) in pass(device)?.into_iter().enumerate() {
                runs[k].push(t);
            }
        }
        Ok(medians(&mut runs))
    };
    timed(device, 0)?;
    let warm = timed(device, 0)?;
    gaps_ms
        .iter()
        .map(|&g| {
            let cold = timed(device, g)?;
            Ok(crate::profile::AfterIdle {
                gap_ns: g * 1_000_000,
                extra_ns: cold.iter().zip(&warm).map(|(c, w)| c - w).collect(),
            })
        })
        .collect()
}

/// Passes back to back [`Profile::measure_sampled`] times for the table's spread: enough for
/// the tail of their distribution (the slowest 1% is one pass), within [`PASSES_BUDGET`].
pub const PASSES: usize = 101;

/// The longest [`Profile::measure_sampled`] spends timing passes back to back (at least 21 are
/// timed whatever they take: a full-size sequence model's pass on a CPU takes a few hundred ms).
pub const PASSES_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// How long whole passes of one request alone at lengths `len` take back to back: up to
/// `count` of them within `budget` (and at least 21), after one untimed; sorted. Each is the
/// sum of its nodes' times as the device reports them. A real device's passes spread (on this
/// project's 2-core VM MobileNet's 400 passes ran 7.4 ms at the median, 12.4 ms at the 99th
/// percentile, 37 ms at most), which the table's medians do not show and the table device
/// draws from ([`crate::device::table`]).
pub fn pass_times(
    device: &mut dyn Device,
    model: &Model,
    len: Lengths,
    count: usize,
    budget: std::time::Duration,
) -> Result<Vec<u64>> {
    alone_latency(device, model, len)?;
    let start = std::time::Instant::now();
    let mut times = Vec::with_capacity(count);
    while times.len() < count && (times.len() < 21 || start.elapsed() < budget) {
        times.push(alone_latency(device, model, len)?.0);
    }
    times.sort_unstable();
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device whose every node takes 1 ms, except the first node it runs after sitting idle
    /// (wall clock) for at least [`Waking::AFTER`]: that one costs [`Waking::WAKE`] more.
    struct Waking {
        last: Option<std::time::Instant>,
    }

    impl Waking {
        const AFTER: std::time::Duration = std::time::Duration::from_millis(8);
        const WAKE: Nanos = Nanos(5_000_000);
    }

    impl Device for Waking {
        fn name(&self) -> &'static str {
            "waking"
        }
        fn is_virtual(&self) -> bool {
            false
        }
        fn prepare(&mut self, _: &Model, _: u32) -> Result<()> {
            Ok(())
        }
        fn execute(&mut self, _: &Model, _: NodeStep, _: &[Member]) -> Result<Timing> {
            let now = std::time::Instant::now();
            let woke = self.last.is_some_and(|l| now - l >= Self::AFTER);
            self.last = Some(now);
            let extra = if woke { Self::WAKE.0 } else { 0 };
            Ok(Timing {
                time: Nanos(1_000_000 + extra),
                ..Timing::default()
            })
        }
    }

    #[test]
    fn after_idle_measures_a_known_wake_up_cost_with_its_sign_and_size() {
        let model = crate::graph::zoo::fixture("eight_nodes.toml");
        let mut dev = Waking { last: None };
        let len = Lengths { enc: 1, dec: 1 };
        // a 1 ms gap does not wake it (each pass is instant: the gap is the sleep, the median
        // of 7 passes hides a late wake-up on a busy machine); 32 ms always does
        let rows = after_idle(&mut dev, &model, len, 7, &[1, 32]).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].gap_ns, rows[1].gap_ns), (1_000_000, 32_000_000));
        assert!(rows[0].extra_ns.iter().all(|&e| e == 0), "{:?}", rows[0]);
        // after 32 ms idle the pass's first node costs exactly the wake-up more; the others
        // nothing: positive, a cost, never a saving
        let first = model.unrolled(len).next().unwrap().node.idx();
        for (k, &e) in rows[1].extra_ns.iter().enumerate() {
            let want = if k == first { Waking::WAKE.0 as i64 } else { 0 };
            assert_eq!(e, want, "node {k}: {:?}", rows[1]);
        }
    }

    /// A device that keeps every unit it executes and prices a unit by what ran just before
    /// it: 1 µs per step of its own, plus [`Warm::COLD`] when another node ran since its last
    /// run (its weights evicted), as a CPU's caches do.
    #[derive(Default)]
    struct Warm {
        ran: Vec<(NodeStep, u32)>,
    }

    impl Warm {
        const COLD: u64 = 1_000_000;
    }

    impl Device for Warm {
        fn name(&self) -> &'static str {
            "warm"
        }
        fn is_virtual(&self) -> bool {
            false
        }
        fn prepare(&mut self, _: &Model, _: u32) -> Result<()> {
            Ok(())
        }
        fn execute(&mut self, _: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
            let cold = self.ran.last().is_none_or(|(last, _)| last.node != at.node);
            self.ran.push((at, members.len() as u32));
            Ok(Timing {
                time: Nanos(1_000 * u64::from(at.step + 1) + if cold { Self::COLD } else { 0 }),
                ..Timing::default()
            })
        }
    }

    #[test]
    fn a_model_order_pass_runs_a_requests_units_and_times_each_node_at_its_middle_step() {
        let model = crate::graph::zoo::fixture("tiny_seq2seq.toml");
        let len = Lengths { enc: 5, dec: 4 };
        let how = Sampling {
            reps: 2,
            order: Order::InModelOrder,
            ..Sampling::default()
        };
        let mut dev = Warm::default();
        let t = Profile::measure_sampled(&mut dev, &model, 2, &[len], how).unwrap();
        // each size: reps + 1 passes, each exactly a request's units in order, every member
        // at the unit's step
        let path: Vec<NodeStep> = model.unrolled(len).collect();
        let passes: Vec<&[(NodeStep, u32)]> = dev.ran.chunks(path.len()).collect();
        assert_eq!(passes.len(), 2 * 3, "sizes 1 and 2, three passes each");
        for (k, pass) in passes.iter().enumerate() {
            let b = if k < 3 { 1 } else { 2 };
            assert_eq!(pass.iter().map(|u| u.0).collect::<Vec<_>>(), path);
            assert!(pass.iter().all(|u| u.1 == b));
        }
        // every node's entry: the price of its middle step in a pass (a decoder node's is the
        // table's step, (dec - 1) / 2 = 1; the encoder's (enc - 1) / 2 = 2, after its own
        // step 1; a static node's its only run)
        for n in &model.nodes {
            let mid = model.repeats(n.id, len).saturating_sub(1) / 2;
            let alone_in_loop = model.nodes[n.id.idx()].loop_id.is_some_and(|l| {
                let lp = &model.loops[l.0 as usize];
                lp.first == lp.last
            });
            let cold = if mid > 0 && alone_in_loop {
                0
            } else {
                Warm::COLD
            };
            let want = 1_000 * u64::from(mid + 1) + cold;
            assert_eq!(t.nodes[n.id.idx()].latency_ns, vec![want; 2], "{}", n.name);
        }
    }
}
