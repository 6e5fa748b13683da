//! LSTM cells: the gate GEMM over [x, h] and the pointwise update, cell states by slot.

use super::kernels::{self, ActK};
use super::CpuDevice;
use crate::device::Member;
use crate::graph::Model;

impl CpuDevice {
    pub(super) fn lstm(&mut self, model: &Model, i: usize, members: &[Member], h: usize) {
        let node = &model.nodes[i];
        let kx = self.nodes[i].in_feat;
        let k = kx + h;
        let mut a = std::mem::take(&mut self.scratch_a);
        let mut c = std::mem::take(&mut self.scratch_c);
        for (j, m) in members.iter().enumerate() {
            let step = m.step;
            let row = &mut a[j * k..(j + 1) * k];
            self.gather_row(model, node, m, 0, &mut row[..kx]);
            if step == 0 {
                row[kx..].iter_mut().for_each(|v| *v = 0.0);
            } else {
                let pos = self.layout.pos(model, i, step - 1, m.len);
                row[kx..].copy_from_slice(self.row(i, m.slot, pos));
            }
        }
        let b = members.len();
        let fin = (&self.nodes[i].w.bias[..], ActK::None);
        kernels::gemm_rows_bias_act(b, &a, &self.nodes[i].panels, &mut c, fin);
        for (j, m) in members.iter().enumerate() {
            let step = m.step;
            let gates = &c[j * 4 * h..(j + 1) * 4 * h];
            let pos = self.layout.pos(model, i, step, m.len);
            let nd = &mut self.nodes[i];
            let cs = &mut nd.state[m.slot as usize * h..(m.slot as usize + 1) * h];
            if step == 0 {
                cs.iter_mut().for_each(|v| *v = 0.0);
            }
            let o = self.layout.offset(i, m.slot, pos);
            kernels::lstm_cell(gates, cs, &mut nd.out[o..o + h]);
        }
        self.scratch_a = a;
        self.scratch_c = c;
    }
}
