//! LSTM cells: the gate GEMM and the state update, states kept by slot.

use super::*;

impl CudaDevice {
    /// Stages an LSTM step's tables: the gather of its [x ; h_prev] rows (inputs, then this
    /// node's previous step, or zeros) and the members' slots and reset flags.
    pub(super) fn stage_lstm(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<()> {
        let node = &model.nodes[i];
        let Op::Lstm { hidden, .. } = &node.op else {
            return Err(Error::Internal(format!("lstm on node '{}'", node.name)));
        };
        let h = *hidden;
        let k = self.mem.nodes[i].in_feat + h;
        let layout = self.mem.layout()?;
        for (r, m) in members.iter().enumerate() {
            let step = m.step;
            let mut off = r * k;
            for (q, inp) in node.inputs.iter().enumerate() {
                layout.input_segs(model, node, inp, m, 0, |s| {
                    self.host.segs.push(Seg {
                        dst: s.dst + off,
                        ..s
                    })
                });
                off += node.in_shapes[q].feat.iter().product::<usize>();
            }
            let src = if step == 0 {
                Src::Fill(0.0)
            } else {
                Src::Node {
                    node: i,
                    off: layout.offset(i, m.slot, layout.pos(model, i, step - 1, m.len)),
                }
            };
            self.host.segs.push(Seg {
                src,
                dst: off,
                len: h,
            });
        }
        self.host.staged.rows = members.len();
        self.stage_segs();
        let slots: Vec<i32> = members.iter().map(|m| m.slot as i32).collect();
        let reset: Vec<i32> = members.iter().map(|m| i32::from(m.step == 0)).collect();
        self.host.staged.i32a = self.stage_i32(&slots);
        self.host.staged.i32b = self.stage_i32(&reset);
        Ok(())
    }

    /// An LSTM step: the gate GEMM over [x, h] and the cell update, states by slot.
    pub(super) fn lstm(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<()> {
        let node = &model.nodes[i];
        let Op::Lstm { hidden, .. } = &node.op else {
            return Err(Error::Internal(format!("lstm on node '{}'", node.name)));
        };
        let h = *hidden;
        let k = self.mem.nodes[i].in_feat + h;
        self.gather()?;
        let rows = members.len();
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs {
            stream,
            funcs,
            blas,
            ..
        } = lib;
        let Memory {
            nodes,
            scratch,
            s16,
            ..
        } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        {
            let av = sc.a.slice(..rows * k);
            let mut cv = sc.c.slice_mut(..rows * 4 * h);
            let w = &nodes[i].w;
            let wop = w.gemm_operand(.., "lstm weights")?;
            let units = Units {
                s16: s16.as_mut(),
                blas,
                stream,
                funcs,
            };
            Self::gemm_p(
                units,
                (rows, 4 * h, k),
                (Operand::F(av), false, k),
                (wop, false, 4 * h),
                (&mut cv, 4 * h),
                Strides::ONE,
            )?;
        }
        let f = funcs.get("lstm_cell").ok_or_else(|| missing("lstm_cell"))?;
        let NodeGpu { w, state, .. } = &mut nodes[i];
        let bias = w.bias.as_ref().ok_or_else(|| missing("lstm bias"))?;
        let cstate = state.as_mut().ok_or_else(|| missing("lstm state"))?;
        let (r_i, h_i) = (rows as i32, h as i32);
        let slots_v = i32s(&sc.tables, staged.i32a, rows)?;
        let reset_v = i32s(&sc.tables, staged.i32b, rows)?;
        let mut b = stream.launch_builder(f);
        b.arg(&sc.c)
            .arg(bias)
            .arg(cstate)
            .arg(&slots_v)
            .arg(&reset_v)
            .arg(&mut sc.a)
            .arg(&r_i)
            .arg(&h_i);
        // SAFETY: rows·4h gates in C, rows·h outputs into A, states indexed by slot.
        unsafe { b.launch(elems(rows * h)) }.map_err(cuda_err)?;
        self.scatter(i, Buf::A)?;
        Ok(())
    }
}
