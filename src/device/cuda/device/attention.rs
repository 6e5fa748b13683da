//! Attention: additive and dot attention over a sequence, multi-head self-attention, and decoder self-attention over a per-slot key/value cache.

use super::*;

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
        let shape = self.attn_rows(model, i, members, mode, heads)?;
        self.stage_gather_first_input(model, i, members)?;
        let (ka, kb, counts) = (
            std::mem::take(&mut self.host_i64),
            std::mem::take(&mut self.host_i64b),
            std::mem::take(&mut self.host_i32),
        );
        self.staged.i64a = self.stage_i64(&ka);
        self.staged.i64b = self.stage_i64(&kb);
        self.staged.i32a = self.stage_i32(&counts);
        let max_keys = counts.iter().copied().max().unwrap_or(1).max(1) as u32;
        (self.host_i64, self.host_i64b, self.host_i32) = (ka, kb, counts);
        if shape.kv_node.is_none() {
            // this step's keys and values: columns d..3d of the gathered Q|K|V rows, into each
            // member's slot of the cache (max_dec steps per slot)
            let d = self.layout.as_ref().ok_or_else(|| missing("layout"))?.nodes[i].feat;
            let max_dec = self.max_dec;
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
            self.staged.cache = Some(self.stage_copy(&segs));
        }
        self.staged.attn = Some((shape, max_keys));
        Ok(())
    }

    /// Attention over the staged query rows, keys and values (see [`Self::stage_attention`]).
    pub(super) fn attention(&mut self, i: usize, mode: AttnMode, heads: usize) -> Result<()> {
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
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
            },
            max_keys,
        ) = self
            .staged
            .attn
            .ok_or_else(|| missing("attention tables"))?;
        let qrows = self.gather()?;
        let CudaDevice {
            stream,
            funcs,
            nodes,
            scratch,
            staged,
            ..
        } = self;
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
        let layout = self.layout.as_ref().ok_or_else(|| missing("layout"))?;
        let d = layout.nodes[i].feat;
        let max_dec = self.max_dec;
        self.host_i64.clear();
        self.host_i64b.clear();
        self.host_i32.clear();
        // per query row: key and value base offsets and key counts; then the strides
        Ok(match mode {
            AttnMode::Additive | AttnMode::Dot => {
                let kp = node.inputs[1].node.idx();
                let vp = node.inputs[2].node.idx();
                for m in members {
                    self.host_i64.push(layout.offset(kp, m.slot, 0) as i64);
                    self.host_i64b.push(layout.offset(vp, m.slot, 0) as i64);
                    self.host_i32
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
                }
            }
            AttnMode::SelfAttn if node.class == Class::Decoder => {
                for m in members {
                    let step = m.step;
                    let base = m.slot as usize * max_dec * 2 * d;
                    self.host_i64.push(base as i64);
                    self.host_i64b.push((base + d) as i64);
                    self.host_i32.push(step as i32 + 1);
                }
                AttnShape::multi_head(3 * d, None, 2 * d, d / heads)
            }
            AttnMode::SelfAttn => {
                let p = node.inputs[0].node.idx();
                for m in members {
                    let rows = Layout::rows(node, m.len);
                    for _ in 0..rows {
                        self.host_i64.push((layout.offset(p, m.slot, 0) + d) as i64);
                        self.host_i64b
                            .push((layout.offset(p, m.slot, 0) + 2 * d) as i64);
                        self.host_i32.push(rows as i32);
                    }
                }
                AttnShape::multi_head(3 * d, Some((p, p)), 3 * d, d / heads)
            }
            AttnMode::Cross => {
                let kvp = node.inputs[1].node.idx();
                for m in members {
                    for _ in 0..Layout::rows(node, m.len) {
                        self.host_i64.push(layout.offset(kvp, m.slot, 0) as i64);
                        self.host_i64b
                            .push((layout.offset(kvp, m.slot, 0) + d) as i64);
                        self.host_i32
                            .push(Layout::valid_rows(model, kvp, m.len) as i32);
                    }
                }
                AttnShape::multi_head(d, Some((kvp, kvp)), 2 * d, d / heads)
            }
        })
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
        }
    }
}
