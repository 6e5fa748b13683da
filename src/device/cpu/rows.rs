//! Row-wise ops: add, concat, activations, batch and layer norm, softmax, argmax, embeddings, take,
//! and `Flatten`, which turns a channels-last image back into the graph's `[C, H, W]` order.

use super::kernels::{self, ActK};
use super::{act_k, hwc, image, numel, par, CpuDevice};
use crate::device::layout::Layout;
use crate::device::Member;
use crate::graph::op::{Op, PosEnc};
use crate::graph::Model;

impl CpuDevice {
    /// Ops that work row by row on their (concatenated) inputs.
    pub(super) fn rowwise(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
        if self.nodes[i].fused {
            // its producer's epilogue wrote it
            return;
        }
        if let Op::Add { act } = &node.op {
            if self.add_in_place(model, i, members, act_k(*act)) {
                return;
            }
        }
        if node.op == Op::Argmax && self.argmax_in_place(model, i, members) {
            return;
        }
        let kin = self.nodes[i].in_feat;
        let fo = self.layout.nodes[i].feat;
        let mut a = std::mem::take(&mut self.scratch_a);
        let mut c = std::mem::take(&mut self.scratch_c);
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                self.gather_row(model, node, m, r, &mut a[..kin]);
                let x = &a[..kin];
                let y = &mut c[..fo];
                let w = &self.nodes[i].w;
                match &node.op {
                    Op::Flatten => match image(&node.in_shapes[0].feat) {
                        Some(chw) => hwc::to_chw(x, chw, y),
                        None => y.copy_from_slice(&x[..fo]),
                    },
                    Op::Concat | Op::Take { .. } => y.copy_from_slice(&x[..fo]),
                    Op::Add { act } => {
                        y.copy_from_slice(&x[..fo]);
                        for part in x[fo..].chunks_exact(fo) {
                            for (v, p) in y.iter_mut().zip(part) {
                                *v += p;
                            }
                        }
                        kernels::act(act_k(*act), y);
                    }
                    Op::Activation { kind } => {
                        y.copy_from_slice(x);
                        kernels::act(act_k(*kind), y);
                    }
                    Op::BatchNorm => {
                        let ch = node.out.feat[0];
                        // an image's channel is the innermost index (channels-last)
                        let channel = |j: usize| match image(&node.out.feat) {
                            Some(_) => j % ch,
                            None => j / (fo / ch.max(1)),
                        };
                        for (j, v) in y.iter_mut().enumerate() {
                            let c = channel(j);
                            *v = x[j] * w.scale[c] + w.shift[c];
                        }
                    }
                    Op::LayerNorm { eps } => {
                        y.copy_from_slice(x);
                        kernels::layernorm(y, &w.scale, &w.shift, *eps);
                    }
                    Op::Softmax => {
                        y.copy_from_slice(x);
                        kernels::softmax(y);
                    }
                    Op::Argmax => y[0] = kernels::argmax(x) as f32,
                    Op::Embedding {
                        vocab,
                        dim,
                        scale,
                        positional,
                        token_types,
                        after_src,
                        ..
                    } => {
                        let id = (x[0].max(0.0) as usize) % vocab;
                        // the table's row, or a column of it packed transposed (tied logits)
                        let owner = &self.nodes[self.nodes[i].tied.unwrap_or(i)];
                        if owner.panels.data.is_empty() {
                            y.copy_from_slice(&owner.w.w[id * dim..(id + 1) * dim]);
                        } else {
                            owner.panels.column(id, y);
                        }
                        if *scale {
                            let s = (*dim as f32).sqrt();
                            y.iter_mut().for_each(|v| *v *= s);
                        }
                        let pos = match (node.loop_id, after_src) {
                            (Some(_), true) => m.len.enc as usize + step as usize,
                            (Some(_), false) => step as usize,
                            (None, _) => r,
                        };
                        match positional {
                            PosEnc::Sinusoidal => {
                                for (j, v) in y.iter_mut().enumerate() {
                                    *v += kernels::sinusoid(pos, j, *dim);
                                }
                            }
                            PosEnc::Learned => {
                                let np = w.extra.len() / dim;
                                let p = pos.min(np.saturating_sub(1));
                                for (v, e) in y.iter_mut().zip(&w.extra[p * dim..(p + 1) * dim]) {
                                    *v += e;
                                }
                            }
                            PosEnc::None => {}
                        }
                        if *token_types > 0 {
                            // every token is of type 0
                            for (v, e) in y.iter_mut().zip(&w.bias[..*dim]) {
                                *v += e;
                            }
                        }
                    }
                    // run_node sends these to their own kernels, never here
                    Op::Input { .. }
                    | Op::Conv2d { .. }
                    | Op::Pool { .. }
                    | Op::Linear { .. }
                    | Op::Lstm { .. }
                    | Op::Attention { .. } => {
                        unreachable!("{} is not a row-wise op", node.op.kind_name())
                    }
                }
                let pos = self.layout.out_pos(model, i, step, r, m.len);
                let src = &c[..fo];
                self.scatter_row(i, m.slot, pos, src);
            }
        }
        self.scratch_a = a;
        self.scratch_c = c;
    }

    /// A two-input add whose inputs are each one run of an earlier node's output (a residual
    /// connection) reads them in place and writes its output directly, vectorised and split
    /// over the cores; false, with nothing done, when some input must be gathered.
    fn add_in_place(&mut self, model: &Model, i: usize, members: &[Member], ak: ActK) -> bool {
        let node = &model.nodes[i];
        let fo = self.layout.nodes[i].feat;
        if node.inputs.len() != 2 {
            return false;
        }
        let run = |m: &Member, r: usize, k: usize| self.input_run(model, node, k, m, r);
        let rows = |m: &Member| 0..Layout::rows(node, m.len);
        if !members
            .iter()
            .all(|m| rows(m).all(|r| run(m, r, 0).is_some() && run(m, r, 1).is_some()))
        {
            return false;
        }
        for m in members {
            for r in rows(m) {
                let inputs = (
                    self.input_run(model, node, 0, m, r),
                    self.input_run(model, node, 1, m, r),
                );
                let (Some((pa, oa)), Some((pb, ob))) = inputs else {
                    continue;
                };
                let o =
                    self.layout
                        .offset(i, m.slot, self.layout.out_pos(model, i, m.step, r, m.len));
                let (before, from_here) = self.nodes.split_at_mut(i);
                let (a, b) = (&before[pa].out[oa..oa + fo], &before[pb].out[ob..ob + fo]);
                kernels::add_act(ak, a, b, &mut from_here[0].out[o..o + fo]);
            }
        }
        true
    }

    /// Argmax over each member's single row read where its producer wrote it (a decoder step's
    /// logits: 36,548 values a request for GNMT, copied into scratch first until now), the
    /// members shared between the cores; false, with nothing done, when a row must be gathered.
    fn argmax_in_place(&mut self, model: &Model, i: usize, members: &[Member]) -> bool {
        let node = &model.nodes[i];
        let width = numel(&node.in_shapes[0].feat);
        let in_place = |m: &Member| {
            Layout::rows(node, m.len) == 1 && self.input_run(model, node, 0, m, 0).is_some()
        };
        if node.inputs.len() != 1
            || self.scratch_c.len() < members.len()
            || !members.iter().all(in_place)
        {
            return false;
        }
        let mut picks = std::mem::take(&mut self.scratch_c);
        let this = &*self;
        let pick = |m: &Member| {
            let (p, off) = this.input_run(model, node, 0, m, 0).unwrap_or_default();
            kernels::argmax(&this.nodes[p].out[off..off + width]) as f32
        };
        let picks_of = &mut picks[..members.len()];
        // members over the threads, one row each
        par::split_rows(picks_of, 1, members.len() * width, |j0, ys| {
            for (y, m) in ys.iter_mut().zip(&members[j0..]) {
                *y = pick(m);
            }
        });
        for (m, y) in members.iter().zip(picks.iter()) {
            let pos = self.layout.out_pos(model, i, m.step, 0, m.len);
            self.out_row_mut(i, m.slot, pos)[0] = *y;
        }
        self.scratch_c = picks;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing;

    /// Each member's argmax, read in place (alone, or members shared between the cores), is the
    /// first largest value's index of its row.
    #[test]
    fn argmax_in_place_picks_each_rows_first_largest() {
        for width in [40usize, 70_000] {
            let text = format!(
                "name = \"pick\"\nmax_batch = 4\n\n[[node]]\nname = \"x\"\nop = \"input\"\n\
                 shape = [{width}]\nseq = \"one\"\n\n[[node]]\nname = \"y\"\nop = \"argmax\"\n\
                 inputs = [\"x\"]\n"
            );
            let (model, mut dev) = testing::prepared(&text, 5);
            let members = testing::members(&model, &[3, 0, 2], |slot| u64::from(slot) + 1);
            testing::run(&mut dev, &model, 1, &members);
            assert!(dev.argmax_in_place(&model, 1, &members), "width {width}");
            for m in &members {
                let x = &dev.nodes[0].out[dev.layout.offset(0, m.slot, 0)..][..width];
                let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let want = x.iter().position(|v| *v == max).unwrap();
                let y = dev.nodes[1].out[dev.layout.offset(1, m.slot, 0)];
                assert_eq!(y, want as f32, "width {width}, slot {}", m.slot);
            }
        }
    }
}
