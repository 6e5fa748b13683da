//! Row-wise ops: inputs, embeddings, and the element-wise ops (add, concat, activations, norms, softmax, argmax, take).

use super::*;

impl CudaDevice {
    /// Writes each member's generated input into its rows.
    pub(super) fn input(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<()> {
        let node = &model.nodes[i];
        let Op::Input { shape, tokens, .. } = &node.op else {
            return Err(Error::Internal(format!("input on node '{}'", node.name)));
        };
        let f: usize = shape.iter().product();
        for m in members {
            let rows = Layout::rows(node, m.len);
            let off = self
                .layout
                .as_ref()
                .ok_or_else(|| missing("layout"))?
                .offset(i, m.slot, 0);
            self.host_in.resize(rows * f, 0.0);
            weights::fill_input(&mut self.host_in, self.seed, m.input, i as u64, *tokens);
            self.stream
                .memcpy_htod(
                    &self.host_in[..],
                    &mut self.nodes[i].out.slice_mut(off..off + rows * f),
                )
                .map_err(cuda_err)?;
        }
        Ok(())
    }

    /// Stages an embedding's tables: the gather of its token ids and each row's position.
    pub(super) fn stage_embedding(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
    ) -> Result<()> {
        let node = &model.nodes[i];
        self.stage_gather(model, i, members)?;
        self.host_i32.clear();
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                self.host_i32.push(if node.loop_id.is_some() {
                    m.step as i32
                } else {
                    r as i32
                });
            }
        }
        let positions = std::mem::take(&mut self.host_i32);
        self.staged.i32a = self.stage_i32(&positions);
        self.host_i32 = positions;
        Ok(())
    }

    /// An embedding lookup (with positions) for every row of the sub-batch.
    pub(super) fn embedding(&mut self, model: &Model, i: usize) -> Result<()> {
        let node = &model.nodes[i];
        let Op::Embedding {
            vocab,
            dim,
            scale,
            positional,
            positions,
            ..
        } = &node.op
        else {
            return Err(Error::Internal(format!(
                "embedding on node '{}'",
                node.name
            )));
        };
        let rows = self.gather()?;
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            staged,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let pos_v = i32s(&sc.tables, staged.i32a, rows)?;
        let table = match nodes[i].tied {
            Some(t) => nodes[t].w.w.as_ref(),
            None => nodes[i].w.w.as_ref(),
        }
        .ok_or_else(|| missing("embedding table"))?;
        let null = 0u64;
        let f = funcs
            .get("embedding_rows")
            .ok_or_else(|| missing("embedding_rows"))?;
        let pcode = match positional {
            PosEnc::None => 0i32,
            PosEnc::Sinusoidal => 1,
            PosEnc::Learned => 2,
        };
        let v = [
            rows as i32,
            *dim as i32,
            *vocab as i32,
            i32::from(*scale),
            pcode,
            (*positions).max(1) as i32,
        ];
        let mut b = stream.launch_builder(f);
        b.arg(&sc.a).arg(&pos_v).arg(table);
        match &nodes[i].w.extra {
            Some(e) => b.arg(e),
            None => b.arg(&null),
        };
        match &nodes[i].w.bias {
            Some(e) => b.arg(e),
            None => b.arg(&null),
        };
        b.arg(&mut sc.c);
        for x in &v {
            b.arg(x);
        }
        // SAFETY: rows ids in A, rows·dim outputs in C.
        unsafe { b.launch(elems(rows * dim)) }.map_err(cuda_err)?;
        self.scatter(i, Buf::C)?;
        Ok(())
    }

    pub(super) fn rowwise(&mut self, model: &Model, i: usize) -> Result<()> {
        let node = &model.nodes[i];
        let rows = self.gather()?;
        let kin = self.nodes[i].in_feat;
        let feat = self.layout.as_ref().ok_or_else(|| missing("layout"))?.nodes[i].feat;
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            ..
        } = self;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let null = 0u64;
        let (r_i, n_i) = (rows as i32, feat as i32);
        let get = |n: &str| funcs.get(n).ok_or_else(|| missing(n));
        let from = match &node.op {
            Op::Flatten | Op::Concat | Op::Take { .. } => Buf::A,
            Op::Add { act } => {
                let parts = (kin / feat.max(1)) as i32;
                let a_i = act_code(*act);
                let mut b = stream.launch_builder(get("sum_parts")?);
                b.arg(&sc.a)
                    .arg(&mut sc.c)
                    .arg(&r_i)
                    .arg(&n_i)
                    .arg(&parts)
                    .arg(&a_i);
                // SAFETY: rows·parts·feat inputs, rows·feat outputs.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                Buf::C
            }
            Op::Activation { kind } => {
                let a_i = act_code(*kind);
                let mut b = stream.launch_builder(get("bias_act")?);
                b.arg(&mut sc.a).arg(&null).arg(&r_i).arg(&n_i).arg(&a_i);
                // SAFETY: rows·feat values in A, in place.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                Buf::A
            }
            Op::BatchNorm => {
                let per = (feat / node.out.feat[0].max(1)) as i32;
                let w = &nodes[i].w;
                let mut b = stream.launch_builder(get("batchnorm_rows")?);
                b.arg(&sc.a)
                    .arg(&mut sc.c)
                    .arg(w.scale.as_ref().ok_or_else(|| missing("bn scale"))?)
                    .arg(w.shift.as_ref().ok_or_else(|| missing("bn shift"))?)
                    .arg(&r_i)
                    .arg(&n_i)
                    .arg(&per);
                // SAFETY: rows·feat values.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                Buf::C
            }
            Op::LayerNorm => {
                let w = &nodes[i].w;
                let mut b = stream.launch_builder(get("layernorm_rows")?);
                b.arg(&sc.a)
                    .arg(&mut sc.c)
                    .arg(w.scale.as_ref().ok_or_else(|| missing("ln gamma"))?)
                    .arg(w.shift.as_ref().ok_or_else(|| missing("ln beta"))?)
                    .arg(&n_i);
                // SAFETY: one block per row.
                unsafe { b.launch(blocks(rows, 256, 0)) }.map_err(cuda_err)?;
                Buf::C
            }
            Op::Softmax => {
                let one = 1.0f32;
                let mut b = stream.launch_builder(get("softmax_rows")?);
                b.arg(&sc.a).arg(&mut sc.c).arg(&n_i).arg(&one);
                // SAFETY: one block per row.
                unsafe { b.launch(blocks(rows, 256, 0)) }.map_err(cuda_err)?;
                Buf::C
            }
            Op::Argmax => {
                let k_i = kin as i32;
                let mut b = stream.launch_builder(get("argmax_rows")?);
                b.arg(&sc.a).arg(&mut sc.c).arg(&k_i);
                // SAFETY: one block of 1024 threads per row (the kernel's shared arrays).
                unsafe { b.launch(blocks(rows, 1024, 0)) }.map_err(cuda_err)?;
                Buf::C
            }
            other => {
                return Err(Error::Internal(format!(
                    "cuda device: no kernel for op {}",
                    other.kind_name()
                )))
            }
        };
        self.scatter(i, from)
    }
}
