//! Linear layers.

use super::*;

impl CudaDevice {
    /// A linear layer: one GEMM over the sub-batch's rows (a tied table transposed), bias and activation.
    pub(super) fn linear(&mut self, model: &Model, i: usize) -> Result<()> {
        let node = &model.nodes[i];
        let feat = self.layout.as_ref().ok_or_else(|| missing("layout"))?.nodes[i].feat;
        let Op::Linear { act, .. } = &node.op else {
            return Err(Error::Internal(format!("linear on node '{}'", node.name)));
        };
        let rows = self.gather()?;
        let k = self.nodes[i].in_feat;
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            staged,
            blas,
            s16,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let tied = nodes[i].tied;
        // the input rows in scratch A or the producer's rows, the outputs in scratch C or the
        // node's own rows
        let Operands {
            x: av,
            y: mut cv,
            w: own,
            others,
            ..
        } = Self::operands(nodes, sc, staged, i, rows * k, rows * feat)?;
        // the tied table is [feat × k]: read it transposed
        let (w, transposed, ld) = match tied {
            Some(t) => (&others.get(t)?.w, true, k),
            None => (own, false, feat),
        };
        let wop = w.gemm_operand(.., "linear weights")?;
        let units = Units {
            s16: s16.as_mut(),
            blas,
            stream,
            funcs,
        };
        Self::gemm_p(
            units,
            (rows, feat, k),
            (Operand::F(av), false, k),
            (wop, transposed, ld),
            (&mut cv, feat),
            Strides::ONE,
        )?;
        let f = funcs.get("bias_act").ok_or_else(|| missing("bias_act"))?;
        let null = 0u64;
        let (r_i, n_i, a_i) = (rows as i32, feat as i32, act_code(*act));
        let mut b = stream.launch_builder(f);
        b.arg(&mut cv);
        match &own.bias {
            Some(bb) => b.arg(bb),
            None => b.arg(&null),
        };
        b.arg(&r_i).arg(&n_i).arg(&a_i);
        // SAFETY: rows·feat outputs in cv.
        unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
        self.scatter(i, Buf::C)?;
        Ok(())
    }
}
