//! Linear layers: one batch-invariant GEMM over the sub-batch's rows against weights packed at
//! prepare time (kernels::gemm_rows).

use super::*;

impl CpuDevice {
    pub(super) fn linear(&mut self, model: &Model, i: usize, members: &[Member], ak: ActK) {
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
        kernels::gemm_rows(r_total, &a, &self.nodes[owner].panels, &mut c);
        kernels::bias_act(ak, &mut c[..r_total * n], n, &self.nodes[i].w.bias);
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
}
