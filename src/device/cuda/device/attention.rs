//! Attention: additive and dot attention over a sequence, multi-head self-attention (masked for
//! a decoder-only model's prefill: each row's keys end at its own), and decoder self-attention
//! over a per-slot key/value cache (after the prompt's keys and values, for a decoder-only
//! model: `attend_rows_prefix`). Encoder self-attention (BERT, the Transformer's
//! encoder: every member attends over its own rows) runs as two grouped GEMMs in cuBLAS
//! (`cublasGemmGroupedBatchedEx`) with a softmax between them: the scores `Q·Kᵀ / √d_h` of every
//! member and head, each an `L × L` block of scratch, a row softmax over them, then `P·V` into the
//! output rows — one group per distinct sequence length `L` in the sub-batch, the operands'
//! addresses in pointer arrays staged with the node's tables. A sub-batch of more than
//! [`MAX_GROUPS`] lengths, and every other attention, runs the row kernel (`attend_rows`: one
//! block per query row and head).

use super::*;
use crate::graph::Node;
use cudarc::cublas::sys as bs;

/// The most distinct sequence lengths in a sub-batch for which encoder self-attention runs as
/// grouped GEMMs (each length adds a softmax launch); a sub-batch of more runs the row kernel.
pub(super) const MAX_GROUPS: usize = 4;

/// One sequence length's share of grouped-GEMM attention: its length `L`, its member-and-head
/// pairs, where its six pointer arrays start in the node's tables (each `count` long: K, Q and
/// scores for `Q·Kᵀ`, then V, scores and outputs for `P·V`) and where its score blocks start
/// in the scores scratch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct GemmGroup {
    pub(super) len: usize,
    pub(super) count: usize,
    pub(super) ptrs: usize,
    pub(super) scores: usize,
}

/// Whether node `n` is an attention that runs as grouped GEMMs (when its sub-batch holds at
/// most [`MAX_GROUPS`] lengths): an encoder's self-attention.
pub(super) fn by_gemms(n: &Node) -> bool {
    matches!(
        n.op,
        Op::Attention {
            mode: AttnMode::SelfAttn,
            ..
        }
    ) && n.class != Class::Decoder
        && n.loop_id.is_none()
}

impl CudaDevice {
    /// Stages an attention's tables: the gather of its query rows, per query row where its
    /// keys and values start and how many keys it has, and for the decoder's self-attention
    /// the append of this step's keys and values to the members' K|V cache slots.
    pub(super) fn stage_attention(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        mode: AttnMode,
        heads: usize,
    ) -> Result<()> {
        if by_gemms(&model.nodes[i]) && self.stage_attention_gemm(model, i, members, heads)? {
            return Ok(());
        }
        let shape = self.attn_rows(model, i, members, mode, heads)?;
        self.stage_gather_first_input(model, i, members)?;
        let (ka, kb, counts) = (
            std::mem::take(&mut self.host.host_i64),
            std::mem::take(&mut self.host.host_i64b),
            std::mem::take(&mut self.host.host_i32),
        );
        self.host.staged.i64a = self.stage_i64(&ka);
        self.host.staged.i64b = self.stage_i64(&kb);
        self.host.staged.i32a = self.stage_i32(&counts);
        // (a decode step after a prompt counts its prompt's keys and its cache's: two a row)
        let max_keys = match shape.prefix {
            true => counts.chunks(2).map(|c| c.iter().sum()).max(),
            false => counts.iter().copied().max(),
        };
        let max_keys = max_keys.unwrap_or(1).max(1) as u32;
        (self.host.host_i64, self.host.host_i64b, self.host.host_i32) = (ka, kb, counts);
        if shape.kv_node.is_none() || shape.prefix {
            // this step's keys and values: columns d..3d of the gathered Q|K|V rows, into each
            // member's slot of the cache (max_dec steps per slot)
            let d = self.mem.feat(i)?;
            let max_dec = self.mem.max_dec;
            let segs: Vec<[i64; 3]> = members
                .iter()
                .enumerate()
                .map(|(r, m)| {
                    [
                        (r * 3 * d + d) as i64,
                        (m.slot as usize * max_dec * 2 * d + m.step as usize * 2 * d) as i64,
                        (2 * d) as i64,
                    ]
                })
                .collect();
            self.host.staged.cache = Some(self.stage_copy(&segs));
        }
        self.host.staged.attn = Some((shape, max_keys));
        Ok(())
    }

    /// Stages encoder self-attention as grouped GEMMs when the sub-batch holds at most
    /// [`MAX_GROUPS`] lengths (else returns false and stages nothing): the gather of the
    /// members' Q|K|V rows into scratch A, and per length the pointer arrays of both GEMMs.
    fn stage_attention_gemm(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        heads: usize,
    ) -> Result<bool> {
        let node = &model.nodes[i];
        let lens: Vec<usize> = members.iter().map(|m| Layout::rows(node, m.len)).collect();
        let mut distinct = lens.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() > MAX_GROUPS {
            return Ok(false);
        }
        let d = self.mem.feat(i)?;
        let dh = d / heads;
        self.stage_gather_first_input(model, i, members)?;
        let sc = self
            .mem
            .scratch
            .as_ref()
            .ok_or_else(|| missing("scratch"))?;
        // addresses of element 0 of scratch A (Q|K|V rows), the scores and scratch C (outputs)
        let base = |s: &CudaSlice<f32>| s.device_ptr(&self.lib.stream).0 as i64;
        let (a, scores, c) = (base(&sc.a), base(&sc.scores), base(&sc.c));
        // each member's first row in A and C, in gather order
        let mut first = Vec::with_capacity(members.len());
        let mut at = 0;
        for &l in &lens {
            first.push(at);
            at += l;
        }
        let mut score_at = 0;
        let mut arrays: [Vec<i64>; 6] = Default::default();
        for &l in &distinct {
            let group = GemmGroup {
                len: l,
                count: 0,
                ptrs: 0,
                scores: score_at,
            };
            for arr in &mut arrays {
                arr.clear();
            }
            let mut count = 0;
            for (r, _) in lens.iter().enumerate().filter(|(_, &x)| x == l) {
                for h in 0..heads {
                    let q = (first[r] * 3 * d + h * dh) as i64;
                    let s = (score_at + count * l * l) as i64;
                    let o = (first[r] * d + h * dh) as i64;
                    let f = 4; // bytes per f32
                    arrays[0].push(a + f * (q + d as i64)); // K
                    arrays[1].push(a + f * q); // Q
                    arrays[2].push(scores + f * s);
                    arrays[3].push(a + f * (q + 2 * d as i64)); // V
                    arrays[4].push(scores + f * s);
                    arrays[5].push(c + f * o);
                    count += 1;
                }
            }
            let ptrs = self.host.staged.host.len();
            for arr in &arrays {
                self.host.staged.host.extend_from_slice(arr);
            }
            score_at += count * l * l;
            self.host.staged.attn_gemm.push(GemmGroup {
                count,
                ptrs,
                ..group
            });
        }
        Ok(true)
    }

    /// Encoder self-attention as staged by [`Self::stage_attention_gemm`].
    fn attention_gemm(&mut self, i: usize, heads: usize) -> Result<()> {
        let d = self.mem.feat(i)?;
        let dh = d / heads;
        self.gather()?;
        let CudaDevice {
            lib,
            mem,
            host,
            precision,
            ..
        } = self;
        let Libs {
            stream,
            funcs,
            blas,
            ..
        } = lib;
        let Memory { scratch, .. } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        let groups = &staged.attn_gemm;
        let compute = match precision {
            Precision::F32 | Precision::F16 => bs::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            Precision::Tf32 => bs::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        };
        let tables = sc.tables.device_ptr(stream).0;
        let (d3, dh_i, d_i) = ((3 * d) as i32, dh as i32, d as i32);
        use bs::cublasOperation_t::{CUBLAS_OP_N as N, CUBLAS_OP_T as T};
        // scores (column-major keys × queries, i.e. row-major queries × keys) = Kᵀ·Q / √d_h:
        // m, n, k = L, L, d_h; K and Q in the 3d-wide rows of A, scores L apart
        let qk = Grouped {
            arrays: 0,
            trans: (T, N),
            dims: |l| [l, l, dh_i, d3, d3, l],
            alpha: 1.0 / (dh as f32).sqrt(),
        };
        qk.run(blas, groups, tables, compute)?;
        let f = funcs
            .get("softmax_rows")
            .ok_or_else(|| missing("softmax_rows"))?;
        let scores = sc.scores.device_ptr(stream).0;
        for g in groups {
            let at = scores + 4 * g.scores as u64;
            let (n_i, one) = (g.len as i32, 1.0f32);
            let mut b = stream.launch_builder(f);
            b.arg(&at).arg(&at).arg(&n_i).arg(&one);
            // SAFETY: one block per row of the group's score blocks, in place.
            unsafe { b.launch(blocks(g.count * g.len, 256, 0)) }.map_err(cuda_err)?;
        }
        // outputs (column-major d_h × queries, each head's columns of the d-wide rows of C) =
        // V·P: m, n, k = d_h, L, L
        let pv = Grouped {
            arrays: 3,
            trans: (N, N),
            dims: |l| [dh_i, l, l, d3, l, d_i],
            alpha: 1.0,
        };
        pv.run(blas, groups, tables, compute)?;
        self.scatter(i, Buf::C)
    }

    /// Attention over the staged query rows, keys and values (see [`Self::stage_attention`]).
    pub(super) fn attention(&mut self, i: usize, mode: AttnMode, heads: usize) -> Result<()> {
        if !self.host.staged.attn_gemm.is_empty() {
            return self.attention_gemm(i, heads);
        }
        let layout = self.mem.layout()?;
        let d = layout.nodes[i].feat;
        let (
            AttnShape {
                qstride,
                kv_node,
                kstride,
                vstride,
                dh,
                dv,
                additive,
                prefix,
            },
            max_keys,
        ) = self
            .host
            .staged
            .attn
            .ok_or_else(|| missing("attention tables"))?;
        let qrows = self.gather()?;
        let CudaDevice { lib, mem, host, .. } = self;
        let Libs { stream, funcs, .. } = lib;
        let Memory { nodes, scratch, .. } = mem;
        let Host { staged, .. } = host;
        let sc = scratch.as_mut().ok_or_else(|| missing("scratch"))?;
        if let Some(g) = staged.cache {
            let cache = nodes[i].state.as_mut().ok_or_else(|| missing("kv cache"))?;
            // SAFETY: the cache holds max_dec steps per slot; step < max_dec (checked in
            // execute); the rows come from scratch A.
            unsafe {
                movement::copy_segments(
                    stream,
                    funcs,
                    &sc.a.slice(..),
                    &mut cache.slice_mut(..),
                    &sc.tables,
                    g,
                    0.0,
                )
            }?;
        }
        // multi-head attention scales by 1/sqrt(head width); LAS's content attention does not
        let scale = if matches!(mode, AttnMode::Dot | AttnMode::Additive) {
            1.0
        } else {
            1.0 / (dh as f32).sqrt()
        };
        if prefix {
            let p = kv_node.ok_or_else(|| missing("prompt's keys"))?.0;
            let cache = nodes[i].state.as_ref().ok_or_else(|| missing("kv cache"))?;
            let pbase = sc.tables.slice(staged.i64a..staged.i64a + qrows);
            let cbase = sc.tables.slice(staged.i64b..staged.i64b + qrows);
            let counts = i32s(&sc.tables, staged.i32a, 2 * qrows)?;
            let ints = [kstride as i32, vstride as i32];
            let (q_i, heads_i, dh_i, d_i) = (qstride as i32, heads as i32, dh as i32, d as i32);
            let f = funcs
                .get("attend_rows_prefix")
                .ok_or_else(|| missing("attend_rows_prefix"))?;
            let mut b = stream.launch_builder(f);
            b.arg(&sc.a)
                .arg(&q_i)
                .arg(&nodes[p].out)
                .arg(&pbase)
                .arg(&ints[0])
                .arg(cache)
                .arg(&cbase)
                .arg(&ints[1])
                .arg(&counts)
                .arg(&heads_i)
                .arg(&dh_i)
                .arg(&d_i)
                .arg(&scale)
                .arg(&mut sc.c)
                .arg(&d_i);
            // SAFETY: one block per (query row, head); every row's scores (its prompt's and
            // its cache's keys, at most max_keys) in dynamic shared memory.
            unsafe { b.launch(blocks(qrows * heads, 128, 4 * max_keys)) }.map_err(cuda_err)?;
            return self.scatter(i, Buf::C);
        }
        let null = 0u64;
        let ints = [
            kstride as i32,
            vstride as i32,
            heads as i32,
            dh as i32,
            dv as i32,
        ];
        let (q_i, o_i, mode_i) = (qstride as i32, d as i32, i32::from(additive));
        let f = funcs
            .get("attend_rows")
            .ok_or_else(|| missing("attend_rows"))?;
        let (kbuf, vbuf) = match kv_node {
            Some((kp, vp)) => (&nodes[kp].out, &nodes[vp].out),
            None => {
                let c = nodes[i].state.as_ref().ok_or_else(|| missing("kv cache"))?;
                (c, c)
            }
        };
        let kbase = sc.tables.slice(staged.i64a..staged.i64a + qrows);
        let vbase = sc.tables.slice(staged.i64b..staged.i64b + qrows);
        let nkeys = i32s(&sc.tables, staged.i32a, qrows)?;
        let w = &nodes[i].w;
        let mut b = stream.launch_builder(f);
        b.arg(&sc.a)
            .arg(&q_i)
            .arg(kbuf)
            .arg(vbuf)
            .arg(&kbase)
            .arg(&vbase)
            .arg(&nkeys);
        for x in &ints {
            b.arg(x);
        }
        b.arg(&scale).arg(&mode_i);
        match (&w.w, &w.bias) {
            (Some(vn), Some(bb)) if additive => b.arg(vn).arg(bb),
            _ => b.arg(&null).arg(&null),
        };
        b.arg(&mut sc.c).arg(&o_i);
        let rows_heads = qrows * heads;
        // SAFETY: one block per (query row, head); scores in dynamic shared memory.
        unsafe { b.launch(blocks(rows_heads, 128, 4 * max_keys)) }.map_err(cuda_err)?;
        self.scatter(i, Buf::C)
    }

    /// Per query row of the sub-batch, into the host staging buffers: where its keys and
    /// values start and how many keys it has; and the strides and widths of `mode`.
    fn attn_rows(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        mode: AttnMode,
        heads: usize,
    ) -> Result<AttnShape> {
        let node = &model.nodes[i];
        let layout = self.mem.layout()?;
        let d = layout.nodes[i].feat;
        let max_dec = self.mem.max_dec;
        self.host.host_i64.clear();
        self.host.host_i64b.clear();
        self.host.host_i32.clear();
        // per query row: key and value base offsets and key counts; then the strides
        Ok(match mode {
            AttnMode::Additive | AttnMode::Dot => {
                let kp = node.inputs[1].node.idx();
                let vp = node.inputs[2].node.idx();
                for m in members {
                    self.host.host_i64.push(layout.offset(kp, m.slot, 0) as i64);
                    self.host
                        .host_i64b
                        .push(layout.offset(vp, m.slot, 0) as i64);
                    self.host
                        .host_i32
                        .push(Layout::valid_rows(model, kp, m.len) as i32);
                }
                let qstride = node.in_shapes[0].feat[0];
                AttnShape {
                    qstride,
                    kv_node: Some((kp, vp)),
                    kstride: layout.nodes[kp].feat,
                    vstride: layout.nodes[vp].feat,
                    dh: qstride,
                    dv: d,
                    additive: mode == AttnMode::Additive,
                    prefix: false,
                }
            }
            AttnMode::SelfAttn if node.class == Class::Decoder && node.inputs.len() == 2 => {
                // the prompt's K (column d of its packed Q|K|V rows), then the cache's
                let p = node.inputs[1].node.idx();
                for m in members {
                    self.host
                        .host_i64
                        .push((layout.offset(p, m.slot, 0) + d) as i64);
                    self.host
                        .host_i64b
                        .push((m.slot as usize * max_dec * 2 * d) as i64);
                    self.host
                        .host_i32
                        .push(Layout::valid_rows(model, p, m.len) as i32);
                    self.host.host_i32.push(m.step as i32 + 1);
                }
                AttnShape {
                    prefix: true,
                    vstride: 2 * d,
                    ..AttnShape::multi_head(3 * d, Some((p, p)), 3 * d, d / heads)
                }
            }
            AttnMode::SelfAttn if node.class == Class::Decoder => {
                for m in members {
                    let step = m.step;
                    let base = m.slot as usize * max_dec * 2 * d;
                    self.host.host_i64.push(base as i64);
                    self.host.host_i64b.push((base + d) as i64);
                    self.host.host_i32.push(step as i32 + 1);
                }
                AttnShape::multi_head(3 * d, None, 2 * d, d / heads)
            }
            AttnMode::SelfAttn | AttnMode::Causal => {
                // masked: row r's keys are rows 0..=r
                let causal = mode == AttnMode::Causal;
                let p = node.inputs[0].node.idx();
                for m in members {
                    let rows = Layout::rows(node, m.len);
                    for r in 0..rows {
                        self.host
                            .host_i64
                            .push((layout.offset(p, m.slot, 0) + d) as i64);
                        self.host
                            .host_i64b
                            .push((layout.offset(p, m.slot, 0) + 2 * d) as i64);
                        self.host
                            .host_i32
                            .push(if causal { r + 1 } else { rows } as i32);
                    }
                }
                AttnShape::multi_head(3 * d, Some((p, p)), 3 * d, d / heads)
            }
            AttnMode::Cross => {
                let kvp = node.inputs[1].node.idx();
                for m in members {
                    for _ in 0..Layout::rows(node, m.len) {
                        self.host
                            .host_i64
                            .push(layout.offset(kvp, m.slot, 0) as i64);
                        self.host
                            .host_i64b
                            .push((layout.offset(kvp, m.slot, 0) + d) as i64);
                        self.host
                            .host_i32
                            .push(Layout::valid_rows(model, kvp, m.len) as i32);
                    }
                }
                AttnShape::multi_head(d, Some((kvp, kvp)), 2 * d, d / heads)
            }
        })
    }
}

/// One of the two GEMMs of grouped-GEMM attention: its first pointer array (of the group's
/// six), its transposes, and per length `L` its `m, n, k` and leading dimensions.
struct Grouped<F: Fn(i32) -> [i32; 6]> {
    arrays: usize,
    trans: (bs::cublasOperation_t, bs::cublasOperation_t),
    dims: F,
    alpha: f32,
}

impl<F: Fn(i32) -> [i32; 6]> Grouped<F> {
    /// One `cublasGemmGroupedBatchedEx` call per length group (a group's pointer arrays are
    /// consecutive; another group's start elsewhere in the tables at `tables`).
    fn run(
        &self,
        blas: &CudaBlas,
        groups: &[GemmGroup],
        tables: u64,
        compute: bs::cublasComputeType_t,
    ) -> Result<()> {
        let zero = 0.0f32;
        for g in groups {
            let [m, n, k, lda, ldb, ldc] = (self.dims)(g.len as i32);
            let size = g.count as i32;
            let array = |j: usize| tables + 8 * (g.ptrs + (self.arrays + j) * g.count) as u64;
            // SAFETY: the pointer arrays (device memory, uploaded with the tables) hold `count`
            // addresses of operands inside scratch A, the scores and scratch C, each sized at
            // prepare for the maximum batch; the host arrays describe one group.
            unsafe {
                bs::cublasGemmGroupedBatchedEx(
                    *blas.handle(),
                    &self.trans.0,
                    &self.trans.1,
                    &m,
                    &n,
                    &k,
                    (&self.alpha as *const f32).cast(),
                    array(0) as *const *const std::ffi::c_void,
                    bs::cudaDataType_t::CUDA_R_32F,
                    &lda,
                    array(1) as *const *const std::ffi::c_void,
                    bs::cudaDataType_t::CUDA_R_32F,
                    &ldb,
                    (&zero as *const f32).cast(),
                    array(2) as *const *mut std::ffi::c_void,
                    bs::cudaDataType_t::CUDA_R_32F,
                    &ldc,
                    1,
                    &size,
                    compute,
                )
            }
            .result()
            .map_err(cuda_err)?;
        }
        Ok(())
    }
}

impl AttnShape {
    /// Multi-head dot attention: queries `qstride` apart, keys and values from `kv_node` (None:
    /// the decoder's K|V cache) in rows `kvstride` apart, heads `head` wide.
    fn multi_head(
        qstride: usize,
        kv_node: Option<(usize, usize)>,
        kvstride: usize,
        head: usize,
    ) -> AttnShape {
        AttnShape {
            qstride,
            kv_node,
            kstride: kvstride,
            vstride: kvstride,
            dh: head,
            dv: head,
            additive: false,
            prefix: false,
        }
    }
}
