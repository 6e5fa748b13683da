//! Linear layers: one batch-invariant GEMM over the sub-batch's rows against weights packed at
//! prepare time (kernels::gemm_rows). A sequence's rows (an encoder's tokens) are read where
//! the producer wrote them and written where they belong, one GEMM per run of rows contiguous
//! in both buffers; other rows (a decoder step's, one per request) are gathered first and
//! scattered after.

use super::kernels::{self, ActK};
use super::{CpuDevice, NodeRt};
use crate::device::layout::Layout;
use crate::device::Member;
use crate::graph::Model;

/// Rows a member needs before its input and output are used in place: below this, gathering a
/// sub-batch's single rows into one GEMM is worth more than the copies it costs (BERT's pass
/// spent 6% of its time copying its 128 tokens in and out of scratch).
const IN_PLACE_ROWS: usize = 8;

/// One member's rows of a linear layer, in place: the producer, and the offsets of the first
/// input and output rows (the rest follow contiguously).
#[derive(Clone, Copy)]
struct Run {
    producer: usize,
    a: usize,
    c: usize,
    rows: usize,
}

impl CpuDevice {
    pub(super) fn linear(&mut self, model: &Model, i: usize, members: &[Member], ak: ActK) {
        if self.linear_in_place(model, i, members, ak) {
            return;
        }
        let node = &model.nodes[i];
        let k = self.nodes[i].in_feat;
        let n = self.layout.nodes[i].feat;
        let mut a = std::mem::take(&mut self.scratch_a);
        let mut c = std::mem::take(&mut self.scratch_c);
        let mut r_total = 0;
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                self.gather_row(model, node, m, r, &mut a[r_total * k..(r_total + 1) * k]);
                r_total += 1;
            }
        }
        // the weights, or a tied embedding table packed transposed
        let owner = self.nodes[i].tied.unwrap_or(i);
        let fin = (&self.nodes[i].w.bias[..], ak);
        kernels::gemm_rows_bias_act(r_total, &a, &self.nodes[owner].panels, &mut c, fin);
        let mut r_at = 0;
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                let pos = self.layout.out_pos(model, i, step, r, m.len);
                self.scatter_row(i, m.slot, pos, &c[r_at * n..(r_at + 1) * n]);
                r_at += 1;
            }
        }
        self.scratch_a = a;
        self.scratch_c = c;
    }

    /// Member `m`'s rows when they can be used in place: one input, read from an earlier node
    /// where its rows lie one after another, and output rows one after another too.
    fn run_of(&self, model: &Model, i: usize, m: &Member) -> Option<Run> {
        let node = &model.nodes[i];
        let (k, n) = (self.nodes[i].in_feat, self.layout.nodes[i].feat);
        let rows = Layout::rows(node, m.len);
        if node.inputs.len() != 1 || rows < IN_PLACE_ROWS {
            return None;
        }
        let out = |r: usize| {
            let pos = self.layout.out_pos(model, i, m.step, r, m.len);
            self.layout.offset(i, m.slot, pos)
        };
        let (producer, a) = self.input_run(model, node, 0, m, 0)?;
        let c = out(0);
        let contiguous = (1..rows).all(|r| {
            self.input_run(model, node, 0, m, r) == Some((producer, a + r * k))
                && out(r) == c + r * n
        });
        contiguous.then_some(Run {
            producer,
            a,
            c,
            rows,
        })
    }

    /// The GEMM straight from the producer's buffer into this node's, when every member's rows
    /// can be used in place (untied weights): one call per run of members whose rows follow
    /// each other in both buffers (a sub-batch in consecutive slots is one call), each row the
    /// same bits as through scratch (the row GEMM is batch-invariant). False, with nothing
    /// done, otherwise.
    fn linear_in_place(&mut self, model: &Model, i: usize, members: &[Member], ak: ActK) -> bool {
        if self.nodes[i].tied.is_some()
            || !members.iter().all(|m| self.run_of(model, i, m).is_some())
        {
            return false;
        }
        let (k, n) = (self.nodes[i].in_feat, self.layout.nodes[i].feat);
        let mut pending: Option<Run> = None;
        for m in members {
            let Some(next) = self.run_of(model, i, m) else {
                continue;
            };
            pending = match pending {
                Some(run)
                    if run.producer == next.producer
                        && run.a + run.rows * k == next.a
                        && run.c + run.rows * n == next.c =>
                {
                    Some(Run {
                        rows: run.rows + next.rows,
                        ..run
                    })
                }
                Some(run) => {
                    self.gemm_run(i, run, ak);
                    Some(next)
                }
                None => Some(next),
            };
        }
        if let Some(run) = pending {
            self.gemm_run(i, run, ak);
        }
        true
    }

    /// One run's GEMM and epilogue, in place.
    fn gemm_run(&mut self, i: usize, run: Run, ak: ActK) {
        let (k, n) = (self.nodes[i].in_feat, self.layout.nodes[i].feat);
        let (before, from_here) = self.nodes.split_at_mut(i);
        let NodeRt { out, panels, w, .. } = &mut from_here[0];
        let a = &before[run.producer].out[run.a..run.a + run.rows * k];
        let c = &mut out[run.c..run.c + run.rows * n];
        kernels::gemm_rows_bias_act(run.rows, a, panels, c, (&w.bias, ak));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing;
    use crate::device::capture::CaptureMode;
    use crate::device::Device;
    use crate::graph::NodeStep;

    /// A sequence of 16 rows through two linear layers (read and written in place), the second
    /// with a GELU.
    const MODEL: &str = r#"
name = "rows"
max_batch = 4

[[node]]
name = "x"
op = "input"
shape = [24]
seq = 16

[[node]]
name = "a"
op = "linear"
inputs = ["x"]
out_features = 40
bias = true

[[node]]
name = "b"
op = "linear"
inputs = ["a"]
out_features = 56
bias = true
act = "gelu"
"#;

    /// Each member's rows equal, bit for bit, the same request's rows served alone, whether the
    /// members sit in consecutive slots (one GEMM) or scattered ones (one GEMM per run), and
    /// the first layer's rows match an f64 reference of its input and weights.
    #[test]
    fn rows_in_place_are_the_same_bits_in_any_slots() {
        let serve = |slots: &[u32]| {
            let (model, mut dev) = testing::prepared(MODEL, 3);
            dev.set_capture(CaptureMode::EveryNode);
            let members = testing::members(&model, slots, |slot| 10 + u64::from(slot));
            assert!(members.iter().all(|m| dev.run_of(&model, 1, m).is_some()));
            // the first layer, checked before the second runs (it may take the input's memory)
            testing::run(&mut dev, &model, 2, &members);
            let (x, a) = (&dev.nodes[0], &dev.nodes[1]);
            let w: Vec<f32> = (0..24 * 40).map(|e| a.panels.at(e / 40, e % 40)).collect();
            for m in &members {
                let x0 = dev.layout.offset(0, m.slot, 0);
                let a0 = dev.layout.offset(1, m.slot, 0);
                for r in 0..16 {
                    for j in 0..40 {
                        let want: f64 = (0..24)
                            .map(|p| x.out[x0 + r * 24 + p] as f64 * w[p * 40 + j] as f64)
                            .sum::<f64>()
                            + a.w.bias[j] as f64;
                        let got = a.out[a0 + r * 40 + j] as f64;
                        assert!((got - want).abs() < 1e-4, "slot {} row {r} col {j}", m.slot);
                    }
                }
            }
            let last = NodeStep {
                node: model.nodes[2].id,
                step: 0,
            };
            dev.execute(&model, last, &members).unwrap();
            dev.take_captured().trace
        };
        let alone: Vec<_> = [0u32, 1, 2, 3].iter().map(|&s| serve(&[s])).collect();
        for slots in [&[0u32, 1, 2, 3][..], &[3, 0, 2][..], &[1, 3][..]] {
            let trace = serve(slots);
            for e in &trace {
                let slot = (e.input - 10) as usize;
                let want = alone[slot].iter().find(|a| a.node == e.node).unwrap();
                assert_eq!(
                    e.values, want.values,
                    "node {} slot {slot} in {slots:?}",
                    e.node
                );
            }
        }
    }
}
