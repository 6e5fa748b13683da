//! Row-wise ops: add, concat, activations, batch and layer norm, softmax, argmax, embeddings, take.

use super::*;

impl CpuDevice {
    /// Ops that work row by row on their (concatenated) inputs.
    pub(super) fn rowwise(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
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
                    Op::Flatten | Op::Concat | Op::Take { .. } => y.copy_from_slice(&x[..fo]),
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
                        let per = fo / ch.max(1);
                        for (j, v) in y.iter_mut().enumerate() {
                            *v = x[j] * w.scale[j / per] + w.shift[j / per];
                        }
                    }
                    Op::LayerNorm => {
                        y.copy_from_slice(x);
                        kernels::layernorm(y, &w.scale, &w.shift);
                    }
                    Op::Softmax => {
                        y.copy_from_slice(x);
                        kernels::softmax(y);
                    }
                    Op::Argmax => {
                        let mut best = 0;
                        for (j, v) in x.iter().enumerate() {
                            if *v > x[best] {
                                best = j;
                            }
                        }
                        y[0] = best as f32;
                    }
                    Op::Embedding {
                        vocab,
                        dim,
                        scale,
                        positional,
                        token_types,
                        ..
                    } => {
                        let id = (x[0].max(0.0) as usize) % vocab;
                        let table = match self.nodes[i].tied {
                            Some(t) => &self.nodes[t].w.w,
                            None => &w.w,
                        };
                        y.copy_from_slice(&table[id * dim..(id + 1) * dim]);
                        if *scale {
                            let s = (*dim as f32).sqrt();
                            y.iter_mut().for_each(|v| *v *= s);
                        }
                        let pos = if node.loop_id.is_some() {
                            step as usize
                        } else {
                            r
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
                    _ => y.copy_from_slice(&x[..fo]),
                }
                let pos = self.layout.out_pos(model, i, step, r, m.len);
                let src = &c[..fo];
                self.scatter_row(i, m.slot, pos, src);
            }
        }
        self.scratch_a = a;
        self.scratch_c = c;
    }
}
