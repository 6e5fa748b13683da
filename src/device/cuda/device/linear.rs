//! Linear layers: one cuBLASLt GEMM over the sub-batch's rows with the bias and activation in
//! its epilogue (`blaslt.rs`).

use super::*;

impl CudaDevice {
    /// A linear layer: one GEMM over the sub-batch's rows (a tied table transposed), its bias and
    /// a ReLU or GELU fused; another activation as one kernel after it.
    pub(super) fn linear(&mut self, model: &Model, i: usize) -> Result<()> {
        let node = &model.nodes[i];
        let feat = self.mem.feat(i)?;
        let Op::Linear { act, .. } = &node.op else {
            return Err(Error::Internal(format!("linear on node '{}'", node.name)));
        };
        let rows = self.gather()?;
        let k = self.mem.nodes[i].in_feat;
        // the raw cuBLASLt calls need the context current on this thread
        self.lib.ctx.bind_to_thread().map_err(cuda_err)?;
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs {
            stream, funcs, lt, ..
        } = lib;
        let Memory {
            nodes,
            scratch,
            s16,
            ..
        } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let tied = nodes[i].tied;
        {
            // the input rows in scratch A or the producer's rows, the outputs in scratch C or the
            // node's own rows
            let Operands {
                x,
                y: mut cv,
                w: own,
                others,
                ..
            } = Self::operands(nodes, sc, staged, i, rows * k, rows * feat)?;
            // the tied table is [feat × k]: read it transposed
            let w = match tied {
                Some(t) => &others.get(t)?.w,
                None => own,
            };
            // f16 weights multiply the rows converted to f16 (scratch B); f32 ones the rows as they are
            let (wp, _gw, ab) = match (&w.w16, &w.w) {
                (Some(h), _) => {
                    let (p, g) = h.device_ptr(stream);
                    (p, g, blaslt::Ab::F16)
                }
                (None, Some(f)) => {
                    let (p, g) = f.device_ptr(stream);
                    (p, g, blaslt::Ab::F32)
                }
                (None, None) => return Err(missing("linear weights")),
            };
            let (xp, _gx) = match (ab, s16.as_mut()) {
                (blaslt::Ab::F32, _) => x.device_ptr(stream),
                (blaslt::Ab::F16, Some(s16)) => {
                    gemm::to_f16(stream, funcs, &x, &mut s16.b, rows * k)?;
                    s16.b.device_ptr(stream)
                }
                (blaslt::Ab::F16, None) => return Err(missing("f16 scratch")),
            };
            let g = blaslt::LinearGemm {
                node: i,
                rows,
                feat,
                k,
                tied: tied.is_some(),
                ab,
                act: *act,
            };
            let fused = lt.linear(stream, &g, (wp, xp), &mut cv, own.bias.as_ref())?;
            if !fused {
                let f = funcs.get("bias_act").ok_or_else(|| missing("bias_act"))?;
                let null = 0u64;
                let (r_i, n_i, a_i) = (rows as i32, feat as i32, act_code(*act));
                let mut b = stream.launch_builder(f);
                b.arg(&mut cv).arg(&null).arg(&r_i).arg(&n_i).arg(&a_i);
                // SAFETY: rows·feat outputs in cv.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
            }
        }
        self.scatter(i, Buf::C)?;
        Ok(())
    }
}
