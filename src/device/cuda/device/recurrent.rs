//! LSTM cells: the gate GEMM and the state update, states kept by slot.

use super::*;

impl CudaDevice {
    /// An LSTM step: the gate GEMM over [x, h] and the cell update, states by slot.
    pub(super) fn lstm(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<()> {
        let node = &model.nodes[i];
        let Op::Lstm { hidden, .. } = &node.op else {
            return Err(Error::Internal(format!("lstm on node '{}'", node.name)));
        };
        let h = *hidden;
        let kx = self.nodes[i].in_feat;
        let k = kx + h;
        // [x ; h_prev] rows: inputs, then this node's previous step (or zeros)
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        for (r, m) in members.iter().enumerate() {
            let step = m.step;
            let mut off = r * k;
            for (q, inp) in node.inputs.iter().enumerate() {
                layout.input_segs(model, node, inp, m, 0, |s| {
                    self.segs.push(Seg {
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
            self.segs.push(Seg {
                src,
                dst: off,
                len: h,
            });
        }
        self.copy_segs(Buf::A)?;
        self.host_i32.clear();
        self.host_i32.extend(members.iter().map(|m| m.slot as i32));
        self.host_i32
            .extend(members.iter().map(|m| i32::from(m.step == 0)));
        let rows = members.len();
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            blas,
            s16,
            host_i32,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        stream
            .memcpy_htod(&host_i32[..], &mut sc.i32a.slice_mut(..2 * rows))
            .map_err(cuda_err)?;
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
        let (slots_v, reset_v) = (sc.i32a.slice(..rows), sc.i32a.slice(rows..2 * rows));
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
        self.scatter(model, i, members, Buf::A)?;
        Ok(())
    }
}
