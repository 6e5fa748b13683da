//! Row-wise ops: inputs, embeddings, and the element-wise ops (add, concat, activations, norms, softmax, argmax, take).

use super::*;

impl CudaDevice {
    /// Writes each member's input into its rows: a front end's values ([`Device::set_exchange`]),
    /// staged in page-locked memory at their rows' places and copied in one transfer per run of
    /// adjacent slots (one a node when the sub-batch's slots are adjacent, as a batch formed at
    /// once is); or generated values, made on the card by `fill_hashed`, bit for bit the CPU
    /// device's (they were made on the host and copied from pageable memory one request at a
    /// time: 7.0–10.3 ms of ResNet-50's batch of 64 on an H200, inside our time and not inside
    /// PyTorch's).
    pub(super) fn input(&mut self, model: &Model, i: usize, members: &[Member]) -> Result<()> {
        let node = &model.nodes[i];
        let Op::Input { shape, tokens, .. } = &node.op else {
            return Err(Error::Internal(format!("input on node '{}'", node.name)));
        };
        let f: usize = shape.iter().product();
        // (offset, values) of each member the front end gave values for
        let mut served: Vec<(usize, Vec<f32>)> = Vec::new();
        for m in members {
            let rows = Layout::rows(node, m.len);
            let off = self.mem.layout()?.offset(i, m.slot, 0);
            if let Some(v) = self
                .capture
                .exchange()
                .and_then(|x| x.input_for(m.input, rows * f, f))
            {
                served.push((off, v));
                continue;
            }
            let (k1, k2) = weights::input_keys(self.seed, m.input, i as u64);
            let (n, t) = ((rows * f) as i64, i32::from(*tokens));
            let CudaDevice { lib, mem, .. } = self;
            let fill = lib
                .funcs
                .get("fill_hashed")
                .ok_or_else(|| missing("fill_hashed"))?;
            let mut out = mem.nodes[i].out.slice_mut(off..off + rows * f);
            let mut b = lib.stream.launch_builder(fill);
            b.arg(&mut out).arg(&n).arg(&k1).arg(&k2).arg(&t);
            // SAFETY: rows·f values in the member's rows of the node's output.
            unsafe { b.launch(elems(rows * f)) }.map_err(cuda_err)?;
        }
        if !served.is_empty() {
            self.upload_served(i, served)?;
        }
        Ok(())
    }

    /// Makes the page-locked staging of a front end's inputs before the first request, once
    /// the device is prepared and serves one (prepare or set_exchange, whichever comes second).
    /// A failure here is not lost: the first served input node allocates again and says why.
    pub(super) fn stage_for_exchange(&mut self) {
        if self.capture.exchange().is_none() || self.host.pinned.is_some() {
            return;
        }
        if self.mem.input_len > 0 {
            self.host.pinned = Pinned::new(&self.lib.ctx, self.mem.input_len).ok();
        }
    }

    /// Copies the front end's values `served` (each at its offset in node `i`'s output) through
    /// the page-locked staging buffer: one copy per run of adjacent rows.
    fn upload_served(&mut self, i: usize, mut served: Vec<(usize, Vec<f32>)>) -> Result<()> {
        let len = self.mem.input_len;
        let Host { pinned, .. } = &mut self.host;
        // the staging buffer mirrors the input node's output; made at the first served request
        // (a run that generates its inputs needs none) and kept until the next prepare
        if pinned.as_ref().is_none_or(|p| p.len() < len) {
            *pinned = Some(Pinned::new(&self.lib.ctx, len)?);
        }
        let p = pinned.as_mut().ok_or_else(|| missing("staging"))?;
        let host = p.writable()?;
        served.sort_by_key(|(off, _)| *off);
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (off, v) in &served {
            host[*off..*off + v.len()].copy_from_slice(v);
            match runs.last_mut() {
                Some((_, end)) if *end == *off => *end += v.len(),
                _ => runs.push((*off, *off + v.len())),
            }
        }
        for (a, b) in runs {
            self.lib
                .stream
                .memcpy_htod(&host[a..b], &mut self.mem.nodes[i].out.slice_mut(a..b))
                .map_err(cuda_err)?;
        }
        p.copied(&self.lib.stream)
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
        self.host.host_i32.clear();
        let after_src = matches!(
            node.op,
            Op::Embedding {
                after_src: true,
                ..
            }
        );
        for m in members {
            for r in 0..Layout::rows(node, m.len) {
                // a decoder step's position (after the source's rows, with `after_src`), or
                // the row's
                self.host.host_i32.push(match (node.loop_id, after_src) {
                    (Some(_), true) => (m.len.enc + m.step) as i32,
                    (Some(_), false) => m.step as i32,
                    (None, _) => r as i32,
                });
            }
        }
        let positions = std::mem::take(&mut self.host.host_i32);
        self.host.staged.i32a = self.stage_i32(&positions);
        self.host.host_i32 = positions;
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
        let kin = self.mem.nodes[i].in_feat;
        let tied = self.mem.nodes[i].tied;
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs { stream, funcs, .. } = lib;
        let Memory { nodes, scratch, .. } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        // the token ids in scratch A or the producer's rows, the outputs in scratch C or the
        // node's own rows
        let Operands {
            x: ids,
            mut y,
            tables,
            w: own,
            others,
            ..
        } = Self::operands(nodes, sc, staged, i, rows * kin, rows * dim)?;
        let pos_v = i32s(tables, staged.i32a, rows)?;
        let table = match tied {
            Some(t) => others.get(t)?.w.w.as_ref(),
            None => own.w.as_ref(),
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
        b.arg(&ids).arg(&pos_v).arg(table);
        match &own.extra {
            Some(e) => b.arg(e),
            None => b.arg(&null),
        };
        match &own.bias {
            Some(e) => b.arg(e),
            None => b.arg(&null),
        };
        b.arg(&mut y);
        for x in &v {
            b.arg(x);
        }
        // SAFETY: rows ids in, rows·dim outputs.
        unsafe { b.launch(elems(rows * dim)) }.map_err(cuda_err)?;
        self.scatter(i, Buf::C)?;
        Ok(())
    }

    pub(super) fn rowwise(&mut self, model: &Model, i: usize) -> Result<()> {
        let node = &model.nodes[i];
        let rows = self.gather()?;
        let kin = self.mem.nodes[i].in_feat;
        let feat = self.mem.feat(i)?;
        let null = 0u64;
        let (r_i, n_i) = (rows as i32, feat as i32);
        match &node.op {
            // row copies: the scatter copies the gathered (or the producer's) rows
            Op::Flatten | Op::Concat | Op::Take { .. } => return self.scatter(i, Buf::A),
            Op::Activation { kind } => {
                let CudaDevice { lib, mem, .. } = self;
                let Libs { stream, funcs, .. } = lib;
                let Memory { scratch, .. } = mem;
                let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
                let f = funcs.get("bias_act").ok_or_else(|| missing("bias_act"))?;
                let a_i = act_code(*kind);
                let mut b = stream.launch_builder(f);
                b.arg(&mut sc.a).arg(&null).arg(&r_i).arg(&n_i).arg(&a_i);
                // SAFETY: rows·feat values in A, in place.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                return self.scatter(i, Buf::A);
            }
            // the kernels below
            Op::Add { .. } | Op::BatchNorm | Op::LayerNorm { .. } | Op::Softmax | Op::Argmax => {}
            // run_node sends these to their own methods
            Op::Input { .. }
            | Op::Conv2d { .. }
            | Op::Pool { .. }
            | Op::Linear { .. }
            | Op::Lstm { .. }
            | Op::Attention { .. }
            | Op::Embedding { .. } => return Err(not_rowwise(&node.op)),
        }
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs { stream, funcs, .. } = lib;
        let Memory { nodes, scratch, .. } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        // the input rows in scratch A or the producers' rows, the outputs in scratch C or the
        // node's own rows
        let Operands {
            x, x2, mut y, w, ..
        } = Self::operands(nodes, sc, staged, i, rows * kin, rows * feat)?;
        let get = |n: &str| funcs.get(n).ok_or_else(|| missing(n));
        match &node.op {
            Op::Add { act } => {
                let a_i = act_code(*act);
                if let Some(x2) = x2 {
                    // both inputs read in place
                    let n = (rows * feat) as i64;
                    let mut b = stream.launch_builder(get("add_pair")?);
                    b.arg(&x).arg(&x2).arg(&mut y).arg(&n).arg(&a_i);
                    // SAFETY: rows·feat values in each input and out.
                    unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                } else {
                    let parts = (kin / feat.max(1)) as i32;
                    let mut b = stream.launch_builder(get("sum_parts")?);
                    b.arg(&x)
                        .arg(&mut y)
                        .arg(&r_i)
                        .arg(&n_i)
                        .arg(&parts)
                        .arg(&a_i);
                    // SAFETY: rows·parts·feat inputs, rows·feat outputs.
                    unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
                }
            }
            Op::BatchNorm => {
                let per = (feat / node.out.feat[0].max(1)) as i32;
                let mut b = stream.launch_builder(get("batchnorm_rows")?);
                b.arg(&x)
                    .arg(&mut y)
                    .arg(w.scale.as_ref().ok_or_else(|| missing("bn scale"))?)
                    .arg(w.shift.as_ref().ok_or_else(|| missing("bn shift"))?)
                    .arg(&r_i)
                    .arg(&n_i)
                    .arg(&per);
                // SAFETY: rows·feat values.
                unsafe { b.launch(elems(rows * feat)) }.map_err(cuda_err)?;
            }
            Op::LayerNorm { eps } => {
                let mut b = stream.launch_builder(get("layernorm_rows")?);
                b.arg(&x)
                    .arg(&mut y)
                    .arg(w.scale.as_ref().ok_or_else(|| missing("ln gamma"))?)
                    .arg(w.shift.as_ref().ok_or_else(|| missing("ln beta"))?)
                    .arg(&n_i)
                    .arg(eps);
                // SAFETY: one block per row.
                unsafe { b.launch(blocks(rows, 256, 0)) }.map_err(cuda_err)?;
            }
            Op::Softmax => {
                let one = 1.0f32;
                let mut b = stream.launch_builder(get("softmax_rows")?);
                b.arg(&x).arg(&mut y).arg(&n_i).arg(&one);
                // SAFETY: one block per row.
                unsafe { b.launch(blocks(rows, 256, 0)) }.map_err(cuda_err)?;
            }
            Op::Argmax => {
                let k_i = kin as i32;
                let mut b = stream.launch_builder(get("argmax_rows")?);
                b.arg(&x).arg(&mut y).arg(&k_i);
                // SAFETY: one block of 1024 threads per row (the kernel's shared arrays).
                unsafe { b.launch(blocks(rows, 1024, 0)) }.map_err(cuda_err)?;
            }
            // answered above, or not row-wise
            Op::Flatten
            | Op::Concat
            | Op::Take { .. }
            | Op::Activation { .. }
            | Op::Input { .. }
            | Op::Conv2d { .. }
            | Op::Pool { .. }
            | Op::Linear { .. }
            | Op::Lstm { .. }
            | Op::Attention { .. }
            | Op::Embedding { .. } => return Err(not_rowwise(&node.op)),
        }
        self.scatter(i, Buf::C)
    }
}

/// The error of an op that reached the row-wise path without being one of its ops.
fn not_rowwise(op: &Op) -> Error {
    Error::Internal(format!(
        "cuda device: {} is not a row-wise op (run_node dispatches it elsewhere)",
        op.kind_name()
    ))
}
